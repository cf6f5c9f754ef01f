package operator_test

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// The agent's integration tests run the real thing: a control plane with
// fake nodes, a git smart-HTTP server holding a desired-state repository
// made from examples/ with lockfiles written by the resolver, and the
// styrmin-agent binary built with `go build` and run as a subprocess (so
// a test can SIGKILL it), acting as its service account with the RBAC of
// config/.
//
// The package's integration tests call t.Parallel: each has a control
// plane, git server and agent of its own (ports from the kernel, files in
// temporary folders), and most of a test's time is waiting, not CPU.

const (
	agentCluster   = "local"
	agentRepoName  = "desired"
	agentSecret    = "repo-creds"
	agentGitToken  = "test-token-not-a-secret"
	hubNamespace   = "dev-hub"
	webNamespace   = "dev-web"
	hubDeployment  = "clusters/local/environments/dev/deployments/hub.cue"
	agentWaitLimit = 90 * time.Second
)

// agentBuild is the agent binary, built once per test process.
var agentBuild = &agenttest.Binaries{Dir: "agent-test", Packages: []string{"./cmd/styrmin-agent", "./cmd/styrminctl"}}

// agentBinary builds cmd/styrmin-agent once per test process.
func agentBinary(t *testing.T) string {
	t.Helper()
	return agentBuild.Path(t, "styrmin-agent")
}

// agentEnv is a control plane, a git server with the desired-state
// repository and (once started) the agent.
type agentEnv struct {
	cluster    *testcluster.Cluster
	c          client.Client
	git        *gitserver.Server
	url        string
	clone      *gitsource.Repo
	kubeconfig string
	bin        string
	agent      *agenttest.Proc
}

// exampleRepo returns the files of examples/ that make a desired-state
// repository with the dev environment's deployments (web and hub): the
// drivers, styrmin.cue and the local cluster without staging.
func exampleRepo(t *testing.T) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	src := os.DirFS("../examples")
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		keep := p == "styrmin.cue" || strings.HasPrefix(p, "drivers/") ||
			(strings.HasPrefix(p, "clusters/local/") && !strings.Contains(p, "/staging/"))
		if !keep {
			return nil
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		out[p] = &fstest.MapFile{Data: b, Mode: 0o644}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func startAgentEnv(t *testing.T) *agentEnv {
	t.Helper()
	return startAgentEnvWith(t, nil)
}

// startAgentEnvWith is startAgentEnv with extra files in the repository's
// first commit (a nil file removes that example file).
func startAgentEnvWith(t *testing.T, extra fstest.MapFS) *agentEnv {
	t.Helper()
	bin := agentBinary(t)
	repo := exampleRepo(t)
	maps.Copy(repo, extra)
	maps.DeleteFunc(repo, func(_ string, f *fstest.MapFile) bool { return f == nil })
	w := agenttest.Start(t, agenttest.Options{Repo: repo, RepoName: agentRepoName, Token: agentGitToken, SecretName: agentSecret})
	clone, err := gitsource.Clone(context.Background(), w.URL, "", gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: agentGitToken}})
	if err != nil {
		t.Fatal(err)
	}
	return &agentEnv{cluster: w.Cluster, c: w.Client, git: w.Git, url: w.URL, clone: clone, kubeconfig: w.Kubeconfig, bin: bin}
}

// commitConfig commits configuration files on the server (nil deletes a
// file), as a user's push would.
func (e *agentEnv) commitConfig(t *testing.T, msg string, files map[string][]byte) {
	t.Helper()
	e.git.Commit(agentRepoName, msg, files)
}

// lock resolves the branch head and commits the changed lockfiles back,
// as `styrminctl lock --push` does, returning the locked sequences by
// deployment name.
func (e *agentEnv) lock(t *testing.T) map[string]int64 {
	t.Helper()
	return lockRepo(t, e.clone)
}

// lockRepo resolves the head of clone's branch and pushes the changed
// lockfiles, returning the locked sequences by deployment name.
func lockRepo(t *testing.T, clone *gitsource.Repo) map[string]int64 {
	t.Helper()
	locked := map[string]int64{}
	_, err := clone.CommitLocks(context.Background(), gitsource.CommitRequest{
		Build: func(_ context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
			clear(locked)
			ws, err := resolver.LoadWorkspace(headFS, resolver.WorkspaceOptions{SourceCommit: head.String()})
			if err != nil {
				return gitsource.Change{}, err
			}
			changes, _, err := ws.Lock(resolver.LockAllOrNothing)
			if err != nil {
				return gitsource.Change{}, err
			}
			ch := gitsource.Change{Files: map[string][]byte{}, Locks: map[string]int{}}
			for _, c := range changes {
				ch.Files[c.Path()] = c.Data
				ch.Locks[c.ID.String()] = int(c.Next.Sequence)
				locked[c.ID.Name] = c.Next.Sequence
			}
			return ch, nil
		},
	})
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	return locked
}

// change commits a configuration change and locks it; it returns the
// sequence the deployment got.
func (e *agentEnv) change(t *testing.T, name, msg string, files map[string][]byte) int64 {
	t.Helper()
	e.commitConfig(t, msg, files)
	seq, ok := e.lock(t)[name]
	if !ok {
		t.Fatalf("%s: the change locked no new instance of %s", msg, name)
	}
	return seq
}

// taskInstance reads a task's instance from its lock in the test's clone
// (the agent's tasks carry no copy).
func (e *agentEnv) taskInstance(t *testing.T, task *v1alpha1.StyrminTask) *resolver.Instance {
	t.Helper()
	in, err := instance.NewRepoLocks(e.clone).Lock(context.Background(), task.Spec.Lock)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// hubConfig is the hub deployment file with the given app version,
// workers and log level.
func hubConfig(app string, workers int, logLevel string) map[string][]byte {
	return map[string][]byte{hubDeployment: fmt.Appendf(nil, `driver:     "graphhub"
appVersion: %q
connects: ["web"]
parameters: {
	workers: %d
	logLevel: %q
	databasePassword: {name: "hub-db", key: "password"}
}
`, app, workers, logLevel)}
}

// startAgent starts the agent binary; it is stopped when the test ends.
func (e *agentEnv) startAgent(t *testing.T, extra ...string) *agenttest.Proc {
	t.Helper()
	e.agent = agenttest.StartAgent(t, e.bin, e.agentArgs(extra...)...)
	return e.agent
}

// agentArgs are the agent's flags for this environment, then extra.
func (e *agentEnv) agentArgs(extra ...string) []string {
	return append([]string{
		"--cluster=" + agentCluster,
		"--repo=" + e.url,
		"--branch=main",
		"--repo-secret=" + agentSecret,
		"--namespace=" + config.AgentNamespace,
		"--poll-interval=500ms",
		"--drift-interval=1h",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=",
		"--kubeconfig=" + e.kubeconfig,
	}, extra...)
}

// waitTask waits until the task of a deployment's sequence is terminal
// and returns it.
func (e *agentEnv) waitTask(t *testing.T, ns, name string, seq int64) *v1alpha1.StyrminTask {
	t.Helper()
	var task v1alpha1.StyrminTask
	key := client.ObjectKey{Namespace: ns, Name: v1alpha1.TaskName(name, seq)}
	defer func() {
		if t.Failed() {
			e.dump(t, ns)
		}
	}()
	agenttest.WaitUntil(t, agentWaitLimit, "task "+key.String()+" to end", func(ctx context.Context) (bool, string, error) {
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
		return task.Status.Phase.Terminal(), fmt.Sprintf("phase %q step %d %s", task.Status.Phase, task.Status.CurrentStep, task.Status.Message), nil
	})
	return &task
}

// dump logs what a namespace holds, to explain a failed wait.
func (e *agentEnv) dump(t *testing.T, ns string) {
	ctx := context.Background()
	if sd := e.deployment(t, ns); sd != nil {
		b, _ := yaml.Marshal(sd.Status)
		t.Logf("StyrminDeployment %s status:\n%s", ns, b)
	}
	var pods corev1.PodList
	_ = e.c.List(ctx, &pods, client.InNamespace(ns))
	for _, p := range pods.Items {
		t.Logf("pod %s: %s node=%q %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Conditions)
	}
	var pvcs corev1.PersistentVolumeClaimList
	_ = e.c.List(ctx, &pvcs, client.InNamespace(ns))
	for _, p := range pvcs.Items {
		t.Logf("pvc %s: %s volume=%q", p.Name, p.Status.Phase, p.Spec.VolumeName)
	}
	for _, task := range e.tasksOf(t, ns) {
		t.Logf("task %s: %s %q steps %v", task.Name, task.Status.Phase, task.Status.Message, stepNames(&task))
	}
}

// deployment reads a StyrminDeployment (nil when it does not exist).
func (e *agentEnv) deployment(t *testing.T, ns string) *v1alpha1.StyrminDeployment {
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

// tasksOf lists a deployment's tasks in sequence order.
func (e *agentEnv) tasksOf(t *testing.T, ns string) []v1alpha1.StyrminTask {
	t.Helper()
	var list v1alpha1.StyrminTaskList
	if err := e.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	items := list.Items
	for i := 1; i < len(items); i++ {
		for j := i; j > 0 && items[j].Spec.ToSequence < items[j-1].Spec.ToSequence; j-- {
			items[j], items[j-1] = items[j-1], items[j]
		}
	}
	return items
}

func stepNames(task *v1alpha1.StyrminTask) []string {
	var out []string
	for _, s := range task.Status.Steps {
		out = append(out, path.Base(s.Name)+"="+string(s.State))
	}
	return out
}

func requireSucceeded(t *testing.T, task *v1alpha1.StyrminTask) {
	t.Helper()
	if task.Status.Phase != v1alpha1.TaskSucceeded {
		t.Fatalf("task %s: phase %s (%s), steps %v", task.Name, task.Status.Phase, task.Status.Message, stepNames(task))
	}
}
