package gitsource_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// stall makes h hold every request stall accepts, answering nothing until
// the client gives up or the test ends: a git host that takes the
// connection and then hangs. reached receives a value per stalled request.
func stall(t *testing.T, h http.Handler, stall func(*http.Request) bool) (srvURL string, reached <-chan struct{}) {
	t.Helper()
	stop := make(chan struct{})
	ch := make(chan struct{}, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !stall(r) {
			h.ServeHTTP(w, r)
			return
		}
		select {
		case ch <- struct{}{}:
		default:
		}
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)              // runs second: it waits for the handlers
	t.Cleanup(func() { close(stop) }) // runs first
	return srv.URL, ch
}

// within runs f and fails the test when it does not return within d. f
// must not use t: it may still run after the test ended.
func within[T any](t *testing.T, d time.Duration, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
		panic("unreachable")
	}
}

// TestAFetchFromAStalledRemoteGivesUpAndBlocksNoReader: a remote that
// accepts the connection and sends nothing makes Fetch (called with a
// context without deadline, as the agent's sync loop does) fail after the
// Repo's NetworkTimeout instead of never returning, and Head and FS do not
// wait for it meanwhile.
func TestAFetchFromAStalledRemoteGivesUpAndBlocksNoReader(t *testing.T) {
	srvURL, reached := stall(t, http.NotFoundHandler(), func(*http.Request) bool { return true })
	lr := newLocalRepo(t, false)
	first := lr.commit("first", map[string]string{"styrmin.cue": "x: 1\n"})
	lr.git("remote", "add", "origin", srvURL+"/o/r.git")
	lr.git("update-ref", "refs/remotes/origin/main", first)
	const timeout = 2 * time.Second
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{Remote: "origin", Branch: "main", NetworkTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	fetched := make(chan error, 1)
	go func() {
		_, err := r.Fetch(context.Background())
		fetched <- err
	}()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the fetch never reached the remote")
	}
	// The fetch now waits on the remote; readers must not wait with it.
	err = within(t, timeout/2, "Head and FS during a stalled fetch", func() error {
		h, err := r.Head()
		if err != nil {
			return err
		}
		if h.String() != first {
			return fmt.Errorf("Head = %s, want %s", h, first)
		}
		fsys, err := r.FS(h)
		if err != nil {
			return err
		}
		_, err = fs.ReadFile(fsys, "styrmin.cue")
		return err
	})
	if err != nil {
		t.Errorf("reading during a stalled fetch: %v", err)
	}

	select {
	case err := <-fetched:
		if err == nil {
			t.Fatal("Fetch from a stalled remote succeeded")
		}
		if d := time.Since(start); d < timeout || d > timeout+5*time.Second {
			t.Errorf("Fetch returned after %s, want about the NetworkTimeout %s: %v", d, timeout, err)
		}
	case <-time.After(timeout + 10*time.Second):
		t.Fatalf("Fetch from a stalled remote did not return %s after its NetworkTimeout %s", 10*time.Second, timeout)
	}
}

// TestCloneAndPushToAStalledRemoteGiveUpAtTheNetworkTimeout: Clone from a
// remote that hangs, and CommitLocks whose push hangs (the remote serves
// fetches but not receive-pack), fail after NetworkTimeout with a context
// without deadline.
func TestCloneAndPushToAStalledRemoteGiveUpAtTheNetworkTimeout(t *testing.T) {
	ctx := context.Background()
	const timeout = 500 * time.Millisecond

	hung, _ := stall(t, http.NotFoundHandler(), func(*http.Request) bool { return true })
	err := within(t, 15*time.Second, "Clone from a stalled remote", func() error {
		_, err := gitsource.Clone(ctx, hung+"/o/r.git", "", gitsource.CloneOptions{NetworkTimeout: timeout})
		return err
	})
	if err == nil {
		t.Fatal("Clone from a stalled remote succeeded")
	}

	git := gitserver.New(t)
	repoURL, _ := git.CreateRepo("config.git")
	git.Commit("config.git", "first", map[string][]byte{appLock: []byte("sequence: 1\n")})
	target, err := url.Parse(git.URL)
	if err != nil {
		t.Fatal(err)
	}
	noPush, _ := stall(t, httputil.NewSingleHostReverseProxy(target), func(r *http.Request) bool {
		return strings.Contains(r.URL.String(), "git-receive-pack")
	})
	r, err := gitsource.Clone(ctx, strings.Replace(repoURL, git.URL, noPush, 1), "", gitsource.CloneOptions{NetworkTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	err = within(t, 15*time.Second, "CommitLocks to a remote whose push stalls", func() error {
		_, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence, MaxAttempts: 1})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "push") {
		t.Fatalf("CommitLocks to a remote whose push stalls: %v, want a push error", err)
	}
}

// TestAPushThatLandedBeforeTheNetworkTimeoutCounts: the remote applies
// the push and then answers nothing until the push's NetworkTimeout
// expires (a proxy forwards the receive-pack request and stalls its
// answer). The check of where the branch now is gets its own deadline,
// not the expired one, so CommitLocks reports the lock commit that
// landed instead of a failed push.
func TestAPushThatLandedBeforeTheNetworkTimeoutCounts(t *testing.T) {
	ctx := context.Background()
	const timeout = 1 * time.Second
	git := gitserver.New(t)
	repoURL, _ := git.CreateRepo("config.git")
	git.Commit("config.git", "first", map[string][]byte{appLock: []byte("sequence: 1\n")})
	target, err := url.Parse(git.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			proxy.ServeHTTP(w, r)
			return
		}
		proxy.ServeHTTP(httptest.NewRecorder(), r) // the push lands
		select {                                   // its answer never comes
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })

	r, err := gitsource.Clone(ctx, strings.Replace(repoURL, git.URL, srv.URL, 1), "", gitsource.CloneOptions{NetworkTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res gitsource.CommitResult
		err error
	}
	got := within(t, 20*time.Second, "CommitLocks whose push answer stalls", func() result {
		res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence, MaxAttempts: 1})
		return result{res, err}
	})
	if got.err != nil || !got.res.Committed {
		t.Fatalf("CommitLocks = %+v, %v; want the push that landed counted", got.res, got.err)
	}
	head, err := gitsource.RemoteHead(ctx, repoURL, "main", gitsource.Auth{})
	if err != nil || head != got.res.Commit {
		t.Fatalf("the remote's head = %s, %v; want the lock commit %s", head, err, got.res.Commit)
	}
}

// silentHost listens on a real TCP port and forwards each connection to
// target until silence is called; from then on (from the start when target
// is "") it accepts connections and never answers: an ssh host that takes
// the connection and then sends nothing, not even its version line. Every
// connection is closed when the test ends.
func silentHost(t *testing.T, target string) (addr string, silence func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var silent atomic.Bool
	silent.Store(target == "")
	var mu sync.Mutex
	var conns []net.Conn
	keep := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			keep(c)
			if silent.Load() {
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			keep(up)
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String(), func() { silent.Store(true) }
}

// TestSSHToASilentHostGivesUpAtTheNetworkTimeout: an ssh host that accepts
// the TCP connection and says nothing makes Fetch, Clone, RemoteHead and a
// push fail once their deadline passes. go-git dials ssh without a
// context and handshakes without a deadline: they never returned, and a
// Fetch or push held the Repo's mutex, and every reader, with them.
func TestSSHToASilentHostGivesUpAtTheNetworkTimeout(t *testing.T) {
	ctx := context.Background()
	const timeout = 500 * time.Millisecond
	const bound = 10 * time.Second
	key, pub := newSSHKey(t, "")
	auth := gitsource.Auth{SSHKey: key, InsecureIgnoreHostKey: true}
	silent, _ := silentHost(t, "")
	url := "ssh://git@" + silent + "/x.git"

	t.Run("Fetch", func(t *testing.T) {
		lr := newLocalRepo(t, false)
		first := lr.commit("first", map[string]string{"styrmin.cue": "x: 1\n"})
		lr.git("remote", "add", "origin", url)
		lr.git("update-ref", "refs/remotes/origin/main", first)
		r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{Remote: "origin", Branch: "main", Auth: auth, NetworkTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		err = within(t, bound, "Fetch from a silent ssh host", func() error {
			_, err := r.Fetch(ctx)
			return err
		})
		if err == nil {
			t.Fatal("Fetch from a silent ssh host succeeded")
		}
	})
	t.Run("Clone", func(t *testing.T) {
		err := within(t, bound, "Clone from a silent ssh host", func() error {
			_, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Auth: auth, NetworkTimeout: timeout})
			return err
		})
		if err == nil {
			t.Fatal("Clone from a silent ssh host succeeded")
		}
	})
	t.Run("RemoteHead", func(t *testing.T) {
		err := within(t, bound, "RemoteHead of a silent ssh host", func() error {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_, err := gitsource.RemoteHead(ctx, url, "main", auth)
			return err
		})
		if err == nil {
			t.Fatal("RemoteHead of a silent ssh host succeeded")
		}
	})
	t.Run("push", func(t *testing.T) {
		// The host answers the clone and the fetch of the attempt, and
		// falls silent before the push connects.
		srv := gitserver.New(t)
		srv.CreateRepo("cfg.git")
		srv.Commit("cfg.git", "seed", map[string][]byte{appLock: []byte("sequence: 1\n")})
		sshd := srv.StartSSH(pub)
		addr, silence := silentHost(t, sshd.Addr)
		r, err := gitsource.Clone(ctx, "ssh://git@"+addr+"/cfg.git", "", gitsource.CloneOptions{Auth: auth, NetworkTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		build := func(ctx context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
			silence()
			return bumpSequence(ctx, head, headFS)
		}
		err = within(t, bound, "CommitLocks pushing to a silent ssh host", func() error {
			_, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: build, MaxAttempts: 1})
			return err
		})
		// The attempt's fetch is done: the connection that failed is the
		// push's.
		if err == nil || !strings.Contains(err.Error(), "connect to") {
			t.Fatalf("CommitLocks pushing to a silent ssh host: %v, want the push's connection to fail", err)
		}
	})
}
