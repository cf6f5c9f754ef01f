package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestDriftIsNotCorrectedWhileATaskRuns pins that a running task's
// deliberate changes (workers scaled to zero before a migration) are not
// put back as drift, and that drift is corrected once the task ends.
func TestDriftIsNotCorrectedWhileATaskRuns(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	in := e.instance(t, "local", "dev", "web", 1)
	ns, name := in.Context.Deployment.Namespace, in.ID.Name
	e.write(t, ns, in)
	e.waitApplied(t, ns, 1)

	task := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-2"},
		Spec: v1alpha1.StyrminTaskSpec{
			Deployment: v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: name},
			Namespace:  ns, Workflow: v1alpha1.WorkflowUpgrade, FromSequence: 1, ToSequence: 2,
			Lock: v1alpha1.LockRef{Commit: "0123456789abcdef0123456789abcdef01234567", Path: in.ID.LockPath()},
		},
	}
	if err := e.client.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
	task.Status.Phase = v1alpha1.TaskRunning
	if err := e.client.Status().Update(ctx, task); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*driftInterval, "the drift check to pause for the running task", func(ctx context.Context) (bool, string, error) {
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			return false, "", err
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted)
		return c != nil && c.Reason == v1alpha1.ReasonDriftCheckPaused, fmt.Sprintf("Drifted: %+v", c), nil
	})
	// Scaled only now: a check between the scale and the controller's
	// cache seeing the task running would rightly put it back.
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}
	if _, err := e.clientset.AppsV1().Deployments(ns).UpdateScale(ctx, name, scale, metav1.UpdateOptions{FieldManager: "styrmin-actions"}); err != nil {
		t.Fatal(err)
	}
	// Several drift intervals later the workers are still stopped.
	time.Sleep(3 * driftInterval)
	var d appsv1.Deployment
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 0 {
		t.Fatalf("replicas %d while a task runs: the drift check undid the task's step", *d.Spec.Replicas)
	}

	task.Status.Phase = v1alpha1.TaskSucceeded
	if err := e.client.Status().Update(ctx, task); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*driftInterval, "drift corrected after the task ended", func(ctx context.Context) (bool, string, error) {
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			return false, "", err
		}
		return *d.Spec.Replicas == 2, fmt.Sprintf("replicas %d", *d.Spec.Replicas), nil
	})
}

// TestDriftDoesNotStartWhatAFailedTaskLeftStopped: an upgrade stopped the
// workers, then its migration failed. The drift check paused only while
// the task ran, so once it failed the old workers were started again on
// half-migrated data (and a failed restore's on half-restored data). Now
// the drift check waits while the last task to run failed with
// components stopped, says so, and corrects again once another task
// (the retry) has run.
func TestDriftDoesNotStartWhatAFailedTaskLeftStopped(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	in := e.instance(t, "local", "dev", "web", 1)
	ns, name := in.Context.Deployment.Namespace, in.ID.Name
	e.write(t, ns, in)
	e.waitApplied(t, ns, 1)

	did := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: name}
	taskAt := func(seq int64) *v1alpha1.StyrminTask {
		return &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.TaskName(name, seq)},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: did, Namespace: ns, Workflow: v1alpha1.WorkflowUpgrade, FromSequence: 1, ToSequence: seq,
				Lock: v1alpha1.LockRef{Commit: "0123456789abcdef0123456789abcdef01234567", Path: in.ID.LockPath()}},
		}
	}
	steps := func(stop, migrate v1alpha1.StepState) []v1alpha1.TaskStep {
		return []v1alpha1.TaskStep{
			{Name: "upgrade/pre/1:stopComponents", Hook: "upgrade", Mode: "pre", Action: "stopComponents", Components: []string{"web"}, State: stop},
			{Name: "upgrade/pre/2:runJob", Hook: "upgrade", Mode: "pre", Action: "runJob", State: migrate},
			{Name: "upgrade/core", Hook: "upgrade", Mode: "core", Action: "apply", State: v1alpha1.StepPending},
			{Name: "upgrade/post/1:startComponents", Hook: "upgrade", Mode: "post", Action: "startComponents", Components: []string{"web"}, State: v1alpha1.StepPending},
		}
	}
	failed := taskAt(2)
	if err := e.client.Create(ctx, failed); err != nil {
		t.Fatal(err)
	}
	started := metav1.Now()
	failed.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, StartedAt: &started, Steps: steps(v1alpha1.StepSucceeded, v1alpha1.StepRunning), CurrentStep: 1}
	if err := e.client.Status().Update(ctx, failed); err != nil {
		t.Fatal(err)
	}
	drifted := func(ctx context.Context) (*metav1.Condition, error) {
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			return nil, err
		}
		return apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted), nil
	}
	agenttest.WaitUntil(t, 10*driftInterval, "the drift check to pause for the running task", func(ctx context.Context) (bool, string, error) {
		c, err := drifted(ctx)
		return c != nil && c.Reason == v1alpha1.ReasonDriftCheckPaused, fmt.Sprintf("Drifted: %+v", c), err
	})
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}
	if _, err := e.clientset.AppsV1().Deployments(ns).UpdateScale(ctx, name, scale, metav1.UpdateOptions{FieldManager: "styrmin-actions"}); err != nil {
		t.Fatal(err)
	}
	// The migration fails: the task ends Failed, the workers stopped.
	finished := metav1.Now()
	failed.Status.Phase, failed.Status.FinishedAt, failed.Status.Steps = v1alpha1.TaskFailed, &finished, steps(v1alpha1.StepSucceeded, v1alpha1.StepFailed)
	if err := e.client.Status().Update(ctx, failed); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*driftInterval, "the drift check to say the failed task holds the workers", func(ctx context.Context) (bool, string, error) {
		c, err := drifted(ctx)
		return c != nil && c.Reason == v1alpha1.ReasonDriftCheckPaused && strings.Contains(c.Message, "web-2 failed after stopping web") && strings.Contains(c.Message, "styrminctl retry"),
			fmt.Sprintf("Drifted: %+v", c), err
	})
	time.Sleep(3 * driftInterval)
	var d appsv1.Deployment
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 0 {
		t.Fatalf("replicas %d after the upgrade that stopped them failed: the drift check started the old workers again", *d.Spec.Replicas)
	}

	// The retry runs and ends: what it leaves is the drift check's again.
	retry := taskAt(3)
	if err := e.client.Create(ctx, retry); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	retry.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, StartedAt: &now, FinishedAt: &now,
		Steps: []v1alpha1.TaskStep{{Name: "update/core", Mode: "core", Action: "apply", State: v1alpha1.StepSucceeded}}}
	if err := e.client.Status().Update(ctx, retry); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*driftInterval, "drift corrected after the retry ran", func(ctx context.Context) (bool, string, error) {
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			return false, "", err
		}
		return *d.Spec.Replicas == 2, fmt.Sprintf("replicas %d", *d.Spec.Replicas), nil
	})
}
