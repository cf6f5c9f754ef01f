package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/version"
)

// planGit runs git in dir with a configuration of its own (no user or
// system settings).
func planGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir(),
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// lockedGitRepo is the example repository, locked and committed on main,
// pushed to a local "origin", with a feature branch tracking origin/main
// checked out: a pull request's situation.
func lockedGitRepo(t *testing.T) string {
	t.Helper()
	dir := upgradeGitRepo(t)
	origin := t.TempDir()
	planGit(t, origin, "init", "-q", "--bare")
	planGit(t, dir, "remote", "add", "origin", origin)
	planGit(t, dir, "push", "-q", "origin", "main")
	planGit(t, dir, "checkout", "-q", "-b", "feature", "--track", "origin/main")
	return dir
}

func writeRepoFile(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const devWebFile = "clusters/local/environments/dev/deployments/web.cue"

func TestPlanWithoutChangesExitsZeroEvenWithDetailedExitcode(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	out, code, err := styrminctl(t, "--repo", dir, "plan", "--detailed-exitcode")
	if code != 0 {
		t.Fatalf("exit %d (%v)\n%s", code, err, out)
	}
	if !strings.Contains(out, "No changes") {
		t.Errorf("output does not say there are no changes:\n%s", out)
	}
}

// TestARevisionThatDoesNotResolveNamesItsFlag pins the error of a --base
// or --head that names no commit (a typo, a branch CI did not fetch): it
// said only `resolve "nope": reference not found`, not which of the two.
func TestARevisionThatDoesNotResolveNamesItsFlag(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	for _, flag := range []string{"--base", "--head"} {
		_, code, err := styrminctl(t, "--repo", dir, "plan", flag, "origin/nope")
		if code != 1 || err == nil || !strings.Contains(err.Error(), flag+" origin/nope: ") || !strings.Contains(err.Error(), "reference not found") {
			t.Errorf("plan %s origin/nope: exit %d, err %v; want exit 1 naming %s and the revision", flag, code, err, flag)
		}
	}
}

func TestPlanComparesTheWorkingTreeWithTheUpstreamMergeBase(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	// Committed on the feature branch and edited in the working tree: the
	// plan sees both, against main's lockfiles.
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	planGit(t, dir, "commit", "-q", "-am", "three replicas")
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 4\n")

	out, code, err := styrminctl(t, "--repo", dir, "plan", "--detailed-exitcode")
	if code != 2 {
		t.Fatalf("exit %d (%v), want 2 for a plan with changes\n%s", code, err, out)
	}
	for _, want := range []string{
		"merge base with origin/main",
		"~ local/dev/web",
		"context.parameters.replicas: 2 → 4",
		"Deployment/dev-web/web changed: 1 field",
		"+  replicas: 4",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}

	// --head plans the committed branch instead of the working tree.
	out, _, _ = styrminctl(t, "--repo", dir, "plan", "--head", "HEAD")
	if !strings.Contains(out, "context.parameters.replicas: 2 → 3") {
		t.Errorf("--head HEAD does not plan the committed change:\n%s", out)
	}

	// main's configuration matches main's lockfiles.
	out, code, _ = styrminctl(t, "--repo", dir, "plan", "--base", "origin/main", "--head", "origin/main", "--detailed-exitcode")
	if code != 0 || !strings.Contains(out, "No changes") {
		t.Errorf("origin/main against itself: exit %d\n%s", code, out)
	}
}

func TestPlanJSONIsVersionedAndMarkdownHasDetails(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")

	out, code, err := styrminctl(t, "--repo", dir, "plan", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %v", code, err)
	}
	var p struct {
		SchemaVersion  string `json:"schemaVersion"`
		StyrminVersion string `json:"styrmin_version"`
		Deployments    []struct {
			ID       string `json:"id"`
			Workflow string `json:"workflow"`
		} `json:"deployments"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if p.StyrminVersion != version.Get().Short() {
		t.Errorf("styrmin_version %q, want %q", p.StyrminVersion, version.Get().Short())
	}
	if p.SchemaVersion != "styrmin.io/plan/v1" || len(p.Deployments) != 1 || p.Deployments[0].ID != "local/dev/web" || p.Deployments[0].Workflow != "update" {
		t.Errorf("unexpected plan: %+v", p)
	}

	out, _, _ = styrminctl(t, "--repo", dir, "plan", "-o", "markdown")
	for _, want := range []string{"| ~ | `local/dev/web` | update |", "<details>", "```diff", "environment `local/dev`: 1 of 2 deployments redeploy"} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("markdown contains ANSI escapes")
	}
}

func TestPlanRefusesDeletionsAboveTheThreshold(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	for _, f := range []string{"web.yaml", "hub.cue"} {
		if err := os.Remove(filepath.Join(dir, "clusters/local/environments/staging/deployments", f)); err != nil {
			t.Fatal(err)
		}
	}
	out, code, _ := styrminctl(t, "--repo", dir, "plan")
	if code != 1 || !strings.Contains(out, "REFUSED") {
		t.Fatalf("two deletions, threshold 1: exit %d, want 1 and a refusal\n%s", code, out)
	}
	if _, code, err := styrminctl(t, "--repo", dir, "plan", "--allow-deletions", "2", "--detailed-exitcode"); code != 2 {
		t.Fatalf("--allow-deletions 2: exit %d (%v), want 2", code, err)
	}
}

func TestDiffShowsOneDeploymentInFullDetail(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \"Hi\"}\n")
	writeRepoFile(t, dir, "clusters/local/environments/dev/deployments/api.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\n")

	out, code, err := styrminctl(t, "--repo", dir, "diff", "local/dev/api")
	if code != 0 {
		t.Fatalf("exit %d: %v", code, err)
	}
	// Full detail: the content of added objects, and only this deployment.
	for _, want := range []string{"+ local/dev/api: create", "+++ b/Deployment/dev-api/api", "+kind: Deployment"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "local/dev/web") {
		t.Errorf("diff of local/dev/api shows local/dev/web:\n%s", out)
	}

	out, code, _ = styrminctl(t, "--repo", dir, "diff", "local/staging/web")
	if code != 0 || !strings.Contains(out, "no changes") {
		t.Errorf("unchanged deployment: exit %d\n%s", code, out)
	}
	if _, code, err := styrminctl(t, "--repo", dir, "diff", "local/dev/nope"); code != 1 || err == nil || !strings.Contains(err.Error(), "local/dev/nope") {
		t.Errorf("unknown deployment: exit %d, err %v", code, err)
	}
}

func TestPlanOutsideGitIsAClearError(t *testing.T) {
	t.Parallel()
	dir := exampleRepo(t)
	_, code, err := styrminctl(t, "--repo", dir, "plan")
	if code != 1 || err == nil || !strings.Contains(err.Error(), "git repository") {
		t.Fatalf("exit %d, err %v", code, err)
	}
}

func TestPlanWorksForARepositoryInASubfolderOfTheGitRepository(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "deploy", "styrmin")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exampleRepo(t), dir); err != nil {
		t.Fatal(err)
	}
	if _, code, err := styrminctl(t, "--repo", dir, "lock"); code != 0 {
		t.Fatalf("lock: %v", err)
	}
	planGit(t, root, "init", "-q", "-b", "main")
	planGit(t, root, "add", ".")
	planGit(t, root, "commit", "-q", "-m", "locked")
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 5\n")

	out, code, err := styrminctl(t, "--repo", dir, "plan", "--detailed-exitcode")
	if code != 2 {
		t.Fatalf("exit %d (%v)\n%s", code, err, out)
	}
	if !strings.Contains(out, "1 to update") || !strings.Contains(out, "context.parameters.replicas: 2 → 5") {
		t.Errorf("the plan does not compare with the subfolder's lockfiles:\n%s", out)
	}
}

// TestDiffOfADeploymentOnHoldSaysSo: a held deployment is resolved but
// kept at its lock; diff said it was "neither defined in the configuration
// nor locked", which sends its reader looking for a deleted file.
func TestDiffOfADeploymentOnHoldSaysSo(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 2\nhold: \"freeze for the audit\"\n")
	out, code, err := styrminctl(t, "--repo", dir, "diff", "local/dev/web")
	if code != 0 || !strings.Contains(out, "local/dev/web: on hold (freeze for the audit); nothing waits") {
		t.Fatalf("diff of a held deployment: exit %d, %v:\n%s", code, err, out)
	}
	writeRepoFile(t, dir, devWebFile, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\nhold: \"freeze for the audit\"\n")
	out, code, err = styrminctl(t, "--repo", dir, "diff", "local/dev/web")
	if code != 0 || !strings.Contains(out, "on hold (freeze for the audit); a change waits") {
		t.Fatalf("diff of a held deployment with a change: exit %d, %v:\n%s", code, err, out)
	}
}

// TestThePlanOfABranchThatLockedItselfShowsItsOwnSequence: a pull request
// whose CI locks it (lock --commit on the branch) holds web at 2, and its
// trailer is among the sequences its history used; the plan against the
// base numbered one past it (3), which no lock would write.
func TestThePlanOfABranchThatLockedItselfShowsItsOwnSequence(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	planGit(t, dir, "commit", "-q", "-am", "web: three replicas")
	if out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit"); code != 0 {
		t.Fatalf("lock --commit: exit %d, %v\n%s", code, err, out)
	}
	out, code, err := styrminctl(t, "--repo", dir, "plan", "-o", "json")
	if code != 0 || !strings.Contains(out, `"toSequence": 2`) || strings.Contains(out, `"toSequence": 3`) {
		t.Fatalf("plan of the locked branch: exit %d, %v; want web to sequence 2, its own lock\n%s", code, err, out)
	}
}

// TestPlanNamesEachDeploymentThatFailsToResolveOnStderr: plan's stderr
// has one line per failed deployment with its file, line and field, as
// CI logs and the CI script's comment show stderr alone (plan -o json >
// plan.json); a sensitive parameter's value is not on it.
func TestPlanNamesEachDeploymentThatFailsToResolveOnStderr(t *testing.T) {
	t.Parallel()
	const secret = "Pa ss/w0rd+launch&code"
	dir := lockedGitRepo(t)
	spec := filepath.Join(dir, "drivers/webapp/1.1.0/driver.cue")
	src, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	marked := strings.Replace(string(src), `message: *"Hello from Styrmin" | string & !=""`, `message: *"Hello from Styrmin" | string & =~"^[A-Za-z ]+$" @styrmin(sensitive)`, 1)
	if marked == string(src) {
		t.Fatal("webapp's message parameter not found; update the test")
	}
	if err := os.WriteFile(spec, []byte(marked), 0o644); err != nil {
		t.Fatal(err)
	}
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \""+secret+"\"}\n")
	writeRepoFile(t, dir, "clusters/local/environments/staging/deployments/web.yaml", "driver: webapp\nappVersion: 1.25.0\nparameters:\n  replicas: three\n")

	stdout, stderr, code := run(t, "--repo", dir, "plan", "-o", "json")
	if code != 1 || !strings.HasPrefix(stdout, "{") {
		t.Fatalf("exit %d, want 1 and the plan\nstderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"error: local/dev/web: " + devWebFile + ":3:",
		"field parameters.message: must match the regular expression ^[A-Za-z ]+$ (value hidden)\n",
		"error: local/staging/web: clusters/local/environments/staging/deployments/web.yaml:4:13: field parameters.replicas: must be an integer",
		"error: local/dev/hub: " + devHubFile + ":3:12: field connects[0]: deployment \"web\" failed to resolve",
		"error: 3 deployment(s) failed to resolve; they are left out of the plan\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if found := secrettest.Find([]byte(stderr), secret); len(found) > 0 {
		t.Errorf("stderr holds %s:\n%s", strings.Join(found, ", "), stderr)
	}
}
