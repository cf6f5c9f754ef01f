package task

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/outcome"
)

// TestTheBackupBeforeAnUpgradeIsNotRecordedOverAStyrminBackupOfAnotherTask
// pins that an upgrade's backup, whose name is predictable, is recorded
// only as a StyrminBackup of its own. One made beforehand with its name
// (by hand, for another environment) was taken over: its status then held
// this deployment's artefact under that environment's spec (its deletion
// ran that environment's hook on it); finished, this backup went
// unrecorded. The step fails, naming the StyrminBackup, and leaves it as
// it was; the task's own record, made again after a restart, is kept.
func TestTheBackupBeforeAnUpgradeIsNotRecordedOverAStyrminBackupOfAnotherTask(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]`)
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), AgentNamespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in := jobsInstance(t, d, ns, 4, "1.0.0")
	in.Context.Environment.BackupLocation = "s3://backups/local/dev"
	tk := createJobsTask(t, cl, in, v1alpha1.WorkflowUpgrade)
	id := InlineBackupID(in.ID, in.Sequence)
	tk.Status.Steps = []v1alpha1.TaskStep{{Name: "upgrade/pre/1:backup/backup/core/1:runJob", Action: "runJob", State: v1alpha1.StepRunning,
		Args: map[string]string{argOperation: "backup", argBackupID: id, argArtifact: "s3://backups/local/dev/" + id + "/jobs"}}}
	run := &taskRun{task: tk, log: logr.Discard(), instance: in}

	other := &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: map[string]string{v1alpha1.LabelEnvironment: "team-a"}},
		Spec:       v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "team-a", Deployments: []string{"jobs"}},
	}
	if err := cl.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	err = r.recordInlineBackup(ctx, run, 0)
	if !outcome.IsStalled(err) || !strings.Contains(err.Error(), "StyrminBackup "+ns+"/"+id+" exists and is not this task's") {
		t.Fatalf("recording over another's StyrminBackup: %v; want the step failed naming it", err)
	}
	var got v1alpha1.StyrminBackup
	if err := cl.Get(ctx, client.ObjectKeyFromObject(other), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != "" || len(got.Status.Deployments) > 0 {
		t.Fatalf("the other StyrminBackup was written: %+v", got.Status)
	}

	// The task's own record (made before a restart) is completed.
	if err := cl.Delete(ctx, &got); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := r.recordInlineBackup(ctx, run, 0); err != nil {
			t.Fatalf("recording the task's own backup: %v", err)
		}
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(other), &got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[LabelTask] != tk.Name || got.Status.Phase != v1alpha1.OperationSucceeded || len(got.Status.Deployments) != 1 ||
		got.Status.Deployments[0].Artifact != "s3://backups/local/dev/"+id+"/jobs" {
		t.Errorf("the task's backup record: labels %v, %s %+v; want it Succeeded with the deployment's artefact", got.Labels, got.Status.Phase, got.Status.Deployments)
	}
}
