package task

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// TestATaskDoesNotRunItsStepsWhileAnotherTaskOfItsDeploymentRuns pins
// the agent's own guard against two tasks of a deployment running at once.
// The order between them is read from the cache (awaitTurn), which can miss
// a task created a moment earlier: a backup's task, ordered before a change
// the backup's controller did not see yet, would start while that change's
// upgrade runs. Whichever task reaches its steps first runs; the other
// waits, without starting a step, until the first is forgotten (it ended or
// was deleted). A task that could not write its first step's start does
// not hold the deployment.
func TestATaskDoesNotRunItsStepsWhileAnotherTaskOfItsDeploymentRuns(t *testing.T) {
	t.Parallel()
	dep := v1alpha1.DeploymentID{Cluster: "local", Environment: "data", Name: "hub"}
	other := v1alpha1.DeploymentID{Cluster: "local", Environment: "data", Name: "web"}
	task := func(name string, uid types.UID, id v1alpha1.DeploymentID, seq int64, op *v1alpha1.TaskOperation) *v1alpha1.StyrminTask {
		return &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: "data-" + id.Name, Name: name, UID: uid},
			Spec:       v1alpha1.StyrminTaskSpec{Deployment: id, ToSequence: seq, Operation: op},
			Status: v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskPending,
				Steps: []v1alpha1.TaskStep{{Name: "backup/core/1:runJob", State: v1alpha1.StepPending}}},
		}
	}
	upgrade := task("hub-5", "u-upgrade", dep, 5, nil)
	backup := task("nightly-hub", "u-backup", dep, 4, &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: "nightly"})
	elsewhere := task("web-2", "u-web", other, 2, nil)
	r := &Reconciler{opts: Options{PollInterval: 2 * time.Second}, runs: map[resolver.ID]types.UID{},
		uids:     map[types.NamespacedName]types.UID{{Namespace: "data-hub", Name: "hub-5"}: "u-upgrade"},
		finished: map[types.UID]string{}, started: map[types.UID]int32{}, tried: map[types.UID]triedStart{}, written: map[types.UID]string{},
		lastErr: map[types.UID]string{}, scaled: map[types.UID]map[string]int64{}, instances: map[types.NamespacedName]lockedInstance{},
		waiting: map[resolver.ID]map[types.NamespacedName]bool{}, waitsFor: map[types.NamespacedName]orderWait{}}
	id := resolver.ID{Cluster: "local", Environment: "data", Name: "hub"}

	if got := r.claimRun(id, upgrade.UID); got != upgrade.UID {
		t.Fatalf("the upgrade reaching its steps first: runs %s, want it", got)
	}
	res, err := r.runSteps(context.Background(), &taskRun{task: backup, log: logr.Discard()})
	if err != nil || !res.stop || res.after != 2*time.Second {
		t.Fatalf("the backup's steps while the upgrade runs: %+v %v, want a wait of the poll interval", res, err)
	}
	if backup.Status.Steps[0].State != v1alpha1.StepPending || backup.Status.Phase != v1alpha1.TaskPending {
		t.Fatalf("the backup started while the upgrade runs: %s, step %s", backup.Status.Phase, backup.Status.Steps[0].State)
	}
	if got := r.claimRun(resolver.ID{Cluster: "local", Environment: "data", Name: "web"}, elsewhere.UID); got != elsewhere.UID {
		t.Errorf("another deployment's task waits for hub's: runs %s", got)
	}
	if got := r.claimRun(id, upgrade.UID); got != upgrade.UID {
		t.Errorf("the upgrade's next reconcile: runs %s, want it still", got)
	}
	r.forget(upgrade)

	// The backup's first step's start cannot be written (here the API
	// server cannot be reached): it has not started, and holds nothing
	// while it tries again, when a task ordered before it may have shown
	// up in the cache.
	unreachable, err := client.New(&rest.Config{Host: "http://127.0.0.1:1"}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.opts.Client = unreachable
	if _, err := r.runSteps(context.Background(), &taskRun{task: backup, log: logr.Discard()}); err == nil {
		t.Fatal("the backup's first step started without its start written")
	}
	if got := r.claimRun(id, upgrade.UID); got != upgrade.UID {
		t.Errorf("after the backup failed to start: %s holds the deployment, want it free", got)
	}
}

// TestAPendingTaskWaitsForAnEarlierOneAndForAnyThatRuns pins awaitTurn's
// rule. A task ordered after this one that runs already (it started from a
// cache that did not show this one, and the agent restarted since, losing
// its hold) finishes first: two tasks of a deployment never interleave.
func TestAPendingTaskWaitsForAnEarlierOneAndForAnyThatRuns(t *testing.T) {
	t.Parallel()
	at := func(uid types.UID, seq int64, op bool, phase v1alpha1.TaskPhase) *v1alpha1.StyrminTask {
		tk := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{UID: uid, Name: string(uid)},
			Spec: v1alpha1.StyrminTaskSpec{ToSequence: seq}, Status: v1alpha1.StyrminTaskStatus{Phase: phase}}
		if op {
			tk.Spec.Operation = &v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: "monday"}
		}
		return tk
	}
	restore := at("restore", 4, true, v1alpha1.TaskPending)
	for _, tc := range []struct {
		name  string
		other *v1alpha1.StyrminTask
		wait  bool
	}{
		{"an earlier change not ended", at("c4", 4, false, v1alpha1.TaskPending), true},
		{"an earlier change that ended", at("c3", 3, false, v1alpha1.TaskSucceeded), false},
		{"a later change, pending", at("c5", 5, false, v1alpha1.TaskPending), false},
		{"a later change that runs", at("c5", 5, false, v1alpha1.TaskRunning), true},
		{"itself", restore, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := waitsFor(restore, tc.other); got != tc.wait {
				t.Errorf("waitsFor = %v, want %v", got, tc.wait)
			}
		})
	}
}
