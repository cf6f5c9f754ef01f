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

// TestADeploymentWaitingForAJudgedObjectLooksAgainSoon pins which objects
// the not-ready poll looks at soon (the agent watches none of them): a
// Job, a claim and a custom resource not ready yet; not a Deployment
// (watched), nor a judged object that is ready or failed.
func TestADeploymentWaitingForAJudgedObjectLooksAgainSoon(t *testing.T) {
	inventory := []v1alpha1.ObjectRef{
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
		{APIVersion: "batch/v1", Kind: "Job", Name: "seed"},
		{APIVersion: "postgresql.cnpg.io/v1", Kind: "Cluster", Name: "db"},
	}
	comps := func(ws ...v1alpha1.WorkloadStatus) []v1alpha1.ComponentStatus {
		return []v1alpha1.ComponentStatus{{Name: "app", Workloads: ws}}
	}
	for _, tc := range []struct {
		name string
		ws   []v1alpha1.WorkloadStatus
		want bool
	}{
		{"a watched workload not ready", []v1alpha1.WorkloadStatus{{Kind: "Deployment", Name: "web"}}, false},
		{"a Job running", []v1alpha1.WorkloadStatus{{Kind: "Job", Name: "seed"}}, true},
		{"a custom resource not ready", []v1alpha1.WorkloadStatus{{Kind: "Cluster", Name: "db"}}, true},
		{"a custom resource ready", []v1alpha1.WorkloadStatus{{Kind: "Cluster", Name: "db", Ready: true}}, false},
		{"a custom resource failed", []v1alpha1.WorkloadStatus{{Kind: "Cluster", Name: "db", Failed: true}}, false},
		{"a custom resource whose kind is no longer served", []v1alpha1.WorkloadStatus{{Kind: "Cluster", Name: "db", Message: "its kind is not served by the API server (its CustomResourceDefinition removed?)"}}, false},
	} {
		if got := judgedPending(inventory, comps(tc.ws...), time.Minute); got != tc.want {
			t.Errorf("%s: judgedPending = %t, want %t", tc.name, got, tc.want)
		}
	}
	// Not ready for longer than customFastFor: a custom resource is read at
	// the not-ready poll's pace; a Job still at the judged poll's.
	long := []v1alpha1.WorkloadStatus{{Kind: "Cluster", Name: "db"}}
	if judgedPending(inventory, comps(long...), customFastFor+time.Minute) {
		t.Error("a custom resource not ready for longer than customFastFor is still polled every few seconds")
	}
	if !judgedPending(inventory, comps(v1alpha1.WorkloadStatus{Kind: "Job", Name: "seed"}), customFastFor+time.Minute) {
		t.Error("a running Job is no longer polled soon after customFastFor")
	}
}
