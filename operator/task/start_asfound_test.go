package task

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestABackupsStartLeavesAWorkloadItFoundStoppedAtZero: a failed upgrade
// leaves its workers stopped on half-migrated data, held so. A backup
// whose hook stops and starts them found them at zero and recorded zero;
// its start took zero as "the chart's replicas", as a change does, and
// started the old workers on that data. A backup (or a backup's
// deletion) leaves what it found: zero stays zero. A change's start
// still takes the chart's.
func TestABackupsStartLeavesAWorkloadItFoundStoppedAtZero(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	d := maintenanceDriver(t)
	workers(t, cl, ns, 0, 0)
	in := jobsInstance(t, d, ns, 1, "1.0.0")
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), StepTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	replicas := func() int32 {
		t.Helper()
		var dep appsv1.Deployment
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "jobs"}, &dep); err != nil {
			t.Fatal(err)
		}
		return *dep.Spec.Replicas
	}
	for _, tc := range []struct {
		name   string
		op     *v1alpha1.TaskOperation
		step   string
		output string
		want   int32
	}{
		{"a backup", &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: "nightly", BackupID: "b1", Artifact: "pvc://backups/b1"},
			"backup/post/1:startComponents", "as the backup found it", 0},
		{"a backup's deletion", &v1alpha1.TaskOperation{Kind: v1alpha1.OperationDeleteBackup, Name: "nightly", BackupID: "b1", Artifact: "pvc://backups/b1"},
			"deleteBackup/post/1:startComponents", "as the backup found it", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := &v1alpha1.StyrminTask{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs-op", UID: types.UID("op-" + tc.step)},
				Spec:       v1alpha1.StyrminTaskSpec{Namespace: ns, Workflow: v1alpha1.WorkflowUpdate, ToSequence: 1, Operation: tc.op},
				Status: v1alpha1.StyrminTaskStatus{Steps: []v1alpha1.TaskStep{
					{Name: strings.Replace(tc.step, "post/1:startComponents", "pre/1:stopComponents", 1), State: v1alpha1.StepSucceeded, Recorded: map[string]string{"Deployment/jobs": "0"}}}},
			}
			run := &taskRun{task: tk, instance: in, driver: d, log: logr.Discard()}
			out, err := r.startComponents(ctx, run, tc.step, drivers.Step{Action: "startComponents", Components: []string{"app"}})
			if err != nil {
				t.Fatal(err)
			}
			if !out.done || !strings.Contains(out.output, tc.output) {
				t.Fatalf("the start: done %v, output %q; want done, %q", out.done, out.output, tc.output)
			}
			if got := replicas(); got != tc.want {
				t.Fatalf("the workload after %s's start: %d replicas, want %d", tc.name, got, tc.want)
			}
		})
	}
	// A change's start takes zero as the chart's replicas.
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs-2", UID: "change"},
		Spec:       v1alpha1.StyrminTaskSpec{Namespace: ns, Workflow: v1alpha1.WorkflowUpgrade, ToSequence: 2},
		Status: v1alpha1.StyrminTaskStatus{Steps: []v1alpha1.TaskStep{
			{Name: "upgrade/pre/1:stopComponents", State: v1alpha1.StepSucceeded, Recorded: map[string]string{"Deployment/jobs": "0"}}}},
	}
	run := &taskRun{task: tk, instance: in, driver: d, log: logr.Discard()}
	if _, err := r.startComponents(ctx, run, "upgrade/post/1:startComponents", drivers.Step{Action: "startComponents", Components: []string{"app"}}); err != nil {
		t.Fatal(err)
	}
	if got := replicas(); got == 0 {
		t.Fatal("a change's start left the workload at zero; want the chart's replicas")
	}
}

// TestAChangesStartTakesTheNewChartsReplicas: the apply of a change keeps
// the workers its stop stopped at zero, and its start scaled them to the
// count the stop recorded, the old chart's: the drift check put the new
// chart's back after the task. A change's start now takes the chart's
// count; a backup's and a restore's keep the recorded one (they leave
// the deployment as they found it).
func TestAChangesStartTakesTheNewChartsReplicas(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	d := maintenanceDriver(t) // its chart: replicas 1
	workers(t, cl, ns, 0, 0)
	in := jobsInstance(t, d, ns, 1, "1.0.0")
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), StepTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var dep appsv1.Deployment
	key := client.ObjectKey{Namespace: ns, Name: "jobs"}
	for _, tc := range []struct {
		name   string
		op     *v1alpha1.TaskOperation
		output string
		want   int32
	}{
		{"an upgrade", nil, "at 1 replicas (from the chart)", 1},
		{"a backup", &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: "nightly", BackupID: "b1", Artifact: "pvc://backups/b1"}, "at 3 replicas (recorded)", 3},
		{"a restore", &v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: "r1", BackupID: "b1", Artifact: "pvc://backups/b1"}, "at 3 replicas (recorded)", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := cl.Get(ctx, key, &dep); err != nil {
				t.Fatal(err)
			}
			if err := cl.Patch(ctx, &dep, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))); err != nil {
				t.Fatal(err)
			}
			tk := &v1alpha1.StyrminTask{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs-2", UID: types.UID("start-" + tc.name)},
				Spec:       v1alpha1.StyrminTaskSpec{Namespace: ns, Workflow: v1alpha1.WorkflowUpgrade, ToSequence: 2, Operation: tc.op},
				Status: v1alpha1.StyrminTaskStatus{Steps: []v1alpha1.TaskStep{
					{Name: "upgrade/pre/1:stopComponents", State: v1alpha1.StepSucceeded, Recorded: map[string]string{"Deployment/jobs": "3"}}}},
			}
			run := &taskRun{task: tk, instance: in, driver: d, log: logr.Discard()}
			step := drivers.Step{Action: "startComponents", Components: []string{"app"}}
			var out actionOutcome
			for i := 0; i < 50 && !out.done; i++ {
				if out, err = r.startComponents(ctx, run, "upgrade/post/1:startComponents", step); err != nil {
					t.Fatal(err)
				}
				if !out.done {
					time.Sleep(100 * time.Millisecond)
				}
			}
			if !out.done || !strings.Contains(out.output, tc.output) {
				t.Fatalf("the start: done %v, output %q; want done, %q", out.done, out.output, tc.output)
			}
			if err := cl.Get(ctx, key, &dep); err != nil {
				t.Fatal(err)
			}
			if *dep.Spec.Replicas != tc.want {
				t.Fatalf("after %s's start: %d replicas, want %d", tc.name, *dep.Spec.Replicas, tc.want)
			}
		})
	}
}
