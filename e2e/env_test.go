package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/checksfolder"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

const (
	clusterName = "local"
	repoName    = "desired"
	repoSecret  = "repo-creds"
	gitToken    = "e2e-token-not-a-secret"
	waitLimit   = 90 * time.Second
	pollFlag    = "--poll-interval=300ms"
)

// binaries are styrminctl and styrmin-agent, built once per test process.
var binaries = &agenttest.Binaries{Dir: "e2e-test", Packages: []string{"./cmd/styrminctl", "./cmd/styrmin-agent"}}

func TestMain(m *testing.M) {
	// envtest and the in-process agent log through controller-runtime.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(checksfolder.Run(m))
}

// buildBinaries builds both commands, once.
func buildBinaries(t testing.TB) (ctl, agent string) {
	t.Helper()
	return binaries.Path(t, "styrminctl"), binaries.Path(t, "styrmin-agent")
}

// env is one test function's world: a control plane with workloads, a git
// server holding the desired-state repository seeded from examples/, and
// the agent once started.
type env struct {
	cluster    *testcluster.Cluster
	c          client.Client
	git        *gitserver.Server
	url        string
	ctl, bin   string
	kubeconfig string // acts as the agent's service account
	agent      *agenttest.Proc
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvWithNodes(t, 0)
}

// newEnvWithNodes starts the environment with that many fake nodes (0:
// the cluster's default), each holding 250 pods.
func newEnvWithNodes(t testing.TB, nodes int) *env {
	t.Helper()
	ctl, bin := buildBinaries(t)
	w := agenttest.Start(t, agenttest.Options{Nodes: nodes, Repo: examples.Repo(), RepoName: repoName, Token: gitToken, SecretName: repoSecret})
	return &env{cluster: w.Cluster, c: w.Client, git: w.Git, url: w.URL, ctl: ctl, bin: bin, kubeconfig: w.Kubeconfig}
}

func (e *env) createSecret(t testing.TB, name string, data map[string][]byte) {
	t.Helper()
	err := e.c.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: config.AgentNamespace},
		Data:       data,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// newClone clones the repository into a folder, as a user's checkout that
// `styrminctl lock --push` runs in.
func (e *env) newClone(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "clone")
	if _, err := gitsource.Clone(context.Background(), e.url, dir, gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: gitToken}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

var lockedLine = regexp.MustCompile(`(?m)^locked (\S+)=(\d+) `)

// lockPush runs `styrminctl lock --push` in clone and returns the
// sequences it locked by deployment key (cluster/env/name) and its output.
func (e *env) lockPush(t testing.TB, clone string) (map[string]int64, string) {
	t.Helper()
	locked, out, err := e.lockPushErr(clone)
	if err != nil {
		t.Fatalf("styrminctl lock --push: %v\n%s", err, out)
	}
	return locked, out
}

func (e *env) lockPushErr(clone string) (map[string]int64, string, error) {
	cmd := exec.Command(e.ctl, "--repo", clone, "lock", "--push")
	cmd.Env = append(os.Environ(), "STYRMIN_GIT_TOKEN="+gitToken)
	out, err := cmd.CombinedOutput()
	locked := map[string]int64{}
	for _, m := range lockedLine.FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		locked[m[1]] = n
	}
	return locked, string(out), err
}

func (e *env) startAgent(t testing.TB, extra ...string) *agenttest.Proc {
	t.Helper()
	args := append([]string{
		"--cluster=" + clusterName,
		"--repo=" + e.url,
		"--branch=main",
		"--repo-secret=" + repoSecret,
		"--namespace=" + config.AgentNamespace,
		pollFlag,
		"--drift-interval=1h",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=",
		"--kubeconfig=" + e.kubeconfig,
	}, extra...)
	e.agent = agenttest.StartAgent(t, e.bin, args...)
	return e.agent
}

// waitTask waits until the task of a deployment's sequence is terminal.
func (e *env) waitTask(t testing.TB, ns, name string, seq int64) *v1alpha1.StyrminTask {
	t.Helper()
	var task v1alpha1.StyrminTask
	key := client.ObjectKey{Namespace: ns, Name: v1alpha1.TaskName(name, seq)}
	agenttest.WaitUntil(t, waitLimit, "task "+key.String()+" to end", func(ctx context.Context) (bool, string, error) {
		if e.agent != nil {
			select {
			case <-e.agent.Done():
				return false, "", fmt.Errorf("the agent exited: %s", e.agent.ExitState())
			default:
			}
		}
		if err := e.c.Get(ctx, key, &task); err != nil {
			return false, err.Error(), nil
		}
		return task.Status.Phase.Terminal(), fmt.Sprintf("phase %q: %s", task.Status.Phase, task.Status.Message), nil
	})
	return &task
}

func requirePhase(t testing.TB, task *v1alpha1.StyrminTask, want v1alpha1.TaskPhase) {
	t.Helper()
	if task.Status.Phase != want {
		t.Fatalf("task %s/%s: phase %s (%s), want %s", task.Namespace, task.Name, task.Status.Phase, task.Status.Message, want)
	}
}

// tasks lists a namespace's task names, sorted.
func (e *env) tasks(t testing.TB, ns string) []string {
	t.Helper()
	var list v1alpha1.StyrminTaskList
	if err := e.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, task := range list.Items {
		names = append(names, task.Name)
	}
	return names
}

// deployment reads the StyrminDeployment of a namespace (nil: none).
func (e *env) deployment(t testing.TB, ns string) *v1alpha1.StyrminDeployment {
	t.Helper()
	var sd v1alpha1.StyrminDeployment
	err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: ns}, &sd)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &sd
}

// waitSynced waits until the agent's StyrminSource has synced the
// repository's head.
func (e *env) waitSynced(t testing.TB) {
	t.Helper()
	head := e.git.Head(repoName, "main")
	agenttest.WaitUntil(t, waitLimit, "the agent to sync "+head, func(ctx context.Context) (bool, string, error) {
		var src v1alpha1.StyrminSource
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: config.AgentNamespace, Name: "styrmin"}, &src); err != nil {
			return false, err.Error(), nil
		}
		return src.Status.LastSyncedCommit == head, "synced " + src.Status.LastSyncedCommit, nil
	})
}

// deployAll locks the seeded repository, starts the agent and waits until
// the four example deployments are created.
func (e *env) deployAll(t testing.TB, clone string, agentArgs ...string) {
	t.Helper()
	locked, out := e.lockPush(t, clone)
	if len(locked) != 4 {
		t.Fatalf("first lock locked %v, want the four example deployments:\n%s", locked, out)
	}
	e.startAgent(t, agentArgs...)
	for _, d := range allDeployments {
		requirePhase(t, e.waitTask(t, d.ns, d.name, 1), v1alpha1.TaskSucceeded)
	}
}

type depRef struct{ key, ns, name string }

var allDeployments = []depRef{
	{"local/dev/hub", "dev-hub", "hub"},
	{"local/dev/web", "dev-web", "web"},
	{"local/staging/hub", "staging-hub", "hub"},
	{"local/staging/web", "staging-web", "web"},
}

const (
	devEnvFile     = "clusters/local/environments/dev/environment.cue"
	devHubFile     = "clusters/local/environments/dev/deployments/hub.cue"
	clusterFile    = "clusters/local/cluster.cue"
	stagingWebFile = "clusters/local/environments/staging/deployments/web.yaml"
)

// devEnvironment is dev's environment file with the given parameters
// (CUE struct body).
func devEnvironment(params string) map[string][]byte {
	return map[string][]byte{devEnvFile: fmt.Appendf(nil, `namespacePrefix: "dev"
backupLocation:  "s3://backups/local/dev"
parameters: {%s}
`, params)}
}

// readExample reads a file of examples/.
func readExample(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "examples", filepath.FromSlash(p)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
