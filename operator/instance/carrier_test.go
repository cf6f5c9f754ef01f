package instance

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestACarrierGoesOnPastAWithdrawnChangeToTheNextLockedAfterIt: the way
// from a superseded change follows the sequences that superseded it; at a
// change withdrawn since, it goes on at the deployment's lowest change
// above it not withdrawn (locked on the branch that holds the first),
// past further withdrawn ones, never to another deployment's task or an
// operation's, and ends at the withdrawn one while none was locked after.
func TestACarrierGoesOnPastAWithdrawnChangeToTheNextLockedAfterIt(t *testing.T) {
	hub := v1alpha1.DeploymentID{Cluster: "prod", Environment: "dev", Name: "hub"}
	web := v1alpha1.DeploymentID{Cluster: "prod", Environment: "dev", Name: "web"}
	task := func(id v1alpha1.DeploymentID, seq int64, phase v1alpha1.TaskPhase, supersededBy int64, withdrawn bool) v1alpha1.StyrminTask {
		tk := v1alpha1.StyrminTask{Spec: v1alpha1.StyrminTaskSpec{Deployment: id, ToSequence: seq},
			Status: v1alpha1.StyrminTaskStatus{Phase: phase, SupersededBy: supersededBy}}
		if withdrawn {
			tk.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonTaskWithdrawn}}
		}
		return tk
	}
	backup := task(hub, 9, v1alpha1.TaskSucceeded, 0, false)
	backup.Spec.Operation = &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: "nightly"}
	tasks := []v1alpha1.StyrminTask{
		task(hub, 5, v1alpha1.TaskSuperseded, 6, false),
		task(hub, 6, v1alpha1.TaskSuperseded, 0, true),
		task(web, 7, v1alpha1.TaskSucceeded, 0, false),
		backup,
	}
	seqOf := func(c *v1alpha1.StyrminTask) int64 {
		if c == nil {
			return 0
		}
		return c.Spec.ToSequence
	}
	check := func(what string, wantCarrier, wantWithdrawn int64) {
		t.Helper()
		c, w := Carrier(tasks, &tasks[0])
		if seqOf(c) != wantCarrier || seqOf(w) != wantWithdrawn {
			t.Errorf("%s: carrier %d, withdrawn %d; want %d, %d", what, seqOf(c), seqOf(w), wantCarrier, wantWithdrawn)
		}
	}
	check("nothing locked after the withdrawn change", 6, 6)
	tasks = append(tasks, task(hub, 8, v1alpha1.TaskRunning, 0, false), task(hub, 7, v1alpha1.TaskSuperseded, 0, true))
	check("7 withdrawn too, 8 locked after it", 8, 6)
	tasks[4] = task(hub, 8, v1alpha1.TaskSuperseded, 10, false)
	tasks = append(tasks, task(hub, 10, v1alpha1.TaskSucceeded, 0, false))
	check("8 superseded by 10", 10, 6)
	if c, w := Carrier(tasks, &tasks[1]); c != nil || w != nil {
		t.Errorf("a withdrawn change has a carrier: %v, %v", c, w)
	}
}
