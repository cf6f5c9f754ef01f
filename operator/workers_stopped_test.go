package operator_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestWorkersStoppedBeforeTheUpgradeStayStoppedThroughItsApplyAndStartAtTheNewChartsCount:
// graphhub's upgrade stops the workers, migrates, applies the new
// release, then starts the workers. The new configuration moves them
// from 2 to 4. The core apply, forced, set the workers to 4 on the new
// image before the start step (they ran while the steps between were
// meant to run without them), the start scaled them back to the 2 its
// stop recorded (two pods killed), and the drift check after the task
// put the 4 back with a drift event: 0, 4, 2, 4. Now the apply leaves
// the stopped workers at 0, the start scales them to the new chart's 4,
// and no drift is corrected.
func TestWorkersStoppedBeforeTheUpgradeStayStoppedThroughItsApplyAndStartAtTheNewChartsCount(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	e.startAgent(t, "--drift-interval=1s")
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	if got := e.workerReplicas(t); got != 2 {
		t.Fatalf("hub-worker replicas %d after the create, want 2", got)
	}

	stop := e.observeStart(t, hubNamespace, "hub-worker")
	seq := e.change(t, "hub", "hub: app 1.4.1, four workers", hubConfig("1.4.1", 4, "info"))
	upgrade := e.waitTask(t, hubNamespace, "hub", seq)
	requireSucceeded(t, upgrade)
	if got := strings.Join(stepNames(upgrade), " "); got != "1:stopComponents=Succeeded 2:runJob=Succeeded 1:upgradeDeploymentVersion=Succeeded 1:startComponents=Succeeded 2:waitReady=Succeeded" {
		t.Fatalf("hub-%d steps: %s", seq, got)
	}
	// A few drift intervals after the task: nothing to put back.
	time.Sleep(4 * time.Second)
	trace := stop()
	// From the stop on: 0 until the start step runs, then 4, and nothing
	// else.
	from := slices.Index(trace, "worker=0")
	if from < 0 || !slices.Equal(trace[from:], []string{"worker=0", "start runs", "worker=4"}) {
		t.Errorf("the worker's replicas and the start step, in order: %v; want worker=0, the start step running, worker=4", trace)
	}
	for _, st := range upgrade.Status.Steps {
		if st.Action == "startComponents" && !strings.Contains(st.Output, "started Deployment/hub-worker at 4 replicas") {
			t.Errorf("the start step's output %q; want the worker started at the new chart's 4", st.Output)
		}
	}
	sd := e.deployment(t, hubNamespace)
	if sd.Status.DriftCorrections != 0 || sd.Status.LastDriftCorrection != nil {
		t.Errorf("drift corrected after the upgrade: %d, last %+v; want none", sd.Status.DriftCorrections, sd.Status.LastDriftCorrection)
	}
	var evs eventsv1.EventList
	if err := e.c.List(context.Background(), &evs, client.InNamespace(hubNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Reason == v1alpha1.ReasonDriftCorrected {
			t.Errorf("a drift event after the upgrade: %s", ev.Note)
		}
	}
	if got := e.workerReplicas(t); got != 4 {
		t.Errorf("hub-worker replicas %d, want 4", got)
	}
}

// observeStart watches a namespace's Deployments and tasks and records,
// in the API server's order (resourceVersion), "worker=N" when the
// worker Deployment's spec.replicas changes and "start runs" when a
// task's startComponents step is first seen running.
func (e *agentEnv) observeStart(t *testing.T, ns, worker string) func() []string {
	t.Helper()
	seen := map[string]bool{}
	stop := e.observeWatches(t, ns, workerReplicasSeen(worker), &v1alpha1.StyrminTaskList{}, func(ev watch.Event, add func(rv, what string)) {
		tk, ok := ev.Object.(*v1alpha1.StyrminTask)
		if !ok {
			return
		}
		for _, st := range tk.Status.Steps {
			if st.Action == "startComponents" && st.State != v1alpha1.StepPending && st.State != "" && !seen[tk.Name] {
				seen[tk.Name] = true
				add(tk.ResourceVersion, "start runs")
			}
		}
	})
	return func() []string {
		var out []string
		for _, o := range stop() {
			out = append(out, o.what)
		}
		return out
	}
}
