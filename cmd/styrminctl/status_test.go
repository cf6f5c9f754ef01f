package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

var update = flag.Bool("update", false, "rewrite golden files")

// The cluster commands are tested against a real API server holding
// StyrminDeployments, StyrminTasks and a StyrminSource written by the
// test (the agent's own tests show how they come to be), through the
// whole command tree with --kubeconfig, against golden files.

var fixtureTime = time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)

func at(minutes int) *metav1.Time {
	t := metav1.NewTime(fixtureTime.Add(time.Duration(minutes) * time.Minute))
	return &t
}

const fixtureDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

func fixtureInstance(env, name string, seq int64, kind, driver, app string) *v1alpha1.StyrminDeploymentSpec {
	s := &v1alpha1.StyrminDeploymentSpec{
		Kind:         kind,
		Deployment:   v1alpha1.DeploymentID{Cluster: "local", Environment: env, Name: name},
		Sequence:     seq,
		SourceCommit: strings.Repeat("c", 40),
		Digest:       fixtureDigest,
		AppVersion:   app,
	}
	if driver != "" {
		n, v, _ := strings.Cut(driver, "@")
		s.Driver = v1alpha1.DriverRef{Name: n, Version: v, Digest: fixtureDigest}
	}
	return s
}

type fixtureTask struct {
	env, name string
	seq, from int64
	workflow  v1alpha1.Workflow
	kind      string
	driver    string
	app       string
	status    v1alpha1.StyrminTaskStatus
}

// styrminClient installs Styrmin's CRDs on c, makes the namespaces ns
// and returns a client of Styrmin's scheme.
func styrminClient(ctx context.Context, c *testcluster.Cluster, ns ...string) (client.Client, error) {
	if err := operator.InstallCRDs(ctx, c.RESTConfig); err != nil {
		return nil, err
	}
	scheme, err := operator.NewScheme()
	if err != nil {
		return nil, err
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

// fillCluster writes the fixtures and returns a client of Styrmin's
// scheme.
func fillCluster(ctx context.Context, c *testcluster.Cluster) (client.Client, error) {
	cl, err := styrminClient(ctx, c, "styrmin-system", "dev-hub", "dev-web", "staging-web")
	if err != nil {
		return nil, err
	}
	src := &v1alpha1.StyrminSource{
		ObjectMeta: metav1.ObjectMeta{Name: "styrmin", Namespace: "styrmin-system"},
		Spec:       v1alpha1.StyrminSourceSpec{URL: "https://git.example.com/acme/desired.git", Branch: "main", Cluster: "local"},
	}
	if err := cl.Create(ctx, src); err != nil {
		return nil, err
	}
	src.Status = v1alpha1.StyrminSourceStatus{
		LastSyncedCommit: strings.Repeat("a", 40), LastSyncTime: at(30),
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Synced", Message: "synced aaaaaaaaaaaa", LastTransitionTime: *at(30)}},
	}
	if err := cl.Status().Update(ctx, src); err != nil {
		return nil, err
	}

	hub := &v1alpha1.StyrminDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "dev-hub", Namespace: "dev-hub",
			Labels:      v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "hub"}.Labels(),
			Annotations: map[string]string{v1alpha1.AnnotationInstanceSequence: "4"}},
		Spec: *fixtureInstance("dev", "hub", 4, v1alpha1.KindInstance, "graphhub@1.0.0", "1.4.1"),
	}
	web := &v1alpha1.StyrminDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "dev-web", Namespace: "dev-web",
			Labels:      v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "web"}.Labels(),
			Annotations: map[string]string{v1alpha1.AnnotationInstanceSequence: "1"}},
		Spec: *fixtureInstance("dev", "web", 1, v1alpha1.KindInstance, "webapp@1.1.0", "1.25.0"),
	}
	for _, sd := range []*v1alpha1.StyrminDeployment{hub, web} {
		if err := cl.Create(ctx, sd); err != nil {
			return nil, err
		}
	}
	hub.Status = v1alpha1.StyrminDeploymentStatus{
		ObservedGeneration: hub.Generation, AppliedSequence: 3, AppliedDigest: fixtureDigest, ActiveSequence: 3,
		Release: &v1alpha1.ReleaseStatus{Name: "dev-hub", Revision: 3, Chart: "graphhub-1.0.0", Status: "deployed", LastAppliedTime: at(20)},
		Conditions: []metav1.Condition{
			{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Progressing", Message: "upgrading to sequence 4", LastTransitionTime: *at(40)},
			{Type: "Reconciling", Status: metav1.ConditionTrue, Reason: "Progressing", Message: "upgrading to sequence 4", LastTransitionTime: *at(40)},
		},
		Components: []v1alpha1.ComponentStatus{
			{Name: "server", Ready: true, DesiredReplicas: 1, ReadyReplicas: 1},
			{Name: "worker", Ready: false, DesiredReplicas: 3, ReadyReplicas: 1},
		},
	}
	web.Status = v1alpha1.StyrminDeploymentStatus{
		ObservedGeneration: web.Generation, AppliedSequence: 1, AppliedDigest: fixtureDigest, ActiveSequence: 1,
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "all components ready", LastTransitionTime: *at(5)}},
	}
	for _, sd := range []*v1alpha1.StyrminDeployment{hub, web} {
		if err := cl.Status().Update(ctx, sd); err != nil {
			return nil, err
		}
	}

	step := func(name, action string, state v1alpha1.StepState, start, end int, output string) v1alpha1.TaskStep {
		s := v1alpha1.TaskStep{Name: name, Action: action, Mode: strings.Split(name, "/")[1], State: state, Attempts: 1, Output: output}
		if start >= 0 {
			s.StartedAt = at(start)
		}
		if end >= 0 {
			s.FinishedAt = at(end)
		}
		return s
	}
	tasks := []fixtureTask{
		{"dev", "hub", 1, 0, v1alpha1.WorkflowCreate, v1alpha1.KindInstance, "graphhub@1.0.0", "1.4.0", v1alpha1.StyrminTaskStatus{
			Phase: v1alpha1.TaskSucceeded, StartedAt: at(1), FinishedAt: at(3), CurrentStep: 1,
			Steps: []v1alpha1.TaskStep{step("setup/core/1:upgradeDeploymentVersion", "upgradeDeploymentVersion", v1alpha1.StepSucceeded, 1, 3, "StyrminDeployment dev-hub/dev-hub is Ready at sequence 1")},
		}},
		{"dev", "hub", 2, 1, v1alpha1.WorkflowUpdate, v1alpha1.KindInstance, "graphhub@1.0.0", "1.4.0", v1alpha1.StyrminTaskStatus{
			Phase: v1alpha1.TaskSuperseded, StartedAt: at(10), FinishedAt: at(10), SupersededBy: 3,
			Message: "superseded by sequence 3 before it ran: the newer task writes the whole configuration",
			Steps:   []v1alpha1.TaskStep{step("update/core/1:upgradeDeploymentVersion", "upgradeDeploymentVersion", v1alpha1.StepSkipped, -1, -1, "")},
		}},
		{"dev", "hub", 3, 2, v1alpha1.WorkflowUpgrade, v1alpha1.KindInstance, "graphhub@1.0.0", "1.4.1", v1alpha1.StyrminTaskStatus{
			Phase: v1alpha1.TaskSucceeded, StartedAt: at(11), FinishedAt: at(20), CurrentStep: 3,
			Steps: []v1alpha1.TaskStep{
				step("upgrade/pre/1:stopComponents", "stopComponents", v1alpha1.StepSucceeded, 11, 12, "stopped Deployment/hub-worker (was 3 replicas)"),
				step("upgrade/pre/2:runJob", "runJob", v1alpha1.StepSucceeded, 12, 15, "job hub-migrate-3 completed (1 pod(s) succeeded)"),
				step("upgrade/core/1:upgradeDeploymentVersion", "upgradeDeploymentVersion", v1alpha1.StepSucceeded, 15, 20, "StyrminDeployment dev-hub/dev-hub is Ready at sequence 3"),
			},
		}},
		{"dev", "hub", 4, 3, v1alpha1.WorkflowUpdate, v1alpha1.KindInstance, "graphhub@1.0.0", "1.4.1", v1alpha1.StyrminTaskStatus{
			Phase: v1alpha1.TaskRunning, StartedAt: at(40), CurrentStep: 0,
			Steps: []v1alpha1.TaskStep{step("update/core/1:upgradeDeploymentVersion", "upgradeDeploymentVersion", v1alpha1.StepRunning, 40, -1, "")},
		}},
		{"dev", "web", 1, 0, v1alpha1.WorkflowCreate, v1alpha1.KindInstance, "webapp@1.1.0", "1.25.0", v1alpha1.StyrminTaskStatus{
			Phase: v1alpha1.TaskSucceeded, StartedAt: at(1), FinishedAt: at(5),
			Steps: []v1alpha1.TaskStep{step("setup/core/1:upgradeDeploymentVersion", "upgradeDeploymentVersion", v1alpha1.StepSucceeded, 1, 5, "StyrminDeployment dev-web/dev-web is Ready at sequence 1")},
		}},
		{"staging", "web", 1, 0, v1alpha1.WorkflowCreate, v1alpha1.KindInstance, "webapp@1.1.0", "1.25.0", v1alpha1.StyrminTaskStatus{
			Phase: v1alpha1.TaskFailed, StartedAt: at(1), FinishedAt: at(2),
			Message: "step setup/core/1:upgradeDeploymentVersion (StepFailed) failed: StyrminDeployment staging-web/staging-web: stalled: RenderFailed: template error",
			Steps:   []v1alpha1.TaskStep{step("setup/core/1:upgradeDeploymentVersion", "upgradeDeploymentVersion", v1alpha1.StepFailed, 1, 2, "")},
		}},
		{"staging", "web", 2, 1, v1alpha1.WorkflowDelete, v1alpha1.KindTombstone, "", "", v1alpha1.StyrminTaskStatus{
			Phase: v1alpha1.TaskSucceeded, StartedAt: at(3), FinishedAt: at(4),
			Steps: []v1alpha1.TaskStep{step("delete/core/1:upgradeDeploymentVersion", "upgradeDeploymentVersion", v1alpha1.StepSucceeded, 3, 4, "StyrminDeployment staging-web/staging-web is gone: the release is uninstalled")},
		}},
	}
	for _, ft := range tasks {
		id := v1alpha1.DeploymentID{Cluster: "local", Environment: ft.env, Name: ft.name}
		labels := id.Labels()
		ns := ft.env + "-" + ft.name
		task := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(ft.name, ft.seq), Namespace: ns, Labels: labels},
			Spec: v1alpha1.StyrminTaskSpec{
				Deployment: id, Namespace: ns, Workflow: ft.workflow, FromSequence: ft.from, ToSequence: ft.seq,
				Lock: v1alpha1.LockRef{Commit: strings.Repeat(string(rune('0'+ft.seq)), 40), Path: "locks/local/" + ft.env + "/" + ft.name + ".lock.yaml"},
			},
		}
		in := fixtureInstance(ft.env, ft.name, ft.seq, ft.kind, ft.driver, ft.app)
		if ft.env == "staging" && ft.seq == 1 {
			// As an earlier agent wrote tasks: a copy of the instance.
			task.Spec.Instance = in
		} else {
			task.Spec.Target = &v1alpha1.TaskTarget{Kind: in.Kind, Driver: in.Driver, AppVersion: in.AppVersion, SourceCommit: in.SourceCommit, Digest: in.Digest}
		}
		if err := cl.Create(ctx, task); err != nil {
			return nil, err
		}
		task.Status = ft.status
		if err := cl.Status().Update(ctx, task); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

// runCluster executes styrminctl with args against the cluster of kc.
func runCluster(t *testing.T, kc string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs(append(args, "--kubeconfig", kc))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", "cluster", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// TestClusterCommands runs status, tasks and history against one control
// plane: their output matches golden files, and bad input gets a clear
// error.
func TestClusterCommands(t *testing.T) {
	t.Parallel()
	c := testcluster.StartT(t, testcluster.Options{})
	cl, err := fillCluster(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("golden", func(t *testing.T) { testClusterGolden(t, c.KubeconfigPath) })
	t.Run("bad input", func(t *testing.T) { testClusterBadInput(t, c.KubeconfigPath) })
	t.Run("ui", func(t *testing.T) { testUI(t, c.KubeconfigPath) })
	// Last: they change the cluster.
	t.Run("watch", func(t *testing.T) { testStatusWatch(t, c.KubeconfigPath, cl) })
	t.Run("a failed change", func(t *testing.T) { testStatusNamesAFailedChange(t, c.KubeconfigPath, cl) })
	t.Run("a refused lockfile", func(t *testing.T) { testStatusNamesARefusedLockfile(t, c.KubeconfigPath, cl) })
	t.Run("deployments the lock mode held back", func(t *testing.T) { testStatusNamesWhatTheLockModeHeldBack(t, c.KubeconfigPath, cl) })
}

// testStatusNamesWhatTheLockModeHeldBack: the agent's lock mode held a
// deployment back (its driver folder does not load), and status showed
// the source synced and the deployment Ready on what it ran. The source's
// Locked condition, when False, is printed under the source's line and
// is in -o json; True prints nothing more.
func testStatusNamesWhatTheLockModeHeldBack(t *testing.T, kc string, cl client.Client) {
	ctx := context.Background()
	set := func(c metav1.Condition) {
		t.Helper()
		var src v1alpha1.StyrminSource
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "styrmin-system", Name: "styrmin"}, &src); err != nil {
			t.Fatal(err)
		}
		apimeta.SetStatusCondition(&src.Status.Conditions, c)
		if err := cl.Status().Update(ctx, &src); err != nil {
			t.Fatal(err)
		}
	}
	set(metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonLocked, Message: "every deployment locked at bbbbbbbbbbbb (no lock needed)"})
	out, err := runCluster(t, kc, "status")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "not locked") {
		t.Errorf("status says something is not locked while every deployment is:\n%s", out)
	}
	msg := "at cccccccccccc 1 deployment locked in dddddddddddd; held back: local/dev/hub: driver graphhub@3.0.0 does not load"
	set(metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDeploymentsHeldBack, Message: msg})
	if out, err = runCluster(t, kc, "status"); err != nil {
		t.Fatal(err)
	}
	want := "source styrmin-system/styrmin: cluster local, https://git.example.com/acme/desired.git main, synced aaaaaaaaaaaa (ok)\n  not locked (DeploymentsHeldBack): " + msg + "\n"
	if !strings.Contains(out, want) {
		t.Errorf("status does not name what the lock mode held back (%q):\n%s", want, out)
	}
	if out, err = runCluster(t, kc, "status", "-o", "json"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"locked": "False"`) || !strings.Contains(out, `"lockedReason": "DeploymentsHeldBack"`) || !strings.Contains(out, "held back: local/dev/hub") {
		t.Errorf("status -o json does not hold the Locked condition:\n%s", out)
	}
}

// testStatusNamesARefusedLockfile: a lockfile the agent refused left its
// deployment running what it ran, shown Ready, and nothing in status said
// git asked for more. The refusals no later change of their deployment
// superseded are listed under the table and in -o json.
func testStatusNamesARefusedLockfile(t *testing.T, kc string, cl client.Client) {
	ctx := context.Background()
	var src v1alpha1.StyrminSource
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "styrmin-system", Name: "styrmin"}, &src); err != nil {
		t.Fatal(err)
	}
	src.Status.Refused = []v1alpha1.RefusedLock{
		// Web's lock at 1 deleted by hand: its task at 2 superseded it.
		{Commit: strings.Repeat("4", 40), Path: "locks/local/dev/web.lock.yaml", Reason: v1alpha1.ReasonLockDeleted, Message: "deleted by hand", Sequence: 1, Time: metav1.Now()},
		// Hub's refused past its tasks (its newest is at 4), whenever it
		// was refused.
		{Commit: strings.Repeat("3", 40), Path: "locks/local/dev/hub.lock.yaml", Reason: v1alpha1.ReasonInvalidLock,
			Message: "locks/local/dev/hub.lock.yaml at 3333333: sequence 2 does not follow 5; no task was created for it", Sequence: 5, Time: *at(1)},
	}
	if err := cl.Status().Update(ctx, &src); err != nil {
		t.Fatal(err)
	}
	out, err := runCluster(t, kc, "status")
	if err != nil {
		t.Fatal(err)
	}
	want := "lockfiles the agent refused (the deployment runs what it ran; lock again once fixed):\n  local/dev/hub: InvalidLock at 333333333333: locks/local/dev/hub.lock.yaml at 3333333: sequence 2 does not follow 5; no task was created for it\n"
	if !strings.Contains(out, want) || strings.Contains(out, "LockDeleted") {
		t.Errorf("status does not list hub's refused lockfile alone (%q):\n%s", want, out)
	}
	out, err = runCluster(t, kc, "status", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"refused": [`) || !strings.Contains(out, `"deployment": "local/dev/hub"`) || strings.Contains(out, "deleted by hand") {
		t.Errorf("status -o json does not list hub's refused lockfile alone:\n%s", out)
	}
	// -n reads one namespace's tasks: it cannot tell which a later change
	// superseded, and says nothing of them.
	out, err = runCluster(t, kc, "status", "-n", "dev-web")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "lockfiles the agent refused") {
		t.Errorf("status -n dev-web lists refusals it cannot tell standing:\n%s", out)
	}
}

// testStatusNamesAFailedChange: the list showed a deployment whose newest
// change failed as its Ready condition said (True, Succeeded: the
// workloads run the instance before it), and nothing under the table
// told of the failure. The row's reason says Failed, and the task, its
// step and why are named under the table and in -o json.
func testStatusNamesAFailedChange(t *testing.T, kc string, cl client.Client) {
	ctx := context.Background()
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "web"}
	task := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName("web", 2), Namespace: "dev-web", Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: "dev-web", Workflow: v1alpha1.WorkflowUpgrade, FromSequence: 1, ToSequence: 2,
			Lock: v1alpha1.LockRef{Commit: strings.Repeat("2", 40), Path: "locks/local/dev/web.lock.yaml"}},
	}
	if err := cl.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
	task.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskFailed, StartedAt: at(50), FinishedAt: at(51), CurrentStep: 0,
		Message: "step upgrade/pre/1:runJob (StepFailed) failed: job web-migrate-2 failed",
		Steps:   []v1alpha1.TaskStep{{Name: "upgrade/pre/1:runJob", Action: "runJob", Mode: "pre", State: v1alpha1.StepFailed, Attempts: 1, StartedAt: at(50), FinishedAt: at(51)}}}
	if err := cl.Status().Update(ctx, task); err != nil {
		t.Fatal(err)
	}
	out, err := runCluster(t, kc, "status")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"local/dev/web  dev-web    1         1       webapp@1.1.0    1.25.0  ",
		"  Failed\n",
		"newest change failed (styrminctl retry, or change the configuration):\n  local/dev/web: task dev-web/web-2 failed: step upgrade/pre/1:runJob (StepFailed) failed: job web-migrate-2 failed\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not show the failed change (%q):\n%s", want, out)
		}
	}
	out, err = runCluster(t, kc, "status", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"failed": "task dev-web/web-2 failed: step upgrade/pre/1:runJob`) {
		t.Errorf("status -o json does not name the failed change:\n%s", out)
	}
}

// testStatusWatch runs status -w and tasks list -w, changes a
// StyrminDeployment's status and a task's phase, and sees the new rows.
func testStatusWatch(t *testing.T, kc string, cl client.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	statusOut, tasksOut := newSyncBuffer(), newSyncBuffer()
	done := make(chan error, 2)
	for _, w := range []struct {
		out  *syncBuffer
		args []string
	}{{statusOut, []string{"status", "-w"}}, {tasksOut, []string{"tasks", "list", "-w", "-n", "dev-web"}}} {
		root := newRootCmd(w.out, io.Discard)
		root.SetArgs(append(w.args, "--kubeconfig", kc))
		go func() { done <- root.ExecuteContext(ctx) }()
	}
	waitFor(t, statusOut, "local/dev/web  dev-web    1         1       webapp@1.1.0    1.25.0  True   Succeeded\n")
	waitFor(t, tasksOut, "dev-web    web-1  local/dev/web  create    0→1       Succeeded  111111111111  \n")

	var web v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "dev-web", Name: "dev-web"}, &web); err != nil {
		t.Fatal(err)
	}
	web.Status.Conditions[0].Status, web.Status.Conditions[0].Reason = metav1.ConditionFalse, "Drifted"
	if err := cl.Status().Update(ctx, &web); err != nil {
		t.Fatal(err)
	}
	var task v1alpha1.StyrminTask
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "dev-web", Name: "web-1"}, &task); err != nil {
		t.Fatal(err)
	}
	task.Status.Phase = v1alpha1.TaskFailed
	if err := cl.Status().Update(ctx, &task); err != nil {
		t.Fatal(err)
	}
	// The changed row alone, in the first table's columns: its newest
	// change (web-1) failed, which the reason says over the condition's.
	waitFor(t, statusOut, "DEPLOYMENT     NAMESPACE  SEQUENCE  ACTIVE  DRIVER          APP     READY  REASON\n"+
		"local/dev/hub  dev-hub    4         3       graphhub@1.0.0  1.4.1   False  Progressing\n"+
		"local/dev/web  dev-web    1         1       webapp@1.1.0    1.25.0  True   Succeeded\n"+
		"local/dev/web  dev-web    1         1       webapp@1.1.0    1.25.0  False  Failed\n")
	waitFor(t, tasksOut, "dev-web    web-1  local/dev/web  create    0→1       Succeeded  111111111111  \n"+
		"dev-web    web-1  local/dev/web  create    0→1       Failed     111111111111  \n")
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("watch ended with %v, want nil when interrupted", err)
		}
	}
	if strings.Count(statusOut.String(), "local/dev/hub") != 1 {
		t.Errorf("an unchanged row was printed again:\n%s", statusOut.String())
	}
}

func testClusterGolden(t *testing.T, kc string) {
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"status.txt", []string{"status"}},
		{"status.json", []string{"status", "-o", "json"}},
		{"status-hub.txt", []string{"status", "local/dev/hub"}},
		{"status-hub.yaml", []string{"status", "local/dev/hub", "-o", "yaml"}},
		{"status-deleted.txt", []string{"status", "local/staging/web"}},
		{"tasks-list.txt", []string{"tasks", "list"}},
		{"tasks-list-unfinished.json", []string{"tasks", "list", "--unfinished", "-o", "json"}},
		{"tasks-list-hub.txt", []string{"tasks", "list", "--deployment", "local/dev/hub"}},
		{"tasks-get-hub-3.txt", []string{"tasks", "get", "hub-3"}},
		{"tasks-get-hub-3.yaml", []string{"tasks", "get", "hub-3", "-n", "dev-hub", "-o", "yaml"}},
		{"history-hub.txt", []string{"history", "hub"}},
		{"history-staging-web.json", []string{"history", "local/staging/web", "-o", "json"}},
		{"status-wide.txt", []string{"status", "-o", "wide"}},
		{"status-name-dev-web.txt", []string{"status", "-n", "dev-web", "-o", "name"}},
		{"tasks-list-wide.txt", []string{"tasks", "list", "-o", "wide"}},
		{"tasks-list-name.txt", []string{"tasks", "list", "-A", "-o", "name"}},
		{"tasks-get-hub-3.txt", []string{"tasks", "get", "dev-hub/hub-3"}},
		{"history-hub-wide.txt", []string{"history", "hub", "-n", "dev-hub", "-o", "wide"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := runCluster(t, kc, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.golden, out)
		})
	}
}

func testClusterBadInput(t *testing.T, kc string) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"history", "web"}, "web names several deployments (local/dev/web, local/staging/web): give CLUSTER/ENV/NAME"},
		{[]string{"history", "nothing"}, "no deployment named nothing in this cluster"},
		{[]string{"tasks", "get", "web-1"}, "task web-1 exists in namespaces dev-web, staging-web: pick one with -n or NAMESPACE/NAME"},
		{[]string{"tasks", "get", "nope-9"}, "no task named nope-9 in any namespace"},
		{[]string{"status", "local/dev/nope"}, "deployment local/dev/nope: no StyrminDeployment and no task in this cluster"},
		{[]string{"status", "-o", "xml"}, `unknown output format "xml"`},
		{[]string{"tasks", "list", "--deployment", "hub"}, "--deployment"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := runCluster(t, kc, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestClusterCommandsNeedAReachableCluster(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs([]string{"status", "--kubeconfig", filepath.Join(t.TempDir(), "missing")})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "kubernetes config") {
		t.Fatalf("err = %v, want a kubernetes config error", err)
	}
}
