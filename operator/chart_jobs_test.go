package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
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
//     by hand) is not made again, by the drift check nor by a change that
//     leaves it as it was, which would run its work a second time, and the
//     deployment stays Ready;
//   - a Job its TTL deletes before the agent saw it finish is judged by
//     the Job controller's events, not left "not found" for ever.
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
	done := seedUID()
	if done == first {
		t.Fatalf("the fix kept the failed Job %s", first)
	}

	t.Log("a finished Job deleted afterwards (as by its TTL) is not made again by the drift check")
	deleteSeed(t, e, done)
	requireSeedGone(t, e, 6*time.Second) // three drift intervals
	requireSeedReadyAndFinished(t, e)

	t.Log("nor by a change that leaves it as it was")
	same := e.change(t, "app", "app: two workers", map[string][]byte{appDeployment: appConfig("1.0.0", "seedJob: \"ok\"\nworkers: 2")})
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", same))
	requireSeedGone(t, e, 0)
	requireSeedReadyAndFinished(t, e)

	t.Log("an upgrade that changes it runs it again; deleted at once (TTL 0), its end is read from its events")
	upgraded := e.change(t, "app", "app: 1.1.0", map[string][]byte{appDeployment: appConfig("1.1.0", "seedJob: \"ok\"\nseedJobTTL: 0")})
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", upgraded))
	var events corev1.EventList
	if err := e.c.List(ctx, &events, client.InNamespace(appNamespace), client.MatchingFields{"involvedObject.name": "app-seed", "reason": "SuccessfulCreate"}); err != nil {
		t.Fatal(err)
	}
	if len(events.Items) < 3 {
		t.Errorf("%d pods made for the seed Job over the test, want one each by the first change, the retry, the fix and the upgrade", len(events.Items))
	}
	requireSeedGone(t, e, 6*time.Second)
	requireSeedReadyAndFinished(t, e)
}

// deleteSeed deletes the seed Job uid, as its TTL or a person would.
func deleteSeed(t *testing.T, e *agentEnv, uid types.UID) {
	t.Helper()
	policy := metav1.DeletePropagationBackground
	if err := e.c.Delete(context.Background(), &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "app-seed", UID: uid}},
		&client.DeleteOptions{PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		t.Fatal(err)
	}
}

// requireSeedGone checks that no seed Job exists now and for the next
// while: made again, its work would run twice.
func requireSeedGone(t *testing.T, e *agentEnv, while time.Duration) {
	t.Helper()
	deadline := time.Now().Add(while)
	for {
		var job batchv1.Job
		err := e.c.Get(context.Background(), client.ObjectKey{Namespace: appNamespace, Name: "app-seed"}, &job)
		if err == nil && job.DeletionTimestamp.IsZero() {
			t.Fatalf("the seed Job was made again (%s): its work would run twice", job.UID)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// requireSeedReadyAndFinished checks that the deployment is Ready with the
// seed Job's status finished.
func requireSeedReadyAndFinished(t *testing.T, e *agentEnv) {
	t.Helper()
	agenttest.WaitUntil(t, 30*time.Second, "the deployment Ready with the seed Job finished", func(ctx context.Context) (bool, string, error) {
		sd := e.deployment(t, appNamespace)
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		w, err := jobStatus(sd, "app-seed")
		if err != nil {
			return false, err.Error(), nil
		}
		ok := c != nil && c.Status == metav1.ConditionTrue && w.Ready && strings.HasPrefix(w.Message, "finished")
		return ok, fmt.Sprintf("Ready %+v, the Job %+v", c, w), nil
	})
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
