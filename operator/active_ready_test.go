package operator_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// TestTheActiveInstanceIsRecordedWithReadyWhenItsTaskRunsNothingAfter pins
// who records a deployment's active instance, with the StyrminDeployment
// controller alone (no task controller: the tasks below only stand there).
// The controller records it in the status write that makes the deployment
// Ready at its sequence when the task of that sequence is at its last step
// and that step writes the instance; with a step after it (an upgrade's
// verification), or no such task, or a task already ended, it does not:
// the task records it when everything it runs succeeded; nor for a task
// that has claimed its failure (instance.ActiveClaims).
func TestTheActiveInstanceIsRecordedWithReadyWhenItsTaskRunsNothingAfter(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	// Copies of dev/web under other names, in namespaces of their own.
	renamed := func(in *resolver.Instance, name string) *resolver.Instance {
		return renamedInstance(t, in, name, "dev-"+name)
	}
	core := v1alpha1.TaskStep{Name: "upgradeDeploymentVersion", Mode: "core", Action: string(drivers.ActionUpgradeDeploymentVersion), State: v1alpha1.StepRunning}
	post := v1alpha1.TaskStep{Name: "waitReady", Mode: "post", Action: string(drivers.ActionWaitReady), State: v1alpha1.StepPending}
	// standing makes the task of in's sequence, as the sync would, for
	// the instance of digest, in phase with steps.
	standing := func(in *resolver.Instance, digest string, phase v1alpha1.TaskPhase, steps ...v1alpha1.TaskStep) *v1alpha1.StyrminTask {
		t.Helper()
		ns := in.Context.Deployment.Namespace
		id := instance.DeploymentID(in.ID)
		if err := instance.CreateNamespace(ctx, e.client, ns, id); err != nil {
			t.Fatal(err)
		}
		task := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.TaskName(in.ID.Name, in.Sequence)},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: in.Sequence,
				Lock:   v1alpha1.LockRef{Commit: in.SourceCommit, Path: in.ID.LockPath()},
				Target: &v1alpha1.TaskTarget{Kind: in.Kind, Digest: digest, Driver: v1alpha1.DriverRef{Name: in.Driver.Name, Version: in.Driver.Version}, AppVersion: in.AppVersion}},
		}
		if err := e.client.Create(ctx, task); err != nil {
			t.Fatal(err)
		}
		task.Status.Phase, task.Status.Steps = phase, steps
		if err := e.client.Status().Update(ctx, task); err != nil {
			t.Fatal(err)
		}
		return task
	}
	web := e.instance(t, "local", "dev", "web", 1)
	cases := []struct {
		name       string
		in         *resolver.Instance
		task       func(in *resolver.Instance)
		wantActive bool
	}{
		{"its task's last step writes it", web,
			func(in *resolver.Instance) { standing(in, in.Digest, v1alpha1.TaskRunning, core) }, true},
		{"its task runs a step after", e.instance(t, "local", "staging", "web", 1),
			func(in *resolver.Instance) { standing(in, in.Digest, v1alpha1.TaskRunning, core, post) }, false},
		{"its task ended", renamed(web, "ended"),
			func(in *resolver.Instance) { standing(in, in.Digest, v1alpha1.TaskFailed, core) }, false},
		{"its task has not started", renamed(web, "pending"),
			func(in *resolver.Instance) { standing(in, in.Digest, v1alpha1.TaskPending, core) }, false},
		{"its task applies another instance", renamed(web, "other"),
			func(in *resolver.Instance) { standing(in, web.Digest, v1alpha1.TaskRunning, core) }, false},
		{"no task", renamed(web, "alone"), func(*resolver.Instance) {}, false},
		// The task's deadline passed before the deployment was Ready, and
		// it ends Failed: the controller, whose cache may still show it
		// running (here it stays so), must not record it active.
		{"its task claimed its failure", renamed(web, "failing"), func(in *resolver.Instance) {
			task := standing(in, in.Digest, v1alpha1.TaskRunning, core)
			if recorded, err := e.claims.Fail(ctx, task.UID); err != nil || recorded {
				t.Fatalf("claiming the failure of a task nothing recorded: recorded %v, %v", recorded, err)
			}
		}, false},
	}
	for _, c := range cases {
		c.task(c.in)
		e.write(t, c.in.Context.Deployment.Namespace, c.in)
	}
	for _, c := range cases {
		// Active or not in the very write that made it Ready.
		sd := e.waitApplied(t, c.in.Context.Deployment.Namespace, 1)
		got := sd.Status.ActiveSequence == 1 && sd.Status.Active != nil
		if got != c.wantActive {
			t.Errorf("%s: active sequence %d (%+v) when Ready at 1; want recorded: %v", c.name, sd.Status.ActiveSequence, sd.Status.Active, c.wantActive)
			continue
		}
		if got && (sd.Status.Active.Task != "web-1" || sd.Status.Active.Digest != c.in.Digest || sd.Status.Active.Driver.Name != c.in.Driver.Name) {
			t.Errorf("%s: active %+v; want the instance's summary naming task web-1", c.name, sd.Status.Active)
		}
	}
	// A later reconcile (an annotation changed) records none either.
	for _, c := range cases {
		ns := c.in.Context.Deployment.Namespace
		var sd v1alpha1.StyrminDeployment
		sd.Namespace, sd.Name = ns, ns
		if err := e.client.Patch(ctx, &sd, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/touch":"1"}}}`))); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	for _, c := range cases {
		ns := c.in.Context.Deployment.Namespace
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			t.Fatal(err)
		}
		if got := sd.Status.ActiveSequence == 1; got != c.wantActive {
			t.Errorf("%s, after another reconcile: active sequence %d; want recorded: %v", c.name, sd.Status.ActiveSequence, c.wantActive)
		}
	}
}
