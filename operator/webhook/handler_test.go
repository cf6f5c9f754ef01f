package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/go-logr/logr/funcr"
)

var testSecret = []byte("s3cret-webhook-key")

type recorder struct {
	mu     sync.Mutex
	events []Event
	logs   []string
}

func (r *recorder) onPush(_ context.Context, e Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return nil
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
		// Each handler counts its own deliveries.
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

const pushMain = `{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567","repository":{"full_name":"acme/desired-state"},"secret_marker":"PAYLOAD-MUST-NOT-BE-LOGGED"}`

func deliver(h http.Handler, event, delivery, sig, body string) *httptest.ResponseRecorder {
	return deliverAs(h, "application/json", event, delivery, sig, body)
}

func deliverAs(h http.Handler, contentType, event, delivery, sig, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/hooks/github", strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
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
		// wantResult is the delivery's count in styrmin_webhook_deliveries_total.
		wantResult Result
	}{
		{"valid push to the tracked branch triggers a sync", "push", good, pushMain, http.StatusAccepted, 1, ResultAccepted},
		{"ping answers", "ping", Sign(testSecret, []byte(`{"zen":"x"}`)), `{"zen":"x"}`, http.StatusOK, 0, ResultPing},
		{"missing signature is rejected", "push", "", pushMain, http.StatusUnauthorized, 0, ResultBadSignature},
		{"signature with another secret is rejected", "push", Sign([]byte("other"), []byte(pushMain)), pushMain, http.StatusUnauthorized, 0, ResultBadSignature},
		{"signature of another body is rejected", "push", good, strings.Replace(pushMain, "main", "mainx", 1), http.StatusUnauthorized, 0, ResultBadSignature},
		{"malformed signature is rejected", "push", "sha1=abcd", pushMain, http.StatusUnauthorized, 0, ResultBadSignature},
		{"push to another branch is ignored", "push", Sign(testSecret, []byte(`{"ref":"refs/heads/dev"}`)), `{"ref":"refs/heads/dev"}`, http.StatusAccepted, 0, ResultIgnored},
		{"other events are acknowledged and ignored", "issues", Sign(testSecret, []byte(`{}`)), `{}`, http.StatusAccepted, 0, ResultIgnored},
		{"signed push with a bad payload is refused", "push", Sign(testSecret, []byte(`{"ref":3}`)), `{"ref":3}`, http.StatusBadRequest, 0, ResultBadRequest},
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
			if got := testutil.ToFloat64(h.deliveries.WithLabelValues(string(tc.wantResult))); got != 1 {
				t.Errorf("styrmin_webhook_deliveries_total{result=%q} = %v, want 1", tc.wantResult, got)
			}
			for _, r := range results {
				if got := testutil.ToFloat64(h.deliveries.WithLabelValues(string(r))); r != tc.wantResult && got != 0 {
					t.Errorf("styrmin_webhook_deliveries_total{result=%q} = %v, want 0", r, got)
				}
			}
			for _, l := range rec.logs {
				if strings.Contains(l, "PAYLOAD-MUST-NOT-BE-LOGGED") {
					t.Errorf("log line contains the payload: %s", l)
				}
			}
		})
	}
}

// TestReplayedDeliveriesAreRefused: a captured push replayed with the same
// delivery id, under a new id (the id is not signed) or without an id is
// refused and triggers nothing; a new push (another body) under a new id
// is accepted.
func TestReplayedDeliveriesAreRefused(t *testing.T) {
	rec := &recorder{}
	h := newTestHandler(t, rec, 0)
	sig := Sign(testSecret, []byte(pushMain))
	if w := deliver(h, "push", "delivery-1", sig, pushMain); w.Code != http.StatusAccepted {
		t.Fatalf("first delivery: status %d", w.Code)
	}
	for _, tc := range []struct{ name, id string }{
		{"the same id", "delivery-1"},
		{"a changed id", "delivery-2"},
		{"no id", ""},
	} {
		w := deliver(h, "push", tc.id, sig, pushMain)
		if w.Code < 400 {
			t.Errorf("replay with %s: status %d, want it refused", tc.name, w.Code)
		}
		t.Logf("replay with %s: %d %s", tc.name, w.Code, strings.TrimSpace(w.Body.String()))
	}
	if len(rec.events) != 1 {
		t.Fatalf("replays triggered %d syncs, want 1 in all", len(rec.events))
	}
	next := strings.Replace(pushMain, "0123456789abcdef", "fedcba9876543210", 1)
	if w := deliver(h, "push", "delivery-3", Sign(testSecret, []byte(next)), next); w.Code != http.StatusAccepted || len(rec.events) != 2 {
		t.Fatalf("a new push: status %d, %d syncs; want 202 and 2", w.Code, len(rec.events))
	}
}

// TestFailedRecordingIsNoReplay: a push whose request could not be
// recorded is answered 503 and forgotten, so GitHub's redelivery (same id,
// same body) is accepted.
func TestFailedRecordingIsNoReplay(t *testing.T) {
	fail := true
	var pushes int
	h, err := NewHandler(Options{
		Secret: func(context.Context) ([]byte, error) { return testSecret, nil },
		Branch: "main",
		OnPush: func(context.Context, Event) error {
			if fail {
				return errors.New("API server unreachable")
			}
			pushes++
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sig := Sign(testSecret, []byte(pushMain))
	if w := deliver(h, "push", "d-1", sig, pushMain); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", w.Code)
	}
	fail = false
	if w := deliver(h, "push", "d-1", sig, pushMain); w.Code != http.StatusAccepted || pushes != 1 {
		t.Fatalf("redelivery: status %d, %d pushes; want 202 and 1", w.Code, pushes)
	}
}

// TestFormEncodedPushIsAccepted: GitHub's default content type carries the
// JSON in the form field "payload"; the signature is over the raw body.
func TestFormEncodedPushIsAccepted(t *testing.T) {
	rec := &recorder{}
	h := newTestHandler(t, rec, 0)
	body := url.Values{"payload": {pushMain}}.Encode()
	w := deliverAs(h, "application/x-www-form-urlencoded", "push", "form-1", Sign(testSecret, []byte(body)), body)
	if w.Code != http.StatusAccepted || len(rec.events) != 1 || rec.events[0].After != "0123456789abcdef0123456789abcdef01234567" {
		t.Fatalf("form push: status %d (%s), events %+v", w.Code, w.Body, rec.events)
	}
	// Signed over the JSON instead of the raw body: refused.
	w = deliverAs(h, "application/x-www-form-urlencoded", "push", "form-2", Sign(testSecret, []byte(pushMain)), body)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("form push signed over the payload: status %d, want 401", w.Code)
	}
	for _, tc := range []struct{ ct, body string }{
		{"application/x-www-form-urlencoded", "nopayload=1"},
		{"application/x-www-form-urlencoded", "payload=%zz"},
	} {
		if w := deliverAs(h, tc.ct, "push", "form-"+tc.body, Sign(testSecret, []byte(tc.body)), tc.body); w.Code != http.StatusBadRequest {
			t.Errorf("%s %q: status %d, want 400", tc.ct, tc.body, w.Code)
		}
	}
	if w := deliverAs(h, "text/plain", "push", "form-3", Sign(testSecret, []byte(pushMain)), pushMain); w.Code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: status %d, want 415", w.Code)
	}
	if len(rec.events) != 1 {
		t.Fatalf("%d syncs, want 1", len(rec.events))
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
	req.Header.Set("X-GitHub-Delivery", "big-2")
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

// TestReplayMemoryIsBoundedByBytesAndTime: deliveries are forgotten when
// their window passes or, oldest first, when the byte budget is spent.
func TestReplayMemoryIsBoundedByBytesAndTime(t *testing.T) {
	sum := func(i int) [32]byte { return sha256.Sum256([]byte(strconv.Itoa(i))) }
	start := time.Unix(1_700_000_000, 0)
	d := newDeliveries(time.Hour, 10*(36+deliveryOverhead))
	for i := range 100 {
		id := fmt.Sprintf("%036d", i)
		if why := d.add(id, sum(i), start); why != "" {
			t.Fatalf("delivery %d: %s", i, why)
		}
	}
	if d.len() != 10 || d.bytes > d.maxBytes {
		t.Fatalf("remembers %d deliveries in %d bytes, want 10 within %d", d.len(), d.bytes, d.maxBytes)
	}
	if why := d.add(fmt.Sprintf("%036d", 99), sum(1000), start); why == "" {
		t.Fatal("the newest id was forgotten")
	}
	if why := d.add("other", sum(99), start); why == "" {
		t.Fatal("the newest body was forgotten")
	}
	if why := d.add(fmt.Sprintf("%036d", 99), sum(99), start.Add(time.Hour+time.Second)); why != "" {
		t.Fatalf("a delivery older than the window is still remembered: %s", why)
	}
	if d.len() != 1 {
		t.Fatalf("after the window %d deliveries remembered, want 1", d.len())
	}
}

// TestSlowRequestIsCutOffForANewOne: with every slot taken, a request
// that has read for longer than SlowAfter is cut off to make room; when
// all holders are young the new request is refused at once.
func TestSlowRequestIsCutOffForANewOne(t *testing.T) {
	s := newSlots(2)
	now := time.Unix(1_700_000_000, 0)
	var aborted []string
	abort := func(name string) func() { return func() { aborted = append(aborted, name) } }
	if _, ok := s.acquire(now, time.Second, abort("a")); !ok {
		t.Fatal("a")
	}
	releaseB, ok := s.acquire(now.Add(500*time.Millisecond), time.Second, abort("b"))
	if !ok {
		t.Fatal("b")
	}
	if _, ok := s.acquire(now.Add(900*time.Millisecond), time.Second, abort("c")); ok || len(aborted) != 0 {
		t.Fatalf("every holder is young: acquired %v, aborted %v; want refused, none", ok, aborted)
	}
	if _, ok := s.acquire(now.Add(1200*time.Millisecond), time.Second, abort("d")); !ok || !slices.Equal(aborted, []string{"a"}) {
		t.Fatalf("acquired %v, aborted %v; want d in place of a", ok, aborted)
	}
	releaseB()
	if _, ok := s.acquire(now.Add(1300*time.Millisecond), time.Second, abort("e")); !ok || len(aborted) != 1 {
		t.Fatalf("a freed slot: acquired %v, aborted %v", ok, aborted)
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
