package operator_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/webhook"
	"github.com/styrmin/styrmin/testcluster"
)

// The webhook server reads its shared secret from a real Secret: a push
// signed with it triggers, a push signed with anything else is refused
// with 401, no Secret yet means 503 (and the Secret created later is
// picked up), and a rotated secret takes effect.
func TestWebhookServerVerifiesWithTheSecretFromKubernetes(t *testing.T) {
	t.Parallel()
	c := testcluster.StartT(t, testcluster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "default", Name: "webhook"}
	var mu sync.Mutex
	var pushes []webhook.Event
	ws, err := webhook.NewServer(webhook.ServerOptions{
		Addr:      "127.0.0.1:0",
		Reader:    cl,
		Secret:    key,
		SecretTTL: -1, // read on every request, so the rotation shows at once
		Branch:    "main",
		OnPush: func(_ context.Context, e webhook.Event) error {
			mu.Lock()
			pushes = append(pushes, e)
			mu.Unlock()
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := ws.Listen()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ws.Start(ctx) }()
	url := "http://" + addr.String() + "/"

	body := `{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567","repository":{"full_name":"acme/desired"}}`
	post := func(delivery, sig string) int {
		t.Helper()
		return agenttest.Deliver(t, url, "push", delivery, sig, body)
	}
	// Each verified delivery is remembered by its body too (a replay under
	// a new id is refused), so the push after the rotation is another one.
	body2 := strings.Replace(body, "0123456789abcdef", "fedcba9876543210", 1)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(pushes) }

	if got := post("d0", webhook.Sign([]byte("s1"), []byte(body))); got != http.StatusServiceUnavailable || count() != 0 {
		t.Fatalf("no Secret yet: status %d, %d pushes; want 503 and none", got, count())
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
		Data:       map[string][]byte{webhook.DefaultSecretKey: []byte("s1")},
	}
	if err := cl.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if got := post("d1", webhook.Sign([]byte("s1"), []byte(body))); got != http.StatusAccepted || count() != 1 {
		t.Fatalf("signed push: status %d, %d pushes; want 202 and 1", got, count())
	}
	if got := post("d2", webhook.Sign([]byte("wrong"), []byte(body))); got != http.StatusUnauthorized || count() != 1 {
		t.Fatalf("badly signed push: status %d, %d pushes; want 401 and still 1", got, count())
	}
	sec.Data[webhook.DefaultSecretKey] = []byte("s2")
	if err := cl.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if got := post("d3", webhook.Sign([]byte("s1"), []byte(body))); got != http.StatusUnauthorized {
		t.Fatalf("push signed with the old secret after rotation: status %d, want 401", got)
	}
	if got := agenttest.Deliver(t, url, "push", "d4", webhook.Sign([]byte("s2"), []byte(body2)), body2); got != http.StatusAccepted || count() != 2 {
		t.Fatalf("push signed with the new secret: status %d, %d pushes; want 202 and 2", got, count())
	}
	if e := pushes[1]; e.After != "fedcba98765432100123456789abcdef01234567" || e.Delivery != "d4" {
		t.Fatalf("event %+v", e)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop with its context")
	}
}
