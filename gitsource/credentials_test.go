package gitsource_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// withUserinfo writes userinfo into an http(s) URL: scheme://userinfo@host/...
func withUserinfo(rawURL, userinfo string) string {
	return strings.Replace(rawURL, "://", "://"+userinfo+"@", 1)
}

// remoteOps runs every gitsource function that talks to rawURL and
// returns their errors by name: Clone (in memory and on disk), FetchTree,
// FetchCommit, RemoteHead, and Open of a repository whose origin is
// rawURL, then its Fetch and CommitLocks (which fetches, then pushes).
func remoteOps(t *testing.T, rawURL string) map[string]error {
	t.Helper()
	ctx := context.Background()
	errs := map[string]error{}
	_, errs["Clone in memory"] = gitsource.Clone(ctx, rawURL, "", gitsource.CloneOptions{})
	_, errs["Clone on disk"] = gitsource.Clone(ctx, rawURL, filepath.Join(t.TempDir(), "clone"), gitsource.CloneOptions{})
	_, _, errs["FetchTree"] = gitsource.FetchTree(ctx, rawURL, "main", ".", gitsource.Auth{})
	_, errs["FetchCommit"] = gitsource.FetchCommit(ctx, rawURL, gitsource.Hash{1}, gitsource.Auth{})
	_, errs["RemoteHead"] = gitsource.RemoteHead(ctx, rawURL, "main", gitsource.Auth{})

	lr := newLocalRepo(t, false)
	lr.commit("first", map[string]string{"styrmin.cue": "x: 1\n"})
	lr.git("remote", "add", "origin", rawURL)
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{Remote: "origin", Branch: "main"})
	errs["Open"] = err
	if err == nil {
		_, errs["Fetch"] = r.Fetch(ctx)
		_, errs["CommitLocks"] = r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence, MaxAttempts: 1})
		if u := r.RemoteURL(); strings.Contains(u, "@") {
			t.Errorf("RemoteURL() = %q, want no credentials", u)
		}
	}
	return errs
}

// TestNoErrorHoldsCredentialsWrittenInTheURL: a token or password written
// in a remote's URL (https://<token>@host/..., as GitHub documents, or
// user:password, or one that makes the URL unparseable) shows in no error
// of any function that fails to reach the remote, whether the connection
// is refused (Go's HTTP client quotes the request URL, a lone user name
// unredacted) or the server refuses the credentials. Errors end in a
// StyrminSource's status, in events and in logs.
func TestNoErrorHoldsCredentialsWrittenInTheURL(t *testing.T) {
	const secret = "ghp_SECRETneverInAnError0123456789"
	srv := gitserver.New(t, gitserver.WithToken("the-right-token"))
	served, _ := srv.CreateRepo("private.git")
	srv.Commit("private.git", "first", map[string][]byte{"styrmin.cue": []byte("x: 1\n")})

	for remote, base := range map[string]string{
		"closed port":                   "https://127.0.0.1:1/o/r.git",
		"server refusing the secret":    served,
		"server, a repository it lacks": served + "-missing",
	} {
		for form, userinfo := range map[string]string{
			"token as user name":   secret,
			"user and password":    "x-access-token:" + secret,
			"unparseable password": "user:" + secret + "^x",
			"unparseable token":    secret + "%zz",
			"password holding '#'": "user:" + secret + "#x",
		} {
			t.Run(remote+"/"+form, func(t *testing.T) {
				for op, err := range remoteOps(t, withUserinfo(base, userinfo)) {
					if err == nil && op != "Open" {
						t.Errorf("%s: no error", op)
					}
					if err != nil && strings.Contains(err.Error(), secret) {
						t.Errorf("%s: the error holds the secret: %v", op, err)
					}
				}
			})
		}
	}
}

// TestCredentialsInTheURLStillAuthenticate: credentials taken out of the
// URL go to the server as basic auth: a token as the user name (sent as
// the password, which is where GitHub and the test server look for it) or
// as the password. Clone, Fetch, CommitLocks, RemoteHead and FetchTree
// work, and the clone on disk does not keep the token in its config.
func TestCredentialsInTheURLStillAuthenticate(t *testing.T) {
	ctx := context.Background()
	const token = "ghp_rightTokenInTheURL0123456789"
	srv := gitserver.New(t, gitserver.WithToken(token))
	base, _ := srv.CreateRepo("private.git")
	first := srv.Commit("private.git", "first", map[string][]byte{"locks/c/e/a.lock.yaml": []byte("sequence: 1\n")})

	for form, userinfo := range map[string]string{
		"token as user name": token,
		"user and password":  "bot:" + token,
	} {
		t.Run(form, func(t *testing.T) {
			u := withUserinfo(base, userinfo)
			dir := filepath.Join(t.TempDir(), "clone")
			r, err := gitsource.Clone(ctx, u, dir, gitsource.CloneOptions{Branch: "main"})
			if err != nil {
				t.Fatalf("Clone: %v", err)
			}
			if _, err := r.Fetch(ctx); err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence})
			if err != nil || !res.Committed {
				t.Fatalf("CommitLocks = %+v, %v", res, err)
			}
			if got, err := gitsource.RemoteHead(ctx, u, "main", gitsource.Auth{}); err != nil || got != res.Commit {
				t.Fatalf("RemoteHead = %s, %v; want %s", got, err, res.Commit)
			}
			if _, got, err := gitsource.FetchTree(ctx, u, first, ".", gitsource.Auth{}); err != nil || got.String() != first {
				t.Fatalf("FetchTree = %s, %v; want %s", got, err, first)
			}
			if strings.Contains(r.RemoteURL(), token) {
				t.Errorf("RemoteURL() = %q holds the token", r.RemoteURL())
			}
			cfg, err := os.ReadFile(filepath.Join(dir, "config"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(cfg), token) {
				t.Errorf("the clone's config holds the token:\n%s", cfg)
			}
		})
	}

}

// TestAuthWinsOverCredentialsInTheURL: credentials in Auth win over user
// information in the URL, which is dropped (never sent, never shown): a
// lone user name (https://user@host/…, Bitbucket, Azure DevOps) or a
// user:password (a CI's https://gitlab-ci-token:…@host/… origin) with
// the agent's Secret or STYRMIN_GIT_TOKEN in Auth. Clone, Fetch,
// CommitLocks, RemoteHead and FetchTree work with Auth's token, and a
// refused token's error holds neither the URL's secret nor Auth's.
func TestAuthWinsOverCredentialsInTheURL(t *testing.T) {
	ctx := context.Background()
	const token = "ghp_rightTokenInAuth0123456789"
	const urlSecret = "glcbt-urlSecretNeverSent0123456789"
	srv := gitserver.New(t, gitserver.WithToken(token))
	base, _ := srv.CreateRepo("private.git")
	first := srv.Commit("private.git", "first", map[string][]byte{"locks/c/e/a.lock.yaml": []byte("sequence: 1\n")})
	auth := gitsource.Auth{Token: token}

	for form, userinfo := range map[string]string{
		"lone user name":    "bitbucket-user",
		"user and password": "gitlab-ci-token:" + urlSecret,
		"wrong token alone": urlSecret,
	} {
		t.Run(form, func(t *testing.T) {
			u := withUserinfo(base, userinfo)
			r, err := gitsource.Clone(ctx, u, filepath.Join(t.TempDir(), "clone"), gitsource.CloneOptions{Branch: "main", Auth: auth})
			if err != nil {
				t.Fatalf("Clone: %v", err)
			}
			if _, err := r.Fetch(ctx); err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence})
			if err != nil || !res.Committed {
				t.Fatalf("CommitLocks = %+v, %v", res, err)
			}
			if got, err := gitsource.RemoteHead(ctx, u, "main", auth); err != nil || got != res.Commit {
				t.Fatalf("RemoteHead = %s, %v; want %s", got, err, res.Commit)
			}
			if _, got, err := gitsource.FetchTree(ctx, u, first, ".", auth); err != nil || got.String() != first {
				t.Fatalf("FetchTree = %s, %v; want %s", got, err, first)
			}
			if strings.Contains(r.RemoteURL(), "@") {
				t.Errorf("RemoteURL() = %q keeps the URL's user information", r.RemoteURL())
			}

			// Auth's token is what is sent: a wrong one is refused even
			// with the right one nowhere else, and no error shows either.
			_, err = gitsource.Clone(ctx, u, "", gitsource.CloneOptions{Auth: gitsource.Auth{Token: "wrong-" + token}})
			if err == nil {
				t.Fatal("Clone with a wrong token in Auth: no error")
			}
			if msg := err.Error(); strings.Contains(msg, urlSecret) || strings.Contains(msg, token) || strings.Contains(msg, "bitbucket-user") {
				t.Errorf("Clone with a wrong token: the error holds a credential: %v", err)
			}
		})
	}
}
