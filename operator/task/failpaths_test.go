package task

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// jobsDriver is a driver of one component (a Deployment, whose pod
// template runJob steps take) with the given actions.
func jobsDriver(t *testing.T, actions string) *drivers.Driver {
	t.Helper()
	return jobsDriverWithPod(t, actions, `      containers:
        - name: app
          image: busybox
          env: [{name: DATA, value: {{ .Values.data | quote }}}]
`)
}

// jobsDriverWithPod is jobsDriver whose Deployment's pod spec is podSpec
// (YAML indented as the pod spec's fields in the template).
func jobsDriverWithPod(t *testing.T, actions, podSpec string) *drivers.Driver {
	t.Helper()
	spec := `name:        "jobs"
version:     "1.0.0"
appVersions: ">=1.0.0"
chart:       "chart"
parameters: {
	// What the ConfigMap holds.
	data: *"one" | string
}
components: app: workloads: [{kind: "Deployment", name: context.deployment.name}]
values: data: context.parameters.data
actions: ` + actions + "\n"
	deployment := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: jobs}
  template:
    metadata:
      labels: {app: jobs}
    spec:
` + podSpec
	d, err := drivers.Load(fstest.MapFS{
		"driver.cue":                      {Data: []byte(spec)},
		"chart/Chart.yaml":                {Data: []byte("apiVersion: v2\nname: jobs\nversion: 1.0.0\n")},
		"chart/values.yaml":               {Data: []byte("data: one\n")},
		"chart/templates/deployment.yaml": {Data: []byte(deployment)},
	}, drivers.LoadOptions{Source: "drivers/jobs/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// oneDriver gives d whatever is asked.
type oneDriver struct{ d *drivers.Driver }

func (o oneDriver) Driver(context.Context, driversource.Request) (*drivers.Driver, error) {
	return o.d, nil
}

// driverReconciler is a task reconciler on cl whose one driver is d.
func driverReconciler(t *testing.T, cl client.Client, d *drivers.Driver) *Reconciler {
	t.Helper()
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// jobsInstance is local/dev/jobs at seq, of driver d and appVersion, in
// namespace ns.
func jobsInstance(t *testing.T, d *drivers.Driver, ns string, seq int64, appVersion string) *resolver.Instance {
	t.Helper()
	return jobsInstanceWith(t, d, ns, seq, appVersion, nil)
}

// jobsInstanceWith is jobsInstance with the deployment's parameters set.
func jobsInstanceWith(t *testing.T, d *drivers.Driver, ns string, seq int64, appVersion string, set map[string]any) *resolver.Instance {
	t.Helper()
	params, err := d.ApplyParameters(set)
	if err != nil {
		t.Fatal(err)
	}
	c := drivers.Context{
		Cluster:     drivers.ClusterContext{Name: "local"},
		Environment: drivers.EnvironmentContext{Name: "dev", Namespace: "dev"},
		Deployment:  drivers.DeploymentContext{Name: "jobs", Namespace: ns, AppVersion: appVersion, Driver: d.Name, DriverVersion: d.Version},
		Parameters:  params,
	}
	values, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	in := &resolver.Instance{
		APIVersion: resolver.APIVersion, Kind: resolver.KindInstance,
		ID:       resolver.ID{Cluster: "local", Environment: "dev", Name: "jobs"},
		Sequence: seq, SourceCommit: "0123456789abcdef0123456789abcdef01234567",
		Driver:     resolver.DriverRef{Name: d.Name, Version: d.Version, Digest: d.Digest},
		AppVersion: appVersion, Context: &c, Values: values,
	}
	if in.Digest, err = in.ComputeDigest(); err != nil {
		t.Fatal(err)
	}
	return in
}

// createJobsTask makes the task of in as the sync would (carrying the
// instance: the reconciler has no lock to read), with workflow wf.
func createJobsTask(t *testing.T, cl client.Client, in *resolver.Instance, wf v1alpha1.Workflow) *v1alpha1.StyrminTask {
	t.Helper()
	return createJobsTaskAt(t, cl, in, wf, in.SourceCommit)
}

// createJobsTaskAt is createJobsTask whose lock is at commit.
func createJobsTaskAt(t *testing.T, cl client.Client, in *resolver.Instance, wf v1alpha1.Workflow, commit string) *v1alpha1.StyrminTask {
	t.Helper()
	spec, err := instance.SpecFromInstance(in)
	if err != nil {
		t.Fatal(err)
	}
	id := instance.DeploymentID(in.ID)
	ns := in.Context.Deployment.Namespace
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(in.ID.Name, in.Sequence), Namespace: ns, Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: wf, ToSequence: in.Sequence,
			Lock: v1alpha1.LockRef{Commit: commit, Path: in.ID.LockPath()}, Instance: &spec},
	}
	if err := cl.Create(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	return tk
}

// noWatch is a client for interceptor.NewClient, which wants one that
// watches: the reconciler never does.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("not watched")
}

// getTask reads task key from the API server.
func getTask(t *testing.T, cl client.Client, key types.NamespacedName) *v1alpha1.StyrminTask {
	t.Helper()
	var tk v1alpha1.StyrminTask
	if err := cl.Get(context.Background(), key, &tk); err != nil {
		t.Fatal(err)
	}
	return &tk
}

// TestARunJobStepsJobIsBoundedByTheStepTimeoutAndDeletedWhenTheStepTimesOut
// pins that a runJob step leaves nothing running once it timed out. Its
// Job had a deadline only when the driver declared the step's timeout;
// a step without one still failed at the controller's step timeout, but
// its Job ran on (the API server here runs no pods: it stays running),
// so a migration ran after its task said it failed, or beside the next
// attempt. The Job's deadline is the step's timeout the controller
// applies, and a step that timed out deletes its Job.
func TestARunJobStepsJobIsBoundedByTheStepTimeoutAndDeletedWhenTheStepTimesOut(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]`)
	const timeout = 2 * time.Minute
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), StepTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	jobKey := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}
	if err := cl.Get(ctx, jobKey, &job); err != nil {
		t.Fatalf("the runJob step's Job: %v", err)
	}
	// What is left of the step's timeout when the Job is made: the whole
	// of it, less the seconds a loaded machine took between the step's
	// start and the Job (a CI run saw 119 of 120).
	if got, most := job.Spec.ActiveDeadlineSeconds, int64(timeout/time.Second); got == nil || *got > most || *got < most-30 {
		t.Errorf("the Job of a step without a declared timeout has activeDeadlineSeconds %s; want what is left of the controller's step timeout, %d, at most", deadlineOf(got), most)
	}

	// The step's deadline passes (its start is moved back) while the Job
	// runs.
	tk = getTask(t, cl, req.NamespacedName)
	if st := tk.Status.Steps[0]; st.State != v1alpha1.StepRunning || st.Action != string(drivers.ActionRunJob) {
		t.Fatalf("first step %s %s; want the runJob step running", st.Name, st.State)
	}
	base := tk.DeepCopy()
	tk.Status.Steps[0].StartedAt = &metav1.Time{Time: time.Now().Add(-timeout - time.Minute)}
	if err := cl.Status().Patch(ctx, tk, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	tk = getTask(t, cl, req.NamespacedName)
	if st := tk.Status.Steps[0]; tk.Status.Phase != v1alpha1.TaskFailed || st.State != v1alpha1.StepFailed || !strings.Contains(st.Message, "timed out") {
		t.Fatalf("task %s, step %s %q; want both failed on the step's timeout", tk.Status.Phase, st.State, st.Message)
	}
	err = cl.Get(ctx, jobKey, &job)
	if err == nil && job.DeletionTimestamp.IsZero() {
		t.Errorf("the Job of the step that timed out is still there (%s) after its task failed", job.UID)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// TestARetriedRunJobStepKeepsItsFailedJobUntilItsNextAttemptStarts pins
// the order of a retried runJob step's writes. Its failed Job was deleted
// before the step was written Pending again: when that write was refused,
// the task read back had the step Running at the same attempt, its Job
// gone, and the step created a new Job at once: a run no attempt counts,
// without back-off, one per refusal. The failed Job stays until the next
// attempt starts, after its back-off, with the step written Pending.
func TestARetriedRunJobStepKeepsItsFailedJobUntilItsNextAttemptStarts(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	direct := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"], retry: {attempts: 2, backoff: "1s"}}]`)
	var refuse atomic.Bool
	cl := interceptor.NewClient(noWatch{direct}, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if tk, ok := obj.(*v1alpha1.StyrminTask); ok && refuse.Load() && len(tk.Status.Steps) > 0 &&
				tk.Status.Steps[0].State == v1alpha1.StepPending && tk.Status.Steps[0].Attempts > 0 {
				return apierrors.NewServiceUnavailable("refused by the test")
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	r, err := NewReconciler(Options{Client: cl, APIReader: direct, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	tk := createJobsTask(t, direct, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	jobKey := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}
	var job batchv1.Job
	if err := direct.Get(ctx, jobKey, &job); err != nil {
		t.Fatalf("the runJob step's Job: %v", err)
	}
	failed := job.UID
	// The Job fails, as the Job controller would say it.
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now, Failed: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
	}}
	if err := direct.Status().Update(ctx, &job); err != nil {
		t.Fatal(err)
	}
	// The step's Pending write is refused.
	refuse.Store(true)
	if _, err := r.Reconcile(ctx, req); err == nil {
		t.Fatal("the reconcile whose Pending write was refused returned no error")
	}
	stillThere := func(when string) {
		t.Helper()
		var got batchv1.Job
		if err := direct.Get(ctx, jobKey, &got); err != nil || got.UID != failed || !got.DeletionTimestamp.IsZero() {
			t.Fatalf("%s: the failed Job %s: %v (uid %s, deleted %v); want it there until the next attempt starts", when, failed, err, got.UID, got.DeletionTimestamp)
		}
	}
	stillThere("after the step's Pending write was refused")
	if st := getTask(t, direct, req.NamespacedName).Status.Steps[0]; st.State != v1alpha1.StepRunning || st.Attempts != 1 {
		t.Fatalf("step %s attempt %d after the refused write; want it running, attempt 1", st.State, st.Attempts)
	}

	// Read back Running, the step finds its failed Job again and is
	// written Pending: no run without an attempt.
	refuse.Store(false)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	stillThere("with the step written Pending")
	st := getTask(t, direct, req.NamespacedName).Status.Steps[0]
	if st.State != v1alpha1.StepPending || st.Attempts != 1 || !strings.Contains(st.Message, "attempt 1 of 2 failed") {
		t.Fatalf("step %s attempt %d %q; want it pending again after attempt 1 of 2", st.State, st.Attempts, st.Message)
	}

	// After its back-off the next attempt starts, with a Job of its own.
	time.Sleep(time.Until(st.FinishedAt.Add(retryPolicy(&st).Delay(1))))
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	st = getTask(t, direct, req.NamespacedName).Status.Steps[0]
	if st.State != v1alpha1.StepRunning || st.Attempts != 2 {
		t.Fatalf("step %s attempt %d after the back-off; want attempt 2 running", st.State, st.Attempts)
	}
	if err := direct.Get(ctx, jobKey, &job); err != nil || job.UID == failed {
		t.Fatalf("attempt 2's Job: %v (uid %s); want a new Job, not the failed %s", err, job.UID, failed)
	}
}

// TestATaskWhoseFirstStepWasSkippedWhenPlannedChoosesItsWorkflowWhenItStarts
// pins when a task's workflow is chosen again: when it starts, against
// what is active then. A task was taken as started once its first step
// was not Pending, and a create's first step can be planned Skipped (the
// restoreBackup of a deployment that is no clone): planned as a create
// behind the deployment's first task, the second change kept its create
// after the first succeeded, and ran the setup hooks instead of the
// upgrade's.
func TestATaskWhoseFirstStepWasSkippedWhenPlannedChoosesItsWorkflowWhenItStarts(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `{
	setup: pre: [{action: "restoreBackup"}]
	upgrade: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]
	backup: core: [{action: "runJob", component: "app", job: "dump", command: ["dump"]}]
	restore: core: [{action: "runJob", component: "app", job: "load", command: ["load"]}]
}`)
	r := driverReconciler(t, cl, d)
	// The first change succeeded.
	first := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	first.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, Workflow: v1alpha1.WorkflowCreate}
	if err := cl.Status().Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	// The second, a new application version, was planned as a create
	// while the first ran.
	in := jobsInstance(t, d, ns, 2, "1.1.0")
	second := createJobsTask(t, cl, in, v1alpha1.WorkflowCreate)
	steps, err := StepsFor(v1alpha1.WorkflowCreate, d, false)
	if err == nil {
		steps, err = expandSteps(v1alpha1.WorkflowCreate, d, nil, in, steps)
	}
	if err != nil {
		t.Fatal(err)
	}
	if steps[0].State != v1alpha1.StepSkipped {
		t.Fatalf("the create's first step %s is %s; want it skipped when planned", steps[0].Name, steps[0].State)
	}
	second.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskPending, Workflow: v1alpha1.WorkflowCreate, Steps: steps}
	if err := cl.Status().Update(ctx, second); err != nil {
		t.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(second)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := getTask(t, cl, req.NamespacedName)
	var names []string
	for _, st := range got.Status.Steps {
		names = append(names, st.Name+"="+string(st.State))
	}
	if got.Status.Workflow != v1alpha1.WorkflowUpgrade || got.Status.FromSequence != 1 || len(names) == 0 || names[0] != "upgrade/pre/1:runJob="+string(v1alpha1.StepRunning) {
		t.Fatalf("the second task runs %s from %d: %v; want the upgrade from sequence 1, its migration running", got.Status.Workflow, got.Status.FromSequence, names)
	}
}

// TestInlineBackupIDsOfDeploymentsWhoseNamesReadAlikeDiffer pins the
// name of the backup an upgrade takes first: environment team-a's
// deployment web and environment team's deployment a-web both read
// team-a-web-before-4, and the second upgrade's backup was recorded over
// the first's. A hash of the whole ID keeps them apart, within the 63
// characters of a DNS label.
func TestInlineBackupIDsOfDeploymentsWhoseNamesReadAlikeDiffer(t *testing.T) {
	t.Parallel()
	a := InlineBackupID(resolver.ID{Cluster: "local", Environment: "team-a", Name: "web"}, 4)
	ids := map[string]string{a: "local/team-a/web@4"}
	for what, id := range map[string]string{
		"local/team/a-web@4": InlineBackupID(resolver.ID{Cluster: "local", Environment: "team", Name: "a-web"}, 4),
		"eu/team-a/web@4":    InlineBackupID(resolver.ID{Cluster: "eu", Environment: "team-a", Name: "web"}, 4),
		"local/team-a/web@5": InlineBackupID(resolver.ID{Cluster: "local", Environment: "team-a", Name: "web"}, 5),
	} {
		if other, ok := ids[id]; ok {
			t.Errorf("the backups of %s and %s are both named %s", other, what, id)
		}
		ids[id] = what
	}
	if !strings.HasPrefix(a, "team-a-web-before-4-") {
		t.Errorf("InlineBackupID = %s; want it to read team-a-web-before-4 first", a)
	}
	long := strings.Repeat("e", 63)
	for _, seq := range []int64{7, 8} {
		id := InlineBackupID(resolver.ID{Cluster: "local", Environment: long, Name: long}, seq)
		if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
			t.Errorf("the backup of a long environment and deployment: %s: %v", id, errs)
		}
		if other, ok := ids[id]; ok {
			t.Errorf("sequences %s and %d share backup %s", other, seq, id)
		}
		ids[id] = fmt.Sprint(seq)
	}
}

// TestAFinishedTaskDeletedBeforeTheCacheShowsItsEndIsForgotten pins what
// the controller keeps of a finished task: the resourceVersion of its end
// (finished, until the cache shows it), and nothing more once it is gone.
// The end was recorded after the task was forgotten, by UID alone: a task
// deleted (pruned) before it was reconciled again was forgotten by its
// key, which no longer led to it, and each task left an entry for the
// agent's life.
func TestAFinishedTaskDeletedBeforeTheCacheShowsItsEndIsForgotten(t *testing.T) {
	t.Parallel()
	r := &Reconciler{runs: map[resolver.ID]types.UID{}, uids: map[types.NamespacedName]types.UID{},
		finished: map[types.UID]string{}, started: map[types.UID]int32{}, written: map[types.UID]string{},
		lastErr: map[types.UID]string{}, scaled: map[types.UID]map[string]int64{}, instances: map[types.NamespacedName]lockedInstance{},
		waiting: map[resolver.ID]map[types.NamespacedName]bool{}, waitsFor: map[types.NamespacedName]orderWait{}}
	tk := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Namespace: "dev-web", Name: "web-3", UID: "u-web-3", ResourceVersion: "42"}}
	key := client.ObjectKeyFromObject(tk)
	// Seen and run by this process.
	r.uids[key], r.started[tk.UID], r.written[tk.UID] = tk.UID, 1, "41"
	r.runs[resolver.ID{Cluster: "local", Environment: "dev", Name: "web"}] = tk.UID

	r.ended(tk)
	if got, ok := r.finished[tk.UID]; !ok || got != "42" {
		t.Fatalf("finished after the end: %q %v; want the end's resourceVersion 42 kept until the cache shows it", got, ok)
	}
	if len(r.runs)+len(r.started)+len(r.written) > 0 {
		t.Errorf("after the end: runs %v, started %v, written %v; want nothing but the end", r.runs, r.started, r.written)
	}
	// Pruned before it was reconciled again.
	r.forgetKey(key)
	if len(r.finished)+len(r.uids) > 0 {
		t.Errorf("after the task was deleted: finished %v, uids %v; want nothing kept", r.finished, r.uids)
	}
}

// TestARunJobStepWhosePodsNeverStartTimesOutNamingWhy pins what a runJob
// step whose Job's pods cannot start says when it times out. Such a pod
// (an image that cannot be pulled, a node that cannot take it, a Secret
// missing for a volume) never fails its Job: the step waited its whole
// timeout and failed saying only "timed out after 2m0s", while the
// deployment looked fine. The message names each pod and Kubernetes'
// reason for it, from its container's state, its PodScheduled condition,
// or its last warning event.
func TestARunJobStepWhosePodsNeverStartTimesOutNamingWhy(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]`)
	const timeout = 2 * time.Minute
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), StepTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	req, job := startMigration(t, cl, r, d, ns)

	// The Job's pods, as the Job controller, the scheduler and the kubelet
	// would leave them (nothing runs pods here).
	if err := cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := func(name string, st corev1.PodStatus) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"job-name": job.Name},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec: *job.Spec.Template.Spec.DeepCopy(),
		}
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status = st
		if err := cl.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const pullMessage = `Back-off pulling image "registry.example/jobs:1.0.0"`
	pod("migrate-pull", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "app", Image: "registry.example/jobs:1.0.0",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: pullMessage}}}}})
	const unschedulable = "0/3 nodes are available: 3 Insufficient cpu."
	pod("migrate-unscheduled", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: unschedulable}}})
	mounting := pod("migrate-mount", corev1.PodStatus{Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "busybox",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}})
	const mountMessage = `MountVolume.SetUp failed for volume "creds" : secret "jobs-db" not found`
	now := metav1.Now()
	if err := cl.Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: "migrate-mount.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: mounting.Name, UID: mounting.UID, APIVersion: "v1"},
		Type:           corev1.EventTypeWarning, Reason: "FailedMount", Message: mountMessage,
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "kubelet"},
	}); err != nil {
		t.Fatal(err)
	}

	// The step looks at its Job while the pods wait, then its deadline
	// passes (its start is moved back): the call that finds it past is cut
	// short by it.
	tk, st := timeOutFirstStep(t, cl, r, req, timeout)
	for _, want := range []string{
		"pod migrate-pull Pending: ImagePullBackOff: " + pullMessage,
		"pod migrate-unscheduled Pending: Unschedulable: " + unschedulable,
		"pod migrate-mount Pending: FailedMount: " + mountMessage,
	} {
		if !strings.Contains(st.Message, want) || !strings.Contains(tk.Status.Message, want) {
			t.Errorf("step message %q, task message %q; want both to say %q", st.Message, tk.Status.Message, want)
		}
	}
}

// TestARunJobStepDoesNotStartItsJobWhileAnotherJobOfTheDeploymentRuns
// pins that two of a deployment's migrations never run at once. Tasks of
// a deployment run one at a time, but a Job outlives its task: the task
// of sequence 1 deleted by hand while its migration ran, the task of
// sequence 2 started its own migration beside it at once. It waits, saying
// for what, until the other Job has ended and its pods are gone.
func TestARunJobStepDoesNotStartItsJobWhileAnotherJobOfTheDeploymentRuns(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]`)
	r := driverReconciler(t, cl, d)
	firstReq, running := startMigration(t, cl, r, d, ns)
	// Its pod runs (as the Job controller and a node would have it), and
	// stays a while once deleted (a finalizer stands for its grace period).
	if err := cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	podLabels := map[string]string{"job-name": running.Name}
	for k, v := range running.Spec.Template.Labels {
		podLabels[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: running.Name + "-x", Labels: podLabels, Finalizers: []string{"styrmin.io/test-grace"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&running, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: *running.Spec.Template.Spec.DeepCopy(),
	}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning}
	if err := cl.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}

	// The running task is deleted by hand; the next change's task comes.
	if err := cl.Delete(ctx, getTask(t, cl, firstReq.NamespacedName)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, firstReq); err != nil {
		t.Fatal(err)
	}
	second := createJobsTask(t, cl, jobsInstance(t, d, ns, 2, "1.0.0"), v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(second)}
	secondJob := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 2)}
	waits := func(when string) {
		t.Helper()
		for range 3 {
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		var j batchv1.Job
		if err := cl.Get(ctx, secondJob, &j); err == nil {
			t.Fatalf("%s: the second task made its Job %s while the first one's migration ran", when, j.Name)
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if st := getTask(t, cl, req.NamespacedName).Status.Steps[0]; st.State != v1alpha1.StepRunning {
			t.Fatalf("%s: the second task's runJob step is %s %q; want it running, waiting", when, st.State, st.Message)
		}
	}
	waits("with the first task's Job running")

	// The Job ends at its deadline; its pod is still stopping.
	now := metav1.Now()
	running.Status = batchv1.JobStatus{StartTime: &now, Active: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, LastTransitionTime: now},
	}}
	if err := cl.Status().Update(ctx, &running); err != nil {
		t.Fatal(err)
	}
	running.Status.Active = 0
	running.Status.Failed = 1
	running.Status.Conditions = append(running.Status.Conditions,
		batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, LastTransitionTime: now})
	if err := cl.Status().Update(ctx, &running); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waits("with the first task's Job failed and its pod stopping")

	// The pod is gone: the second task's migration starts.
	if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	pod.Finalizers = nil
	if err := cl.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	reconcileUntil(t, r, cl, req, "the second task's Job made", func(*v1alpha1.StyrminTask) bool {
		var j batchv1.Job
		return cl.Get(ctx, secondJob, &j) == nil
	})
}

// TestAFailedRunJobStepSaysHowItsLastPodEnded pins the message of a
// runJob step whose Job failed after its retries (backoffLimit): it said
// only what the Job's condition says ("BackoffLimitExceeded: Job has
// reached the specified backoff limit"), and a migration killed for its
// memory, which logs nothing of it, failed without a word of why. The
// message names the Job's last pod and how it ended.
func TestAFailedRunJobStepSaysHowItsLastPodEnded(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"], args: {backoffLimit: "1"}}]`)
	r := driverReconciler(t, cl, d)
	req, job := startMigration(t, cl, r, d, ns)
	if err := cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Its two pods, as the Job controller and the kubelet leave them: the
	// second attempt (made first here: the order of their ends counts)
	// killed for its memory after the first one's error.
	failedPod := func(name, reason string, code int32, finished time.Time) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"job-name": job.Name},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec: *job.Spec.Template.Spec.DeepCopy(),
		}
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "busybox",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code,
				StartedAt: metav1.NewTime(finished.Add(-time.Minute)), FinishedAt: metav1.NewTime(finished)}}}}}
		if err := cl.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	failedPod("jobs-migrate-1-second", "OOMKilled", 137, time.Now().Add(-time.Minute))
	failedPod("jobs-migrate-1-first", "Error", 1, time.Now().Add(-3*time.Minute))
	failJobAtItsBackoffLimit(t, cl, &job, 2)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	tk := getTask(t, cl, req.NamespacedName)
	st := tk.Status.Steps[0]
	if tk.Status.Phase != v1alpha1.TaskFailed || st.State != v1alpha1.StepFailed || !strings.Contains(st.Message, "BackoffLimitExceeded") {
		t.Fatalf("task %s, step %s %q; want both failed as the Job did", tk.Status.Phase, st.State, st.Message)
	}
	const want = "its last pod: pod jobs-migrate-1-second Failed: OOMKilled: exit code 137 (2 pod(s) failed)"
	if !strings.Contains(st.Message, want) || !strings.Contains(tk.Status.Message, want) {
		t.Errorf("step message %q, task message %q; want both to say %q", st.Message, tk.Status.Message, want)
	}
}

// TestAFailedRunJobStepsOutputKeepsItsLastAttemptsLogWhateverTheEarlierLogged
// pins a failed runJob step's output when an earlier attempt logged more
// than the output holds: the last attempt's log, which says why the
// migration failed, is there whole under its pod's name, the earlier
// attempt's end in the room left, and a line says what of it was left
// out. Before, the tail of all the logs was kept, the earlier attempt's
// cut into without its pod's name or a word of what was cut.
func TestAFailedRunJobStepsOutputKeepsItsLastAttemptsLogWhateverTheEarlierLogged(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"], args: {backoffLimit: "1"}}]`)
	r := driverReconciler(t, cl, d)
	const failed = "migrate: column users.email: duplicate key value (row 17)\n"
	r.own.Logs = podLogsOf{"jobs-migrate-1-a": logLines("a", 400), "jobs-migrate-1-b": failed}
	req, job := startMigration(t, cl, r, d, ns)
	if err := cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Its two attempts, the first made first: older, or of the same
	// second and first by name.
	for _, name := range []string{"jobs-migrate-1-a", "jobs-migrate-1-b"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"job-name": job.Name},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec: *job.Spec.Template.Spec.DeepCopy(),
		}
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	failJobAtItsBackoffLimit(t, cl, &job, 2)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	tk := getTask(t, cl, req.NamespacedName)
	st := tk.Status.Steps[0]
	if st.State != v1alpha1.StepFailed {
		t.Fatalf("step %s %q, want it failed as the Job did", st.State, st.Message)
	}
	out := st.Output
	if len(out) > maxActionOutput || !strings.HasPrefix(out, "pod jobs-migrate-1-a:\n… the first ") || !strings.Contains(out, " bytes of this log left out\nattempt a, line ") ||
		!strings.HasSuffix(out, "attempt a, line 00399 of work.\npod jobs-migrate-1-b:\n"+failed) {
		t.Errorf("step output (%d bytes):\n%s\nwant at most %d bytes: the first attempt's end, saying what of it was left out, then the last attempt's log whole", len(out), out, maxActionOutput)
	}
}

// TestARunJobStepWhoseJobIsDeletedBeforeItsEndIsSeenIsNotRunAgain pins
// what a runJob step does when its Job is gone before the step saw it
// end: deleted by hand while it ran, or by a TTL a cluster policy sets on
// Jobs while the agent restarted. The step took the Job's absence for a
// Job to make: the migration ran a second time, behind the user's back,
// under the same attempt. The Job controller's events tell a completed
// Job's end; without one, the step fails, saying so, and makes no Job.
func TestARunJobStepWhoseJobIsDeletedBeforeItsEndIsSeenIsNotRunAgain(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]`)
	r := driverReconciler(t, cl, d)
	// startJob makes the task of seq and reconciles it until its step
	// waits for its Job, which it returns.
	startJob := func(seq int64) (reconcile.Request, *batchv1.Job) {
		t.Helper()
		tk := createJobsTask(t, cl, jobsInstance(t, d, ns, seq, "1.0.0"), v1alpha1.WorkflowCreate)
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
		var job batchv1.Job
		key := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", seq)}
		reconcileUntil(t, r, cl, req, "the step waiting for its Job", func(*v1alpha1.StyrminTask) bool {
			return cl.Get(ctx, key, &job) == nil
		})
		for range 2 {
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		return req, &job
	}
	noJob := func(job *batchv1.Job) {
		t.Helper()
		var again batchv1.Job
		if err := cl.Get(ctx, client.ObjectKeyFromObject(job), &again); err == nil {
			t.Errorf("job %s was made again (uid %s, the deleted one %s): the migration runs a second time", again.Name, again.UID, job.UID)
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}

	// Deleted by hand while it ran: no end to read.
	req, job := startJob(1)
	if err := cl.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	noJob(job)
	tk := getTask(t, cl, req.NamespacedName)
	if st := tk.Status.Steps[0]; tk.Status.Phase != v1alpha1.TaskFailed || st.State != v1alpha1.StepFailed || !strings.Contains(st.Message, "was deleted before the step saw it end") {
		t.Fatalf("task %s, step %s %q; want both failed, saying the Job was deleted before its end was seen", tk.Status.Phase, st.State, st.Message)
	}

	// Completed, then deleted by a TTL before the step looked again: its
	// end is in the Job controller's event.
	req, job = startJob(2)
	completeAndDeleteJob(t, cl, job)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	noJob(job)
	if st := getTask(t, cl, req.NamespacedName).Status.Steps[0]; st.State != v1alpha1.StepSucceeded || !strings.Contains(st.Output, "read from its events") {
		t.Fatalf("step %s %q (output %q); want it succeeded, its Job's end read from its events", st.State, st.Message, st.Output)
	}
}

// completeAndDeleteJob does what the Job controller and a TTL do to a
// Job that completes: its status and Completed event written, then the
// Job deleted.
func completeAndDeleteJob(t *testing.T, cl client.Client, job *batchv1.Job) {
	t.Helper()
	ctx := context.Background()
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}}
	if err := cl.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + ".completed"},
		InvolvedObject: corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: job.Namespace, Name: job.Name, UID: job.UID},
		Type:           corev1.EventTypeNormal, Reason: "Completed", Message: "Job completed",
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "job-controller"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
}

// TestARunJobStepsJobDeletedAfterItsEndBeforeItsUIDWasRecordedIsNotRunAgain
// pins a runJob step whose agent died between its Job's create and the
// write of the Job's UID (OOM-killed, its lease lost), the Job then
// completing and deleted by a TTL a cluster policy sets before the next
// agent resumed the step: with no UID recorded, the Job's absence read as
// a Job to make, and the migration ran twice. The resumed step reads the
// Job controller's events of its Job's name from after its attempt
// started, and ends as the Job did. A resumed step whose Job was never
// made makes it.
func TestARunJobStepsJobDeletedAfterItsEndBeforeItsUIDWasRecordedIsNotRunAgain(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]`)
	req, job := startMigration(t, cl, driverReconciler(t, cl, d), d, ns)
	// The agent dies before the Job's UID is written.
	tk := getTask(t, cl, req.NamespacedName)
	delete(tk.Status.Steps[0].Recorded, recordJob)
	if err := cl.Status().Update(ctx, tk); err != nil {
		t.Fatal(err)
	}
	completeAndDeleteJob(t, cl, &job)
	r := driverReconciler(t, cl, d) // the next agent
	for range 2 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	var again batchv1.Job
	if err := cl.Get(ctx, client.ObjectKeyFromObject(&job), &again); err == nil {
		t.Errorf("job %s was made again (uid %s, the deleted one %s): the migration runs a second time", again.Name, again.UID, job.UID)
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	tk = getTask(t, cl, req.NamespacedName)
	if st := tk.Status.Steps[0]; st.State != v1alpha1.StepSucceeded || !strings.Contains(st.Output, "read from its events") {
		t.Fatalf("step %s %q (output %q); want it succeeded, its Job's end read from its events", st.State, st.Message, st.Output)
	}
}

// TestAResumedRunJobStepWhoseJobWasNeverMadeMakesIt pins the other side
// of TestARunJobStepsJobDeletedAfterItsEndBeforeItsUIDWasRecordedIsNotRunAgain:
// an agent that started the step and died before its Job's create
// happened (here refused) left no event of a Job; the next agent makes it.
func TestAResumedRunJobStepWhoseJobWasNeverMadeMakesIt(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]`)
	refusing := interceptor.NewClient(noWatch{cl}, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*batchv1.Job); ok {
				return apierrors.NewServiceUnavailable("refused by the test")
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	first, err := NewReconciler(Options{Client: refusing, APIReader: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	jobKey := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}
	var again batchv1.Job
	reconcileUntil(t, first, cl, req, "the step started, its Job's create refused", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State == v1alpha1.StepRunning
	})
	if err := cl.Get(ctx, jobKey, &again); !apierrors.IsNotFound(err) {
		t.Fatalf("the Job whose create was refused: %v, want not found", err)
	}
	if _, err := driverReconciler(t, cl, d).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(ctx, jobKey, &again); err != nil {
		t.Fatalf("the resumed step's Job, never made before: %v", err)
	}
}

// failJobAtItsBackoffLimit writes job's status as the Job controller
// does once failed pods reach its backoff limit.
func failJobAtItsBackoffLimit(t *testing.T, cl client.Client, job *batchv1.Job, failed int32) {
	t.Helper()
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now, Failed: failed, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
	}}
	if err := cl.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
}

// startMigration makes the create task of the jobs driver d's first
// instance in ns and reconciles it once: its runJob step "migrate" has
// made its Job, which it returns with the task's request.
func startMigration(t *testing.T, cl client.Client, r *Reconciler, d *drivers.Driver, ns string) (reconcile.Request, batchv1.Job) {
	t.Helper()
	return startMigrationOf(t, cl, r, jobsInstance(t, d, ns, 1, "1.0.0"))
}

// startMigrationOf is startMigration of the instance in (sequence 1).
func startMigrationOf(t *testing.T, cl client.Client, r *Reconciler, in *resolver.Instance) (reconcile.Request, batchv1.Job) {
	t.Helper()
	ctx := context.Background()
	ns := in.Context.Deployment.Namespace
	tk := createJobsTask(t, cl, in, v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}, &job); err != nil {
		t.Fatalf("the runJob step's Job: %v", err)
	}
	return req, job
}

// deadlineOf prints a Job's activeDeadlineSeconds.
func deadlineOf(s *int64) string {
	if s == nil {
		return "none"
	}
	return strconv.FormatInt(*s, 10)
}

// TestARunJobStepWaitingBehindAnotherJobForOverAnHourMakesItsJobOnResume:
// a resumed runJob step that finds no Job and no recorded UID reads the
// Job controller's events since its attempt started, and fails when that
// start is older than events are kept. A step that waited behind another
// Job of the namespace for over an hour made no Job in that time, yet an
// agent restarting after it failed the step, a migration that never ran.
// The waiting step renews its attempt's start, so the resumed one makes
// its Job.
func TestARunJobStepWaitingBehindAnotherJobForOverAnHourMakesItsJobOnResume(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]`)
	// Another task's Job, running: the step waits behind it.
	other := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backup-nightly", Labels: map[string]string{LabelTask: "jobs-op"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
	if err := cl.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	first := driverReconciler(t, cl, d)
	tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	reconcileUntil(t, first, cl, req, "the step waiting behind the other Job", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State == v1alpha1.StepRunning
	})
	// An hour and more behind the other Job, as the step's clock reads.
	if err := cl.Get(ctx, req.NamespacedName, tk); err != nil {
		t.Fatal(err)
	}
	tk.Status.Steps[0].Recorded[recordJobSince] = time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	if err := cl.Status().Update(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, other, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	// The agent restarts: the resumed step makes its Job, never made.
	if _, err := driverReconciler(t, cl, d).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}, &job); err != nil {
		if err := cl.Get(ctx, req.NamespacedName, tk); err == nil {
			t.Logf("the task: %s: %s", tk.Status.Phase, tk.Status.Message)
		}
		t.Fatalf("the resumed step's Job, never made while it waited: %v", err)
	}
}

// timeOutFirstStep reconciles the task of req once, moves its first
// step's start back past timeout, reconciles it again and returns the
// task and that step, both failed on the step's timeout.
func timeOutFirstStep(t *testing.T, cl client.Client, r *Reconciler, req reconcile.Request, timeout time.Duration) (*v1alpha1.StyrminTask, v1alpha1.TaskStep) {
	t.Helper()
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	tk := getTask(t, cl, req.NamespacedName)
	base := tk.DeepCopy()
	tk.Status.Steps[0].StartedAt = &metav1.Time{Time: time.Now().Add(-timeout - time.Minute)}
	if err := cl.Status().Patch(ctx, tk, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	tk = getTask(t, cl, req.NamespacedName)
	st := tk.Status.Steps[0]
	if tk.Status.Phase != v1alpha1.TaskFailed || st.State != v1alpha1.StepFailed || !strings.HasPrefix(st.Message, "timed out after "+timeout.String()) {
		t.Fatalf("task %s, step %s %q; want both failed on the step's timeout", tk.Status.Phase, st.State, st.Message)
	}
	return tk, st
}
