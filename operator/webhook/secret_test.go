package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/testcluster"
)

// TestAnUnsignedDeliveryIsRefusedBeforeTheSecretIsRead: a POST without a
// usable X-Hub-Signature-256 had the handler read the body and the
// secret (an API read) before refusing it; it is refused first.
func TestAnUnsignedDeliveryIsRefusedBeforeTheSecretIsRead(t *testing.T) {
	var reads atomic.Int64
	h, err := NewHandler(Options{
		Secret:     func(context.Context) ([]byte, error) { reads.Add(1); return testSecret, nil },
		Branch:     "main",
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []string{"", "sha1=abcd", "sha256=not-hex", "sha256=" + strings.Repeat("0", 62)} {
		if w := deliver(h, "push", "d-"+sig, sig, pushMain); w.Code != http.StatusUnauthorized {
			t.Errorf("signature %q: status %d, want 401", sig, w.Code)
		}
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("the secret was read %d times for deliveries without a usable signature, want 0", n)
	}
	if w := deliver(h, "push", "d-signed", Sign(testSecret, []byte(pushMain)), pushMain); w.Code != http.StatusAccepted || reads.Load() != 1 {
		t.Errorf("a signed push: status %d, %d reads of the secret; want 202 and 1", w.Code, reads.Load())
	}
}

// secretReads counts the reads of Secrets through a client of the API
// server.
type secretReads struct {
	client.Reader
	n atomic.Int64
}

func (r *secretReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		r.n.Add(1)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestAMissingWebhookSecretCostsOneReadAndOneErrorLinePerRetry: while the
// Secret did not exist, every POST read it from the API server and logged
// an error. Now unsigned POSTs read nothing, a failed read is answered
// from memory for SecretRetry, the failure is logged as an error once,
// and the Secret created later is picked up.
func TestAMissingWebhookSecretCostsOneReadAndOneErrorLinePerRetry(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	ctx := context.Background()
	cl, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reader := &secretReads{Reader: cl}
	var mu sync.Mutex
	var errorLines, readAgain int
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(args, "every delivery is answered 503 until it can be read") {
			errorLines++
		}
		if strings.Contains(args, "webhook secret read: deliveries are verified again") {
			readAgain++
		}
	}, funcr.Options{Verbosity: 1})
	const retry = time.Second
	key := types.NamespacedName{Namespace: "default", Name: "webhook"}
	s, err := NewServer(ServerOptions{Addr: "127.0.0.1:0", Reader: reader, Secret: key, SecretRetry: retry, Branch: "main", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Start(sctx) }()
	t.Cleanup(func() { cancel(); <-done })
	url := "http://" + addr.String() + "/"
	post := func(delivery, sig string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(pushMain))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", delivery)
		if sig != "" {
			req.Header.Set("X-Hub-Signature-256", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	for i := range 10 {
		if code := post(fmt.Sprintf("unsigned-%d", i), ""); code != http.StatusUnauthorized {
			t.Fatalf("an unsigned POST: status %d, want 401", code)
		}
	}
	if n := reader.n.Load(); n != 0 {
		t.Fatalf("%d reads of the Secret for unsigned POSTs, want none", n)
	}
	start := time.Now()
	const forged = 20
	for i := range forged {
		if code := post(fmt.Sprintf("forged-%d", i), Sign([]byte("guess"), []byte(pushMain))); code != http.StatusServiceUnavailable {
			t.Fatalf("a signed POST without a Secret: status %d, want 503", code)
		}
	}
	allowed := 1 + int64(time.Since(start)/retry)
	if n := reader.n.Load(); n > allowed {
		t.Errorf("%d reads of the missing Secret for %d POSTs in %v, want at most %d (one per %v)", n, forged, time.Since(start), allowed, retry)
	}
	mu.Lock()
	if errorLines != 1 {
		t.Errorf("%d error lines for the missing Secret, want 1", errorLines)
	}
	mu.Unlock()

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: map[string][]byte{DefaultSecretKey: testSecret}}
	if err := cl.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(retry + 5*time.Second)
	for code := 0; code != http.StatusAccepted; {
		if time.Now().After(deadline) {
			t.Fatalf("the Secret created was not picked up within %v: status %d", retry+5*time.Second, code)
		}
		code = post(fmt.Sprintf("genuine-%d", time.Now().UnixNano()), Sign(testSecret, []byte(pushMain)))
		if code != http.StatusAccepted {
			time.Sleep(100 * time.Millisecond)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if errorLines != 1 || readAgain != 1 {
		t.Errorf("%d error lines and %d lines saying the secret is read again, want 1 and 1", errorLines, readAgain)
	}
}
