package task

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
)

func TestTrimFinishedDropsOnlyTheStepsOfFinishedLockTasks(t *testing.T) {
	t.Parallel()
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

// TestTheTaskCacheKeepsWhatTheHoldOnStoppedComponentsReads: the
// StyrminDeployment controller reads from the cache which components
// failed tasks left stopped (instance.LeftStopped), to keep them from
// drift correction and Ready. The cache kept no step of a finished
// change, so from it no failed task held anything. A task trimmed for
// the cache now gives the same answer as the task itself, and keeps of
// its steps only what that answer reads.
func TestTheTaskCacheKeepsWhatTheHoldOnStoppedComponentsReads(t *testing.T) {
	t.Parallel()
	at := func(minute int) *metav1.Time {
		tm := metav1.NewTime(time.Date(2026, 12, 6, 12, minute, 0, 0, time.UTC))
		return &tm
	}
	step := func(action string, state v1alpha1.StepState, components ...string) v1alpha1.TaskStep {
		st := v1alpha1.TaskStep{Name: "upgrade/pre/1:" + action, Mode: "pre", Action: action, Components: components, State: state,
			Args: map[string]string{"command": "migrate"}, Message: "why"}
		if state != v1alpha1.StepSkipped {
			st.Output, st.Attempts, st.StartedAt, st.FinishedAt = "a long output", 1, at(1), at(2)
			st.Recorded = map[string]string{"Deployment/web": "2"}
		}
		return st
	}
	task := func(name string, seq int64, minute int, phase v1alpha1.TaskPhase, steps ...v1alpha1.TaskStep) v1alpha1.StyrminTask {
		return v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:   v1alpha1.StyrminTaskSpec{ToSequence: seq},
			Status: v1alpha1.StyrminTaskStatus{Phase: phase, StartedAt: at(minute), CurrentStep: int32(len(steps) - 1), Steps: steps}}
	}
	upgrade := task("web-2", 2, 10, v1alpha1.TaskFailed, step("exec", v1alpha1.StepSucceeded), step("stopComponents", v1alpha1.StepSucceeded, "web", "worker"),
		step("startComponents", v1alpha1.StepSucceeded, "web"), step("runJob", v1alpha1.StepFailed), step("startComponents", v1alpha1.StepSkipped, "worker"))
	for _, tc := range []struct {
		name      string
		tasks     []v1alpha1.StyrminTask
		keepSteps []bool
	}{
		{"a failed upgrade", []v1alpha1.StyrminTask{upgrade}, []bool{true}},
		{"then a retry that failed before its stop", []v1alpha1.StyrminTask{upgrade,
			task("web-3", 3, 20, v1alpha1.TaskFailed, step("exec", v1alpha1.StepFailed), step("stopComponents", v1alpha1.StepSkipped, "worker"))}, []bool{true, false}},
		{"then a superseded change that started them", []v1alpha1.StyrminTask{upgrade,
			task("web-3", 3, 20, v1alpha1.TaskSuperseded, step("stopComponents", v1alpha1.StepSucceeded, "worker"), step("startComponents", v1alpha1.StepSucceeded, "worker"))}, []bool{true, true}},
		{"then a retry that succeeded", []v1alpha1.StyrminTask{upgrade,
			task("web-3", 3, 20, v1alpha1.TaskSucceeded, step("stopComponents", v1alpha1.StepSucceeded, "worker"), step("startComponents", v1alpha1.StepSucceeded, "worker"))}, []bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached := make([]v1alpha1.StyrminTask, len(tc.tasks))
			for i := range tc.tasks {
				got, err := TrimFinished(tc.tasks[i].DeepCopy())
				if err != nil {
					t.Fatal(err)
				}
				cached[i] = *got.(*v1alpha1.StyrminTask)
				if kept := len(cached[i].Status.Steps) > 0; kept != tc.keepSteps[i] {
					t.Errorf("task %s: steps kept %v, want %v", cached[i].Name, kept, tc.keepSteps[i])
				}
				if kept := cached[i].Status.Steps; len(kept) > 0 && len(kept) != len(tc.tasks[i].Status.Steps) {
					t.Errorf("task %s: %d steps kept of %d: currentStep would point at another", cached[i].Name, len(kept), len(tc.tasks[i].Status.Steps))
				}
				for _, st := range cached[i].Status.Steps {
					if st.Output != "" || st.Message != "" || st.Args != nil || st.Recorded != nil || st.FinishedAt != nil {
						t.Errorf("task %s step %s kept more than the hold reads: %+v", cached[i].Name, st.Name, st)
					}
				}
			}
			if want, got := describeStopped(instance.LeftStopped(tc.tasks)), describeStopped(instance.LeftStopped(cached)); got != want {
				t.Errorf("from the cache: left stopped %q, from the tasks %q", got, want)
			}
		})
	}
}

func describeStopped(held []instance.StoppedBy) string {
	var out []string
	for _, h := range held {
		out = append(out, h.Task.Name+": "+strings.Join(h.Components, " "))
	}
	return strings.Join(out, "; ")
}
