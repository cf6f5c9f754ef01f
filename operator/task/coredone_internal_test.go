package task

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestTheCoreStepCountsItsChangeRecordedActiveAsDone pins when the core
// step is done: Ready at its sequence, or its change recorded active by
// its own task (the StyrminDeployment controller's record with Ready),
// even once a workload failed since; another task's record, or an older
// sequence's, does not count, and a failure stays a failure then.
func TestTheCoreStepCountsItsChangeRecordedActiveAsDone(t *testing.T) {
	t.Parallel()
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, ObservedGeneration: 2}
	}
	ready := []metav1.Condition{cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSucceeded)}
	failed := []metav1.Condition{cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonWorkloadFailed)}
	rolling := []metav1.Condition{cond(v1alpha1.ConditionReady, metav1.ConditionFalse, "Progressing")}
	active := func(seq int64, task string) *v1alpha1.ActiveInstance {
		return &v1alpha1.ActiveInstance{Sequence: seq, Task: task}
	}
	cases := []struct {
		name                    string
		conditions              []metav1.Condition
		active                  *v1alpha1.ActiveInstance
		wantReady, wantRecorded bool
		wantErr                 bool
	}{
		{"Ready, nothing recorded", ready, nil, true, false, false},
		{"Ready and recorded by the task", ready, active(3, "web-3"), true, true, false},
		{"recorded by the task, a workload failed since", failed, active(3, "web-3"), false, true, false},
		{"a workload failed, nothing recorded", failed, nil, false, false, true},
		{"a workload failed, recorded by another task", failed, active(3, "web-3-retry"), false, false, true},
		{"rolling out, an older sequence recorded", rolling, active(2, "web-2"), false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sd := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Generation: 2},
				Status: v1alpha1.StyrminDeploymentStatus{ObservedGeneration: 2, AppliedSequence: 3, Conditions: c.conditions, Active: c.active}}
			if c.active != nil {
				sd.Status.ActiveSequence = c.active.Sequence
			}
			r, rec, err := coreStepDone(sd, 3, "web-3")
			if r != c.wantReady || rec != c.wantRecorded || (err != nil) != c.wantErr {
				t.Errorf("ready %v recorded %v err %v; want %v %v error %v", r, rec, err, c.wantReady, c.wantRecorded, c.wantErr)
			}
		})
	}
}
