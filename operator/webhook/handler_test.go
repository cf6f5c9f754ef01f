package webhook

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
)

var testSecret = []byte("s3cret-webhook-key")

type recorder struct {
	mu     sync.Mutex
	events []Event
	logs   []string
}

func (r *recorder) onPush(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func newTestHandler(t *testing.T, rec *recorder, maxBody int64) *Handler {
	t.Helper()
	log := funcr.New(func(prefix, args string) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.logs = append(rec.logs, args)
	}, funcr.Options{})
	h, err := NewHandler(Options{
		Secret:  func(context.Context) ([]byte, error) { return testSecret, nil },
		Branch:  "main",
		OnPush:  rec.onPush,
		MaxBody: maxBody,
		Log:     log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

const pushMain = `{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567","repository":{"full_name":"acme/desired-state"},"secret_marker":"PAYLOAD-MUST-NOT-BE-LOGGED"}`

func deliver(h http.Handler, event, delivery, sig, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/hooks/github", strings.NewReader(body))
	req.Header.Set("X-GitHub-Event", event)
	if delivery != "" {
		req.Header.Set("X-GitHub-Delivery", delivery)
	}
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestWebhookDeliveries(t *testing.T) {
	good := Sign(testSecret, []byte(pushMain))
	cases := []struct {
		name       string
		event, sig string
		body       string
		wantCode   int
		wantPushes int
	}{
		{"valid push to the tracked branch triggers a sync", "push", good, pushMain, http.StatusAccepted, 1},
		{"ping answers", "ping", Sign(testSecret, []byte(`{"zen":"x"}`)), `{"zen":"x"}`, http.StatusOK, 0},
		{"missing signature is rejected", "push", "", pushMain, http.StatusUnauthorized, 0},
		{"signature with another secret is rejected", "push", Sign([]byte("other"), []byte(pushMain)), pushMain, http.StatusUnauthorized, 0},
		{"signature of another body is rejected", "push", good, strings.Replace(pushMain, "main", "mainx", 1), http.StatusUnauthorized, 0},
		{"malformed signature is rejected", "push", "sha1=abcd", pushMain, http.StatusUnauthorized, 0},
		{"push to another branch is ignored", "push", Sign(testSecret, []byte(`{"ref":"refs/heads/dev"}`)), `{"ref":"refs/heads/dev"}`, http.StatusAccepted, 0},
		{"other events are acknowledged and ignored", "issues", Sign(testSecret, []byte(`{}`)), `{}`, http.StatusAccepted, 0},
		{"signed push with a bad payload is refused", "push", Sign(testSecret, []byte(`{"ref":3}`)), `{"ref":3}`, http.StatusBadRequest, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			h := newTestHandler(t, rec, 0)
			w := deliver(h, tc.event, "d-"+string(rune('a'+i)), tc.sig, tc.body)
			if w.Code != tc.wantCode {
				t.Errorf("status %d, want %d (%s)", w.Code, tc.wantCode, w.Body)
			}
			if len(rec.events) != tc.wantPushes {
				t.Errorf("%d syncs triggered, want %d", len(rec.events), tc.wantPushes)
			}
			for _, l := range rec.logs {
				if strings.Contains(l, "PAYLOAD-MUST-NOT-BE-LOGGED") {
					t.Errorf("log line contains the payload: %s", l)
				}
			}
		})
	}
}

func TestReplayedDeliveryIsProcessedOnce(t *testing.T) {
	rec := &recorder{}
	h := newTestHandler(t, rec, 0)
	sig := Sign(testSecret, []byte(pushMain))
	for range 3 {
		if w := deliver(h, "push", "delivery-1", sig, pushMain); w.Code >= 300 {
			t.Fatalf("status %d", w.Code)
		}
	}
	if len(rec.events) != 1 {
		t.Fatalf("a delivery replayed three times triggered %d syncs, want 1", len(rec.events))
	}
	deliver(h, "push", "delivery-2", sig, pushMain)
	if len(rec.events) != 2 {
		t.Fatalf("a new delivery id was not processed")
	}
}

func TestBadSignatureDoesNotBurnTheDeliveryID(t *testing.T) {
	rec := &recorder{}
	h := newTestHandler(t, rec, 0)
	deliver(h, "push", "delivery-x", "sha256="+strings.Repeat("0", 64), pushMain)
	deliver(h, "push", "delivery-x", Sign(testSecret, []byte(pushMain)), pushMain)
	if len(rec.events) != 1 {
		t.Fatalf("a forged delivery blocked the genuine one with the same id")
	}
}

func TestOversizedBodyIsRefused(t *testing.T) {
	rec := &recorder{}
	h := newTestHandler(t, rec, 64)
	body := `{"ref":"refs/heads/main","pad":"` + strings.Repeat("x", 100) + `"}`
	w := deliver(h, "push", "big", Sign(testSecret, []byte(body)), body)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", w.Code)
	}
	// Without a Content-Length the limit still holds.
	req := httptest.NewRequest(http.MethodPost, "/", struct{ *bytes.Reader }{bytes.NewReader([]byte(body))})
	req.ContentLength = -1
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", Sign(testSecret, []byte(body)))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusRequestEntityTooLarge || len(rec.events) != 0 {
		t.Fatalf("status %d, %d syncs; want 413 and none", w.Code, len(rec.events))
	}
}

func TestOnlyPostIsAccepted(t *testing.T) {
	h := newTestHandler(t, &recorder{}, 0)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("status %d, want 405", w.Code)
	}
}

func TestReplayMemoryIsBounded(t *testing.T) {
	d := newDeliveries(2)
	for _, id := range []string{"a", "b", "c"} {
		if !d.add(id) {
			t.Fatalf("%s reported as seen", id)
		}
	}
	if len(d.set) != 2 {
		t.Fatalf("remembers %d ids, want 2", len(d.set))
	}
	if !d.add("a") {
		t.Fatal("the oldest id should have been forgotten")
	}
}

// FuzzParsePush must never panic, and any accepted payload has a ref.
func FuzzParsePush(f *testing.F) {
	f.Add([]byte(pushMain))
	f.Add([]byte(`{"ref":"refs/tags/v1"}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParsePush(body)
		if err == nil && !strings.HasPrefix(p.Ref, "refs/") {
			t.Fatalf("accepted ref %q", p.Ref)
		}
	})
}

// FuzzVerify: no input panics, and only the true signature verifies.
func FuzzVerify(f *testing.F) {
	f.Add([]byte("body"), "sha256=00")
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		err := Verify(testSecret, body, header)
		if err == nil && header != Sign(testSecret, body) && !strings.EqualFold(header, Sign(testSecret, body)) {
			t.Fatalf("forged header %q verified", header)
		}
	})
}
