package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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
// (the retry) has run. Meanwhile the deployment is not Ready: the
// stopped workers read as 0 of 0 ready, and it showed green.
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
	condition := func(ctx context.Context, typ string) (*metav1.Condition, error) {
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			return nil, err
		}
		return apimeta.FindStatusCondition(sd.Status.Conditions, typ), nil
	}
	drifted := func(ctx context.Context) (*metav1.Condition, error) { return condition(ctx, v1alpha1.ConditionDrifted) }
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
	agenttest.WaitUntil(t, 10*driftInterval, "Ready to say the failed task holds the workers stopped", func(ctx context.Context) (bool, string, error) {
		c, err := condition(ctx, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonComponentsHeldStopped &&
			strings.Contains(c.Message, "web-2 failed after stopping web"), fmt.Sprintf("Ready: %+v", c), err
	})

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
	agenttest.WaitUntil(t, 10*driftInterval, "Ready again after the retry ran", func(ctx context.Context) (bool, string, error) {
		c, err := condition(ctx, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("Ready: %+v", c), err
	})
}

// TestDriftKeepsWhatAFailedTaskStoppedThroughABackupAndATaskThatRanNoStep:
// an upgrade stopped the workers, then its migration failed. The hold on
// them ended when any later task had a start time: a nightly backup that
// succeeded, a retry that failed at its first step (before its own
// stopComponents), a fix that failed its checks before any step (an
// ended task was given a start time), a backup's deletion. The drift
// check then started the old workers on half-migrated data. Now none of
// these ends the hold, and the condition still names the failed upgrade.
func TestDriftKeepsWhatAFailedTaskStoppedThroughABackupAndATaskThatRanNoStep(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	in := e.instance(t, "local", "dev", "web", 1)
	ns, name := in.Context.Deployment.Namespace, in.ID.Name
	e.write(t, ns, in)
	e.waitApplied(t, ns, 1)

	did := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: name}
	lock := v1alpha1.LockRef{Commit: "0123456789abcdef0123456789abcdef01234567", Path: in.ID.LockPath()}
	// Each task starts a minute after the one before: the order the
	// deployment's tasks ran in.
	base := time.Now().Add(-time.Hour)
	made := 0
	add := func(tk *v1alpha1.StyrminTask, phase v1alpha1.TaskPhase, steps ...v1alpha1.TaskStep) {
		t.Helper()
		if err := e.client.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		made++
		started, finished := metav1.NewTime(base.Add(time.Duration(made)*time.Minute)), metav1.NewTime(base.Add(time.Duration(made)*time.Minute+30*time.Second))
		tk.Status = v1alpha1.StyrminTaskStatus{Phase: phase, StartedAt: &started, FinishedAt: &finished, Steps: steps}
		if err := e.client.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	change := func(seq int64) *v1alpha1.StyrminTask {
		return &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.TaskName(name, seq)},
			Spec:       v1alpha1.StyrminTaskSpec{Deployment: did, Namespace: ns, Workflow: v1alpha1.WorkflowUpgrade, FromSequence: 1, ToSequence: seq, Lock: lock},
		}
	}
	operation := func(kind v1alpha1.OperationKind, wf v1alpha1.Workflow, backup string) *v1alpha1.StyrminTask {
		return &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + strings.ToLower(string(kind)) + "-" + backup},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: did, Namespace: ns, Workflow: wf, FromSequence: 1, ToSequence: 2, Lock: lock,
				Operation: &v1alpha1.TaskOperation{Kind: kind, Name: backup, BackupID: backup, Artifact: "s3://backups/local/dev/" + backup + "/web", Attempt: 1}},
		}
	}
	step := func(name, action string, state v1alpha1.StepState, components ...string) v1alpha1.TaskStep {
		return v1alpha1.TaskStep{Name: name, Mode: strings.Split(name, "/")[1], Action: action, Components: components, State: state}
	}
	upgradeSteps := func(maintenance, stop, migrate v1alpha1.StepState) []v1alpha1.TaskStep {
		return []v1alpha1.TaskStep{
			step("upgrade/pre/1:exec", "exec", maintenance),
			step("upgrade/pre/2:stopComponents", "stopComponents", stop, "web"),
			step("upgrade/pre/3:runJob", "runJob", migrate),
			step("upgrade/core", "apply", v1alpha1.StepSkipped),
			step("upgrade/post/1:startComponents", "startComponents", v1alpha1.StepSkipped, "web"),
		}
	}
	heldByTheUpgrade := func(ctx context.Context) (bool, string, error) {
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			return false, "", err
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted)
		return c != nil && c.Reason == v1alpha1.ReasonDriftCheckPaused && strings.Contains(c.Message, "web-2 failed after stopping web"),
			fmt.Sprintf("Drifted: %+v", c), nil
	}
	// stillStopped checks, a few drift intervals after what happened,
	// that the workers are still at zero and the failed upgrade still
	// named as what holds them.
	stillStopped := func(after string) {
		t.Helper()
		time.Sleep(3 * driftInterval)
		var d appsv1.Deployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			t.Fatal(err)
		}
		if *d.Spec.Replicas != 0 {
			t.Fatalf("replicas %d after %s: the drift check started the workers the failed upgrade stopped", *d.Spec.Replicas, after)
		}
		if ok, msg, err := heldByTheUpgrade(ctx); err != nil || !ok {
			t.Fatalf("after %s: %s %v; want the drift check paused, naming the failed upgrade", after, msg, err)
		}
	}

	// The upgrade stops web, then its migration fails.
	add(change(2), v1alpha1.TaskFailed, upgradeSteps(v1alpha1.StepSucceeded, v1alpha1.StepSucceeded, v1alpha1.StepFailed)...)
	agenttest.WaitUntil(t, 10*driftInterval, "the drift check to say the failed upgrade holds web", heldByTheUpgrade)
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}
	if _, err := e.clientset.AppsV1().Deployments(ns).UpdateScale(ctx, name, scale, metav1.UpdateOptions{FieldManager: "styrmin-actions"}); err != nil {
		t.Fatal(err)
	}
	stillStopped("the upgrade failed")

	add(operation(v1alpha1.OperationBackup, v1alpha1.WorkflowBackup, "nightly"), v1alpha1.TaskSucceeded,
		step("backup/core/1:runJob", "runJob", v1alpha1.StepSucceeded))
	stillStopped("a nightly backup succeeded")

	// The retry fails at its first step, before its own stopComponents.
	add(change(3), v1alpha1.TaskFailed, upgradeSteps(v1alpha1.StepFailed, v1alpha1.StepSkipped, v1alpha1.StepSkipped)...)
	stillStopped("a retry failed before its stopComponents step")

	// A fix fails its checks (a policy violation) before any step; the
	// agent used to give such a task a start time when it ended it.
	add(change(4), v1alpha1.TaskFailed, upgradeSteps(v1alpha1.StepSkipped, v1alpha1.StepSkipped, v1alpha1.StepSkipped)...)
	stillStopped("a fix failed its checks before any step")

	add(operation(v1alpha1.OperationDeleteBackup, v1alpha1.WorkflowDeleteBackup, "old"), v1alpha1.TaskSucceeded,
		step("deleteBackup/core/1:runJob", "runJob", v1alpha1.StepSucceeded))
	stillStopped("a backup's deletion succeeded")
}

// TestDriftDoesNotStartWorkersWhileTheJobOfADeletedTaskRuns: an upgrade
// stopped the workers and started its migration Job, then its task was
// deleted by hand. The drift check held only for the tasks that exist,
// so its next check started the old workers on the data the orphaned
// migration was still changing. Now it holds while a Job the agent made
// for a step of the deployment has not ended, names it, and corrects
// once it is gone.
func TestDriftDoesNotStartWorkersWhileTheJobOfADeletedTaskRuns(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	in := e.instance(t, "local", "dev", "web", 1)
	ns, name := in.Context.Deployment.Namespace, in.ID.Name
	e.write(t, ns, in)
	e.waitApplied(t, ns, 1)

	did := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: name}
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.TaskName(name, 2), Labels: did.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: did, Namespace: ns, Workflow: v1alpha1.WorkflowUpgrade, FromSequence: 1, ToSequence: 2,
			Lock: v1alpha1.LockRef{Commit: "0123456789abcdef0123456789abcdef01234567", Path: in.ID.LockPath()}},
	}
	if err := e.client.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	started := metav1.Now()
	tk.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, StartedAt: &started, CurrentStep: 1, Steps: []v1alpha1.TaskStep{
		{Name: "upgrade/pre/1:stopComponents", Hook: "upgrade", Mode: "pre", Action: "stopComponents", Components: []string{"web"}, State: v1alpha1.StepSucceeded},
		{Name: "upgrade/pre/2:runJob", Hook: "upgrade", Mode: "pre", Action: "runJob", State: v1alpha1.StepRunning},
	}}
	if err := e.client.Status().Update(ctx, tk); err != nil {
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
	// The step's migration Job, labelled as the agent labels it; its pod
	// waits for a node it never gets, so the Job does not end.
	labels := did.Labels()
	labels[v1alpha1.LabelTask] = tk.Name
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-migrate-2", Labels: labels},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeSelector: map[string]string{"styrmin.io/test": "no-such-node"},
				Containers: []corev1.Container{{Name: "migrate", Image: "migrate:1", Command: []string{"migrate"}}}},
		}},
	}
	if err := e.client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}

	// The running task is deleted by hand mid-migration.
	if err := e.client.Delete(ctx, tk); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*driftInterval, "the drift check to say the deleted task's Job holds it", func(ctx context.Context) (bool, string, error) {
		c, err := drifted(ctx)
		return c != nil && c.Reason == v1alpha1.ReasonDriftCheckPaused && strings.Contains(c.Message, "job "+job.Name+" of task "+tk.Name+" has not ended"),
			fmt.Sprintf("Drifted: %+v", c), err
	})
	time.Sleep(3 * driftInterval)
	var d appsv1.Deployment
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 0 {
		t.Fatalf("replicas %d while the migration Job of a deleted task runs: the drift check started the old workers on half-migrated data", *d.Spec.Replicas)
	}

	// The Job is deleted (it ended, or a person stopped it): what its
	// steps left is the drift check's again.
	if err := e.client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*driftInterval, "drift corrected once the Job is gone", func(ctx context.Context) (bool, string, error) {
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			return false, "", err
		}
		return *d.Spec.Replicas == 2, fmt.Sprintf("replicas %d", *d.Spec.Replicas), nil
	})
}
