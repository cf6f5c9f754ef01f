package driversource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/outcome"
	"github.com/styrmin/styrmin/resolver"
)

// fakeRepo is a DriverRepo of fixed commits.
type fakeRepo struct {
	head    gitsource.Hash
	commits map[gitsource.Hash]fs.FS
}

func (r *fakeRepo) Head() (gitsource.Hash, error) { return r.head, nil }

func (r *fakeRepo) FS(h gitsource.Hash) (fs.FS, error) {
	if f, ok := r.commits[h]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("fake: %s: %w", h.Short(), gitsource.ErrCommitNotFound)
}

var _ DriverRepo = (*fakeRepo)(nil)

func hash(c byte) gitsource.Hash {
	h, err := gitsource.ParseHash(strings.Repeat(string(c), 40))
	if err != nil {
		panic(err)
	}
	return h
}

// webapp returns the example's webapp 1.1.0 folder under prefix, and its
// digest.
func webapp(t *testing.T, prefix string) (fstest.MapFS, string) {
	t.Helper()
	sub, err := fs.Sub(examples.Repo(), "drivers/webapp/1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := drivers.Load(sub, drivers.LoadOptions{Source: "webapp"})
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	err = fs.WalkDir(sub, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		out[prefix+p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, d.Digest
}

// TestRepoDriversClassifiesEachWayADriverIsMissing reads in-repository
// drivers at the request's commit (the head may have dropped the folder)
// and external drivers at their recorded commit, and classifies what can
// go wrong: missing or other content is stalled, the network retryable.
func TestRepoDriversClassifiesEachWayADriverIsMissing(t *testing.T) {
	inRepo, digest := webapp(t, "drivers/webapp/1.1.0/")
	locked, head := hash('1'), hash('2')
	const url = "https://git.example.com/drivers.git"
	repo := &fakeRepo{head: head, commits: map[gitsource.Hash]fs.FS{locked: inRepo, head: fstest.MapFS{"styrmin.cue": {Data: []byte(
		declare(url, "https://down.example.com/drivers.git"))}}}}

	external, _ := webapp(t, "webapp/")
	good := hash('a')
	fetch := func(_ context.Context, u string, c gitsource.Hash) (fs.FS, error) {
		switch {
		case u == url && c == good:
			return external, nil
		case u == "https://down.example.com/drivers.git":
			return nil, errors.New("dial tcp: connection refused")
		}
		return nil, fmt.Errorf("fake: %w", gitsource.ErrCommitNotFound)
	}
	ref := resolver.DriverRef{Name: "webapp", Version: "1.1.0", Digest: digest}
	src := func(mod func(o *resolver.DriverOrigin)) resolver.DriverRef {
		o := &resolver.DriverOrigin{URL: url, Ref: "main", Path: "webapp", Commit: good.String()}
		mod(o)
		r := ref
		r.Source = o
		return r
	}
	other := ref
	other.Digest = "sha256:" + strings.Repeat("0", 64)
	otherExternal := src(func(*resolver.DriverOrigin) {})
	otherExternal.Digest = other.Digest

	for _, tc := range []struct {
		name    string
		req     Request
		stalled bool // when it fails
		ok      bool
	}{
		{"in the repository at the lock commit", Request{Ref: ref, Commit: locked.String()}, false, true},
		{"in the repository, dropped at the head", Request{Ref: ref}, true, false},
		{"in the repository, lock commit gone: the head", Request{Ref: ref, Commit: hash('9').String()}, true, false},
		{"in the repository with other content", Request{Ref: other, Commit: locked.String()}, true, false},
		{"external at the recorded commit", Request{Ref: src(func(*resolver.DriverOrigin) {})}, false, true},
		{"external, the commit is gone", Request{Ref: src(func(o *resolver.DriverOrigin) { o.Commit = hash('b').String() })}, true, false},
		{"external, no such folder", Request{Ref: src(func(o *resolver.DriverOrigin) { o.Path = "nothing/here" })}, true, false},
		{"external, a path escaping the tree", Request{Ref: src(func(o *resolver.DriverOrigin) { o.Path = "../webapp" })}, true, false},
		{"external, not a commit hash", Request{Ref: src(func(o *resolver.DriverOrigin) { o.Commit = "main" })}, true, false},
		{"external, the remote is down", Request{Ref: src(func(o *resolver.DriverOrigin) { o.URL = "https://down.example.com/drivers.git" })}, false, false},
		{"external with other content", Request{Ref: otherExternal}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A fresh source each time: the loaded versions are kept.
			s := NewRepoDrivers(repo, NewRemoteTrees(fetch, RemoteTreesOptions{}), LoadOptions{})
			d, err := Get(context.Background(), s, tc.req)
			if tc.ok {
				if err != nil || d.Digest != digest {
					t.Fatalf("got %v, %v", d, err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			stalled, reason := outcome.Classify(err, "")
			want := v1alpha1.ReasonDriverUnavailable
			if tc.stalled {
				want = v1alpha1.ReasonDriverNotFound
			}
			if stalled != tc.stalled || reason != want {
				t.Fatalf("%v: stalled=%v reason=%s, want stalled=%v %s", err, stalled, reason, tc.stalled, want)
			}
		})
	}
}

// declare is a styrmin.cue listing webapp 1.1.0 from each of urls.
func declare(urls ...string) string {
	var b strings.Builder
	b.WriteString("drivers: [\n")
	for _, u := range urls {
		fmt.Fprintf(&b, "\t{name: \"webapp\", version: \"1.1.0\", url: %q, ref: \"main\", path: \"webapp\"},\n", u)
	}
	b.WriteString("]\n")
	return b.String()
}

// TestRemoteTreesFetchEachCommitOnceAndKeepFew: concurrent requests for one
// commit share one fetch; a failed fetch is tried again; beyond the bound
// the least recently used tree is dropped.
func TestRemoteTreesFetchEachCommitOnceAndKeepFew(t *testing.T) {
	var calls sync.Map // commit -> *atomic.Int32
	gate := make(chan struct{})
	var fail atomic.Bool
	fetch := func(_ context.Context, _ string, c gitsource.Hash) (fs.FS, error) {
		n, _ := calls.LoadOrStore(c, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		<-gate
		if fail.Load() {
			return nil, errors.New("connection reset")
		}
		return fstest.MapFS{"commit": {Data: []byte(c.String())}}, nil
	}
	count := func(c gitsource.Hash) int32 {
		n, ok := calls.Load(c)
		if !ok {
			return 0
		}
		return n.(*atomic.Int32).Load()
	}
	trees := NewRemoteTrees(fetch, RemoteTreesOptions{MaxTrees: 2})
	ctx := context.Background()
	const url = "https://git.example.com/drivers.git"

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := trees.Tree(ctx, url, hash('a'))
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := count(hash('a')); n != 1 {
		t.Fatalf("8 concurrent requests made %d fetches", n)
	}

	// A waiter whose context ends does not wait for the fetch.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := trees.Tree(cctx, url, hash('f')); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}

	fail.Store(true)
	if _, err := trees.Tree(ctx, url, hash('b')); err == nil {
		t.Fatal("a failed fetch returned no error")
	}
	fail.Store(false)
	if _, err := trees.Tree(ctx, url, hash('b')); err != nil || count(hash('b')) != 2 {
		t.Fatalf("after a failed fetch: %v, %d fetches", err, count(hash('b')))
	}
	for _, c := range []byte{'c', 'a'} {
		if _, err := trees.Tree(ctx, url, hash(c)); err != nil {
			t.Fatal(err)
		}
	}
	if n := trees.Len(); n > 2 {
		t.Fatalf("%d trees kept, the bound is 2", n)
	}
	if n := count(hash('a')); n != 2 {
		t.Fatalf("a dropped tree was fetched %d times in all, want 2", n)
	}
}

// TestRemotesSendCredentialsOnlyToTheRepositorysHost: a styrmin.cue entry
// naming another host gets no token.
func TestRemotesSendCredentialsOnlyToTheRepositorysHost(t *testing.T) {
	r := Remotes{RepoURL: "https://git.example.com/team/state.git", Auth: gitsource.Auth{Token: "t"}}
	if got := r.AuthFor("https://git.example.com/team/drivers.git"); got.Token != "t" {
		t.Fatal("the repository's host gets no credentials")
	}
	if got := r.AuthFor("https://evil.example.org/drivers.git"); got.Token != "" {
		t.Fatal("another host gets the repository's token")
	}
}

// TestASandboxThatCannotStartIsRetryableNotStalled: a driver evaluated in
// a sandbox the machine cannot start (here its executable is missing; in
// a pod, a process or pipe limit) is not the driver's fault: a load or a
// render failing over it is retried, where a stalled error would fail the
// change at once and leave the deployment behind once the machine
// recovers. A limit the driver exceeds stays stalled.
func TestASandboxThatCannotStartIsRetryableNotStalled(t *testing.T) {
	sub, err := fs.Sub(examples.Repo(), "drivers/webapp/1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	missing := &drivers.Sandbox{Path: t.TempDir() + "/no-such-executable"}
	_, loadErr := drivers.Load(sub, drivers.LoadOptions{Sandbox: missing})
	if !errors.Is(loadErr, drivers.ErrSandboxStart) {
		t.Fatalf("load with a sandbox that cannot start: %v, want ErrSandboxStart", loadErr)
	}
	for name, c := range map[string]struct {
		err        error
		stalled    bool
		wantReason string
	}{
		"a load":                  {Classify(&DriverLoadError{Err: loadErr}), false, v1alpha1.ReasonDriverUnavailable},
		"a render":                {ClassifyRender(fmt.Errorf("render: %w", loadErr)), false, v1alpha1.ReasonRenderFailed},
		"a render over its limit": {ClassifyRender(fmt.Errorf("render: %w", &drivers.LimitError{Limit: drivers.LimitTime})), true, v1alpha1.ReasonRenderFailed},
		"a load over its limit":   {Classify(fmt.Errorf("load: %w", drivers.ErrLimit)), true, v1alpha1.ReasonDriverLimitExceeded},
	} {
		stalled, reason := outcome.Classify(c.err, "")
		if stalled != c.stalled || reason != c.wantReason {
			t.Errorf("%s: stalled %v, reason %q; want %v, %q (%v)", name, stalled, reason, c.stalled, c.wantReason, c.err)
		}
	}
}

// TestALockfileCannotPointTheAgentAtARepositoryStyrminCueDoesNotList: the
// agent fetches an external driver only from a URL that styrmin.cue lists
// at the commit the request reads (the task's lock commit, or the head
// when that is gone). A lockfile written by hand that names another
// (a service inside the cluster, a file:// path, the listed one with
// credentials) fails stalled, naming the lockfile's field and what
// styrmin.cue lists, and nothing is fetched.
func TestALockfileCannotPointTheAgentAtARepositoryStyrminCueDoesNotList(t *testing.T) {
	const url, other = "https://git.example.com/drivers.git", "https://git.example.com/other.git"
	external, digest := webapp(t, "webapp/")
	lockCommit, bare, head := hash('1'), hash('3'), hash('2')
	repo := &fakeRepo{head: head, commits: map[gitsource.Hash]fs.FS{
		lockCommit: fstest.MapFS{"styrmin.cue": {Data: []byte(declare(url, other))}},
		bare:       fstest.MapFS{"styrmin.cue": {Data: []byte("deletionThreshold: 1\n")}},
		head:       fstest.MapFS{"styrmin.cue": {Data: []byte(declare(url))}},
	}}
	var mu sync.Mutex
	var fetched []string
	fetch := func(_ context.Context, u string, c gitsource.Hash) (fs.FS, error) {
		mu.Lock()
		fetched = append(fetched, u)
		mu.Unlock()
		return external, nil
	}
	req := func(u string, commit gitsource.Hash) Request {
		return Request{Ref: resolver.DriverRef{Name: "webapp", Version: "1.1.0", Digest: digest,
			Source: &resolver.DriverOrigin{URL: u, Ref: "main", Path: "webapp", Commit: hash('a').String()}}, Commit: commit.String()}
	}
	for _, tc := range []struct {
		name     string
		req      Request
		declared string // in the error; "" when it loads
	}{
		{"listed at the lock commit", req(url, lockCommit), ""},
		{"listed at the lock commit only", req(other, lockCommit), ""},
		{"the lock commit is gone: listed at the head", req(url, hash('9')), ""},
		{"a service inside the cluster", req("http://10.96.0.1:8080/x.git", lockCommit), "lists " + url + ", " + other},
		{"a file path", req("file:///var/run/secrets/kubernetes.io", lockCommit), "lists " + url + ", " + other},
		{"the lock commit is gone: not listed at the head", req(other, hash('9')), "lists " + url},
		{"listed at the head, not at the lock commit, which lists none", req(url, bare), "lists no driver sources"},
		{"the listed URL with credentials", req("https://x:s3cret@git.example.com/drivers.git", lockCommit), "lists " + url},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fetched = nil
			s := NewRepoDrivers(repo, NewRemoteTrees(fetch, RemoteTreesOptions{}), LoadOptions{})
			d, err := Get(context.Background(), s, tc.req)
			if tc.declared == "" {
				if err != nil || d.Digest != digest {
					t.Fatalf("got %v, %v", d, err)
				}
				return
			}
			if err == nil {
				t.Fatal("an undeclared driver source was loaded")
			}
			if len(fetched) != 0 {
				t.Fatalf("fetched %v before refusing it", fetched)
			}
			if stalled, reason := outcome.Classify(err, ""); !stalled || reason != v1alpha1.ReasonDriverNotFound {
				t.Errorf("stalled=%v reason=%s, want stalled %s", stalled, reason, v1alpha1.ReasonDriverNotFound)
			}
			msg := err.Error()
			for _, want := range []string{"driver.source.url", gitsource.PublicURL(tc.req.Ref.Source.URL), tc.declared, "lock the deployment again"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the error does not say %q: %s", want, msg)
				}
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("the error holds the URL's password: %s", msg)
			}
		})
	}
}

// TestRemoteTreesKeepWithinTheirByteBound: trees of megabytes each are
// kept within the byte bound, least recently used first out; a tree
// larger than the bound is used and not kept; a repository over what a
// fetch may hold fails stalled with the limit, as a driver over its own.
func TestRemoteTreesKeepWithinTheirByteBound(t *testing.T) {
	const bound = 4 << 20
	var fetches atomic.Int32
	fetch := func(_ context.Context, u string, c gitsource.Hash) (fs.FS, error) {
		fetches.Add(1)
		size := 1 << 20
		if c == hash('f') {
			size = 5 << 20
		}
		return fstest.MapFS{"chart/big.bin": {Data: make([]byte, size)}}, nil
	}
	trees := NewRemoteTrees(fetch, RemoteTreesOptions{MaxBytes: bound})
	ctx := context.Background()
	const url = "https://git.example.com/drivers.git"
	for _, c := range []byte{'a', 'b', 'c', 'd', 'e', 'a', 'b'} {
		if _, err := trees.Tree(ctx, url, hash(c)); err != nil {
			t.Fatal(err)
		}
		if n := trees.Bytes(); n > bound {
			t.Fatalf("after %c the trees kept hold %d bytes, over the bound of %d", c, n, bound)
		}
	}
	// b, fetched again last, is kept.
	before := fetches.Load()
	if _, err := trees.Tree(ctx, url, hash('b')); err != nil || fetches.Load() != before {
		t.Fatalf("the tree used last was dropped (%v)", err)
	}
	held := trees.Bytes()
	for range 2 {
		if _, err := trees.Tree(ctx, url, hash('f')); err != nil {
			t.Fatal(err)
		}
	}
	if n := fetches.Load() - before; n != 2 || trees.Bytes() != held {
		t.Fatalf("a tree over the bound: %d fetches, %d bytes kept (was %d); want 2 fetches and nothing kept", n, trees.Bytes(), held)
	}

	limit := &gitsource.FetchLimitError{URL: url, Limit: 32 << 20, What: "its objects inflate to at least 40000000 bytes"}
	if stalled, reason := outcome.Classify(Classify(fmt.Errorf("driver webapp@1.1.0 from %s: %w", url, limit)), ""); !stalled || reason != v1alpha1.ReasonDriverLimitExceeded {
		t.Fatalf("a fetch over its limit: stalled=%v reason=%s", stalled, reason)
	}
}
