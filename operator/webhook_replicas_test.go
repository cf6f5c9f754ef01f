package operator_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/source"
	"github.com/styrmin/styrmin/operator/webhook"
	"github.com/styrmin/styrmin/testcluster"
)

// TestWebhookPushToAReplicaThatDoesNotLeadTriggersTheLeader runs two
// replicas as the agent wires them (a leader-elected manager watching sync
// requests on the shared StyrminSource, and a webhook receiver that
// records a verified push there): a push delivered to the replica that
// does not lead triggers the leader's sync, not its own; a replay of it
// under a new id is refused; a push to the leader triggers it too, once.
func TestWebhookPushToAReplicaThatDoesNotLeadTriggersTheLeader(t *testing.T) {
	t.Parallel()
	c := testcluster.StartT(t, testcluster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := operator.InstallCRDs(ctx, c.RESTConfig); err != nil {
		t.Fatal(err)
	}
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	src := types.NamespacedName{Namespace: "default", Name: "styrmin"}
	if err := cl.Create(ctx, &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: src.Name},
		Spec: v1alpha1.StyrminSourceSpec{URL: "https://example.com/desired.git", Branch: "main", Cluster: "local"}}); err != nil {
		t.Fatal(err)
	}
	secret := types.NamespacedName{Namespace: "default", Name: "webhook"}
	if err := cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name},
		Data: map[string][]byte{webhook.DefaultSecretKey: []byte("s1")}}); err != nil {
		t.Fatal(err)
	}

	type replica struct {
		mgr      ctrl.Manager
		url      string
		triggers chan struct{}
	}
	start := func(name string) *replica {
		mgr, err := ctrl.NewManager(c.RESTConfig, ctrl.Options{
			Scheme:                        scheme,
			Metrics:                       metricsserver.Options{BindAddress: "0"},
			LeaderElection:                true,
			LeaderElectionNamespace:       "default",
			LeaderElectionID:              "styrmin-webhook-test",
			LeaderElectionReleaseOnCancel: true,
			// Two replicas in one process register the same controller.
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		})
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{mgr: mgr, triggers: make(chan struct{}, 16)}
		if err := source.WatchRequests(mgr, src, func() { r.triggers <- struct{}{} }); err != nil {
			t.Fatal(err)
		}
		ws, err := webhook.NewServer(webhook.ServerOptions{
			Addr: "127.0.0.1:0", Reader: cl, Secret: secret, Branch: "main",
			OnPush: func(ctx context.Context, _ webhook.Event) error {
				return source.RequestSync(ctx, cl, src, time.Now())
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		addr, err := ws.Listen()
		if err != nil {
			t.Fatal(err)
		}
		if err := mgr.Add(ws); err != nil {
			t.Fatal(err)
		}
		r.url = "http://" + addr.String() + "/"
		go func() {
			if err := mgr.Start(ctx); err != nil {
				t.Errorf("replica %s: %v", name, err)
			}
		}()
		return r
	}
	leader := start("a")
	select {
	case <-leader.mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("replica a was not elected")
	}
	other := start("b")
	// The leader's watch lists the StyrminSource once at start: drain.
	time.Sleep(time.Second)
	for len(leader.triggers) > 0 {
		<-leader.triggers
	}
	select {
	case <-other.mgr.Elected():
		t.Fatal("both replicas lead")
	default:
	}

	body := `{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567","repository":{"full_name":"acme/desired"}}`
	sig := webhook.Sign([]byte("s1"), []byte(body))
	sent := time.Now()
	if code := agenttest.Deliver(t, other.url, "push", "d-1", sig, body); code != http.StatusAccepted {
		t.Fatalf("push to the replica that does not lead: status %d, want 202", code)
	}
	select {
	case <-leader.triggers:
		t.Logf("push to the replica that does not lead → leader's sync triggered in %v", time.Since(sent).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("a push to the replica that does not lead did not trigger the leader")
	}
	var got v1alpha1.StyrminSource
	if err := cl.Get(ctx, src, &got); err != nil || got.Annotations[v1alpha1.AnnotationRequestedAt] == "" {
		t.Fatalf("StyrminSource annotations %v (%v), want %s", got.Annotations, err, v1alpha1.AnnotationRequestedAt)
	}

	// A replay to the same replica is refused, and triggers nothing.
	if code := agenttest.Deliver(t, other.url, "push", "d-2", sig, body); code != http.StatusConflict {
		t.Fatalf("replayed push under a new id: status %d, want 409", code)
	}
	// A second push, to the leader itself, triggers it once more.
	body2 := fmt.Sprintf(`{"ref":"refs/heads/main","after":%q}`, "fedcba9876543210fedcba9876543210fedcba98")
	if code := agenttest.Deliver(t, leader.url, "push", "d-3", webhook.Sign([]byte("s1"), []byte(body2)), body2); code != http.StatusAccepted {
		t.Fatalf("push to the leader: status %d, want 202", code)
	}
	select {
	case <-leader.triggers:
	case <-time.After(30 * time.Second):
		t.Fatal("a push to the leader did not trigger it")
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(leader.triggers) + len(other.triggers); n != 0 {
		t.Fatalf("%d extra triggers (the replica that does not lead must never sync; the replay must not trigger)", n)
	}
}
