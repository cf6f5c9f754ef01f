package task

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// TestAReplicaFinishingAnOlderTaskNeverRecordsItActiveOverANewerOne pins
// the record of the active instance against a second writer: a replica
// that lost its lease while it finished change 5 (its copy of the
// StyrminDeployment read with change 4 active) wakes after the next
// leader ran change 5 again and change 6 since. Its record finds the
// copy older than the StyrminDeployment and reads it again, and change 6
// stays active; a merge patch without the copy's resourceVersion wrote 5
// over it, and change 7's workflow would have been chosen against 5.
func TestAReplicaFinishingAnOlderTaskNeverRecordsItActiveOverANewerOne(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, "{}")
	in4, in5, in6 := jobsInstance(t, d, ns, 4, "1.0.0"), jobsInstance(t, d, ns, 5, "1.1.0"), jobsInstance(t, d, ns, 6, "1.2.0")

	// Change 4 written and recorded active: what the old leader read.
	if _, err := instance.WriteInstance(ctx, cl, "", in4); err != nil {
		t.Fatal(err)
	}
	setActive(t, cl, ns, in4)
	var stale v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, instance.Key(ns), &stale); err != nil {
		t.Fatal(err)
	}
	// The next leader runs changes 5 and 6 to their end.
	for _, in := range []*resolver.Instance{in5, in6} {
		if _, err := instance.WriteInstance(ctx, cl, "", in); err != nil {
			t.Fatal(err)
		}
		setActive(t, cl, ns, in)
	}

	r := driverReconciler(t, cl, d)
	task := &v1alpha1.StyrminTask{}
	task.Name, task.Namespace = v1alpha1.TaskName("jobs", 5), ns
	task.Spec = v1alpha1.StyrminTaskSpec{Deployment: instance.DeploymentID(in5.ID), Namespace: ns, ToSequence: 5, FromSequence: 4}
	run := &taskRun{task: task, log: logr.Discard(), instance: in5, sd: &stale, sdRead: true}
	if err := r.recordActive(ctx, run); err != nil {
		t.Fatalf("recordActive: %v", err)
	}

	var sd v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, instance.Key(ns), &sd); err != nil {
		t.Fatal(err)
	}
	if sd.Status.ActiveSequence != 6 || sd.Status.Active == nil || sd.Status.Active.Sequence != 6 {
		t.Fatalf("active sequence %d (active %+v), want 6: an older change was recorded active over a newer one", sd.Status.ActiveSequence, sd.Status.Active)
	}
}

// setActive records in as the active instance of ns's StyrminDeployment,
// as the task that ran it does.
func setActive(t *testing.T, cl client.Client, ns string, in *resolver.Instance) {
	t.Helper()
	ctx := context.Background()
	var sd v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, instance.Key(ns), &sd); err != nil {
		t.Fatal(err)
	}
	sd.Status.Active = instance.Summary(in, v1alpha1.TaskName(in.ID.Name, in.Sequence))
	sd.Status.ActiveSequence = in.Sequence
	if err := cl.Status().Update(ctx, &sd); err != nil {
		t.Fatal(err)
	}
}
