package instance

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAPendingChangeSaysWhatItWaitsFor: a deployment whose newest change
// waits behind an earlier task read "task … waits to run (Pending)" in
// `styrminctl status`, though the task names the earlier one and what
// holds it (a failed wave, a step waiting for a person): a hotfix behind
// it waited for days, and status did not say why.
func TestAPendingChangeSaysWhatItWaitsFor(t *testing.T) {
	id := v1alpha1.DeploymentID{Cluster: "prod", Environment: "dev", Name: "hub"}
	const held = "waits for task hub-5 of this deployment, which runs first; it is Running: wave 2 waits for wave 1, which failed"
	pending := v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Namespace: "dev-hub", Name: "hub-6"},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, ToSequence: 6},
		Status: v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskPending, Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady,
			Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonTaskPending, Message: held}}}}
	bare := pending
	bare.Status.Conditions = nil
	for _, tc := range []struct {
		name string
		task v1alpha1.StyrminTask
		want string
	}{
		{"what holds it", pending, "task dev-hub/hub-6 waits to run (Pending): " + held},
		{"nothing said yet", bare, "task dev-hub/hub-6 waits to run (Pending)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := standing(id, nil, []v1alpha1.StyrminTask{tc.task})
			if !s.Behind || s.Reason != tc.want {
				t.Fatalf("behind %t, %q; want behind, %q", s.Behind, s.Reason, tc.want)
			}
			if tc.task.Status.Conditions == nil && strings.Contains(s.Reason, ": ") {
				t.Fatalf("%q says more than the task does", s.Reason)
			}
		})
	}
}
