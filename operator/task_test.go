package operator_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/task"
)

// observation is one change to a workload or job seen through a watch,
// with the resourceVersion the API server gave it. Within one etcd,
// resourceVersions of all kinds come from one increasing revision, so
// they order events across kinds (a test-only reading of an opaque
// value).
type observation struct {
	rv   uint64
	what string
}

// observe watches the Deployments and Jobs of a namespace and records
// "worker=N" (the worker Deployment's spec.replicas when it changes),
// "job+ NAME" (a Job created) and "job✓ NAME" (a Job complete).
func (e *agentEnv) observe(t *testing.T, ns, worker string) func() []observation {
	done := map[string]bool{}
	return e.observeWatches(t, ns, workerReplicasSeen(worker), &batchv1.JobList{}, func(ev watch.Event, add func(rv, what string)) {
		j, ok := ev.Object.(*batchv1.Job)
		if !ok {
			return
		}
		if ev.Type == watch.Added {
			add(j.ResourceVersion, "job+ "+j.Name)
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue && !done[j.Name] {
				done[j.Name] = true
				add(j.ResourceVersion, "job✓ "+j.Name)
			}
		}
	})
}

// seenFunc records what one watch event shows, through add.
type seenFunc func(ev watch.Event, add func(rv, what string))

// workerReplicasSeen records "worker=N" when the worker Deployment's
// spec.replicas changes.
func workerReplicasSeen(worker string) seenFunc {
	last := int32(-1)
	return func(ev watch.Event, add func(rv, what string)) {
		d, ok := ev.Object.(*appsv1.Deployment)
		if !ok || d.Name != worker || ev.Type == watch.Deleted || d.Spec.Replicas == nil {
			return
		}
		if *d.Spec.Replicas != last {
			last = *d.Spec.Replicas
			add(d.ResourceVersion, fmt.Sprintf("worker=%d", last))
		}
	}
}

// observeWatches watches a namespace's Deployments (deployments seen by
// onDeployment) and the objects of other (seen by onOther), and returns
// what they recorded, in the API server's order (resourceVersion), once
// stopped.
func (e *agentEnv) observeWatches(t *testing.T, ns string, onDeployment seenFunc, other client.ObjectList, onOther seenFunc) func() []observation {
	t.Helper()
	wc, err := client.NewWithWatch(e.cluster.RESTConfig, client.Options{Scheme: e.c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	var obs []observation
	add := func(rv, what string) {
		n, _ := strconv.ParseUint(rv, 10, 64)
		mu.Lock()
		obs = append(obs, observation{n, what})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	var watches []watch.Interface
	for _, w := range []struct {
		list client.ObjectList
		seen seenFunc
	}{{&appsv1.DeploymentList{}, onDeployment}, {other, onOther}} {
		wi, err := wc.Watch(ctx, w.list, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		watches = append(watches, wi)
		wg.Go(func() {
			for ev := range wi.ResultChan() {
				w.seen(ev, add)
			}
		})
	}
	return func() []observation {
		cancel()
		for _, wi := range watches {
			wi.Stop()
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		slices.SortFunc(obs, func(a, b observation) int { return cmp.Compare(a.rv, b.rv) })
		return obs
	}
}

func indexOf(obs []observation, what string, from int) int {
	for i := from; i < len(obs); i++ {
		if obs[i].what == what {
			return i
		}
	}
	return -1
}

// TestAgentCreatesUpdatesUpgradesAndDeletesGraphhub walks the graphhub
// example through its life with the agent running as a subprocess:
// create runs the setup hook (the init-db job), a parameter change is an
// update that only writes the instance, an application version change is
// an upgrade whose migration job runs between stopping and starting the
// workers, and removing the deployment uninstalls it.
func TestAgentCreatesUpdatesUpgradesAndDeletesGraphhub(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	first := e.lock(t)
	if first["hub"] != 1 || first["web"] != 1 {
		t.Fatalf("first lock = %v, want hub and web at 1", first)
	}
	metricsAddr := agenttest.FreeAddr(t)
	e.startAgent(t, "--leader-elect=true", "--metrics-bind-address="+metricsAddr)

	// Create: the setup hook.
	create := e.waitTask(t, hubNamespace, "hub", 1)
	requireSucceeded(t, create)
	if create.Spec.Workflow != v1alpha1.WorkflowCreate || create.Spec.FromSequence != 0 {
		t.Errorf("hub-1: workflow %s from %d, want create from 0", create.Spec.Workflow, create.Spec.FromSequence)
	}
	if got := strings.Join(stepNames(create), " "); got != "1:upgradeDeploymentVersion=Succeeded 1:waitReady=Succeeded 2:restoreBackup=Skipped 3:runJob=Succeeded 4:waitReady=Succeeded" {
		t.Errorf("hub-1 steps: %s", got)
	}
	var initJob batchv1.Job
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: hubNamespace, Name: "hub-init-db-1"}, &initJob); err != nil {
		t.Fatalf("the setup hook's job: %v", err)
	}
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", 1))
	sd := e.deployment(t, hubNamespace)
	if sd == nil || sd.Status.ActiveSequence != 1 || sd.Annotations[v1alpha1.AnnotationInstanceSequence] != "1" {
		t.Fatalf("StyrminDeployment after create: %+v", sd)
	}

	// Update: configuration only.
	seq := e.change(t, "hub", "hub: three workers", hubConfig("1.4.0", 3, "info"))
	if seq != 2 {
		t.Fatalf("update locked sequence %d, want 2", seq)
	}
	update := e.waitTask(t, hubNamespace, "hub", 2)
	requireSucceeded(t, update)
	if update.Spec.Workflow != v1alpha1.WorkflowUpdate || strings.Join(stepNames(update), " ") != "1:upgradeDeploymentVersion=Succeeded" {
		t.Errorf("hub-2: workflow %s steps %v, want update with the core step only", update.Spec.Workflow, stepNames(update))
	}
	var worker appsv1.Deployment
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: hubNamespace, Name: "hub-worker"}, &worker); err != nil || *worker.Spec.Replicas != 3 {
		t.Fatalf("hub-worker after the update: %v replicas %v", err, worker.Spec.Replicas)
	}

	// Upgrade: stop workers → migrate → write → start workers → wait.
	stop := e.observe(t, hubNamespace, "hub-worker")
	if seq = e.change(t, "hub", "hub: app 1.4.1", hubConfig("1.4.1", 3, "info")); seq != 3 {
		t.Fatalf("upgrade locked sequence %d, want 3", seq)
	}
	upgrade := e.waitTask(t, hubNamespace, "hub", 3)
	requireSucceeded(t, upgrade)
	if upgrade.Spec.Workflow != v1alpha1.WorkflowUpgrade || upgrade.Spec.FromSequence != 2 {
		t.Errorf("hub-3: workflow %s from %d, want upgrade from 2", upgrade.Spec.Workflow, upgrade.Spec.FromSequence)
	}
	steps := upgrade.Status.Steps
	if got := strings.Join(stepNames(upgrade), " "); got != "1:stopComponents=Succeeded 2:runJob=Succeeded 1:upgradeDeploymentVersion=Succeeded 1:startComponents=Succeeded 2:waitReady=Succeeded" {
		t.Fatalf("hub-3 steps: %s", got)
	}
	for i := 1; i < len(steps); i++ {
		if steps[i].StartedAt.Before(steps[i-1].FinishedAt) {
			t.Errorf("step %s started (%s) before step %s finished (%s)", steps[i].Name, steps[i].StartedAt, steps[i-1].Name, steps[i-1].FinishedAt)
		}
	}
	if steps[0].Recorded["Deployment/hub-worker"] != "3" {
		t.Errorf("stopComponents recorded %v, want Deployment/hub-worker=3", steps[0].Recorded)
	}
	var migrate batchv1.Job
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: hubNamespace, Name: "hub-migrate-3"}, &migrate); err != nil {
		t.Fatalf("the migration job: %v", err)
	}
	c0 := migrate.Spec.Template.Spec.Containers[0]
	if !strings.HasSuffix(c0.Image, ":1.4.1") || strings.Join(c0.Command, " ") != "graphhub db migrate" {
		t.Errorf("migration job runs %s %v, want the new version's image with the declared command", c0.Image, c0.Command)
	}
	if migrate.Spec.Template.Labels[task.LabelTask] != "hub-3" || migrate.Spec.Template.Labels["app.kubernetes.io/component"] != "" {
		t.Errorf("migration pod labels %v: want the task's, not the workload's", migrate.Spec.Template.Labels)
	}
	obs := stop()
	var trace []string
	for _, o := range obs {
		trace = append(trace, o.what)
	}
	stopped := indexOf(obs, "worker=0", 0)
	created := indexOf(obs, "job+ hub-migrate-3", 0)
	completed := indexOf(obs, "job✓ hub-migrate-3", 0)
	started := indexOf(obs, "worker=3", max(completed, 0))
	if stopped < 0 || created < stopped || completed < created || started < completed {
		t.Errorf("order of events (by resourceVersion): %v; want worker=0, then the migration job created and complete, then worker=3", trace)
	}
	sd = e.deployment(t, hubNamespace)
	if sd.Status.ActiveSequence != 3 || sd.Spec.AppVersion != "1.4.1" {
		t.Errorf("StyrminDeployment after the upgrade: active %d app %s", sd.Status.ActiveSequence, sd.Spec.AppVersion)
	}

	// Delete: the tombstone uninstalls the release.
	e.commitConfig(t, "remove hub", map[string][]byte{hubDeployment: nil})
	if got := e.lock(t)["hub"]; got != 4 {
		t.Fatalf("removal locked hub at %d, want a tombstone at 4", got)
	}
	del := e.waitTask(t, hubNamespace, "hub", 4)
	requireSucceeded(t, del)
	if del.Spec.Workflow != v1alpha1.WorkflowDelete {
		t.Errorf("hub-4 workflow %s, want delete", del.Spec.Workflow)
	}
	agenttest.WaitUntil(t, agentWaitLimit, "the hub release to be uninstalled", func(ctx context.Context) (bool, string, error) {
		var list appsv1.DeploymentList
		if err := e.c.List(ctx, &list, client.InNamespace(hubNamespace)); err != nil {
			return false, err.Error(), nil
		}
		err := e.c.Get(ctx, client.ObjectKey{Namespace: hubNamespace, Name: hubNamespace}, &v1alpha1.StyrminDeployment{})
		return len(list.Items) == 0 && apierrors.IsNotFound(err), fmt.Sprintf("%d deployments left, StyrminDeployment: %v", len(list.Items), err), nil
	})
	if len(e.tasksOf(t, hubNamespace)) != 4 {
		t.Errorf("hub tasks: %d, want 4 (the history stays)", len(e.tasksOf(t, hubNamespace)))
	}
	// Metrics: tasks by phase, step durations. The gauges are set after a
	// reconcile returns, a moment after what it wrote is seen: scraped
	// until all are there.
	wants := []string{
		`styrmin_tasks{phase="Succeeded"} 5`,
		`styrmin_tasks_finished_total{phase="Succeeded",workflow="upgrade"} 1`,
		`styrmin_task_step_duration_seconds_count{action="runJob",state="Succeeded"} 2`,
		`styrmin_task_step_duration_seconds_count{action="stopComponents",state="Succeeded"} 1`,
		// Each deployment's readiness and sequences; the deleted hub's
		// series are gone.
		`styrmin_deployment_ready{cluster="local",deployment="web",environment="dev",namespace="dev-web"} 1`,
		`styrmin_deployment_stalled{cluster="local",deployment="web",environment="dev",namespace="dev-web"} 0`,
		`styrmin_deployment_sequence{cluster="local",deployment="web",environment="dev",namespace="dev-web",state="active"} 1`,
		`styrmin_deployment_sequence{cluster="local",deployment="web",environment="dev",namespace="dev-web",state="locked"} 1`,
		// The source's syncs and fetches.
		`styrmin_source_syncs_total{result="synced"}`,
		`styrmin_source_fetch_duration_seconds_count{result="success"}`,
	}
	var metrics string
	agenttest.WaitUntil(t, 10*time.Second, "the metrics of every task and deployment", func(context.Context) (bool, string, error) {
		metrics = scrape(t, "http://"+metricsAddr+"/metrics")
		var lack []string
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				lack = append(lack, want)
			}
		}
		if strings.Contains(metrics, `namespace="dev-hub"}`) || strings.Contains(metrics, `namespace="dev-hub",state=`) {
			lack = append(lack, "the deleted hub's deployment series gone")
		}
		return len(lack) == 0, "lacking " + strings.Join(lack, ", "), nil
	})
	if m := regexp.MustCompile(`(?m)^styrmin_source_last_sync_success_timestamp_seconds (\S+)$`).FindStringSubmatch(metrics); m == nil || m[1] == "0" {
		t.Errorf("styrmin_source_last_sync_success_timestamp_seconds: %v, want the last sync's time", m)
	}

	var src v1alpha1.StyrminSource
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "styrmin-system", Name: "styrmin"}, &src); err != nil {
		t.Fatal(err)
	}
	head, _ := e.clone.Head()
	if src.Status.LastSyncedCommit != head.String() {
		t.Errorf("StyrminSource synced %s, want the head %s", src.Status.LastSyncedCommit, head)
	}

	// A task of the create, made again after the deletion (a second
	// writer, or a walk from the root after its task was pruned), does not
	// install the deleted deployment again: it ends Superseded by the
	// tombstone.
	var createTask v1alpha1.StyrminTask
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: hubNamespace, Name: v1alpha1.TaskName("hub", 1)}, &createTask); err != nil {
		t.Fatal(err)
	}
	late := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: "hub-late", Namespace: hubNamespace, Labels: createTask.Labels}, Spec: createTask.Spec}
	if err := e.c.Create(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, agentWaitLimit, "the late create task to end", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(late), late); err != nil {
			return false, err.Error(), nil
		}
		return late.Status.Phase.Terminal(), string(late.Status.Phase), nil
	})
	if late.Status.Phase != v1alpha1.TaskSuperseded || late.Status.SupersededBy != 4 || !strings.Contains(late.Status.Message, "deleted the deployment") {
		t.Errorf("a create task made after the deletion: %s superseded by %d (%q), want Superseded by the tombstone 4", late.Status.Phase, late.Status.SupersededBy, late.Status.Message)
	}
	if c := apimeta.FindStatusCondition(late.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonSupersededByDeletion {
		t.Errorf("the late create task's Ready condition: %+v, want reason %s (the UI says nothing of it was applied by it)", c, v1alpha1.ReasonSupersededByDeletion)
	}
	var list appsv1.DeploymentList
	if err := e.c.List(context.Background(), &list, client.InNamespace(hubNamespace)); err != nil {
		t.Fatal(err)
	}
	err := e.c.Get(context.Background(), client.ObjectKey{Namespace: hubNamespace, Name: hubNamespace}, &v1alpha1.StyrminDeployment{})
	if len(list.Items) != 0 || !apierrors.IsNotFound(err) {
		t.Errorf("after the late create task: %d workloads, StyrminDeployment %v; want the deployment to stay deleted", len(list.Items), err)
	}
}

func (e *agentEnv) workerReplicas(t *testing.T) int32 {
	t.Helper()
	var worker appsv1.Deployment
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: hubNamespace, Name: "hub-worker"}, &worker); err != nil {
		t.Fatal(err)
	}
	return *worker.Spec.Replicas
}

// TestAgentAppliesChangesMadeOneAfterAnotherInOrder commits five changes
// to the hub deployment one after another (updates and upgrades mixed)
// while the agent runs: the deployment ends at the last one, every task
// ends, no two tasks of the deployment ran at once, and the upgrades'
// migrations ran in sequence order.
func TestAgentAppliesChangesMadeOneAfterAnotherInOrder(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))

	stop := e.observe(t, hubNamespace, "hub-worker")
	changes := []map[string][]byte{
		hubConfig("1.4.0", 3, "info"),  // 2: update
		hubConfig("1.4.1", 3, "info"),  // 3: upgrade
		hubConfig("1.4.1", 3, "debug"), // 4: update
		hubConfig("1.4.2", 3, "debug"), // 5: upgrade
		hubConfig("1.4.2", 4, "debug"), // 6: update
	}
	for i, files := range changes {
		if seq := e.change(t, "hub", fmt.Sprintf("change %d", i+1), files); seq != int64(i+2) {
			t.Fatalf("change %d locked sequence %d, want %d", i+1, seq, i+2)
		}
	}
	last := e.waitTask(t, hubNamespace, "hub", 6)
	requireSucceeded(t, last)

	tasks := e.tasksOf(t, hubNamespace)
	if len(tasks) != 6 {
		t.Fatalf("%d hub tasks, want 6", len(tasks))
	}
	var ran []v1alpha1.StyrminTask
	for i, task := range tasks {
		if task.Spec.ToSequence != int64(i+1) || !task.Status.Phase.Terminal() {
			t.Errorf("task %s (sequence %d): phase %s", task.Name, task.Spec.ToSequence, task.Status.Phase)
		}
		switch task.Spec.Workflow {
		case v1alpha1.WorkflowUpgrade, v1alpha1.WorkflowCreate:
			// Migrations must run, in order: never superseded.
			requireSucceeded(t, &task)
		case v1alpha1.WorkflowUpdate:
			if task.Status.Phase != v1alpha1.TaskSucceeded && task.Status.Phase != v1alpha1.TaskSuperseded {
				t.Errorf("update %s ended %s (%s)", task.Name, task.Status.Phase, task.Status.Message)
			}
		}
		t.Logf("%s %s → %s %s", task.Name, task.Spec.Workflow, task.Status.Phase, task.Status.Message)
		if task.Status.Phase == v1alpha1.TaskSucceeded {
			ran = append(ran, task)
		}
	}
	for i := 1; i < len(ran); i++ {
		if ran[i].Status.StartedAt.Before(ran[i-1].Status.FinishedAt) {
			t.Errorf("task %s started at %s, before task %s finished at %s", ran[i].Name, ran[i].Status.StartedAt, ran[i-1].Name, ran[i-1].Status.FinishedAt)
		}
	}
	obs := stop()
	var trace []string
	for _, o := range obs {
		trace = append(trace, o.what)
	}
	m3, m5 := indexOf(obs, "job✓ hub-migrate-3", 0), indexOf(obs, "job+ hub-migrate-5", 0)
	if m3 < 0 || m5 < m3 {
		t.Errorf("migrations out of order: %v", trace)
	}
	sd := e.deployment(t, hubNamespace)
	if sd.Spec.Sequence != 6 || sd.Status.ActiveSequence != 6 || sd.Annotations[v1alpha1.AnnotationInstanceSequence] != "6" || sd.Spec.AppVersion != "1.4.2" {
		t.Errorf("StyrminDeployment: spec sequence %d, active %d, annotation %s, app %s; want the last change (6, app 1.4.2)",
			sd.Spec.Sequence, sd.Status.ActiveSequence, sd.Annotations[v1alpha1.AnnotationInstanceSequence], sd.Spec.AppVersion)
	}
	if got := e.workerReplicas(t); got != 4 {
		t.Errorf("hub-worker replicas %d, want 4 (the last change)", got)
	}
}

// TestAgentHandSetSequenceStallsTheDeploymentAndItsNewestTaskWaits
// hand-sets the sequence annotation of a StyrminDeployment above every
// instance (a number no task wrote): the deployment is Stalled with
// reason SequenceAhead naming the annotation and the recovery, the next
// change's task waits at its core step instead of being superseded by a
// phantom (an agent killed during the wait resumes waiting), and removing
// the annotation lets that task write the whole configuration.
func TestAgentHandSetSequenceStallsTheDeploymentAndItsNewestTaskWaits(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	// Without leader election: the agent is killed below, and a restarted
	// one would wait for the killed one's lease to expire.
	noLease := "--leader-elect=false"
	e.startAgent(t, noLease)
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	ctx := context.Background()

	sd := e.deployment(t, hubNamespace)
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"styrmin.io/instance-sequence":"100"}}}`))
	if err := e.c.Patch(ctx, sd, patch); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 30*time.Second, "the StyrminDeployment Stalled with SequenceAhead", func(ctx context.Context) (bool, string, error) {
		sd := e.deployment(t, hubNamespace)
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionStalled)
		r := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || r == nil {
			return false, "no condition yet", nil
		}
		ok := c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonSequenceAhead && r.Status == metav1.ConditionFalse &&
			strings.Contains(c.Message, v1alpha1.AnnotationInstanceSequence) && strings.Contains(c.Message, "kubectl annotate")
		return ok, c.Reason + ": " + c.Message, nil
	})

	// A stall is an event too, not only a condition.
	agenttest.WaitUntil(t, 30*time.Second, "a Warning SequenceAhead event on the StyrminDeployment", func(ctx context.Context) (bool, string, error) {
		var evs eventsv1.EventList
		if err := e.c.List(ctx, &evs, client.InNamespace(hubNamespace)); err != nil {
			return false, err.Error(), nil
		}
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning && ev.Reason == v1alpha1.ReasonSequenceAhead && ev.Regarding.Kind == "StyrminDeployment" {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d events, none a Warning SequenceAhead", len(evs.Items)), nil
	})

	seq := e.change(t, "hub", "hub: three workers", hubConfig("1.4.0", 3, "info"))
	waiting := func(what string) {
		t.Helper()
		agenttest.WaitUntil(t, 30*time.Second, what, func(ctx context.Context) (bool, string, error) {
			var task v1alpha1.StyrminTask
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: hubNamespace, Name: v1alpha1.TaskName("hub", seq)}, &task); err != nil {
				return false, err.Error(), nil
			}
			if task.Status.Phase.Terminal() {
				return false, "", fmt.Errorf("hub-%d ended %s (%s): it must wait", seq, task.Status.Phase, task.Status.Message)
			}
			i := task.Status.CurrentStep
			if task.Status.Phase != v1alpha1.TaskRunning || int(i) >= len(task.Status.Steps) {
				return false, string(task.Status.Phase), nil
			}
			st := task.Status.Steps[i]
			return st.State == v1alpha1.StepRunning && strings.Contains(st.Message, "annotation "+v1alpha1.AnnotationInstanceSequence+" is 100"),
				st.Name + ": " + st.Message, nil
		})
	}
	waiting("the newest task waiting at its core step, saying why")

	// Killed during the wait, the agent resumes waiting.
	e.agent.Kill(t)
	e.startAgent(t, noLease)
	time.Sleep(3 * time.Second)
	waiting("the newest task waiting again after a restart")
	if got := e.deployment(t, hubNamespace); got.Spec.Sequence != 1 || got.Annotations[v1alpha1.AnnotationInstanceSequence] != "100" {
		t.Fatalf("the waiting task changed the StyrminDeployment: sequence %d annotation %s", got.Spec.Sequence, got.Annotations[v1alpha1.AnnotationInstanceSequence])
	}

	// Recovery: remove the annotation; the waiting task writes the whole
	// configuration.
	patch = client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/annotations/styrmin.io~1instance-sequence"}]`))
	if err := e.c.Patch(ctx, e.deployment(t, hubNamespace), patch); err != nil {
		t.Fatal(err)
	}
	rec := e.waitTask(t, hubNamespace, "hub", seq)
	requireSucceeded(t, rec)
	want := e.taskInstance(t, rec)
	got := e.deployment(t, hubNamespace)
	if got.Spec.Sequence != seq || got.Spec.Digest != want.Digest || got.Status.ActiveSequence != seq || got.Annotations[v1alpha1.AnnotationInstanceSequence] != strconv.FormatInt(seq, 10) {
		t.Errorf("after recovery: sequence %d digest %s active %d annotation %q; want the whole instance %d (%s)",
			got.Spec.Sequence, got.Spec.Digest, got.Status.ActiveSequence, got.Annotations[v1alpha1.AnnotationInstanceSequence], seq, want.Digest)
	}
	if apimeta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionStalled) || e.workerReplicas(t) != 3 {
		t.Errorf("after recovery: stalled %v, %d workers; want not stalled, 3 workers", apimeta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionStalled), e.workerReplicas(t))
	}
}

// TestAgentNewerInstanceKeptRunsTheEarlierChangesHooks runs a task of an
// earlier change after a newer one was applied (a task made by hand from
// the earlier lock, as a second writer would): the guard keeps the newer
// instance, says so and records NewerInstanceKept, the earlier change's
// upgrade hook still runs its pre and post steps, and the task ends
// Superseded.
func TestAgentNewerInstanceKeptRunsTheEarlierChangesHooks(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	ctx := context.Background()
	first := e.change(t, "hub", "hub: app 1.4.1", hubConfig("1.4.1", 2, "info"))
	earlier := e.waitTask(t, hubNamespace, "hub", first)
	requireSucceeded(t, earlier)
	last := e.change(t, "hub", "hub: app 1.4.2", hubConfig("1.4.2", 2, "info"))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", last))

	again := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: "hub-again", Namespace: hubNamespace, Labels: earlier.Labels}, Spec: earlier.Spec}
	if err := e.c.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	var kept v1alpha1.StyrminTask
	agenttest.WaitUntil(t, agentWaitLimit, "the earlier change's task to end", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(again), &kept); err != nil {
			return false, err.Error(), nil
		}
		return kept.Status.Phase.Terminal(), string(kept.Status.Phase), nil
	})
	if kept.Status.Phase != v1alpha1.TaskSuperseded || kept.Status.SupersededBy != last || kept.Status.Workflow != v1alpha1.WorkflowUpgrade {
		t.Fatalf("the earlier change: %s (%s) superseded by %d, workflow %s; want an upgrade Superseded by %d", kept.Status.Phase, kept.Status.Message, kept.Status.SupersededBy, kept.Status.Workflow, last)
	}
	if got := strings.Join(stepNames(&kept), " "); got != "1:stopComponents=Succeeded 2:runJob=Succeeded 1:upgradeDeploymentVersion=Succeeded 1:startComponents=Succeeded 2:waitReady=Succeeded" {
		t.Errorf("the earlier change's steps: %s; want its upgrade hook run, pre and post", got)
	}
	core := kept.Status.Steps[2]
	if !strings.Contains(core.Output, fmt.Sprintf("holds sequence %d", last)) || !strings.Contains(core.Output, "left unchanged") {
		t.Errorf("the core step's output does not say why: %q", core.Output)
	}
	sd := e.deployment(t, hubNamespace)
	if sd.Spec.Sequence != last || sd.Spec.AppVersion != "1.4.2" || sd.Status.ActiveSequence != last {
		t.Errorf("the guarded StyrminDeployment changed: sequence %d app %s active %d", sd.Spec.Sequence, sd.Spec.AppVersion, sd.Status.ActiveSequence)
	}
	agenttest.WaitUntil(t, 30*time.Second, "a NewerInstanceKept event on the StyrminDeployment", func(ctx context.Context) (bool, string, error) {
		var evs eventsv1.EventList
		if err := e.c.List(ctx, &evs, client.InNamespace(hubNamespace)); err != nil {
			return false, err.Error(), nil
		}
		for _, ev := range evs.Items {
			if ev.Reason == v1alpha1.EventNewerInstanceKept && ev.Regarding.Kind == "StyrminDeployment" && ev.Regarding.Name == hubNamespace {
				return true, "", nil
			}
		}
		return false, "none yet", nil
	})
}

// taskEvents lists the events regarding a task of the hub namespace as
// "type/reason".
func taskEvents(ctx context.Context, t *testing.T, c client.Client, task string) []string {
	t.Helper()
	var evs eventsv1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(hubNamespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs.Items {
		if ev.Regarding.Kind == "StyrminTask" && ev.Regarding.Name == task {
			out = append(out, ev.Type+"/"+ev.Reason)
		}
	}
	return out
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAgentFailedStepLeavesTheActiveInstance upgrades hub to the 1.5 line,
// whose driver (graphhub 2.0.0) first execs into the server to turn on
// maintenance mode. Pods on fake nodes run no containers, so the exec
// fails: the task fails naming the step and why, nothing after it runs
// (the workers keep running, the StyrminDeployment keeps the active
// instance). A later change is not held back by the failed task.
func TestAgentFailedStepLeavesTheActiveInstance(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	before := e.deployment(t, hubNamespace)

	seq := e.change(t, "hub", "hub: app 1.5.0", hubConfig("1.5.0", 2, "info"))
	failed := e.waitTask(t, hubNamespace, "hub", seq)
	if failed.Status.Phase != v1alpha1.TaskFailed {
		t.Fatalf("hub-%d: %s (%s), want Failed", seq, failed.Status.Phase, failed.Status.Message)
	}
	if in := e.taskInstance(t, failed); in.Driver.Version != "2.0.0" {
		t.Fatalf("the upgrade runs driver %s, want graphhub 2.0.0", in.Driver.Version)
	}
	msg := failed.Status.Message
	t.Logf("hub-%d: %s", seq, msg)
	if !strings.Contains(msg, "step upgrade/pre/1:exec") || !strings.Contains(msg, `exec "graphhub maintenance on" in pod dev-hub/hub-server-`) {
		t.Errorf("the task message does not say which step failed and why: %q", msg)
	}
	if got := strings.Join(stepNames(failed), " "); !strings.HasPrefix(got, "1:exec=Failed 2:stopComponents=Skipped 3:runJob=Skipped 1:upgradeDeploymentVersion=Skipped") {
		t.Errorf("steps after the failure: %s", got)
	}
	after := e.deployment(t, hubNamespace)
	if after.Spec.Sequence != 1 || after.Spec.Digest != before.Spec.Digest || after.Status.ActiveSequence != 1 {
		t.Errorf("the failed upgrade changed the StyrminDeployment: sequence %d active %d", after.Spec.Sequence, after.Status.ActiveSequence)
	}
	if got := e.workerReplicas(t); got != 2 {
		t.Errorf("hub-worker replicas %d, want 2 (never stopped)", got)
	}
	// Tasks record events only when they end other than as planned: the
	// failed one a Warning, the one that succeeded none.
	agenttest.WaitUntil(t, 30*time.Second, "a Failed event on the failed task", func(ctx context.Context) (bool, string, error) {
		evs := taskEvents(ctx, t, e.c, failed.Name)
		return len(evs) == 1 && evs[0] == "Warning/Failed", fmt.Sprint(evs), nil
	})
	if evs := taskEvents(context.Background(), t, e.c, "hub-1"); len(evs) != 0 {
		t.Errorf("events on the task that succeeded: %v, want none (its StyrminDeployment records the change)", evs)
	}

	// Back to the 1.4 line: runs (driver 1.0.0's upgrade hook) and succeeds.
	next := e.change(t, "hub", "hub: back to 1.4.1", hubConfig("1.4.1", 2, "info"))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", next))
	if sd := e.deployment(t, hubNamespace); sd.Status.ActiveSequence != next || sd.Spec.AppVersion != "1.4.1" {
		t.Errorf("after the next change: active %d app %s", sd.Status.ActiveSequence, sd.Spec.AppVersion)
	}
}
