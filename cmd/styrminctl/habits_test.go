package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// run executes styrminctl as main does and returns stdout, stderr and
// the exit code.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs(args)
	code = execute(context.Background(), root, &errb)
	return out.String(), errb.String(), code
}

// commandPaths are the paths of every command but cobra's help.
func commandPaths(c *cobra.Command) [][]string {
	var out [][]string
	for _, sub := range c.Commands() {
		if sub.Name() == "help" {
			continue
		}
		out = append(out, []string{sub.Name()})
		for _, p := range commandPaths(sub) {
			out = append(out, append([]string{sub.Name()}, p...))
		}
	}
	return out
}

func TestEveryCommandHasExamplesAndHelpExitsZero(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	paths := append([][]string{{}}, commandPaths(newRootCmd(&out, &errb))...)
	for _, p := range paths {
		t.Run(strings.Join(append([]string{"styrminctl"}, p...), " "), func(t *testing.T) {
			stdout, stderr, code := run(t, append(p, "--help")...)
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			if !strings.Contains(stdout, "\nExamples:\n  styrminctl ") {
				t.Errorf("no examples in the help:\n%s", stdout)
			}
		})
	}
}

func TestUsageMistakesPrintAOneLineHintAndFail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		err  string
		hint string
	}{
		{[]string{"plan", "extra"}, `unknown command "extra" for "styrminctl plan"`, "styrminctl plan"},
		{[]string{"plan", "--nope"}, "unknown flag: --nope", "styrminctl plan"},
		{[]string{"explain"}, "accepts between 1 and 2 arg(s), received 0", "styrminctl explain"},
		{[]string{"tasks", "get"}, "accepts 1 arg(s), received 0", "styrminctl tasks get"},
		{[]string{"tasks", "nope"}, `unknown command "nope" for "styrminctl tasks"`, "styrminctl tasks"},
		{[]string{"nope"}, `unknown command "nope" for "styrminctl"`, "styrminctl"},
		{[]string{"status", "-o", "xml"}, `unknown output format "xml" (accepted: text, wide, name, json, yaml)`, "styrminctl status"},
		{[]string{"status", "--cluster", "prod"}, "unknown flag: --cluster", "styrminctl status"},
		{[]string{"status", "-n", "dev", "-A"}, "-n/--namespace and -A/--all-namespaces: give one of them", "styrminctl status"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := run(t, tc.args...)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if code != 1 || stdout != "" || len(lines) != 2 {
				t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
			}
			if !strings.HasPrefix(lines[0], "error: ") || !strings.Contains(lines[0], tc.err) {
				t.Errorf("error line %q, want it to contain %q", lines[0], tc.err)
			}
			if want := "Run '" + tc.hint + " --help' for usage."; lines[1] != want {
				t.Errorf("hint %q, want %q", lines[1], want)
			}
		})
	}
	t.Run("an error that is no usage mistake has no hint", func(t *testing.T) {
		_, stderr, code := run(t, "--repo", filepath.Join(t.TempDir(), "missing"), "plan")
		if code != 1 || strings.Contains(stderr, "--help") {
			t.Errorf("exit %d, stderr:\n%s", code, stderr)
		}
	})
}

func TestRepoThatIsNotADesiredStateRepositoryIsNamed(t *testing.T) {
	t.Parallel()
	notRepo := t.TempDir()
	if err := os.WriteFile(filepath.Join(notRepo, "README.md"), []byte("# something else\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	for _, args := range [][]string{
		{"plan"}, {"diff", "local/dev/web"}, {"lock"}, {"lock", "--commit"}, {"retry", "local/dev/web"},
		{"upgrade", "local/dev"}, {"explain", "local/dev/web"}, {"drivers", "list"}, {"drivers", "show", "webapp"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, stderr, code := run(t, append([]string{"--repo", notRepo}, args...)...)
			want := "error: --repo " + notRepo + ": not a desired-state repository: expected styrmin.cue (or styrmin.yaml), a clusters/ folder"
			if code != 1 || !strings.HasPrefix(stderr, want) {
				t.Errorf("exit %d, stderr:\n%s\nwant it to start with %q", code, stderr, want)
			}
			_, stderr, code = run(t, append([]string{"--repo", missing}, args...)...)
			if code != 1 || !strings.HasPrefix(stderr, "error: --repo "+missing+": ") || !strings.Contains(stderr, "no such file or directory") {
				t.Errorf("missing folder: exit %d, stderr:\n%s", code, stderr)
			}
		})
	}
}

// TestCloneWithoutAWorkingTreeIsARepositoryForLocking: a clone with no
// files checked out (git clone --no-checkout, as CI caches and the agent
// keep them) is a desired-state repository when its HEAD holds one, for
// the commands that read HEAD: lock --commit locks it from HEAD, plan
// --head plans it. Those that read the working tree fail saying it is
// empty and what to do: they would find an empty repository there, and
// lock --check would pass, plan delete every deployment.
func TestCloneWithoutAWorkingTreeIsARepositoryForLocking(t *testing.T) {
	t.Parallel()
	src := exampleRepo(t)
	planGit(t, src, "init", "-q", "-b", "main")
	planGit(t, src, "add", "-A")
	planGit(t, src, "commit", "-q", "-m", "examples")
	clone := filepath.Join(t.TempDir(), "clone")
	planGit(t, filepath.Dir(clone), "clone", "-q", "--no-checkout", src, clone)
	const want = "error: --repo " + "%s" + ": the working tree holds no desired-state repository, though HEAD does (a clone without a checkout?): check it out (git checkout)"
	for _, tc := range []struct {
		args []string
		use  string // the command that reads HEAD instead, "" for none
	}{
		{[]string{"lock", "--check"}, "`styrminctl lock --commit` or `styrminctl lock --push`"},
		{[]string{"lock"}, "`styrminctl lock --commit` or `styrminctl lock --push`"},
		{[]string{"plan"}, "`styrminctl plan --head HEAD`"},
		{[]string{"diff", "local/dev/web"}, "`styrminctl diff --head HEAD`"},
		{[]string{"explain", "local/dev/web"}, ""},
		{[]string{"drivers", "list"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := run(t, append([]string{"--repo", clone}, tc.args...)...)
			if code != 1 || stdout != "" || !strings.HasPrefix(stderr, fmt.Sprintf(want, clone)) {
				t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
			}
			if tc.use != "" && !strings.Contains(stderr, "or read HEAD instead: "+tc.use) {
				t.Errorf("stderr does not say to use %s:\n%s", tc.use, stderr)
			}
		})
	}
	if out, _, code := run(t, "--repo", clone, "plan", "--head", "HEAD"); code != 0 || !strings.Contains(out, "local/dev/web") {
		t.Errorf("plan --head HEAD in a clone without a working tree: exit %d\n%s", code, out)
	}
	out, code, err := styrminctl(t, "--repo", clone, "lock", "--commit")
	if code != 0 || !strings.Contains(out, "locked local/dev/web=1") {
		t.Fatalf("lock --commit in a clone without a working tree: exit %d, %v\n%s", code, err, out)
	}
	if strings.Contains(out, "uncommitted configuration edits") {
		t.Errorf("lock --commit takes the empty working tree for edits:\n%s", out)
	}
	// The next commits too: nothing is checked out, so nothing in the
	// index or the working tree reads as an edit of the lockfiles HEAD
	// holds, and neither is written to.
	if out, code, err := styrminctl(t, "--repo", clone, "retry", "local/dev/web", "--commit"); code != 0 {
		t.Fatalf("retry --commit in a clone without a working tree, after its first lock: exit %d, %v\n%s", code, err, out)
	}
	if entries, err := os.ReadDir(clone); err != nil || len(entries) != 1 || entries[0].Name() != ".git" {
		t.Errorf("the clone's working tree after two commits: %v, %v; want only .git", entries, err)
	}
	if _, stderr, code := run(t, "--repo", clone, "plan"); code != 1 || !strings.Contains(stderr, "the working tree holds no desired-state repository") {
		t.Errorf("plan after the commits: exit %d, stderr:\n%s", code, stderr)
	}
	// ui reads commits only (the timeline, plans between them).
	if _, stderr, _ := run(t, "--repo", clone, "ui", "--kubeconfig", filepath.Join(t.TempDir(), "none")); strings.Contains(stderr, "the working tree holds no") {
		t.Errorf("ui in a clone without a working tree: %s", stderr)
	}
}

// TestCICheckoutsThatLackABranchOrHistoryAreNamedWithTheFix: a detached
// HEAD (CI checkouts of pull requests, GitLab, Jenkins) asks for --branch,
// and a shallow clone (CI's default depth) says it is one and how to
// fetch the whole history, which sequences are numbered from, rather
// than naming a missing commit. Both exit 1 and commit nothing.
func TestCICheckoutsThatLackABranchOrHistoryAreNamedWithTheFix(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	planGit(t, dir, "commit", "-q", "-am", "web 3 replicas")
	planGit(t, dir, "push", "-q", "origin", "HEAD:main")

	t.Run("detached HEAD", func(t *testing.T) {
		planGit(t, dir, "checkout", "-q", "--detach", "HEAD")
		head := planGit(t, dir, "rev-parse", "HEAD")
		for _, args := range [][]string{{"lock", "--push"}, {"lock", "--commit"}, {"retry", "local/dev/web", "--commit"}} {
			_, stderr, code := run(t, append([]string{"--repo", dir}, args...)...)
			if want := "error: HEAD is detached and no branch was given: pass --branch BRANCH, the branch to commit on\n"; code != 1 || stderr != want {
				t.Errorf("%s: exit %d, stderr %q, want %q", strings.Join(args, " "), code, stderr, want)
			}
		}
		if after := planGit(t, dir, "rev-parse", "HEAD"); after != head {
			t.Errorf("HEAD moved from %s to %s", head, after)
		}
	})

	t.Run("shallow clone", func(t *testing.T) {
		shallow := filepath.Join(t.TempDir(), "shallow")
		origin := planGit(t, dir, "remote", "get-url", "origin")
		planGit(t, filepath.Dir(shallow), "clone", "-q", "--depth", "1", "--branch", "main", "file://"+origin, shallow)
		head := planGit(t, shallow, "rev-parse", "HEAD")
		for _, args := range [][]string{{"plan"}, {"lock", "--check"}, {"lock"}, {"lock", "--commit"}} {
			_, stderr, code := run(t, append([]string{"--repo", shallow}, args...)...)
			if code != 1 || !strings.Contains(stderr, "the clone is shallow") || !strings.Contains(stderr, "git fetch --unshallow; fetch-depth: 0 in actions/checkout; GIT_DEPTH: 0 in GitLab CI") {
				t.Errorf("%s: exit %d, stderr:\n%s", strings.Join(args, " "), code, stderr)
			}
		}
		if after := planGit(t, shallow, "rev-parse", "HEAD"); after != head {
			t.Errorf("HEAD moved from %s to %s", head, after)
		}
		if st := planGit(t, shallow, "status", "--porcelain"); st != "" {
			t.Errorf("the working tree changed:\n%s", st)
		}
	})
}

func TestUnknownOutputFormatListsTheAcceptedOnes(t *testing.T) {
	t.Parallel()
	data := "(accepted: text, json, yaml)"
	list := "(accepted: text, wide, name, json, yaml)"
	plan := "(accepted: text, markdown, json, yaml)"
	for _, tc := range []struct {
		args     []string
		accepted string
	}{
		{[]string{"status"}, list}, {[]string{"status", "local/dev/web"}, list}, {[]string{"tasks", "list"}, list},
		{[]string{"history", "web"}, list}, {[]string{"tasks", "get", "web-1"}, data}, {[]string{"version"}, data},
		{[]string{"drivers", "list"}, data}, {[]string{"drivers", "show", "webapp"}, data}, {[]string{"drivers", "lint", "x"}, data},
		{[]string{"explain", "local/dev/web"}, data}, {[]string{"plan"}, plan}, {[]string{"diff", "local/dev/web"}, plan},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, stderr, code := run(t, append(tc.args, "-o", "xml")...)
			if code != 1 || !strings.Contains(stderr, `unknown output format "xml" `+tc.accepted) {
				t.Errorf("exit %d, stderr:\n%s", code, stderr)
			}
		})
	}
}

func TestJSONAndYAMLKeepAngleBracketsAndAmpersandsVerbatim(t *testing.T) {
	t.Parallel()
	type value struct {
		Message string `json:"message"`
	}
	for _, output := range []string{outJSON, outYAML} {
		var buf bytes.Buffer
		if err := writeData(&buf, output, value{Message: "a<b&c>"}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "a<b&c>") {
			t.Errorf("%s: %s", output, buf.String())
		}
		var back value
		if err := yaml.Unmarshal(buf.Bytes(), &back); err != nil || back.Message != "a<b&c>" {
			t.Errorf("%s round trip: %q, %v", output, back.Message, err)
		}
	}
}

// kubeconfigFile writes a kubeconfig with one context: server a, token a.
func kubeconfigFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	const kc = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://a.example.com"}
users:
- name: a
  user: {token: token-a}
- name: b
  user: {token: token-b}
contexts:
- name: a
  context: {cluster: a, user: a}
current-context: a
`
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKubectlFlagsChooseTheClusterOfEveryClusterCommand(t *testing.T) {
	t.Parallel()
	kc := kubeconfigFile(t)
	errStop := errors.New("stop here")
	for _, tc := range []struct {
		build func(restConfigFunc) *cobra.Command
		args  []string
	}{
		{func(l restConfigFunc) *cobra.Command { return newStatusCmd(l, &bytes.Buffer{}) }, nil},
		{func(l restConfigFunc) *cobra.Command { return newTasksCmd(l, &bytes.Buffer{}) }, []string{"list"}},
		{func(l restConfigFunc) *cobra.Command { return newTasksCmd(l, &bytes.Buffer{}) }, []string{"get", "x"}},
		{func(l restConfigFunc) *cobra.Command {
			return newHistoryCmd(&globalOptions{Repo: "."}, l, &bytes.Buffer{})
		}, []string{"x"}},
		{func(l restConfigFunc) *cobra.Command { return newInstallCmd(l, &bytes.Buffer{}) }, []string{"--cluster", "prod", "--repo", "https://git.example.com/r.git"}},
		{func(l restConfigFunc) *cobra.Command { return newUninstallCmd(l, &bytes.Buffer{}) }, nil},
		{func(l restConfigFunc) *cobra.Command {
			return newCheckCmd(l, func(string) string { return "" }, &bytes.Buffer{})
		}, nil},
		{func(l restConfigFunc) *cobra.Command { return newVersionCmd(l, &bytes.Buffer{}) }, nil},
		{func(l restConfigFunc) *cobra.Command {
			return newLockCmd(&globalOptions{Repo: exampleRepo(t)}, l, &bytes.Buffer{})
		}, []string{"--retry-failed"}},
	} {
		var got *rest.Config
		load := func(g genericclioptions.RESTClientGetter) (*rest.Config, error) {
			cfg, err := g.ToRESTConfig()
			if err != nil {
				return nil, err
			}
			got = cfg
			return nil, errStop
		}
		cmd := tc.build(load)
		t.Run(cmd.Name()+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			cmd.SetArgs(append(tc.args, "--kubeconfig", kc, "--server", "https://b.example.com", "--user", "b",
				"--insecure-skip-tls-verify", "--request-timeout", "7s"))
			err := cmd.ExecuteContext(context.Background())
			if got == nil {
				t.Fatalf("the flags did not reach the config: %v", err)
			}
			if got.Host != "https://b.example.com" || got.BearerToken != "token-b" || !got.Insecure || got.Timeout != 7*time.Second {
				t.Errorf("config: host %s, token %s, insecure %v, timeout %s", got.Host, got.BearerToken, got.Insecure, got.Timeout)
			}
		})
	}
	t.Run("--context names a context of the kubeconfig", func(t *testing.T) {
		_, stderr, code := run(t, "status", "--kubeconfig", kc, "--context", "nope")
		if code != 1 || !strings.Contains(stderr, `context "nope" does not exist`) {
			t.Errorf("exit %d, stderr:\n%s", code, stderr)
		}
	})
}

// TestInstallNamespaceIsTheAgentsNamespace: -n sets the namespace of
// the objects install renders.
func TestInstallNamespaceIsTheAgentsNamespace(t *testing.T) {
	t.Parallel()
	out, stderr, code := run(t, "install", "--cluster", "prod", "--repo", "https://git.example.com/r.git", "-n", "styrmin-prod", "--export")
	if code != 0 || !strings.Contains(out, "kind: Namespace\nmetadata:\n") || !strings.Contains(out, "name: styrmin-prod\n") ||
		strings.Contains(out, "namespace: styrmin-system") {
		t.Fatalf("exit %d, stderr %s:\n%.2000s", code, stderr, out)
	}
}

// syncBuffer is a bytes.Buffer a watching command writes while the test
// reads it.
type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.String()
}

// waitFor waits until the buffer holds want.
func waitFor(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output:\n%s", want, b.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
