package source

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/githubtest"
	"github.com/styrmin/styrmin/internal/logtest"
)

// statusHost stands in for GitHub's commit status endpoint: it counts
// the requests, answers each with limit while it is set, refuses a token
// other than "good" (401), and records the statuses it took, in order.
type statusHost struct {
	mu       sync.Mutex
	requests int
	limit    func(w http.ResponseWriter)
	took     []string // "sha state", the sha's first four hex digits
}

func (h *statusHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	if h.limit != nil {
		h.limit(w)
		return
	}
	if r.Header.Get("Authorization") != "Bearer good" {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	var s commitstatus.Status
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
		http.Error(w, `{"message":"Problems parsing JSON"}`, http.StatusBadRequest)
		return
	}
	sha := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	h.took = append(h.took, sha[:4]+" "+string(s.State))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, `{}`)
}

// takeRequests returns the requests counted since the last call.
func (h *statusHost) takeRequests() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.requests
	h.requests = 0
	return n
}

func (h *statusHost) setLimit(limit func(w http.ResponseWriter)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.limit = limit
}

func (h *statusHost) taken() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.took, ",")
}

// statusClock is a settable time.
type statusClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *statusClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *statusClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// tokenOf is a token source whose token the test replaces.
type tokenOf struct {
	mu    sync.Mutex
	token string
}

func (s *tokenOf) Token(context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token, nil
}

func (s *tokenOf) Set(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}

// statusClient is a commit status client of srv with tokens.
func statusClient(t *testing.T, srv *httptest.Server, tokens *tokenOf) *commitstatus.Client {
	t.Helper()
	c, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", TokenSource: tokens.Token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTheLockModeSendsNoStatusWhileGitHubsRateLimitLasts: a rate limited
// lock status was posted again at every round (every 10 s), each request
// refused alike and spending what is left of the limit. Now no request
// goes before the wait the answer asked for (as the commit status
// reporter waits: a minute when it named none), and the statuses of the
// heads locked meanwhile are posted once it is over, oldest first.
func TestTheLockModeSendsNoStatusWhileGitHubsRateLimitLasts(t *testing.T) {
	for _, tc := range githubtest.RateLimits() {
		t.Run(tc.Name, func(t *testing.T) {
			gh := &statusHost{limit: tc.Answer}
			srv := httptest.NewServer(gh)
			defer srv.Close()
			t0 := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
			clk := &statusClock{now: t0}
			l := &Locker{opts: LockModeOptions{Statuses: statusClient(t, srv, &tokenOf{token: "good"}), StatusContext: "styrmin/local/lock",
				Log: logr.Discard(), Now: clk.Now}}
			locked := func(seq int) LockResult {
				return LockResult{Locked: []string{fmt.Sprintf("local/dev/web=%d", seq)}, Commit: gitsource.Hash{byte(seq)}}
			}
			round := func(at time.Duration, head gitsource.Hash, seq, want int) {
				t.Helper()
				clk.Set(t0.Add(at))
				l.round(head, locked(seq), nil, false)
				if n := gh.takeRequests(); n != want {
					t.Fatalf("the round at +%s sent %d requests, want %d", at, n, want)
				}
			}
			round(0, gitsource.Hash{0xa1, 0xa1}, 2, 1)
			// The answer's reset is read against the real clock, in whole
			// seconds: 30 s of slack, for a machine slow to answer.
			round(10*time.Second, gitsource.Hash{0xb2, 0xb2}, 3, 0)
			round(tc.Wait-30*time.Second, gitsource.Hash{0xc3, 0xc3}, 4, 0)
			if n := len(l.pendingStatuses); n != 3 {
				t.Fatalf("%d statuses kept to post, want the three heads'", n)
			}
			gh.setLimit(nil)
			clk.Set(t0.Add(tc.Wait + 30*time.Second))
			l.postStatus(context.Background())
			if n := gh.takeRequests(); n != 3 {
				t.Errorf("once the wait was over %d requests were sent, want one per head", n)
			}
			if got, want := gh.taken(), "a1a1 success,b2b2 success,c3c3 success"; got != want {
				t.Errorf("GitHub took %q, want %q: every head's, oldest first", got, want)
			}
		})
	}
}

// TestTheLockModeLogsARefusedTokenOnceUntilGitHubTakesOneAgain: a token
// GitHub refuses (401: expired, revoked) logged an error at every round,
// every 10 s for as long as nobody replaced it. Now it is logged when the
// refusals start, and once at info when a token is taken again; the
// statuses decided meanwhile are posted then, and a later refusal is
// logged again.
func TestTheLockModeLogsARefusedTokenOnceUntilGitHubTakesOneAgain(t *testing.T) {
	gh := &statusHost{}
	srv := httptest.NewServer(gh)
	defer srv.Close()
	tokens := &tokenOf{token: "expired"}
	logs, log := logtest.New(0)
	l, err := NewLocker(LockModeOptions{URL: "https://github.com/acme/desired.git", Statuses: statusClient(t, srv, tokens), StatusContext: "styrmin/local/lock", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	heads := []gitsource.Hash{{0xa1, 0xa1}, {0xb2, 0xb2}, {0xc3, 0xc3}, {0xd4, 0xd4}, {0xe5, 0xe5}, {0xf6, 0xf6}}
	for i, head := range heads[:5] {
		l.round(head, LockResult{Locked: []string{fmt.Sprintf("local/dev/web=%d", i+2)}, Commit: gitsource.Hash{byte(i)}}, nil, false)
	}
	// Asked at every round: a token replaced in its Secret is used at once.
	if n := gh.takeRequests(); n != 5 {
		t.Fatalf("five rounds sent %d requests, want one each", n)
	}
	if errs := logs.Errors(); len(errs) != 1 || !strings.Contains(errs[0], "401") || !strings.Contains(errs[0], "refuses the token") {
		t.Fatalf("five rounds refused for the token logged %d errors, want one saying so:\n%s", len(errs), strings.Join(errs, "\n"))
	}

	tokens.Set("good")
	l.postStatus(context.Background())
	if got, want := gh.taken(), "a1a1 success,b2b2 success,c3c3 success,d4d4 success,e5e5 success"; got != want {
		t.Fatalf("with the token replaced GitHub took %q, want %q", got, want)
	}
	errs, infoLines := logs.Errors(), logs.Infos()
	if len(errs) != 1 {
		t.Errorf("%d errors logged, want still the one:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	again := 0
	for _, line := range infoLines {
		if strings.Contains(line, "takes the token") {
			again++
		}
	}
	if again != 1 {
		t.Errorf("%d info lines say the token is taken again, want one:\n%s", again, strings.Join(infoLines, "\n"))
	}

	// Refused again later: logged again, once.
	tokens.Set("revoked")
	l.round(heads[5], LockResult{Locked: []string{"local/dev/web=7"}, Commit: gitsource.Hash{0x07}}, nil, false)
	l.postStatus(context.Background())
	if errs := logs.Errors(); len(errs) != 2 {
		t.Errorf("a token refused again logged %d errors in all, want a second one:\n%s", len(errs), strings.Join(errs, "\n"))
	}
}

// TestTheLockModeBacksOffFromAHostThatDoesNotAnswer: a host that did not
// answer (a 5xx, no connection) was asked again at every round, every
// 10 s for as long as the outage lasted, each failure logged. Now the
// lock mode backs off as the commit status reporter does (30 s doubling
// to 10 minutes), logs the outage once when it starts and once when it
// ends, and posts the statuses of the heads locked meanwhile then, oldest
// first; the next outage starts again at 30 s.
func TestTheLockModeBacksOffFromAHostThatDoesNotAnswer(t *testing.T) {
	down := func(w http.ResponseWriter) {
		http.Error(w, `{"message":"Server Error"}`, http.StatusBadGateway)
	}
	gh := &statusHost{limit: down}
	srv := httptest.NewServer(gh)
	defer srv.Close()
	t0 := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	clk := &statusClock{now: t0}
	logs, log := logtest.New(0)
	l := &Locker{opts: LockModeOptions{Statuses: statusClient(t, srv, &tokenOf{token: "good"}), StatusContext: "styrmin/local/lock",
		Log: log, Now: clk.Now}}
	seq := 0
	var want []string
	// round locks a new head at +at and wants n requests sent.
	round := func(at time.Duration, n int) {
		t.Helper()
		seq++
		head := gitsource.Hash{byte(seq), byte(seq)}
		want = append(want, fmt.Sprintf("%02x%02x success", seq, seq))
		clk.Set(t0.Add(at))
		l.round(head, LockResult{Locked: []string{fmt.Sprintf("local/dev/web=%d", seq)}, Commit: gitsource.Hash{byte(seq)}}, nil, false)
		if got := gh.takeRequests(); got != n {
			t.Fatalf("the round at +%s sent %d requests, want %d", at, got, n)
		}
	}

	at := time.Duration(0)
	round(at, 1)
	for _, wait := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		round(at+10*time.Second, 0)
		round(at+wait-time.Second, 0)
		at += wait
		round(at, 1)
	}
	if errs := logs.Errors(); len(errs) != 1 || !strings.Contains(errs[0], "502") || !strings.Contains(errs[0], "does not answer") {
		t.Fatalf("an outage of %d rounds logged %d errors, want one saying so:\n%s", seq, len(errs), strings.Join(errs, "\n"))
	}

	gh.setLimit(nil)
	at += 10 * time.Minute
	round(at, seq+1)
	if got, want := gh.taken(), strings.Join(want, ","); got != want {
		t.Errorf("once it answered GitHub took %q, want %q: every head's, oldest first", got, want)
	}
	ended := 0
	for _, line := range logs.Infos() {
		if strings.Contains(line, "answers the lock's commit statuses again") {
			ended++
		}
	}
	if ended != 1 {
		t.Errorf("%d info lines say the host answers again, want one:\n%s", ended, strings.Join(logs.Infos(), "\n"))
	}

	// The next outage is logged again, and backs off from 30 s again.
	gh.setLimit(down)
	at += time.Minute
	round(at, 1)
	round(at+29*time.Second, 0)
	round(at+30*time.Second, 1)
	if errs := logs.Errors(); len(errs) != 2 {
		t.Errorf("a second outage logged %d errors in all, want a second one:\n%s", len(errs), strings.Join(errs, "\n"))
	}
}
