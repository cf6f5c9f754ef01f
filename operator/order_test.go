package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestADeploymentWaitingForAFailedPeerCanBeDeleted: app's create waits
// for peer, which failed; deleting app (its tombstone locked) waited behind
// that create for ever, and a fix of peer would have created app only to
// delete it. The waiting create ends Superseded by the deletion, which
// runs, its reason SupersededByDeletion (what the UI reads).
func TestADeploymentWaitingForAFailedPeerCanBeDeleted(t *testing.T) {
	t.Parallel()
	repo := faultyRepo(t)
	repo[appDeployment] = &fstest.MapFile{Data: []byte("driver: \"faulty\"\nappVersion: \"1.0.0\"\nconnects: [\"peer\"]\n"), Mode: 0o644}
	repo[peerDeployment] = &fstest.MapFile{Data: appConfig("1.0.0", `fault: "unready"`+"\nprogressDeadline: 1"), Mode: 0o644}
	e := startAgentEnvWith(t, repo)
	e.lock(t)
	e.startAgent(t)
	if peer := e.waitTask(t, "dev-peer", "peer", 1); peer.Status.Phase != v1alpha1.TaskFailed {
		t.Fatalf("peer-1: %s (%s), want Failed (its pods fail)", peer.Status.Phase, peer.Status.Message)
	}
	key := client.ObjectKey{Namespace: appNamespace, Name: v1alpha1.TaskName("app", 1)}
	agenttest.WaitUntil(t, agentWaitLimit, "app-1 to wait for the failed peer", func(ctx context.Context) (bool, string, error) {
		var task v1alpha1.StyrminTask
		if err := e.c.Get(ctx, key, &task); err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(task.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonWaitingForOrder, string(task.Status.Phase), nil
	})

	e.commitConfig(t, "app: gone", map[string][]byte{appDeployment: nil})
	seq, ok := e.lock(t)["app"]
	if !ok {
		t.Fatal("deleting app locked no tombstone")
	}
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", seq))
	created := e.waitTask(t, appNamespace, "app", 1)
	if created.Status.Phase != v1alpha1.TaskSuperseded || created.Status.SupersededBy != seq {
		t.Fatalf("app-1: %s (%s) superseded by %d, want Superseded by the deletion %d", created.Status.Phase, created.Status.Message, created.Status.SupersededBy, seq)
	}
	// The UI says "nothing of it was applied" by this reason, whatever
	// the words.
	if c := apimeta.FindStatusCondition(created.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonSupersededByDeletion {
		t.Errorf("app-1's Ready condition: %+v, want reason %s", c, v1alpha1.ReasonSupersededByDeletion)
	}
	for _, s := range created.Status.Steps {
		if s.StartedAt != nil {
			t.Errorf("app-1 started step %s", s.Name)
		}
	}
}

// TestAWaveAfterAPeerDeletedSinceRunsInsteadOfWaiting: a cluster fan-out
// in two waves, o0 of wave 1 failing; wave 2 waits for it, naming it.
// Meanwhile a commit deletes o1, the other deployment of wave 1, which ran
// its instance: its tombstone's task ends by deleting its
// StyrminDeployment while wave 2 waits for o0 (nothing wakes it for o1).
// A fix commit then makes o0 Ready, and wave 2, whose locks still order
// after o1's instance, runs and succeeds instead of waiting for ever for a
// deployment that looks not created yet.
func TestAWaveAfterAPeerDeletedSinceRunsInsteadOfWaiting(t *testing.T) {
	t.Parallel()
	waveAfterADeletedPeer(t, false)
}

// TestAWaveAfterAPeerDeletedWithItsNamespaceRunsInsteadOfWaiting is
// TestAWaveAfterAPeerDeletedSinceRunsInsteadOfWaiting with o1's namespace
// deleted by hand after o1 was: its tasks went with it, and only git says
// o1 was deleted.
func TestAWaveAfterAPeerDeletedWithItsNamespaceRunsInsteadOfWaiting(t *testing.T) {
	t.Parallel()
	waveAfterADeletedPeer(t, true)
}

func waveAfterADeletedPeer(t *testing.T, deleteNamespace bool) {
	repo := faultyRepo(t)
	repo[appDeployment] = nil
	repo[webDeployment] = nil
	repo[hubDeployment] = nil
	repo["styrmin.cue"] = &fstest.MapFile{Data: []byte("rollout: {waves: 2, gate: \"ready\"}\n"), Mode: 0o644}
	repo["clusters/local/cluster.cue"] = &fstest.MapFile{Data: waveCluster("json"), Mode: 0o644}
	names := []string{"o0", "o1", "o2", "o3"} // o0, o1 in wave 1; o2, o3 in wave 2
	for _, n := range names {
		repo[waveFile(n)] = &fstest.MapFile{Data: appConfig("1.0.0", ""), Mode: 0o644}
	}
	e := startAgentEnvWith(t, repo)
	e.lock(t)
	e.startAgent(t)
	for _, n := range names {
		requireSucceeded(t, e.waitTask(t, "dev-"+n, n, 1))
	}

	t.Log("the fan-out, o0 made to fail")
	e.commitConfig(t, "cluster: log format text; o0 unready", map[string][]byte{
		"clusters/local/cluster.cue": waveCluster("text"),
		waveFile("o0"):               appConfig("1.0.0", `fault: "unready"`+"\nprogressDeadline: 1"),
	})
	if locked := e.lock(t); len(locked) != len(names) {
		t.Fatalf("the fan-out locked %v", locked)
	}
	if task := e.waitTask(t, "dev-o0", "o0", 2); task.Status.Phase != v1alpha1.TaskFailed {
		t.Fatalf("o0-2: %s, want Failed", task.Status.Phase)
	}
	requireSucceeded(t, e.waitTask(t, "dev-o1", "o1", 2))
	for _, n := range []string{"o2", "o3"} {
		key := client.ObjectKey{Namespace: "dev-" + n, Name: v1alpha1.TaskName(n, 2)}
		agenttest.WaitUntil(t, agentWaitLimit, key.Name+" to wait for the failed o0", func(ctx context.Context) (bool, string, error) {
			var task v1alpha1.StyrminTask
			if err := e.c.Get(ctx, key, &task); err != nil {
				return false, err.Error(), nil
			}
			c := apimeta.FindStatusCondition(task.Status.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Reason != v1alpha1.ReasonWaitingForOrder || !strings.Contains(c.Message, "waiting for local/dev/o0@2: its task o0-2 failed") {
				return false, fmt.Sprint(c), nil
			}
			return true, "", nil
		})
	}

	t.Log("a commit deletes o1 while wave 2 waits for o0")
	e.commitConfig(t, "delete o1", map[string][]byte{waveFile("o1"): nil})
	if locked := e.lock(t); locked["o1"] != 3 || len(locked) != 1 {
		t.Fatalf("the deletion locked %v, want o1's tombstone at 3", locked)
	}
	requireSucceeded(t, e.waitTask(t, "dev-o1", "o1", 3))
	agenttest.WaitUntil(t, agentWaitLimit, "o1's StyrminDeployment to be deleted", func(context.Context) (bool, string, error) {
		return e.deployment(t, "dev-o1") == nil, "still there", nil
	})
	if deleteNamespace {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dev-o1"}}
		if err := e.c.Delete(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
		agenttest.WaitUntil(t, agentWaitLimit, "namespace dev-o1 to be deleted", func(ctx context.Context) (bool, string, error) {
			err := e.c.Get(ctx, client.ObjectKeyFromObject(ns), ns)
			return apierrors.IsNotFound(err), fmt.Sprint(err), nil
		})
	}

	t.Log("a fix commit makes o0 Ready; wave 2 goes on")
	fixed := e.change(t, "o0", "o0: no fault", map[string][]byte{waveFile("o0"): appConfig("1.0.0", "")})
	requireSucceeded(t, e.waitTask(t, "dev-o0", "o0", fixed))
	for _, n := range []string{"o2", "o3"} {
		requireSucceeded(t, e.waitTask(t, "dev-"+n, n, 2))
	}
}
