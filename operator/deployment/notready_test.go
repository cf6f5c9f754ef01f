package deployment

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestNotReadyIsTimedFromTheLaterOfTheConditionAndTheApply pins when a
// deployment's pods become worth reading: a change that waited in a
// queue before it was applied is timed from its apply, so a large
// fan-out does not read the pods of every deployment as it applies it.
func TestNotReadyIsTimedFromTheLaterOfTheConditionAndTheApply(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-ago)} }
	cond := func(status metav1.ConditionStatus, ago time.Duration) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: status, LastTransitionTime: *at(ago)}}
	}
	for _, tc := range []struct {
		name   string
		status v1alpha1.StyrminDeploymentStatus
		want   time.Duration
	}{
		{"no condition yet", v1alpha1.StyrminDeploymentStatus{}, 0},
		{"ready", v1alpha1.StyrminDeploymentStatus{Conditions: cond(metav1.ConditionTrue, time.Hour)}, 0},
		{"not ready, never applied", v1alpha1.StyrminDeploymentStatus{Conditions: cond(metav1.ConditionFalse, 90*time.Second)}, 90 * time.Second},
		{"applied after it became not ready", v1alpha1.StyrminDeploymentStatus{
			Conditions: cond(metav1.ConditionFalse, 150*time.Second),
			Release:    &v1alpha1.ReleaseStatus{Name: "r", Revision: 2, LastAppliedTime: at(4 * time.Second)}}, 4 * time.Second},
		{"applied before it became not ready", v1alpha1.StyrminDeploymentStatus{
			Conditions: cond(metav1.ConditionFalse, 40*time.Second),
			Release:    &v1alpha1.ReleaseStatus{Name: "r", Revision: 1, LastAppliedTime: at(time.Hour)}}, 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{now: func() time.Time { return now }}
			if got := r.notReadyFor(&v1alpha1.StyrminDeployment{Status: tc.status}); got != tc.want {
				t.Errorf("notReadyFor = %s, want %s", got, tc.want)
			}
		})
	}
}
