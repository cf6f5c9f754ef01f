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
	repo := &fakeRepo{head: head, commits: map[gitsource.Hash]fs.FS{locked: inRepo, head: fstest.MapFS{"styrmin.cue": {}}}}

	external, _ := webapp(t, "webapp/")
	const url = "https://git.example.com/drivers.git"
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
