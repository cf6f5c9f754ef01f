package operation_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/task"
)

// TestARestoreOfADeploymentAnotherRestoreRunsOnIsRefusedNamingIt pins
// two restores of one environment asked at once (two engineers, a CI job
// run twice): both ran, one after the other on each deployment in the
// order their tasks were placed, and one whose task on a deployment was
// made late (its start retried) went after a change locked meanwhile, so
// after the other restore there only: the deployments were left holding
// different backups' data, both restores Succeeded. The second to start
// is refused, naming the first, with no task made; a restore of a
// deployment the first has done with starts.
func TestARestoreOfADeploymentAnotherRestoreRunsOnIsRefusedNamingIt(t *testing.T) {
	t.Parallel()
	ctx, cl, r, _ := restoring(t)
	started := metav1.Now()
	hub := v1alpha1.OperationDeployment{Name: "hub", Namespace: "data-hub", Task: task.OperationTaskName("hub", v1alpha1.OperationRestore, "first", 1),
		Phase: v1alpha1.OperationRunning, Artifact: "s3://backups/local/data/monday/hub", Sequence: 3, Attempt: 1,
		Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}, StartedAt: &started}
	first := newRestore(ctx, t, cl, "first", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationRunning, Environment: "data",
		StartedAt: &started, Deployments: []v1alpha1.OperationDeployment{hub}})

	second := newRestore(ctx, t, cl, "second", "monday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, r, second)
	if second.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(second.Status.Message, "refused: environment local/data, deployment hub: StyrminRestore first restores it and has not ended") {
		t.Fatalf("a restore of hub while restore first runs there: %s %q; want it refused naming first", second.Status.Phase, second.Status.Message)
	}
	wantTasks(ctx, t, cl, second, "a restore refused while another runs")

	// Once first is done with hub, a restore of hub starts.
	writeStatus(ctx, t, cl, first, func(rs *v1alpha1.StyrminRestore) {
		rs.Status.Deployments[0].Phase, rs.Status.Deployments[0].FinishedAt = v1alpha1.OperationSucceeded, &started
	})
	third := newRestore(ctx, t, cl, "third", "monday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, r, third)
	if third.Status.Phase != v1alpha1.OperationRunning {
		t.Fatalf("a restore of hub once the other ended there: %s %q; want it running", third.Status.Phase, third.Status.Message)
	}
	wantTasks(ctx, t, cl, third, "a restore once the other ended there", "data-hub/"+task.OperationTaskName("hub", v1alpha1.OperationRestore, "third", 1))
}
