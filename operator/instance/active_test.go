package instance

import (
	"testing"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// TestActiveTrustsALegacyActiveSequenceOnlyWhenItsTaskSucceededOrIsPruned
// pins how a StyrminDeployment written by an agent before status.active
// (activeSequence set when the release was applied, whatever the post
// steps did) is read: its sequence is active only when its task succeeded
// or is no longer kept; a task of it that failed, runs or was superseded
// leaves the active instance to the newest succeeded task, so the retry
// of a failed upgrade runs the upgrade hooks again.
func TestActiveTrustsALegacyActiveSequenceOnlyWhenItsTaskSucceededOrIsPruned(t *testing.T) {
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "web"}
	v1 := v1alpha1.DriverRef{Name: "app", Version: "1.0.0"}
	v2 := v1alpha1.DriverRef{Name: "app", Version: "2.0.0"}
	// The legacy shape: active nil, activeSequence the spec's (5, driver 2.0).
	sd := &v1alpha1.StyrminDeployment{
		Spec: v1alpha1.StyrminDeploymentSpec{Deployment: id, Sequence: 5, Kind: resolver.KindInstance, Digest: "sha256:five",
			Driver: v2, AppVersion: "1.0"},
		Status: v1alpha1.StyrminDeploymentStatus{ActiveSequence: 5, AppliedSequence: 5},
	}
	task := func(seq int64, phase v1alpha1.TaskPhase, driver v1alpha1.DriverRef, digest string) v1alpha1.StyrminTask {
		return v1alpha1.StyrminTask{
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, ToSequence: seq,
				Target: &v1alpha1.TaskTarget{Kind: resolver.KindInstance, Digest: digest, Driver: driver, AppVersion: "1.0"}},
			Status: v1alpha1.StyrminTaskStatus{Phase: phase},
		}
	}
	four := task(4, v1alpha1.TaskSucceeded, v1, "sha256:four")
	// The retry of sequence 5: the same content under sequence 6.
	retry := &resolver.Instance{Kind: resolver.KindInstance, Sequence: 6, Digest: "sha256:five",
		Driver: resolver.DriverRef{Name: "app", Version: "2.0.0"}, AppVersion: "1.0"}
	cases := []struct {
		name     string
		tasks    []v1alpha1.StyrminTask
		wantSeq  int64
		workflow v1alpha1.Workflow
	}{
		{"its task succeeded", []v1alpha1.StyrminTask{four, task(5, v1alpha1.TaskSucceeded, v2, "sha256:five")}, 5, v1alpha1.WorkflowUpdate},
		{"its task succeeded, carrying no summary", []v1alpha1.StyrminTask{four, func() v1alpha1.StyrminTask {
			t := task(5, v1alpha1.TaskSucceeded, v2, "sha256:five")
			t.Spec.Target = nil
			return t
		}()}, 5, v1alpha1.WorkflowUpdate},
		{"its task pruned", []v1alpha1.StyrminTask{four}, 5, v1alpha1.WorkflowUpdate},
		{"its task and every other pruned", nil, 5, v1alpha1.WorkflowUpdate},
		{"its task failed in a post step", []v1alpha1.StyrminTask{four, task(5, v1alpha1.TaskFailed, v2, "sha256:five")}, 4, v1alpha1.WorkflowUpgrade},
		{"its task still runs", []v1alpha1.StyrminTask{four, task(5, v1alpha1.TaskRunning, v2, "sha256:five")}, 4, v1alpha1.WorkflowUpgrade},
		{"its task was superseded", []v1alpha1.StyrminTask{four, task(5, v1alpha1.TaskSuperseded, v2, "sha256:five")}, 4, v1alpha1.WorkflowUpgrade},
		{"its task failed and an operation carries its sequence", []v1alpha1.StyrminTask{four, task(5, v1alpha1.TaskFailed, v2, "sha256:five"), func() v1alpha1.StyrminTask {
			t := task(5, v1alpha1.TaskSucceeded, v2, "sha256:five")
			t.Spec.Target = nil
			t.Spec.Operation = &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup}
			return t
		}()}, 4, v1alpha1.WorkflowUpgrade},
		// Something runs, which instance is not known: an upgrade, never
		// a create's setup hooks over a deployment that holds data.
		{"its task failed with no succeeded one kept", []v1alpha1.StyrminTask{task(5, v1alpha1.TaskFailed, v2, "sha256:five")}, 0, v1alpha1.WorkflowUpgrade},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Active(sd, c.tasks)
			var got int64
			if a != nil {
				got = a.Sequence
			}
			if got != c.wantSeq {
				t.Fatalf("active sequence %d (%+v); want %d", got, a, c.wantSeq)
			}
			if w := SelectWorkflow(a, retry); w != c.workflow {
				t.Errorf("the retry's workflow is %s; want %s", w, c.workflow)
			}
		})
	}
}
