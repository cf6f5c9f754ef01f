package operator_test

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

const peerDeployment = "clusters/local/environments/dev/deployments/peer.cue"

// TestNewDeploymentWaitsForWhatItConnectsToAndAFailedOneHoldsItBack
// creates two deployments in one lock, app connecting to peer, whose
// pods fail: app's task waits, Pending with reason WaitingForOrder naming
// peer's failed task and how to go on, and runs no step; a fix commit
// makes peer Ready, and only then does app's create run and succeed.
func TestNewDeploymentWaitsForWhatItConnectsToAndAFailedOneHoldsItBack(t *testing.T) {
	t.Parallel()
	repo := faultyRepo(t)
	repo[appDeployment] = &fstest.MapFile{Data: []byte("driver: \"faulty\"\nappVersion: \"1.0.0\"\nconnects: [\"peer\"]\n"), Mode: 0o644}
	repo[peerDeployment] = &fstest.MapFile{Data: appConfig("1.0.0", `fault: "unready"`+"\nprogressDeadline: 1"), Mode: 0o644}
	e := startAgentEnvWith(t, repo)
	locked := e.lock(t)
	if locked["app"] != 1 || locked["peer"] != 1 {
		t.Fatalf("locked %v", locked)
	}
	e.startAgent(t)

	peer := e.waitTask(t, "dev-peer", "peer", 1)
	if peer.Status.Phase != v1alpha1.TaskFailed {
		t.Fatalf("peer-1: %s (%s), want Failed (its pods fail)", peer.Status.Phase, peer.Status.Message)
	}
	key := client.ObjectKey{Namespace: appNamespace, Name: v1alpha1.TaskName("app", 1)}
	agenttest.WaitUntil(t, agentWaitLimit, "app-1 to wait for the failed peer", func(ctx context.Context) (bool, string, error) {
		var task v1alpha1.StyrminTask
		if err := e.c.Get(ctx, key, &task); err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(task.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Reason != v1alpha1.ReasonWaitingForOrder {
			return false, string(task.Status.Phase), nil
		}
		if task.Status.Phase != v1alpha1.TaskPending {
			t.Fatalf("app-1 is %s while it waits for its peer", task.Status.Phase)
		}
		for _, want := range []string{"waiting for local/dev/peer@1", "its task peer-1 failed", "styrminctl retry local/dev/peer"} {
			if !strings.Contains(c.Message, want) {
				return false, c.Message, nil
			}
		}
		return true, "", nil
	})
	var waiting v1alpha1.StyrminTask
	if err := e.c.Get(context.Background(), key, &waiting); err != nil {
		t.Fatal(err)
	}
	for _, s := range waiting.Status.Steps {
		if s.StartedAt != nil {
			t.Errorf("app-1 started step %s while its peer had failed", s.Name)
		}
	}

	t.Log("a fix commit makes the peer Ready; then the app is created")
	fixed := e.change(t, "peer", "peer: no fault", map[string][]byte{peerDeployment: appConfig("1.0.0", "")})
	peerFixed := e.waitTask(t, "dev-peer", "peer", fixed)
	requireSucceeded(t, peerFixed)
	app := e.waitTask(t, appNamespace, "app", 1)
	requireSucceeded(t, app)
	peerDone := peerFixed.Status.Steps[len(peerFixed.Status.Steps)-1].FinishedAt
	if first := app.Status.Steps[0].StartedAt; first == nil || peerDone == nil || first.Before(peerDone) {
		t.Errorf("app-1 started at %v, before its peer's fix ended at %v", first, peerDone)
	}
}
