package ui_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/ui"
)

// commits makes n empty commits on the repository's branch and returns
// them: heads of plans that are all different.
func (d *desired) commits(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		git(t, d.dir, "commit", "--quiet", "--allow-empty", "-m", fmt.Sprintf("empty %d", i))
		out = append(out, git(t, d.dir, "rev-parse", "HEAD"))
	}
	return out
}

// Plans take seconds of the agent's CPU, one at a time: a request whose
// client went away while it waited for its turn computes nothing. The
// planner stands in for the real one (a computation, no I/O); 8 plans of
// different heads are asked for and given up on at 50 ms.
func TestAPlanWhoseClientWentAwayWhileItWaitedIsNotComputed(t *testing.T) {
	d := newDesired(t)
	heads := d.commits(t, 8)
	var runs atomic.Int32
	h, err := ui.New(ui.Options{
		Clusters: []ui.Cluster{{Name: "local", Reader: emptyCluster(t)}},
		Repo:     d.repo,
		Planner: ui.PlannerFunc(func(planner.Trees, planner.Options) (*planner.Plan, error) {
			runs.Add(1)
			time.Sleep(300 * time.Millisecond)
			return &planner.Plan{}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	var wg sync.WaitGroup
	for _, head := range heads {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/plan?head="+head, nil)
			if err != nil {
				t.Error(err)
				return
			}
			if resp, err := srv.Client().Do(req); err == nil {
				resp.Body.Close()
				t.Errorf("the plan of %s was answered within 50 ms", head)
			}
		})
	}
	wg.Wait()
	// Close waits for the handlers still running.
	srv.Close()
	if n := runs.Load(); n > 1 {
		t.Errorf("%d plans computed for clients that had gone, want at most the one that started before they went", n)
	}
}

// A failed plan (a sandbox child killed, say) is remembered for a few
// seconds only: the page shows the plan once it can be computed, not the
// failure until 32 other plans push it out.
func TestAFailedPlanIsComputedAgainAfterAFewSeconds(t *testing.T) {
	d := newDesired(t)
	head := d.commits(t, 1)[0]
	var clockMu sync.Mutex
	clock := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var runs atomic.Int32
	h, err := ui.New(ui.Options{
		Clusters: []ui.Cluster{{Name: "local", Reader: emptyCluster(t)}},
		Repo:     d.repo,
		Now:      func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock },
		Planner: ui.PlannerFunc(func(planner.Trees, planner.Options) (*planner.Plan, error) {
			if runs.Add(1) == 1 {
				return nil, errors.New("loading driver webapp 1.1.0: sandbox: signal: killed")
			}
			return &planner.Plan{}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	page := func() string {
		t.Helper()
		rec := getHost(h, "localhost:8090", "/plan?head="+head)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /plan: %d\n%s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	if body := page(); !strings.Contains(body, "signal: killed") {
		t.Fatalf("the first plan's failure is not shown:\n%s", body)
	}
	// A reload at once shares the failure: no plan again per request.
	if body := page(); !strings.Contains(body, "signal: killed") || runs.Load() != 1 {
		t.Errorf("a reload at once computed %d plans, want the failure remembered:\n%s", runs.Load(), body)
	}
	clockMu.Lock()
	clock = clock.Add(11 * time.Second)
	clockMu.Unlock()
	body := page()
	if strings.Contains(body, "signal: killed") || !strings.Contains(body, `<section class="plan">`) {
		t.Errorf("11 s after the failure the page still shows it, not the plan:\n%s", body)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("%d plans computed, want 2", n)
	}
}
