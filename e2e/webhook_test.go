package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/webhook"
)

const (
	webhookSecretName = "git-webhook"
	webhookSecret     = "e2e-webhook-secret"
)

// TestWebhookPushSyncsAtOnce runs the agent with a one-hour poll interval
// and its webhook receiver: a push signed with the secret from the
// Kubernetes Secret makes it sync at once (the time from the delivery to
// the StyrminTask existing is logged), a push with a bad signature is
// refused with 401 and changes nothing.
//
// The agent runs in this process (operator.RunAgent, as its
// binary does once the webhook flags are wired), acting as its service
// account.
func TestWebhookPushSyncsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createSecret(t, webhookSecretName, map[string][]byte{operator.DefaultWebhookSecretKey: []byte(webhookSecret)})
	clone := e.newClone(t)
	if locked, out := e.lockPush(t, clone); len(locked) != 4 {
		t.Fatalf("first lock locked %v:\n%s", locked, out)
	}

	cfg := rest.CopyConfig(e.cluster.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + config.AgentNamespace + ":" + config.AgentServiceAccount}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- operator.RunAgent(ctx, cfg, operator.Options{
			Manager:      operator.ManagerOptions{Namespace: config.AgentNamespace, MetricsAddr: "0", DriftInterval: time.Hour},
			Cluster:      clusterName,
			URL:          e.url,
			Branch:       "main",
			SecretName:   repoSecret,
			PollInterval: time.Hour,
			Webhook: operator.WebhookOptions{
				Addr:        "127.0.0.1:0",
				SecretName:  webhookSecretName,
				OnListening: func(a net.Addr) { addrc <- a },
			},
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("the agent did not stop")
		}
	})
	var url string
	select {
	case a := <-addrc:
		url = "http://" + a.String() + "/"
	case err := <-done:
		t.Fatalf("agent: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook receiver did not listen")
	}
	// The first sync runs at start.
	requirePhase(t, e.waitTask(t, "dev-hub", "hub", 1), v1alpha1.TaskSucceeded)
	e.waitSynced(t)

	e.git.Commit(repoName, "dev: log errors only", devEnvironment(`logLevel: "error"`))
	locked, out := e.lockPush(t, clone)
	if locked["local/dev/hub"] != 2 {
		t.Fatalf("locked %v, want local/dev/hub=2:\n%s", locked, out)
	}
	head := e.git.Head(repoName, "main")
	body := fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"full_name":"acme/desired"}}`, head)

	// A bad signature: 401, and no sync (the poll is an hour away).
	if code := agenttest.Deliver(t, url, "push", "bad-1", webhook.Sign([]byte("not-the-secret"), []byte(body)), body); code != http.StatusUnauthorized {
		t.Fatalf("badly signed push: status %d, want 401", code)
	}
	time.Sleep(2 * time.Second)
	if taskExists(t, e, "dev-hub", "hub-2") {
		t.Fatal("a badly signed push made the agent sync")
	}

	// A good signature: the task exists moments later.
	start := time.Now()
	if code := agenttest.Deliver(t, url, "push", "good-1", webhook.Sign([]byte(webhookSecret), []byte(body)), body); code != http.StatusAccepted {
		t.Fatalf("signed push: status %d, want 202", code)
	}
	deadline := start.Add(30 * time.Second)
	for !taskExists(t, e, "dev-hub", "hub-2") {
		if time.Now().After(deadline) {
			t.Fatal("the signed push did not make the agent sync within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	latency := time.Since(start)
	// Logged, not asserted: timings are reported, never tested (the wait
	// above is what fails when the push does not trigger a sync).
	t.Logf("webhook push → StyrminTask dev-hub/hub-2 created in %v (poll interval 1h)", latency.Round(time.Millisecond))
	requirePhase(t, e.waitTask(t, "dev-hub", "hub", 2), v1alpha1.TaskSucceeded)

	// A replayed delivery is refused, under its own id or a new one.
	for _, id := range []string{"good-1", "good-2"} {
		if code := agenttest.Deliver(t, url, "push", id, webhook.Sign([]byte(webhookSecret), []byte(body)), body); code != http.StatusConflict {
			t.Errorf("replayed delivery as %s: status %d, want 409", id, code)
		}
	}
}

func taskExists(t *testing.T, e *env, ns, name string) bool {
	t.Helper()
	err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.StyrminTask{})
	return err == nil
}
