package task

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

func TestTrimFinishedDropsOnlyTheStepsOfFinishedLockTasks(t *testing.T) {
	task := func(phase v1alpha1.TaskPhase, op *v1alpha1.TaskOperation) *v1alpha1.StyrminTask {
		return &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: "web-3", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "styrmin-agent"}}},
			Spec:       v1alpha1.StyrminTaskSpec{ToSequence: 3, Operation: op, Target: &v1alpha1.TaskTarget{Digest: "sha256:1"}},
			Status: v1alpha1.StyrminTaskStatus{
				Phase: phase, Message: "why", CurrentStep: 1,
				Steps:      []v1alpha1.TaskStep{{Name: "update/core/1:apply", State: v1alpha1.StepSucceeded, Output: "styrmin-backup-size=12"}},
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue}},
			},
		}
	}
	backup := &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup}
	for _, tc := range []struct {
		name      string
		task      *v1alpha1.StyrminTask
		keepSteps bool
	}{
		{"succeeded", task(v1alpha1.TaskSucceeded, nil), false},
		{"failed", task(v1alpha1.TaskFailed, nil), false},
		{"superseded", task(v1alpha1.TaskSuperseded, nil), false},
		{"running", task(v1alpha1.TaskRunning, nil), true},
		{"pending", task(v1alpha1.TaskPending, nil), true},
		{"new", task("", nil), true},
		{"succeeded backup", task(v1alpha1.TaskSucceeded, backup), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.task.DeepCopy()
			want.ManagedFields = nil
			if !tc.keepSteps {
				want.Status.Steps, want.Status.Conditions = nil, nil
			}
			got, err := TrimFinished(tc.task)
			if err != nil {
				t.Fatal(err)
			}
			gt := got.(*v1alpha1.StyrminTask)
			if gt.Spec.Target.Digest != "sha256:1" || gt.Status.Phase != want.Status.Phase || gt.Status.Message != "why" || gt.Status.CurrentStep != 1 {
				t.Errorf("the spec, phase, message or current step changed: %+v", gt)
			}
			if len(gt.ManagedFields) != 0 {
				t.Error("managedFields kept")
			}
			if (len(gt.Status.Steps) > 0) != tc.keepSteps || (len(gt.Status.Conditions) > 0) != tc.keepSteps {
				t.Errorf("steps %d, conditions %d: want them kept %v", len(gt.Status.Steps), len(gt.Status.Conditions), tc.keepSteps)
			}
			// A deletion whose last state is unknown wraps the task.
			d, err := TrimFinished(cache.DeletedFinalStateUnknown{Key: "ns/web-3", Obj: tc.task.DeepCopy()})
			if err != nil {
				t.Fatal(err)
			}
			dt := d.(cache.DeletedFinalStateUnknown).Obj.(*v1alpha1.StyrminTask)
			if (len(dt.Status.Steps) > 0) != tc.keepSteps {
				t.Errorf("in a final state unknown: steps %d, want kept %v", len(dt.Status.Steps), tc.keepSteps)
			}
		})
	}
	if got, err := TrimFinished(&v1alpha1.StyrminDeployment{}); err != nil || got == nil {
		t.Errorf("another kind: %v, %v", got, err)
	}
}
