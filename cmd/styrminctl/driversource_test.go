package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// TestLockTakesDriverVersionsFromAnotherGitRepository serves a driver
// version from its own repository over HTTP, lists it in styrmin.cue by
// URL, tag and folder, pins a deployment to it and locks: the lockfile
// names that version and its digest.
func TestLockTakesDriverVersionsFromAnotherGitRepository(t *testing.T) {
	t.Parallel()
	srv := gitserver.New(t)
	sub, err := fs.Sub(examples.Repo(), "drivers/webapp/1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(sub, p)
		if p == "driver.cue" {
			data = []byte(strings.Replace(string(data), `version:     "1.1.0"`, `version:     "1.2.0"`, 1))
		}
		files["webapp/"+p] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Commit("drivers", "webapp 1.2.0", files)
	srv.Git(srv.Dir("drivers"), "tag", "webapp-1.2.0", "main")
	tagged := srv.Head("drivers", "main")
	srv.Commit("drivers", "work in progress after the tag", map[string][]byte{"webapp/driver.cue": []byte("broken {")})

	repo := exampleRepo(t)
	// The URL carries credentials: the lockfile must not.
	withUser := strings.Replace(srv.RepoURL("drivers"), "http://", "http://user:not-a-secret@", 1)
	settings := "deletionThreshold: 1\ndrivers: [{name: \"webapp\", version: \"1.2.0\", url: \"" + withUser + "\", ref: \"webapp-1.2.0\", path: \"webapp\"}]\n"
	if err := os.WriteFile(filepath.Join(repo, "styrmin.cue"), []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	web := filepath.Join(repo, "clusters/local/environments/dev/deployments/web.cue")
	if err := os.WriteFile(web, []byte("driver: {name: \"webapp\", version: \"1.2.0\"}\nappVersion: \"1.25.0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code, err := styrminctl(t, "--repo", repo, "lock")
	if code != 0 {
		t.Fatalf("lock: %v\n%s", err, out)
	}
	lock, err := os.ReadFile(filepath.Join(repo, "locks/local/dev/web.lock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lock), "version: 1.2.0") {
		t.Fatalf("the lock does not use the driver from the other repository:\n%s", lock)
	}
	// The lock records where the driver comes from and the commit the tag
	// resolved to (not the branch's newer head), without the credentials.
	want := "  source:\n    commit: " + tagged + "\n    path: webapp\n    ref: webapp-1.2.0\n    url: " + srv.RepoURL("drivers") + "\n"
	if !strings.Contains(string(lock), want) || strings.Contains(string(lock), "not-a-secret") {
		t.Fatalf("the lock does not record the driver's source as\n%s\n%s", want, lock)
	}

	// A ref that does not exist is an error naming styrmin.cue's entry.
	settings = strings.Replace(settings, "webapp-1.2.0", "webapp-9.9.9", 1)
	if err := os.WriteFile(filepath.Join(repo, "styrmin.cue"), []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = styrminctl(t, "--repo", repo, "lock")
	if err == nil || !strings.Contains(err.Error(), "styrmin.cue: field drivers[0]") || !strings.Contains(err.Error(), "webapp-9.9.9") {
		t.Fatalf("a missing ref: %v", err)
	}
}

// TestDriverFetcherSendsTheTokenOnlyToItsOwnHostAndNeverOverHTTP serves a
// driver repository that asks for a token over plain http: with
// STYRMIN_GIT_TOKEN set, lock sends it neither when the desired-state
// repository's remote is on another host (the fetch fails saying the token
// was not sent) nor when the remote is on the same host over http (the
// lock refuses, naming https).
func TestDriverFetcherSendsTheTokenOnlyToItsOwnHostAndNeverOverHTTP(t *testing.T) {
	const token = "tok-never-sent"
	srv := gitserver.New(t, gitserver.WithToken(token))
	srv.Commit("drivers", "webapp", map[string][]byte{"webapp/README": []byte("no driver needed: the fetch is refused first\n")})
	t.Setenv("STYRMIN_GIT_TOKEN", token)

	repo := exampleRepo(t)
	settings := "deletionThreshold: 1\ndrivers: [{name: \"webapp\", version: \"1.2.0\", url: \"" + srv.RepoURL("drivers") + "\", ref: \"main\", path: \"webapp\"}]\n"
	if err := os.WriteFile(filepath.Join(repo, "styrmin.cue"), []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	planGit(t, repo, "init", "-q", "-b", "main")
	planGit(t, repo, "remote", "add", "origin", "https://git.example.com/o/state.git")
	_, _, err := styrminctl(t, "--repo", repo, "lock")
	if err == nil || !strings.Contains(err.Error(), "STYRMIN_GIT_TOKEN was not sent") || !strings.Contains(err.Error(), "git.example.com") {
		t.Fatalf("a driver repository on another host: %v, want an error saying the token was not sent", err)
	}

	// Plain http to another machine: refused before any request. (To this
	// machine, a local git server, plain http is allowed.)
	planGit(t, repo, "remote", "set-url", "origin", "http://git.internal/o/state.git")
	settings = strings.Replace(settings, srv.RepoURL("drivers"), "http://git.internal/o/drivers.git", 1)
	if err := os.WriteFile(filepath.Join(repo, "styrmin.cue"), []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	requests := srv.Requests()
	_, _, err = styrminctl(t, "--repo", repo, "lock")
	if err == nil || !strings.Contains(err.Error(), "never sent over plain http") || !strings.Contains(err.Error(), "https") {
		t.Fatalf("a driver repository on the remote's host over http: %v, want a refusal", err)
	}
	if srv.Requests() != requests {
		t.Errorf("the lock talked to the http server after refusing to send the token there")
	}
	if strings.Contains(err.Error(), token) {
		t.Errorf("the error shows the token: %v", err)
	}
}
