package statusreport_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/logtest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/statusreport"
)

// TestTheReporterLogsARefusedTokenOnceUntilGitHubTakesOneAgain: a token
// GitHub refuses (401: expired, revoked) logged an error at every round,
// every 10 s for as long as nobody replaced it. Now the running reporter
// logs it when the refusals start, and once at info when a token is
// taken again; it still asks at every round, so a token replaced in its
// Secret posts the statuses that waited.
func TestTheReporterLogsARefusedTokenOnceUntilGitHubTakesOneAgain(t *testing.T) {
	var mu sync.Mutex
	requests, took := 0, 0
	current := "ghs_expired"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		requests++
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
			return
		}
		took++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{}`)
	}))
	defer srv.Close()
	poster, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired",
		TokenSource: func(context.Context) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			return current, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	logs, log := logtest.New(0)
	cl := fakeReader(t,
		taskOf("web", strings.Repeat("a", 40), 2, v1alpha1.TaskRunning, time.Time{}),
		taskOf("hub", strings.Repeat("b", 40), 2, v1alpha1.TaskRunning, time.Time{}),
	)
	r, err := statusreport.New(statusreport.Options{Reader: cl, Poster: poster, Cluster: "prod", Interval: 10 * time.Millisecond, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Start(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	agenttest.WaitUntil(t, 30*time.Second, "five rounds refused for the token", func(context.Context) (bool, string, error) {
		mu.Lock()
		defer mu.Unlock()
		return requests >= 5, fmt.Sprintf("%d requests", requests), nil
	})
	mu.Lock()
	current = token
	mu.Unlock()
	agenttest.WaitUntil(t, 30*time.Second, "both statuses posted with the token that replaced it", func(context.Context) (bool, string, error) {
		mu.Lock()
		defer mu.Unlock()
		return took == 2, fmt.Sprintf("%d posted", took), nil
	})
	cancel()
	<-done

	errorsLogged, infos := logs.Errors(), logs.Infos()
	mu.Lock()
	defer mu.Unlock()
	if len(errorsLogged) != 1 || !strings.Contains(errorsLogged[0], "401") || !strings.Contains(errorsLogged[0], "refuses the commit status token") {
		t.Errorf("%d rounds refused for the token logged %d errors, want one saying so:\n%s", requests-took, len(errorsLogged), strings.Join(errorsLogged, "\n"))
	}
	again := 0
	for _, line := range infos {
		if strings.Contains(line, "takes the commit status token again") {
			again++
		}
	}
	if again != 1 {
		t.Errorf("%d info lines say the token is taken again, want one:\n%s", again, strings.Join(infos, "\n"))
	}
}
