package gitsource_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

func TestFetchSkipsWhenRemoteHeadHasNotMoved(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t)
	url, _ := srv.CreateRepo("config.git")
	first := srv.Commit("config.git", "first", map[string][]byte{"locks/c/e/a.lock.yaml": []byte("sequence: 1\n")})

	r, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Branch() != "main" {
		t.Fatalf("Branch = %q, want main (the remote HEAD)", r.Branch())
	}
	head, err := r.Head()
	if err != nil || head.String() != first {
		t.Fatalf("Head = %s, %v; want %s", head, err, first)
	}

	before := srv.Requests()
	res, err := r.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved || res.Head.String() != first || res.Previous != res.Head {
		t.Fatalf("Fetch = %+v, want unmoved at %s", res, first)
	}
	if n := srv.Requests() - before; n != 1 {
		t.Fatalf("an unmoved fetch made %d HTTP requests, want 1 (the ref advertisement)", n)
	}

	second := srv.Commit("config.git", "second", map[string][]byte{"locks/c/e/a.lock.yaml": []byte("sequence: 2\n")})
	res, err = r.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Moved || res.Previous.String() != first || res.Head.String() != second {
		t.Fatalf("Fetch = %+v, want moved %s → %s", res, first, second)
	}
	// The clone's own branch and HEAD follow what was fetched.
	for _, rev := range []string{"main", "HEAD", "origin/main"} {
		if h := mustResolve(t, r, rev); h != res.Head {
			t.Fatalf("Resolve(%s) = %s, want %s", rev, h, res.Head)
		}
	}
	fsys, err := r.FS(res.Head)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := fs.ReadFile(fsys, "locks/c/e/a.lock.yaml"); err != nil || string(b) != "sequence: 2\n" {
		t.Fatalf("after fetch: %q, %v", b, err)
	}
	changes, err := r.LockChanges(res.Previous, res.Head, "locks")
	if err != nil || len(changes) != 1 || changes[0].Commit.String() != second {
		t.Fatalf("LockChanges(prev, head) = %+v, %v", changes, err)
	}
}

func TestCloneWithToken(t *testing.T) {
	ctx := context.Background()
	const token = "s3cret-token"
	srv := gitserver.New(t, gitserver.WithToken(token))
	url, _ := srv.CreateRepo("private.git")
	srv.Commit("private.git", "first", map[string][]byte{"styrmin.cue": []byte("x: 1\n")})

	r, err := gitsource.Clone(ctx, url, t.TempDir(), gitsource.CloneOptions{Auth: gitsource.Auth{Token: token}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Fetch(ctx); err != nil {
		t.Fatalf("fetch with the token: %v", err)
	}

	for name, auth := range map[string]gitsource.Auth{
		"wrong token": {Token: "wrong-token-value"},
		"no token":    {},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Auth: auth})
			if !errors.Is(err, gitsource.ErrAuth) {
				t.Fatalf("err = %v, want ErrAuth", err)
			}
			if !strings.Contains(err.Error(), "check the token") || !strings.Contains(err.Error(), url) {
				t.Errorf("error %q does not say what to check and where", err)
			}
			if strings.Contains(err.Error(), "wrong-token-value") {
				t.Errorf("error leaks the token: %v", err)
			}
		})
	}

	// A token embedded in the URL never shows in errors either.
	bad := strings.Replace(url, "://", "://user:leaked-token@", 1)
	_, err = gitsource.Clone(ctx, bad+"-missing", "", gitsource.CloneOptions{})
	if err == nil || strings.Contains(err.Error(), "leaked-token") {
		t.Fatalf("err = %v; want an error without the token", err)
	}
}

func TestCloneLocalPathAndNamedBranch(t *testing.T) {
	ctx := context.Background()
	lr := newLocalRepo(t, false)
	lr.commit("main", map[string]string{"f": "main"})
	lr.git("checkout", "--quiet", "-b", "locks")
	c := lr.commit("on locks", map[string]string{"f": "locks"})

	r, err := gitsource.Clone(ctx, lr.dir, "", gitsource.CloneOptions{Branch: "locks"})
	if err != nil {
		t.Fatal(err)
	}
	head, err := r.Head()
	if err != nil || head.String() != c || r.Branch() != "locks" {
		t.Fatalf("Head = %s, %v on %q; want %s on locks", head, err, r.Branch(), c)
	}
	if res, err := r.Fetch(ctx); err != nil || res.Moved {
		t.Fatalf("Fetch = %+v, %v", res, err)
	}
	if _, err := gitsource.Clone(ctx, lr.dir, "", gitsource.CloneOptions{Branch: "nope"}); err == nil {
		t.Fatal("clone of a missing branch succeeded")
	}
}

func TestOpenWithRemoteFetchesAndReadsFromSubdirectory(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t)
	url, _ := srv.CreateRepo("cfg.git")
	first := srv.Commit("cfg.git", "first", map[string][]byte{"clusters/c/cluster.cue": []byte("a: 1\n")})

	lr := newLocalRepo(t, false)
	lr.git("remote", "add", "origin", url)
	lr.git("fetch", "--quiet", "origin")
	lr.git("checkout", "--quiet", "-B", "main", "origin/main")

	r, err := gitsource.Open(lr.dir+"/clusters/c", gitsource.OpenOptions{Remote: "origin"})
	if err != nil {
		t.Fatal(err)
	}
	if r.WorktreeDir() != lr.dir || r.RemoteURL() != url {
		t.Fatalf("WorktreeDir = %q, RemoteURL = %q", r.WorktreeDir(), r.RemoteURL())
	}
	second := srv.Commit("cfg.git", "second", map[string][]byte{"x": []byte("1")})
	res, err := r.Fetch(ctx)
	if err != nil || !res.Moved || res.Previous.String() != first || res.Head.String() != second {
		t.Fatalf("Fetch = %+v, %v", res, err)
	}
	if _, err := gitsource.Open(lr.dir, gitsource.OpenOptions{Remote: "upstream"}); err == nil {
		t.Fatal("Open with an unknown remote succeeded")
	}
	local, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.Fetch(ctx); !errors.Is(err, gitsource.ErrNoRemote) {
		t.Fatalf("Fetch in local mode: err = %v, want ErrNoRemote", err)
	}
}

func TestAuthRejectsCredentialsThatDoNotFitTheURL(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		url     string
		auth    gitsource.Auth
		wantErr string
	}{
		{"token over ssh", "git@example.com:org/repo.git", gitsource.Auth{Token: "t"}, "use SSHKey"},
		{"key over https", "https://example.com/org/repo.git", gitsource.Auth{SSHKey: []byte("k")}, "use Token"},
		{"user without token", "https://example.com/org/repo.git", gitsource.Auth{Username: "u"}, "without a Token"},
		{"bad key", "ssh://git@example.com/org/repo.git", gitsource.Auth{SSHKey: []byte("not a key")}, "parse SSHKey"},
		{"credentials for a path", "/srv/git/repo.git", gitsource.Auth{Token: "t"}, "takes no credentials"},
		{"token over plain http to another machine", "http://git.example.com/org/repo.git", gitsource.Auth{Token: "t"}, "never sent over plain http: use an https URL"},
		{"token in a plain http URL to another machine", "http://t@git.example.com/org/repo.git", gitsource.Auth{}, "never sent over plain http: use an https URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gitsource.Clone(ctx, tt.url, "", gitsource.CloneOptions{Auth: tt.auth})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestAuthStringRedactsSecrets(t *testing.T) {
	a := gitsource.Auth{Username: "bot", Token: "tok-123", SSHKey: []byte("KEY"), SSHKeyPassphrase: "pass-456"}
	for _, s := range []string{a.String(), a.GoString()} {
		for _, secret := range []string{"tok-123", "KEY", "pass-456"} {
			if strings.Contains(s, secret) {
				t.Fatalf("%q leaks %q", s, secret)
			}
		}
		if !strings.Contains(s, "bot") {
			t.Fatalf("%q lost the user name", s)
		}
	}
}

func TestOpenOnDetachedHeadReadsButWillNotCommit(t *testing.T) {
	lr := newLocalRepo(t, false)
	c := lr.commit("c", map[string]string{"x": "1"})
	lr.git("checkout", "--quiet", "--detach", "HEAD")
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := mustResolve(t, r, "HEAD"); h.String() != c || r.Branch() != "" {
		t.Fatalf("HEAD = %s on branch %q", h, r.Branch())
	}
	if _, err := r.Head(); err == nil || !strings.Contains(err.Error(), "OpenOptions.Branch") {
		t.Fatalf("Head err = %v, want a hint to set OpenOptions.Branch", err)
	}
	if _, err := r.CommitLocks(context.Background(), gitsource.CommitRequest{Build: bumpSequence}); err == nil || !strings.Contains(err.Error(), "detached") {
		t.Fatalf("CommitLocks err = %v", err)
	}
	// With the branch named, a detached checkout commits onto the branch
	// ref only: the worktree is not on it.
	r, err = gitsource.Open(lr.dir, gitsource.OpenOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.CommitLocks(context.Background(), gitsource.CommitRequest{Build: bumpSequence})
	if err != nil || lr.git("rev-parse", "main") != res.Commit.String() || lr.git("rev-parse", "HEAD") != c {
		t.Fatalf("result %+v, %v; main = %s, HEAD = %s", res, err, lr.git("rev-parse", "main"), lr.git("rev-parse", "HEAD"))
	}
	if st := lr.git("status", "--porcelain"); st != "" {
		t.Fatalf("worktree changed:\n%s", st)
	}
}

func TestRemoteHeadListsABranchWithoutFetchingAndNamesWhatIsWrong(t *testing.T) {
	ctx := context.Background()
	const token = "s3cret-token"
	srv := gitserver.New(t, gitserver.WithToken(token))
	url, _ := srv.CreateRepo("heads.git")
	want := srv.Commit("heads.git", "first", map[string][]byte{"styrmin.cue": []byte("x: 1\n")})

	for _, branch := range []string{"main", ""} {
		got, err := gitsource.RemoteHead(ctx, url, branch, gitsource.Auth{Token: token})
		if err != nil || got.String() != want {
			t.Errorf("RemoteHead(%q) = %s, %v; want %s", branch, got, err, want)
		}
	}
	if _, err := gitsource.RemoteHead(ctx, url, "release", gitsource.Auth{Token: token}); !errors.Is(err, gitsource.ErrBranchNotFound) {
		t.Errorf("a missing branch: err = %v, want ErrBranchNotFound", err)
	}
	_, err := gitsource.RemoteHead(ctx, url, "main", gitsource.Auth{Token: "wrong-token-value"})
	if !errors.Is(err, gitsource.ErrAuth) || strings.Contains(err.Error(), "wrong-token-value") {
		t.Errorf("a wrong token: err = %v, want ErrAuth without the token", err)
	}
}

// TestARotatedTokenIsUsedFromTheNextFetchAndPush: a token rotated on the
// git host (an installation token expires within the hour) and given to
// a repository already cloned is used from its next fetch and push,
// without cloning again; the old one is refused from then on.
func TestARotatedTokenIsUsedFromTheNextFetchAndPush(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t, gitserver.WithToken("first-token"))
	url, _ := srv.CreateRepo("private.git")
	srv.Commit("private.git", "first", map[string][]byte{"styrmin.cue": []byte("x: 1\n")})
	r, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Auth: gitsource.Auth{Token: "first-token"}})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetToken("second-token")
	srv.Commit("private.git", "second", map[string][]byte{"styrmin.cue": []byte("x: 2\n")})
	if _, err := r.Fetch(ctx); !errors.Is(err, gitsource.ErrAuth) {
		t.Fatalf("fetch with the token the host no longer takes: %v, want ErrAuth", err)
	}
	if err := r.SetAuth(gitsource.Auth{Token: "second-token"}); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Fetch(ctx); err != nil || !res.Moved {
		t.Fatalf("fetch with the rotated token: %+v, %v; want the second commit", res, err)
	}
	_, err = r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{Files: map[string][]byte{"locks/c/e/a.lock.yaml": []byte("sequence: 1\n")}, Locks: map[string]int{"c/e/a": 1}}, nil
	}})
	if err != nil {
		t.Fatalf("push with the rotated token: %v", err)
	}
}
