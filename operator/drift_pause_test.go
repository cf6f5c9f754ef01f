package operator_test

import (
	"context"
	"fmt"
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
