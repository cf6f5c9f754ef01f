package ci_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// buildStyrminctl builds the CLI the script drives.
func buildStyrminctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "styrminctl")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/styrmin/styrmin/cmd/styrminctl")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build styrminctl: %v\n%s", err, out)
	}
	return bin
}

type run struct {
	t          *testing.T
	srv        *gitserver.Server
	work       string
	env        []string
	scriptPath string
}

// script runs styrmin-ci.sh and returns its output and exit code.
func (r *run) script(args ...string) (string, int) {
	r.t.Helper()
	cmd := exec.Command(r.scriptPath, args...)
	cmd.Dir = r.work
	cmd.Env = r.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return out.String(), 0
}

func (r *run) git(args ...string) string {
	r.t.Helper()
	return r.srv.Git(r.work, args...)
}

// TestCIScriptPlansLocksAndChecksAgainstARealRemote drives the plain CI
// script through a pull request's life: lock the initial configuration
// back to the remote, plan a change on a branch (markdown with the blast
// radius), see --check fail on stale locks, merge and lock again.
func TestCIScriptPlansLocksAndChecksAgainstARealRemote(t *testing.T) {
	bin, srv, script, work, authURL, planFile := remoteCheckout(t)
	env := append(os.Environ(), "STYRMINCTL="+bin, "STYRMIN_GIT_TOKEN=ci-token", "STYRMIN_PLAN_FILE="+planFile)
	r := &run{t: t, srv: srv, work: work, env: env, scriptPath: script}
	// The clone's remote URL must not carry the token for the engine: it
	// reads STYRMIN_GIT_TOKEN.
	r.git("remote", "set-url", "origin", srv.RepoURL("desired-state"))

	out, code := r.script("lock")
	if code != 0 {
		t.Fatalf("lock after the first merge: exit %d\n%s", code, out)
	}
	msg := srv.Git(srv.Dir("desired-state"), "log", "-1", "--format=%an%n%B", "main")
	for _, want := range []string{"styrmin", "styrmin: lock", "Styrmin-Lock: local/dev/web=1", "Styrmin-Lock: local/staging/hub=1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("lock commit lacks %q:\n%s", want, msg)
		}
	}

	// A pull request changes an environment value.
	r.git("fetch", "--quiet", authURL, "+refs/heads/*:refs/remotes/origin/*")
	r.git("checkout", "--quiet", "-b", "change-log-level", "origin/main")
	envFile := filepath.Join(work, "clusters/local/environments/dev/environment.cue")
	if err := os.WriteFile(envFile, []byte("namespacePrefix: \"dev\"\nbackupLocation: \"s3://backups/local/dev\"\nconfig: logLevel: \"trace\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.git("commit", "--quiet", "-am", "dev: trace logging")
	r.env = append(r.env, "STYRMIN_BASE=origin/main")
	out, code = r.script("plan")
	if code != 0 {
		t.Fatalf("plan: exit %d\n%s", code, out)
	}
	plan, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"local/dev/web", "local/dev/hub", "environment `local/dev`: 2 of 2 deployments redeploy"} {
		if !strings.Contains(string(plan), want) {
			t.Errorf("plan markdown lacks %q:\n%s", want, plan)
		}
	}
	if strings.Contains(string(plan), "local/staging/web |") {
		t.Errorf("plan lists staging, which the change does not reach:\n%s", plan)
	}
	base, head := strings.TrimSpace(r.git("rev-parse", "--short", "origin/main")), strings.TrimSpace(r.git("rev-parse", "--short", "HEAD"))
	for _, want := range []string{"\n---\n<sub>styrminctl ", "compared `" + base + "` (origin/main) with head `" + head + "`",
		"on merge, CI locks what changed and pushes the lockfiles"} {
		if !strings.Contains(string(plan), want) {
			t.Errorf("plan footer lacks %q:\n%s", want, plan)
		}
	}
	if strings.Contains(string(plan), "styrminctl unknown") {
		t.Errorf("the footer has no tool version:\n%s", plan)
	}

	// A change that does not resolve: the comment says why, with the
	// footer, and the step fails.
	r.git("checkout", "--quiet", "-b", "broken", "change-log-level")
	if err := os.WriteFile(envFile, []byte("namespacePrefix: \"dev\"\nconfig: logLevel: \"trace\"\nconfig: logLevel: \"debug\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.git("commit", "--quiet", "-am", "dev: two log levels")
	r.env = append(r.env, "STYRMIN_LOCK_MODE=check")
	out, code = r.script("plan")
	if code == 0 || code == 2 {
		t.Fatalf("plan of a broken change: exit %d, want a failure\n%s", code, out)
	}
	failed, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### Styrmin plan failed", "environment.cue", "logLevel", "\n---\n<sub>styrminctl ",
		"lockfiles are committed in the pull request"} {
		if !strings.Contains(string(failed), want) {
			t.Errorf("the failed plan's comment lacks %q:\n%s", want, failed)
		}
	}
	r.env = r.env[:len(r.env)-1]
	r.git("checkout", "--quiet", "change-log-level")
	if out, code := r.script("check"); code != 2 {
		t.Fatalf("check on a branch with stale locks: exit %d, want 2\n%s", code, out)
	}

	// Merge and lock again: only dev's deployments move to sequence 2.
	r.git("checkout", "--quiet", "-B", "main", "origin/main")
	r.git("merge", "--quiet", "--no-ff", "-m", "merge change-log-level", "change-log-level")
	r.git("push", "--quiet", authURL, "main")
	out, code = r.script("lock")
	if code != 0 {
		t.Fatalf("lock after the merge: exit %d\n%s", code, out)
	}
	msg = srv.Git(srv.Dir("desired-state"), "log", "-1", "--format=%B", "main")
	if !strings.Contains(msg, "Styrmin-Lock: local/dev/web=2") || strings.Contains(msg, "local/staging") {
		t.Fatalf("second lock commit should lock dev only:\n%s", msg)
	}
	r.git("fetch", "--quiet", authURL, "+refs/heads/*:refs/remotes/origin/*")
	r.git("reset", "--quiet", "--hard", "origin/main")
	if out, code := r.script("check"); code != 0 {
		t.Fatalf("check after locking: exit %d\n%s", code, out)
	}
}

// TestCIScriptCommentNamesTheFileAndFieldOfADeploymentThatFailsToResolve:
// a pull request giving a parameter a value of the wrong type gets a
// comment naming the deployment, the file and the field (the plan's
// stderr), above the plan of what did resolve.
func TestCIScriptCommentNamesTheFileAndFieldOfADeploymentThatFailsToResolve(t *testing.T) {
	bin := buildStyrminctl(t)
	srv := gitserver.New(t)
	script, err := filepath.Abs("styrmin-ci.sh")
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "checkout")
	if err := os.CopyFS(work, os.DirFS("..")); err != nil {
		t.Fatal(err)
	}
	planFile := filepath.Join(t.TempDir(), "plan.md")
	r := &run{t: t, srv: srv, work: work, scriptPath: script,
		env: append(os.Environ(), "STYRMINCTL="+bin, "STYRMIN_PLAN_FILE="+planFile, "STYRMIN_BASE=main")}
	r.git("init", "--quiet", "-b", "main")
	r.git("add", ".")
	r.git("commit", "--quiet", "-m", "initial configuration")
	r.git("checkout", "--quiet", "-b", "replicas")
	const webFile = "clusters/local/environments/staging/deployments/web.yaml"
	if err := os.WriteFile(filepath.Join(work, webFile), []byte("driver: webapp\nappVersion: 1.25.0\nparameters:\n  replicas: three\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "clusters/local/environments/dev/deployments/web.cue"), []byte("driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.git("commit", "--quiet", "-am", "replicas")

	out, code := r.script("plan")
	if code != 1 {
		t.Fatalf("plan: exit %d, want 1\n%s", code, out)
	}
	comment, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"### Styrmin plan failed",
		"error: local/staging/web: " + webFile + ":4:13: field parameters.replicas: must be an integer",
		"**Errors** (these deployments are neither planned nor deleted)", // the plan's body
		"`local/dev/web`",
		"\n---\n<sub>styrminctl ",
	} {
		if !strings.Contains(string(comment), want) {
			t.Errorf("the comment lacks %q:\n%s", want, comment)
		}
	}
}

// TestCIScriptTakesACrashedPlanForAFailureNotForChanges: a Go program
// that panics or runs out of memory exits 2, which --detailed-exitcode
// uses for "the plan has changes": the script said so, exited 0 and
// posted an empty comment, so a crash passed the pull request's check. A
// 2 without a plan, or with a crash on stderr, is a failure.
func TestCIScriptTakesACrashedPlanForAFailureNotForChanges(t *testing.T) {
	script, err := filepath.Abs("styrmin-ci.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	crashing := filepath.Join(dir, "styrminctl")
	if err := os.WriteFile(crashing, []byte("#!/bin/sh\n"+
		"case \"$*\" in *version*) echo 'client: v0.0.0-test'; exit 0;; esac\n"+
		"echo 'panic: runtime error: index out of range [3] with length 3' >&2\n"+
		"exit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	planFile := filepath.Join(dir, "plan.md")
	r := &run{t: t, work: dir, scriptPath: script, env: append(os.Environ(), "STYRMINCTL="+crashing, "STYRMIN_PLAN_FILE="+planFile)}
	out, code := r.script("plan")
	if code == 0 || strings.Contains(out, "plan has changes") {
		t.Fatalf("a crashed plan: exit %d\n%s\nwant a failure", code, out)
	}
	comment, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(comment), "### Styrmin plan failed") || !strings.Contains(string(comment), "panic: runtime error") {
		t.Errorf("the comment of a crashed plan:\n%s", comment)
	}
}

// TestCIScriptPlansADetachedCheckoutAgainstTheBranchItMergesInto: CI checks
// a pull request out on a detached HEAD (GitLab, Jenkins, a merge commit),
// which has no upstream, so styrminctl compared the head with its own
// lockfiles; a pull request that commits its locks (STYRMIN_LOCK_MODE
// check) got a comment saying "no changes" and a green check. The script
// now takes the target branch the CI names (here GitLab's
// CI_MERGE_REQUEST_TARGET_BRANCH_NAME) as the base, and without one on a
// detached HEAD fails saying to set STYRMIN_BASE.
func TestCIScriptPlansADetachedCheckoutAgainstTheBranchItMergesInto(t *testing.T) {
	bin, srv, script, work, authURL, planFile := remoteCheckout(t)
	env := []string{}
	for _, e := range os.Environ() {
		switch strings.SplitN(e, "=", 2)[0] {
		case "GITHUB_BASE_REF", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME", "CHANGE_TARGET", "BITBUCKET_PR_DESTINATION_BRANCH", "SYSTEM_PULLREQUEST_TARGETBRANCH", "STYRMIN_BASE":
		default:
			env = append(env, e)
		}
	}
	env = append(env, "STYRMINCTL="+bin, "STYRMIN_GIT_TOKEN=ci-token", "STYRMIN_PLAN_FILE="+planFile, "STYRMIN_LOCK_MODE=check")
	r := &run{t: t, srv: srv, work: work, env: env, scriptPath: script}
	r.git("remote", "set-url", "origin", srv.RepoURL("desired-state"))
	if out, code := r.script("lock"); code != 0 {
		t.Fatalf("lock of the first configuration: exit %d\n%s", code, out)
	}
	r.git("fetch", "--quiet", authURL, "+refs/heads/*:refs/remotes/origin/*")

	// The merge request changes dev's web and commits its lock, as a team
	// that locks in its pull requests does; CI checks it out detached.
	r.git("checkout", "--quiet", "-b", "replicas", "origin/main")
	if err := os.WriteFile(filepath.Join(work, "clusters/local/environments/dev/deployments/web.cue"), []byte("driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.git("commit", "--quiet", "-am", "web: 3 replicas")
	if out, err := exec.Command(bin, "--repo", work, "lock", "--commit", "--author", "Dev <dev@example.com>").CombinedOutput(); err != nil {
		t.Fatalf("lock --commit in the merge request: %v\n%s", err, out)
	}
	r.git("checkout", "--quiet", "--detach", "HEAD")

	out, code := r.script("plan")
	if code != 1 || !strings.Contains(out, "set STYRMIN_BASE") {
		t.Errorf("plan of a detached checkout with no base named: exit %d, want 1 saying to set STYRMIN_BASE\n%s", code, out)
	}
	if comment, _ := os.ReadFile(planFile); !strings.Contains(string(comment), "### Styrmin plan failed") {
		t.Errorf("the comment of a plan with no base:\n%s", comment)
	}

	r.env = append(r.env, "CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main")
	if out, code := r.script("plan"); code != 0 {
		t.Fatalf("plan against the target branch: exit %d\n%s", code, out)
	}
	plan, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSpace(r.git("rev-parse", "--short", "origin/main"))
	for _, want := range []string{"`local/dev/web` | update | 1 → 2", "compared `" + base + "` (origin/main)"} {
		if !strings.Contains(string(plan), want) {
			t.Errorf("the plan lacks %q:\n%s", want, plan)
		}
	}
}

// remoteCheckout builds styrminctl, serves the examples as repository
// desired-state over HTTP (token ci-token) and clones it: the binary, the
// server, the script's path, the checkout, the clone URL with the token
// and a file for the plan's comment.
func remoteCheckout(t *testing.T) (bin string, srv *gitserver.Server, script, work, authURL, planFile string) {
	t.Helper()
	bin = buildStyrminctl(t)
	srv = gitserver.New(t, gitserver.WithToken("ci-token"))
	srv.Seed("desired-state", os.DirFS(".."), "initial configuration")
	script, err := filepath.Abs("styrmin-ci.sh")
	if err != nil {
		t.Fatal(err)
	}
	work = filepath.Join(t.TempDir(), "checkout")
	authURL = strings.Replace(srv.RepoURL("desired-state"), "://", "://x-access-token:ci-token@", 1)
	srv.Git(filepath.Dir(work), "clone", "--quiet", authURL, work)
	return bin, srv, script, work, authURL, filepath.Join(t.TempDir(), "plan.md")
}
