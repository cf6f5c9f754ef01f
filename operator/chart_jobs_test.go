package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAChartJobRunsOncePerRevisionAndAgainOnARetryOrAFix pins how a Job
// of the chart (not a driver step) lives with its releases:
//
//   - a Job that failed runs again on a retry (the same instance locked
//     again): applied unchanged, a failed Job stays failed, so the retry
//     failed at once without running it;
//   - a fix of the failed Job, and an upgrade that changes a finished
//     Job's template, replace it (the API server refuses to change a
//     Job's template in place, and the deployment stalled with "field is
//     immutable");
//   - a finished Job deleted afterwards (its ttlSecondsAfterFinished, or
//     by hand) is not made again by the drift check, which would run its
//     work a second time, and the deployment stays Ready.
func TestAChartJobRunsOncePerRevisionAndAgainOnARetryOrAFix(t *testing.T) {
	// Not parallel; see TestRolloutPastItsProgressDeadlineFailsAtOnce.
	e := startFaultyEnv(t, "--drift-interval=2s")
	ctx := context.Background()
	seedKey := client.ObjectKey{Namespace: appNamespace, Name: "app-seed"}
	seedUID := func() types.UID {
		t.Helper()
		var job batchv1.Job
		if err := e.c.Get(ctx, seedKey, &job); err != nil {
			t.Fatalf("the seed Job: %v", err)
		}
		return job.UID
	}

	failed := e.change(t, "app", "app: a seed job that fails", map[string][]byte{appDeployment: appConfig("1.0.0", `seedJob: "fail"`)})
	if ft := e.waitTask(t, appNamespace, "app", failed); ft.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(ft.Status.Message, "Job/app-seed") {
		t.Fatalf("app-%d: %s (%s), want Failed naming the Job", failed, ft.Status.Phase, ft.Status.Message)
	}
	first := seedUID()

	t.Log("a retry runs the failed Job again")
	e.ctl(t, "retry", "local/dev/app", "--push")
	rt := e.waitTask(t, appNamespace, "app", failed+1)
	if rt.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(rt.Status.Message, "Job/app-seed") {
		t.Fatalf("app-%d (the retry): %s (%s), want Failed again at the Job, which fails again", failed+1, rt.Status.Phase, rt.Status.Message)
	}
	if again := seedUID(); again == first {
		t.Fatalf("the retry did not run the Job again: the same Job %s, failed before the retry", first)
	}

	t.Log("a fix of the failed Job replaces it")
	fixed := e.change(t, "app", "app: a seed job that works", map[string][]byte{appDeployment: appConfig("1.0.0", `seedJob: "ok"`)})
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", fixed))
	ran := seedUID()

	t.Log("an upgrade that changes the finished Job's image replaces it")
	upgraded := e.change(t, "app", "app: 1.1.0", map[string][]byte{appDeployment: appConfig("1.1.0", `seedJob: "ok"`)})
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", upgraded))
	done := seedUID()
	if done == ran {
		t.Fatalf("the upgrade kept the Job %s of the version before", ran)
	}

	t.Log("a finished Job deleted afterwards is not made again")
	policy := metav1.DeletePropagationBackground
	if err := e.c.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "app-seed", UID: done}},
		&client.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		t.Fatal(err)
	}
	// Three drift intervals of 2 s, and the judged objects' poll.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var job batchv1.Job
		err := e.c.Get(ctx, seedKey, &job)
		if err == nil && job.UID != done {
			t.Fatalf("the drift check made the finished Job again (%s): its work would run twice", job.UID)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	sd := e.deployment(t, appNamespace)
	if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready after the finished Job was deleted: %+v, want True", c)
	}
	if w, err := jobStatus(sd, "app-seed"); err != nil || !w.Ready {
		t.Fatalf("the deleted Job's status: %+v (%v), want ready (finished)", w, err)
	}
}

// jobStatus is the status the StyrminDeployment holds of a Job.
func jobStatus(sd *v1alpha1.StyrminDeployment, name string) (v1alpha1.WorkloadStatus, error) {
	for _, c := range sd.Status.Components {
		for _, w := range c.Workloads {
			if w.Kind == "Job" && w.Name == name {
				return w, nil
			}
		}
	}
	return v1alpha1.WorkloadStatus{}, fmt.Errorf("no status of Job %s in %+v", name, sd.Status.Components)
}
