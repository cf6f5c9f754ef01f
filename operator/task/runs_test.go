package task

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
// was deleted).
func TestATaskDoesNotRunItsStepsWhileAnotherTaskOfItsDeploymentRuns(t *testing.T) {
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
		finished: map[types.UID]string{}, started: map[types.UID]int32{}, written: map[types.UID]string{},
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
	if got := r.claimRun(id, backup.UID); got != backup.UID {
		t.Errorf("after the upgrade ended: runs %s, want the backup", got)
	}
}
