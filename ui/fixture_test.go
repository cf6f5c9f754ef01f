package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
	"github.com/styrmin/styrmin/ui"
)

// The pages are tested against a real control plane holding what an agent
// writes (StyrminDeployments written through the guard, tasks, events,
// pods) and a real git repository made from the examples and locked by
// the resolver, as `styrminctl lock` does: the demo's state, with a
// failed task, a superseded one and a held deployment.

// secretValue is the sensitive parameter's value in the configuration:
// no page may show it in any form.
const secretValue = "hunter2-launch-code/xyz+1"

const (
	devWeb     = "clusters/local/environments/dev/deployments/web.cue"
	devHub     = "clusters/local/environments/dev/deployments/hub.cue"
	stagingWeb = "clusters/local/environments/staging/deployments/web.yaml"
)

// desired is a desired-state repository in a local git repository.
type desired struct {
	dir  string
	repo *gitsource.Repo
	// lockCommits are the lock commits, in order.
	lockCommits []gitsource.Hash
}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Demo Platform Team", "-c", "user.email=platform@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// newDesired makes the examples' repository with webapp's message
// parameter sensitive and dev/web setting it, and commits it.
func newDesired(t testing.TB) *desired {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	if err := examples.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	const spec = "drivers/webapp/1.1.0/driver.cue"
	src, err := os.ReadFile(filepath.Join(dir, spec))
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(src), `message: *"Hello from Styrmin" | string & !=""`, `message: *"Hello from Styrmin" | string & !="" @styrmin(sensitive)`, 1)
	if out == string(src) {
		t.Fatalf("%s: the message parameter is not where the test expects it", spec)
	}
	write(t, dir, spec, out)
	write(t, dir, devWeb, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \""+secretValue+"\"}\n")
	git(t, dir, "init", "--quiet", "--initial-branch=main")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "--quiet", "-m", "Desired state: cluster local, environments dev and staging")
	repo, err := gitsource.Open(dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &desired{dir: dir, repo: repo}
}

func write(t testing.TB, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// change commits configuration files (as a merged pull request) and locks
// the result as `styrminctl lock` does.
func (d *desired) change(t testing.TB, subject string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		write(t, d.dir, rel, content)
	}
	git(t, d.dir, "add", "-A")
	git(t, d.dir, "commit", "--quiet", "-m", subject)
	d.lock(t)
}

// lock commits the lockfiles of every configuration commit since the last
// lock, one lock commit each.
func (d *desired) lock(t testing.TB) {
	t.Helper()
	out, err := resolver.CommitLocksWith(context.Background(), d.repo, resolver.WorkspaceOptions{}, resolver.LockRequest{Policy: resolver.LockAllOrNothing},
		resolver.CommitOptions{History: d.repo, Author: gitsource.Signature{Name: "Styrmin CI", Email: "ci@example.com"}})
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	d.lockCommits = append(d.lockCommits, out.Commits...)
}

// lockAt reads a deployment's lockfile at the repository's head.
func (d *desired) lockAt(t testing.TB, commit gitsource.Hash, id resolver.ID) *resolver.Instance {
	t.Helper()
	fsys, err := d.repo.TreeAt(commit, ".")
	if err != nil {
		t.Fatal(err)
	}
	in, err := resolver.ReadLock(fsys, id.LockPath())
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func (d *desired) head(t testing.TB) gitsource.Hash {
	t.Helper()
	h, err := d.repo.Head()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// brokenLock is a lockfile committed by hand that is no lockfile: the
// agent skips it, and so must the pages.
const brokenLock = "locks/local/dev/broken.lock.yaml"

// demoHistory is the history of the fixture: a first lock of the four
// deployments, two changes of dev/hub, one of dev/web, a hold on
// staging/web with a change it keeps waiting, and an invalid lockfile
// committed by hand (brokenLock).
func demoHistory(t testing.TB) *desired {
	t.Helper()
	d := newDesired(t)
	d.lock(t)
	d.change(t, "Merge pull request #7 from team/web-replicas", map[string]string{
		devWeb: "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 3, message: \"" + secretValue + "\"}\n",
	})
	hub, err := os.ReadFile(filepath.Join(d.dir, devHub))
	if err != nil {
		t.Fatal(err)
	}
	d.change(t, "hub: more workers", map[string]string{devHub: strings.Replace(string(hub), "workers: 2", "workers: 3", 1)})
	d.change(t, "hub: even more workers", map[string]string{devHub: strings.Replace(string(hub), "workers: 2", "workers: 4", 1)})
	d.change(t, "Merge pull request #9 from team/freeze", map[string]string{
		stagingWeb: "driver: webapp\nappVersion: 1.25.0\nhold: frozen for the audit\nparameters:\n  replicas: 5\n",
	})
	write(t, d.dir, brokenLock, "x: 1\n")
	git(t, d.dir, "add", "-A")
	git(t, d.dir, "commit", "--quiet", "-m", "A lockfile edited by hand")
	return d
}

var (
	idDevWeb     = resolver.ID{Cluster: "local", Environment: "dev", Name: "web"}
	idDevHub     = resolver.ID{Cluster: "local", Environment: "dev", Name: "hub"}
	idStagingWeb = resolver.ID{Cluster: "local", Environment: "staging", Name: "web"}
	idStagingHub = resolver.ID{Cluster: "local", Environment: "staging", Name: "hub"}
)

// sharedCluster is one control plane for the package's tests (each
// start costs seconds on a shared machine); each test writes into
// namespaces of its own or only reads.
var sharedCluster struct {
	once sync.Once
	c    *testcluster.Cluster
	cl   client.Client
	err  error
}

// packageDirs are folders kept for the whole package (the shared
// fixture's repository), removed when it ends.
var packageDirs struct {
	mu   sync.Mutex
	dirs []string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedCluster.c != nil {
		_ = sharedCluster.c.Stop()
	}
	for _, d := range packageDirs.dirs {
		_ = os.RemoveAll(d)
	}
	os.Exit(code)
}

// controlPlane starts (once) a control plane with Styrmin's CRDs.
func controlPlane(t testing.TB) (*testcluster.Cluster, client.Client) {
	t.Helper()
	s := &sharedCluster
	s.once.Do(func() {
		s.c, s.cl, s.err = startControlPlane()
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.c, s.cl
}

func startControlPlane() (*testcluster.Cluster, client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := testcluster.Start(ctx, testcluster.Options{})
	if err != nil {
		return nil, nil, err
	}
	if err := operator.InstallCRDs(ctx, c.RESTConfig); err != nil {
		return c, nil, err
	}
	cl, err := newClient(c)
	return c, cl, err
}

func newClient(c *testcluster.Cluster) (client.Client, error) {
	scheme, err := operator.NewScheme()
	if err != nil {
		return nil, err
	}
	return client.New(c.RESTConfig, client.Options{Scheme: scheme})
}

// demoWorld is the demo's state: the repository and, in the cluster, what
// the agent of cluster local made of it.
type demoWorld struct {
	git *desired
	cl  client.Client
	h   *ui.Handler
	srv *httptest.Server
}

var fixtureTime = time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)

func at(seconds int) *metav1.Time {
	t := metav1.NewTime(fixtureTime.Add(time.Duration(seconds) * time.Second))
	return &t
}

var demoOnce struct {
	once sync.Once
	git  *desired
	err  error
}

// newDemoWorld fills the shared control plane with the demo's state
// (once) and serves the pages over it.
func newDemoWorld(t *testing.T) *demoWorld {
	t.Helper()
	_, cl := controlPlane(t)
	demoOnce.once.Do(func() {
		demoOnce.git = demoHistory(&onceT{T: t})
		demoOnce.err = fillCluster(context.Background(), cl, demoOnce.git)
	})
	if demoOnce.git == nil {
		t.Fatal("the demo's repository could not be made (see the first test)")
	}
	if demoOnce.err != nil {
		t.Fatal(demoOnce.err)
	}
	h, err := ui.New(ui.Options{
		Clusters: []ui.Cluster{{Name: "local", Reader: cl}},
		Repo:     demoOnce.git.repo,
		Now:      func() time.Time { return fixtureTime.Add(time.Hour) },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &demoWorld{git: demoOnce.git, cl: cl, h: h, srv: srv}
}

// onceT keeps the fixture's temporary folders for the whole package: the
// first test's TempDir would be removed when it ends.
type onceT struct{ *testing.T }

func (o *onceT) TempDir() string {
	dir, err := os.MkdirTemp("", "styrmin-ui-")
	if err != nil {
		o.T.Fatal(err)
	}
	packageDirs.mu.Lock()
	packageDirs.dirs = append(packageDirs.dirs, dir)
	packageDirs.mu.Unlock()
	return dir
}

// fillCluster writes what the agent of cluster local made of the
// history: every StyrminDeployment through the guard, the tasks and their
// steps, events and a crashing pod.
//
//   - dev/web: sequence 1 succeeded; 2 (the replicas change) failed in its
//     core step, so 1 stays active and the deployment is behind git; a
//     backup then succeeded (its task carries 2's sequence and lock);
//   - dev/hub: 1 succeeded; 2 was superseded (its core step found 3,
//     NewerInstanceKept); 3 succeeded;
//   - staging/web: 1 succeeded and is Ready; git holds it;
//   - staging/hub: locked in git, never applied.
func fillCluster(ctx context.Context, cl client.Client, d *desired) error {
	lc := d.lockCommits
	if len(lc) != 4 {
		return fmt.Errorf("the fixture's history has %d lock commits, want 4 (the first lock, dev/web, dev/hub twice)", len(lc))
	}
	lock := func(commit gitsource.Hash, id resolver.ID) (*resolver.Instance, error) {
		fsys, err := d.repo.TreeAt(commit, ".")
		if err != nil {
			return nil, err
		}
		return resolver.ReadLock(fsys, id.LockPath())
	}
	type deployment struct {
		id     resolver.ID
		commit gitsource.Hash
		active int64
		ready  metav1.Condition
	}
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSucceeded, Message: "all components ready", LastTransitionTime: *at(60)}
	failed := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonWorkloadFailed, Message: "Deployment dev-web/web: ProgressDeadlineExceeded", LastTransitionTime: *at(200)}
	for _, dep := range []deployment{
		{idDevWeb, lc[1], 1, failed},
		{idDevHub, lc[3], 3, ready},
		{idStagingWeb, lc[0], 1, ready},
	} {
		in, err := lock(dep.commit, dep.id)
		if err != nil {
			return err
		}
		ns := in.Context.Deployment.Namespace
		if err := instance.EnsureNamespace(ctx, cl, ns, instance.DeploymentID(dep.id)); err != nil {
			return err
		}
		if _, err := instance.WriteInstance(ctx, cl, ns, in); err != nil {
			return err
		}
		var sd v1alpha1.StyrminDeployment
		if err := cl.Get(ctx, instance.Key(ns), &sd); err != nil {
			return err
		}
		sd.Status = v1alpha1.StyrminDeploymentStatus{
			ObservedGeneration: sd.Generation, AppliedSequence: in.Sequence, AppliedDigest: in.Digest, ActiveSequence: dep.active,
			Active:     &v1alpha1.ActiveInstance{Sequence: dep.active, Driver: sd.Spec.Driver, AppVersion: sd.Spec.AppVersion, Task: v1alpha1.TaskName(dep.id.Name, dep.active)},
			Release:    &v1alpha1.ReleaseStatus{Name: ns, Revision: int(in.Sequence), Chart: in.Driver.Name + "-" + in.Driver.Version, Status: "deployed", LastAppliedTime: at(50)},
			Conditions: []metav1.Condition{dep.ready},
			Inventory: []v1alpha1.ObjectRef{
				{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: dep.id.Name},
				{APIVersion: "v1", Kind: "Service", Namespace: ns, Name: dep.id.Name},
			},
			Components: []v1alpha1.ComponentStatus{{Name: "server", Ready: dep.ready.Status == metav1.ConditionTrue, DesiredReplicas: 2, ReadyReplicas: 1}},
		}
		if err := cl.Status().Update(ctx, &sd); err != nil {
			return err
		}
	}

	step := func(name, action string, state v1alpha1.StepState, start, end int, output, message string) v1alpha1.TaskStep {
		s := v1alpha1.TaskStep{Name: name, Action: action, Mode: strings.Split(name, "/")[1], State: state, Attempts: 1, Output: output, Message: message, StartedAt: at(start)}
		if end >= 0 {
			s.FinishedAt = at(end)
		}
		return s
	}
	type task struct {
		id       resolver.ID
		seq      int64
		commit   gitsource.Hash
		workflow v1alpha1.Workflow
		status   v1alpha1.StyrminTaskStatus
	}
	webNS, hubNS, stagingNS := "dev-web", "dev-hub", "staging-web"
	nsOf := map[resolver.ID]string{idDevWeb: webNS, idDevHub: hubNS, idStagingWeb: stagingNS}
	tasks := []task{
		{idDevWeb, 1, lc[0], v1alpha1.WorkflowCreate, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, Workflow: v1alpha1.WorkflowCreate, StartedAt: at(0), FinishedAt: at(40),
			Steps: []v1alpha1.TaskStep{step("setup/core/0:writeInstance", "writeInstance", v1alpha1.StepSucceeded, 0, 1, "StyrminDeployment dev-web/dev-web: sequence 1 written", ""),
				step("setup/core/1:waitReady", "waitReady", v1alpha1.StepSucceeded, 1, 40, "all components ready", "")}}},
		{idDevWeb, 2, lc[1], v1alpha1.WorkflowUpdate, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskFailed, Workflow: v1alpha1.WorkflowUpdate, FromSequence: 1, StartedAt: at(100), FinishedAt: at(200),
			Message: "step update/core/1:waitReady failed",
			Steps: []v1alpha1.TaskStep{step("update/core/0:writeInstance", "writeInstance", v1alpha1.StepSucceeded, 100, 101, "StyrminDeployment dev-web/dev-web: sequence 2 written", ""),
				step("update/core/1:waitReady", "waitReady", v1alpha1.StepFailed, 101, 200, "Deployment dev-web/web: 1 of 3 replicas ready", "Deployment dev-web/web: ProgressDeadlineExceeded: ReplicaSet web-7f9 has timed out progressing")}}},
		{idDevHub, 1, lc[0], v1alpha1.WorkflowCreate, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, Workflow: v1alpha1.WorkflowCreate, StartedAt: at(0), FinishedAt: at(60),
			Steps: []v1alpha1.TaskStep{step("setup/pre/0:runJob", "runJob", v1alpha1.StepSucceeded, 0, 20, "job hub-migrate completed", ""),
				step("setup/core/1:writeInstance", "writeInstance", v1alpha1.StepSucceeded, 20, 21, "sequence 1 written", ""),
				step("setup/core/2:waitReady", "waitReady", v1alpha1.StepSucceeded, 21, 60, "all components ready", "")}}},
		{idDevHub, 2, lc[2], v1alpha1.WorkflowUpdate, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSuperseded, Workflow: v1alpha1.WorkflowUpdate, FromSequence: 1, SupersededBy: 3, StartedAt: at(300), FinishedAt: at(305),
			Steps: []v1alpha1.TaskStep{step("update/core/0:writeInstance", "writeInstance", v1alpha1.StepSucceeded, 300, 305,
				"StyrminDeployment dev-hub/dev-hub holds sequence 3 (annotation styrmin.io/instance-sequence), newer than this task's 2: left unchanged", "")}}},
		{idDevHub, 3, lc[3], v1alpha1.WorkflowUpdate, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, Workflow: v1alpha1.WorkflowUpdate, FromSequence: 1, StartedAt: at(290), FinishedAt: at(330),
			Steps: []v1alpha1.TaskStep{step("update/core/0:writeInstance", "writeInstance", v1alpha1.StepSucceeded, 290, 291, "sequence 3 written", ""),
				step("update/core/1:waitReady", "waitReady", v1alpha1.StepSucceeded, 291, 330, "all components ready", "")}}},
		{idStagingWeb, 1, lc[0], v1alpha1.WorkflowCreate, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, Workflow: v1alpha1.WorkflowCreate, StartedAt: at(0), FinishedAt: at(30),
			Steps: []v1alpha1.TaskStep{step("setup/core/0:writeInstance", "writeInstance", v1alpha1.StepSucceeded, 0, 30, "sequence 1 written", "")}}},
	}
	for _, tk := range tasks {
		did := instance.DeploymentID(tk.id)
		labels := did.Labels()
		labels[v1alpha1.LabelSequence] = fmt.Sprint(tk.seq)
		t := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(tk.id.Name, tk.seq), Namespace: nsOf[tk.id], Labels: labels},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: did, Namespace: nsOf[tk.id], Workflow: tk.workflow, ToSequence: tk.seq, FromSequence: tk.status.FromSequence,
				Lock: v1alpha1.LockRef{Commit: tk.commit.String(), Path: tk.id.LockPath()}},
		}
		if err := cl.Create(ctx, t); err != nil {
			return err
		}
		t.Status = tk.status
		if err := cl.Status().Update(ctx, t); err != nil {
			return err
		}
	}
	// A backup of dev/web after its failed change, as the agent makes it
	// (operation.makeTask): the deployment's labels, the sequence and lock
	// of the newest change. Its name (task.OperationTaskName) lists after
	// web-2's.
	backup := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: "web-backup-nightly-0a1b2c3d4e", Namespace: webNS, Labels: func() map[string]string {
			l := instance.DeploymentID(idDevWeb).Labels()
			l[v1alpha1.LabelOperation], l[v1alpha1.LabelOperationKind], l[v1alpha1.LabelSequence] = "nightly", "backup", "2"
			return l
		}()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: instance.DeploymentID(idDevWeb), Namespace: webNS, Workflow: v1alpha1.WorkflowBackup,
			FromSequence: 2, ToSequence: 2, Lock: v1alpha1.LockRef{Commit: lc[1].String(), Path: idDevWeb.LockPath()},
			Operation: &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: "nightly", BackupID: "nightly-20261101", Artifact: "s3://backups/local/dev/nightly-20261101/web", Attempt: 1}},
	}
	if err := cl.Create(ctx, backup); err != nil {
		return err
	}
	backup.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, Workflow: v1alpha1.WorkflowBackup, FromSequence: 2, StartedAt: at(210), FinishedAt: at(240)}
	if err := cl.Status().Update(ctx, backup); err != nil {
		return err
	}
	// The agent's source.
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "styrmin-system"}}); err != nil {
		return err
	}
	src := &v1alpha1.StyrminSource{
		ObjectMeta: metav1.ObjectMeta{Name: "styrmin", Namespace: "styrmin-system"},
		Spec:       v1alpha1.StyrminSourceSpec{URL: "https://git.example.com/platform/desired-state.git", Branch: "main", Cluster: "local"},
	}
	if err := cl.Create(ctx, src); err != nil {
		return err
	}
	head, err := d.repo.Head()
	if err != nil {
		return err
	}
	src.Status = v1alpha1.StyrminSourceStatus{LastSyncedCommit: head.String(), LastSyncTime: at(400),
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSynced, Message: "synced", LastTransitionTime: *at(400)},
			// The lock mode held a deployment back at the head.
			{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDeploymentsHeldBack,
				Message: "at " + head.Short() + " no lock needed; held back: local/staging/web: driver webapp@9.0.0 does not load", LastTransitionTime: *at(400)}}}
	if err := cl.Status().Update(ctx, src); err != nil {
		return err
	}
	// The events the agent records, and a crashing pod.
	events := []corev1.Event{
		{ObjectMeta: metav1.ObjectMeta{Name: "dev-hub.kept", Namespace: hubNS},
			InvolvedObject: corev1.ObjectReference{Kind: "StyrminDeployment", Namespace: hubNS, Name: hubNS, APIVersion: v1alpha1.GroupVersion.String()},
			Related:        &corev1.ObjectReference{Kind: "StyrminTask", Namespace: hubNS, Name: v1alpha1.TaskName("hub", 2)},
			Reason:         v1alpha1.EventNewerInstanceKept, Message: "kept sequence 3; task hub-2 for sequence 2 is superseded", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "styrmin-agent"}, FirstTimestamp: *at(305), LastTimestamp: *at(305), Count: 1},
		{ObjectMeta: metav1.ObjectMeta{Name: "dev-web.failed", Namespace: webNS},
			InvolvedObject: corev1.ObjectReference{Kind: "StyrminTask", Namespace: webNS, Name: v1alpha1.TaskName("web", 2), APIVersion: v1alpha1.GroupVersion.String()},
			Reason:         "StepFailed", Message: "update/core/1:waitReady: ProgressDeadlineExceeded", Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: "styrmin-agent"}, FirstTimestamp: *at(200), LastTimestamp: *at(200), Count: 1},
	}
	for i := range events {
		if err := cl.Create(ctx, &events[i]); err != nil {
			return err
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-7f9-abcde", Namespace: webNS},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.25.0"}}},
	}
	if err := cl.Create(ctx, pod); err != nil {
		return err
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "web", RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container"}}}}}
	return cl.Status().Update(ctx, pod)
}

// get fetches a page and returns its status, headers and body.
func get(t *testing.T, srv *httptest.Server, path string) (int, http.Header, string) {
	t.Helper()
	return do(t, srv, http.MethodGet, path)
}

func do(t *testing.T, srv *httptest.Server, method, path string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(body)
}
