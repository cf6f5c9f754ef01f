package statusreport_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/internal/githubtest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/statusreport"
)

// host is a git host in memory: the status it shows per commit (of the
// reporter's one context), the posts and the reads it got.
type host struct {
	mu    sync.Mutex
	shown map[string]commitstatus.Status
	posts []posted
	reads []string
}

func newHost() *host { return &host{shown: map[string]commitstatus.Status{}} }

func (h *host) Post(_ context.Context, sha string, s commitstatus.Status) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.posts = append(h.posts, posted{sha, s})
	h.shown[sha] = s
	return nil
}

func (h *host) Current(_ context.Context, sha, _ string) (commitstatus.Status, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads = append(h.reads, sha)
	s, ok := h.shown[sha]
	return s, ok, nil
}

func (h *host) takePosts() []posted {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.posts
	h.posts = nil
	return out
}

// clock is a settable time.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// t0 is whole seconds: a task's FinishedAt keeps no finer time.
var t0 = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)

// taskOf is a task of deployment prod/dev/<name> for lock commit sha,
// finished at finished when phase is terminal.
func taskOf(name, sha string, seq int64, phase v1alpha1.TaskPhase, finished time.Time) *v1alpha1.StyrminTask {
	did := v1alpha1.DeploymentID{Cluster: "prod", Environment: "dev", Name: name}
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(name, seq), Namespace: "apps", Labels: did.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: did, Namespace: "apps", Workflow: v1alpha1.WorkflowUpdate, ToSequence: seq,
			Lock: v1alpha1.LockRef{Commit: sha, Path: "locks/prod/dev/" + name + ".lock.yaml"}},
		Status: v1alpha1.StyrminTaskStatus{Phase: phase},
	}
	if phase.Terminal() {
		tk.Status.FinishedAt = &metav1.Time{Time: finished}
	}
	return tk
}

func fakeReader(t *testing.T, tasks ...*v1alpha1.StyrminTask) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.StyrminTask{})
	for _, tk := range tasks {
		b = b.WithObjects(tk)
	}
	return b.Build()
}

// TestABackupOrRestoreLeavesItsLockCommitsStatusAlone: an operation task
// carries the lock of the change it follows, yet its result is not that
// commit's. A running backup posted the commit as pending, a failed one
// as a failure of the deployment, over the success of its change.
func TestABackupOrRestoreLeavesItsLockCommitsStatusAlone(t *testing.T) {
	ctx := context.Background()
	sha := strings.Repeat("e", 40)
	change := taskOf("hub", sha, 3, v1alpha1.TaskSucceeded, t0)
	backup := taskOf("hub", sha, 3, v1alpha1.TaskRunning, time.Time{})
	backup.Name = "hub-backup-nightly"
	backup.Spec.Operation = &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup}
	cl := fakeReader(t, change, backup)
	h := newHost()
	clk := &clock{now: t0.Add(-time.Minute)}
	r, err := statusreport.New(statusreport.Options{Reader: cl, Poster: h, Cluster: "prod", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.takePosts(); len(got) != 1 || got[0].State != commitstatus.Success || got[0].Description != "prod: 1 deployment applied" {
		t.Fatalf("with the change applied and a backup running: posted %+v, want the change's success alone", got)
	}
	backup.Status.Phase, backup.Status.FinishedAt = v1alpha1.TaskFailed, &metav1.Time{Time: t0.Add(time.Hour)}
	if err := cl.Status().Update(ctx, backup); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(time.Hour + time.Minute))
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.takePosts(); len(got) != 0 {
		t.Fatalf("a failed backup changed its lock commit's status: posted %+v", got)
	}
}

// TestAReplicaElectedLateDoesNotPostOverAnEarlierLeader: a standby is
// built with the agent and elected days later. It took its start from when
// it was built, so it posted every commit whose tasks ended since, and a
// failure whose failed task was pruned meanwhile became a success. Now
// commits that ended long before its election are left alone, and those
// that ended shortly before are posted only when the host shows no final
// status of theirs (the earlier leader may have gone before posting).
func TestAReplicaElectedLateDoesNotPostOverAnEarlierLeader(t *testing.T) {
	ctx := context.Background()
	elected := t0.Add(48 * time.Hour)
	old, failed, unposted, pending, after := strings.Repeat("1", 40), strings.Repeat("2", 40), strings.Repeat("3", 40), strings.Repeat("4", 40), strings.Repeat("5", 40)
	cl := fakeReader(t,
		// Its failed hub task pruned; the web task left succeeded.
		taskOf("web", old, 2, v1alpha1.TaskSucceeded, t0.Add(2*time.Hour)),
		taskOf("web", failed, 3, v1alpha1.TaskSucceeded, elected.Add(-10*time.Minute)),
		taskOf("web", unposted, 4, v1alpha1.TaskSucceeded, elected.Add(-5*time.Minute)),
		taskOf("web", pending, 5, v1alpha1.TaskSucceeded, elected.Add(-2*time.Minute)),
		taskOf("web", after, 6, v1alpha1.TaskRunning, time.Time{}),
	)
	h := newHost()
	h.shown[old] = commitstatus.Status{State: commitstatus.Failure, Context: "styrmin/prod", Description: "prod: prod/dev/hub failed; 1 deployment applied"}
	h.shown[failed] = commitstatus.Status{State: commitstatus.Failure, Context: "styrmin/prod", Description: "prod: prod/dev/hub failed; 1 deployment applied"}
	h.shown[pending] = commitstatus.Status{State: commitstatus.Pending, Context: "styrmin/prod", Description: "prod: 1 deployment running or waiting"}
	clk := &clock{now: t0}
	r, err := statusreport.New(statusreport.Options{Reader: cl, Poster: h, Cluster: "prod", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(elected)
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range h.takePosts() {
		got = append(got, p.sha[:1]+"="+string(p.State))
	}
	if want := "3=success 4=success 5=pending"; strings.Join(got, " ") != want {
		t.Errorf("the first round after the election posted %v, want %s: only what no leader reported as final", got, want)
	}
	if strings.Contains(strings.Join(h.reads, " "), old) {
		t.Error("the host was asked about a commit that ended long before the election")
	}
	if h.shown[old].State != commitstatus.Failure || h.shown[failed].State != commitstatus.Failure {
		t.Errorf("a failure became %s, %s", h.shown[old].State, h.shown[failed].State)
	}
	clk.Set(elected.Add(10 * time.Second))
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.takePosts(); len(got) != 0 {
		t.Errorf("nothing changed, yet it posted %+v", got)
	}
}

// TestARateLimitEndsTheRoundAndWaitsTheTimeItAsks: a rate limited post
// went on to the next commit, and every commit was posted again every
// round. Now the first refusal ends the round and no request goes before
// the time the answer asks for (a minute when it names none, an hour at
// most).
func TestARateLimitEndsTheRoundAndWaitsTheTimeItAsks(t *testing.T) {
	aDay := githubtest.RateLimit{Name: "a wait of a day is an hour", Answer: func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "86400")
		http.Error(w, `{"message":"Too many requests"}`, http.StatusTooManyRequests)
	}, Wait: time.Hour}
	for _, tc := range append(githubtest.RateLimits(), aDay) {
		t.Run(tc.Name, func(t *testing.T) {
			ctx := context.Background()
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				tc.Answer(w)
			}))
			defer srv.Close()
			poster, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", Token: token})
			if err != nil {
				t.Fatal(err)
			}
			cl := fakeReader(t,
				taskOf("web", strings.Repeat("a", 40), 2, v1alpha1.TaskRunning, time.Time{}),
				taskOf("hub", strings.Repeat("b", 40), 2, v1alpha1.TaskRunning, time.Time{}),
				taskOf("api", strings.Repeat("c", 40), 2, v1alpha1.TaskRunning, time.Time{}),
			)
			clk := &clock{now: t0}
			r, err := statusreport.New(statusreport.Options{Reader: cl, Poster: poster, Cluster: "prod", Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			round := func(at time.Duration, want int32) {
				t.Helper()
				clk.Set(t0.Add(at))
				err := r.Report(ctx)
				if n := requests.Swap(0); n != want {
					t.Fatalf("the round at +%s sent %d requests, want %d (error: %v)", at, n, want, err)
				}
				if want > 0 && (err == nil || strings.Contains(err.Error(), token)) {
					t.Fatalf("the round at +%s: error %v, want the refusal without the token", at, err)
				}
			}
			round(0, 1)
			// The answer's reset is read against the real clock, in whole
			// seconds: 30 s of slack, for a machine slow to answer. The
			// next wait (a minute at least) begins with the last request.
			round(tc.Wait-30*time.Second, 0)
			round(tc.Wait+30*time.Second, 1)
			round(tc.Wait+40*time.Second, 0)
		})
	}
}

// TestAHostThatDoesNotAnswerIsAskedAgainAfterABackOff: a 5xx or a refused
// connection went on to the next commit and every commit was posted again
// every round, thousands of requests a minute to a host in an outage. Now
// the first failure ends the round and the next waits 30 s, doubling while
// the outage lasts; the first answer ends it, and all commits are posted.
func TestAHostThatDoesNotAnswerIsAskedAgainAfterABackOff(t *testing.T) {
	ctx := context.Background()
	var requests atomic.Int32
	var down atomic.Bool
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if down.Load() {
			http.Error(w, `{"message":"Server Error"}`, http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{}`)
	}))
	defer srv.Close()
	poster, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	cl := fakeReader(t,
		taskOf("web", strings.Repeat("a", 40), 2, v1alpha1.TaskRunning, time.Time{}),
		taskOf("hub", strings.Repeat("b", 40), 2, v1alpha1.TaskRunning, time.Time{}),
		taskOf("api", strings.Repeat("c", 40), 2, v1alpha1.TaskRunning, time.Time{}),
	)
	clk := &clock{now: t0}
	r, err := statusreport.New(statusreport.Options{Reader: cl, Poster: poster, Cluster: "prod", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	round := func(at time.Duration, want int32, wantErr string) {
		t.Helper()
		clk.Set(t0.Add(at))
		err := r.Report(ctx)
		if n := requests.Swap(0); n != want {
			t.Fatalf("the round at +%s sent %d requests, want %d (error: %v)", at, n, want, err)
		}
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("the round at +%s: %v", at, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr) || strings.Contains(err.Error(), token)):
			t.Fatalf("the round at +%s: error %v, want one saying %q without the token", at, err, wantErr)
		}
	}
	round(0, 1, "no status is posted for 30s")
	round(20*time.Second, 0, "")
	round(31*time.Second, 1, "no status is posted for 1m0s")
	round(81*time.Second, 0, "")
	round(92*time.Second, 1, "no status is posted for 2m0s")
	down.Store(false)
	round(3*time.Minute, 0, "")
	round(4*time.Minute, 3, "")
	// The outage ended: the next one starts again at 30 s.
	r2 := taskOf("ops", strings.Repeat("d", 40), 2, v1alpha1.TaskRunning, time.Time{})
	if err := cl.Create(ctx, r2); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	round(5*time.Minute, 1, "no status is posted for 30s")

	// A host that refuses the connection is waited for alike.
	srv.Close()
	down.Store(false)
	r3 := taskOf("db", strings.Repeat("e", 40), 2, v1alpha1.TaskRunning, time.Time{})
	if err := cl.Create(ctx, r3); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(6 * time.Minute))
	if err := r.Report(ctx); err == nil || !strings.Contains(err.Error(), "no status is posted for 1m0s") {
		t.Fatalf("a refused connection: %v, want the round ended with a back-off of a minute", err)
	}
	clk.Set(t0.Add(6*time.Minute + 30*time.Second))
	if err := r.Report(ctx); err != nil {
		t.Fatalf("a round within the back-off sent a request: %v", err)
	}
}
