package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// heapBytes is the live heap after a collection, from runtime/metrics.
func heapBytes() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// startServer runs a Server with opts (the secret from a fake API) and
// returns its URL and how many pushes it recorded.
func startServer(t *testing.T, opts ServerOptions) (string, *atomic.Int64) {
	t.Helper()
	key := types.NamespacedName{Namespace: "agent", Name: "webhook"}
	opts.Addr = "127.0.0.1:0"
	opts.Reader = fake.NewClientBuilder().WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Data:       map[string][]byte{DefaultSecretKey: testSecret},
	}).Build()
	opts.Secret = key
	opts.Branch = "main"
	var pushes atomic.Int64
	opts.OnPush = func(context.Context, Event) error { pushes.Add(1); return nil }
	s, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + addr.String() + "/", &pushes
}

// attack opens n connections to addr that never finish a request: half
// trickle their headers, half send complete headers announcing a 1 MiB
// body, send prefix bytes of it at once and trickle the rest. It returns
// when all are open; stop closes them.
func attack(t *testing.T, addr string, n, prefix int) (stop func()) {
	t.Helper()
	junk := []byte(strings.Repeat("x", prefix))
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	done := make(chan struct{})
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\n")
			} else {
				fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: slow-%d\r\nX-Hub-Signature-256: sha256=%s\r\nContent-Length: %d\r\n\r\n",
					i, strings.Repeat("0", 64), 1<<20)
				c.Write(junk)
			}
			go io.Copy(io.Discard, c) // whatever the server answers
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					b := "x"
					if i%2 == 0 {
						b = "X-Slow: x\r\n"
					}
					if _, err := c.Write([]byte(b)); err != nil {
						return // the server cut it off
					}
				}
			}
		}()
	}
	return func() {
		close(done)
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// TestSlowUnauthenticatedRequestsStayWithinAMemoryBound: 500 slowloris
// connections (250 stalling in their headers, 250 announcing a 1 MiB body
// after sending 256 KiB of it) hold the process's heap within a bound,
// and a signed push sent meanwhile triggers at once (its request cuts off
// a slow sender's). The figures are logged; the same attack against a
// receiver without the bounds (every request in flight) is measured for
// comparison.
func TestSlowUnauthenticatedRequestsStayWithinAMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 500 connections")
	}
	const conns, prefix = 500, 256 << 10
	const bound = 48 << 20
	measure := func(t *testing.T, opts ServerOptions) (grew uint64, pushed bool) {
		u, pushes := startServer(t, opts)
		before := heapBytes()
		stop := attack(t, strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/"), conns, prefix)
		defer func() {
			// After the attack the memory is given back: poll until the
			// server's side of the connections has ended.
			stop()
			after := heapBytes()
			for deadline := time.Now().Add(5 * time.Second); after > before+(4<<20) && time.Now().Before(deadline); after = heapBytes() {
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("heap after the connections closed: %.1f MiB", mib(after))
		}()
		// Every slot older than SlowAfter (1 s), with room for a loaded
		// machine whose handlers took their slots late.
		time.Sleep(2500 * time.Millisecond)
		during := heapBytes()
		start := time.Now()
		body := []byte(pushMain)
		req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(pushMain))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", "genuine-1")
		req.Header.Set("X-Hub-Signature-256", Sign(testSecret, body))
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("signed push during the attack: %v", err)
		}
		resp.Body.Close()
		t.Logf("heap before %.1f MiB, with %d slow connections %.1f MiB (+%.1f MiB); signed push answered %d in %v, %d sync(s) requested",
			mib(before), conns, mib(during), mib(during-min(before, during)), resp.StatusCode, time.Since(start).Round(time.Millisecond), pushes.Load())
		return during - min(before, during), resp.StatusCode == http.StatusAccepted && pushes.Load() == 1
	}
	t.Run("bounded", func(t *testing.T) {
		grew, pushed := measure(t, ServerOptions{})
		if grew > bound {
			t.Errorf("the heap grew by %.1f MiB, over the bound of %.0f MiB", mib(grew), mib(bound))
		}
		if !pushed {
			t.Error("the signed push sent during the attack did not trigger a sync")
		}
	})
	t.Run("unbounded for comparison", func(t *testing.T) {
		measure(t, ServerOptions{MaxInFlight: 1 << 20, SlowAfter: time.Hour, BodyTimeout: time.Minute, ReadHeaderTimeout: time.Minute})
	})
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// TestStalledBodyIsCutOffAtTheBodyTimeout: a sender that stops halfway
// through its body loses the connection at BodyTimeout, not at the
// server's generous ReadTimeout; one that stalls in its headers at
// ReadHeaderTimeout.
func TestStalledBodyIsCutOffAtTheBodyTimeout(t *testing.T) {
	u, _ := startServer(t, ServerOptions{BodyTimeout: 300 * time.Millisecond, ReadHeaderTimeout: 300 * time.Millisecond})
	addr := strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/")
	for name, req := range map[string]string{
		"body":    "POST / HTTP/1.1\r\nHost: x\r\nX-GitHub-Delivery: d\r\nContent-Length: 100\r\n\r\n{\"ref\":",
		"headers": "POST / HTTP/1.1\r\nHost: x\r\n",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		fmt.Fprint(c, req)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c) // until the server closes it
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("stalled %s: connection held %v", name, took)
		} else {
			t.Logf("stalled %s: connection closed after %v", name, took.Round(10*time.Millisecond))
		}
		c.Close()
	}
}

// TestUnverifiedBodiesWaitingForTheSecretKeepTheirSlots pins the bound on
// unverified bodies while the secret is slow to read (an API server under
// load, or a Secret that is missing, whose failed reads are not cached):
// a request keeps its slot until its body is verified, so no more than
// MaxInFlight bodies wait for the secret at once.
func TestUnverifiedBodiesWaitingForTheSecretKeepTheirSlots(t *testing.T) {
	var waiting, most atomic.Int64
	var reads sync.Mutex // one read at a time, as the Server's
	h, err := NewHandler(Options{
		Secret: func(ctx context.Context) ([]byte, error) {
			n := waiting.Add(1)
			defer waiting.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			reads.Lock()
			defer reads.Unlock()
			time.Sleep(50 * time.Millisecond)
			return testSecret, nil
		},
		Branch:      "main",
		MaxInFlight: 2,
		MaxBody:     1 << 20,
		Registerer:  prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := bytes.Repeat([]byte("x"), 1<<20)
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 40 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
			req.Header.Set("X-GitHub-Event", "push")
			req.Header.Set("X-GitHub-Delivery", "stranger")
			req.Header.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > 2 {
		t.Errorf("%d unverified 1 MiB bodies waited for the secret at once, with MaxInFlight 2", m)
	}
	if refused.Load() == 0 {
		t.Error("no request was refused as busy: the test did not fill the slots")
	}
}

// TestAnEvictedRequestStopsWaitingForTheSecret: a request that waits for
// the secret past SlowAfter is cut off when a new one needs its slot, and
// lets go of its body at once rather than when the read returns.
func TestAnEvictedRequestStopsWaitingForTheSecret(t *testing.T) {
	entered := make(chan struct{}, 2)
	h, err := NewHandler(Options{
		Secret: func(ctx context.Context) ([]byte, error) {
			entered <- struct{}{}
			<-ctx.Done() // an API server that does not answer
			return nil, ctx.Err()
		},
		Branch:      "main",
		MaxInFlight: 1,
		SlowAfter:   50 * time.Millisecond,
		Registerer:  prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	send := func(ctx context.Context, id string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(pushMain))
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", id)
		req.Header.Set("X-Hub-Signature-256", Sign(testSecret, []byte(pushMain)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// Both requests end with the test, so a failure does not leave the
	// server waiting for them.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan int, 1)
	go func() {
		code, err := send(ctx, "first")
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		first <- code
	}()
	<-entered
	time.Sleep(100 * time.Millisecond) // older than SlowAfter
	go func() { _, _ = send(ctx, "second") }()
	select {
	case code := <-first:
		if code != http.StatusServiceUnavailable {
			t.Errorf("the evicted request was answered %d, want %d (retry)", code, http.StatusServiceUnavailable)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted request still waits for the secret")
	}
}
