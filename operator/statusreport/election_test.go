package statusreport_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/statusreport"
	"github.com/styrmin/styrmin/testcluster"
)

// TestACommitsFinalStatusIsPostedByALeaderElectedHoursAfterItsTasksEnded:
// the leader posted a commit pending, its task ended while the host was
// down, and the leader went before the host came back. A replica elected
// more than an hour later took every commit that ended over an hour
// before as reported, and the commit stayed pending on the host for ever.
// Now the leaders record on the StyrminSource the time before which every
// commit that ended has its final status on the host (reportedThrough):
// the replica elected later posts that commit, and still asks the host
// about none reported before it.
func TestACommitsFinalStatusIsPostedByALeaderElectedHoursAfterItsTasksEnded(t *testing.T) {
	_, cl := agenttest.StartCluster(t, testcluster.Options{})
	ctx := context.Background()
	gh := &gitHub{}
	var down atomic.Bool
	var readsMu sync.Mutex
	var reads []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, `{"message":"Server Error"}`, http.StatusBadGateway)
			return
		}
		if r.Method == http.MethodGet {
			readsMu.Lock()
			reads = append(reads, r.URL.Path)
			readsMu.Unlock()
		}
		gh.ServeHTTP(w, r)
	}))
	defer srv.Close()
	srcKey := keyOf("styrmin-system", "styrmin")
	for _, ns := range []string{"apps", srcKey.Namespace} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Create(ctx, &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: srcKey.Namespace, Name: srcKey.Name},
		Spec: v1alpha1.StyrminSourceSpec{URL: "https://github.com/acme/desired", Cluster: "prod"}}); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Truncate(time.Second)
	earlier, late := strings.Repeat("1", 40), strings.Repeat("2", 40)
	create := func(tk *v1alpha1.StyrminTask) *v1alpha1.StyrminTask {
		t.Helper()
		st := tk.Status
		if err := cl.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		tk.Status = st
		if err := cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	create(taskOf("web", earlier, 2, v1alpha1.TaskSucceeded, base.Add(-30*time.Minute)))
	hub := create(taskOf("hub", late, 3, v1alpha1.TaskRunning, time.Time{}))

	reporter := func(clk *clock) *statusreport.Reporter {
		t.Helper()
		poster, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", Token: token})
		if err != nil {
			t.Fatal(err)
		}
		r, err := statusreport.New(statusreport.Options{Reader: cl, Writer: cl, Poster: poster, Cluster: "prod", Source: srcKey, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	clk := &clock{now: base}
	leader := reporter(clk)
	if err := leader.Report(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range gh.take() {
		got = append(got, p.sha[:1]+"="+string(p.State))
	}
	if want := "1=success 2=pending"; strings.Join(got, " ") != want {
		t.Fatalf("the leader's first round posted %v, want %s", got, want)
	}

	// The hub's task ends while the host is down; the leader tries for
	// the better part of an hour, then goes.
	hub.Status.Phase, hub.Status.FinishedAt = v1alpha1.TaskSucceeded, &metav1.Time{Time: base.Add(time.Minute)}
	if err := cl.Status().Update(ctx, hub); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	for _, at := range []time.Duration{2 * time.Minute, 40 * time.Minute} {
		clk.Set(base.Add(at))
		if err := leader.Report(ctx); err == nil || !strings.Contains(err.Error(), "did not answer") {
			t.Fatalf("a round at +%s while the host is down: %v, want it said", at, err)
		}
	}
	var src v1alpha1.StyrminSource
	if err := cl.Get(ctx, srcKey, &src); err != nil {
		t.Fatal(err)
	}
	if rt := src.Status.ReportedThrough; rt == nil || rt.After(base.Add(time.Minute)) {
		t.Fatalf("the StyrminSource records reportedThrough %v, want at most the unreported commit's end %s", rt, base.Add(time.Minute))
	}

	// Another replica is elected three hours later, the host back.
	down.Store(false)
	readsMu.Lock()
	reads = nil
	readsMu.Unlock()
	next := reporter(&clock{now: base.Add(3 * time.Hour)})
	if err := next.Report(ctx); err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, p := range gh.take() {
		got = append(got, p.sha[:1]+"="+string(p.State))
	}
	if want := "2=success"; strings.Join(got, " ") != want {
		t.Errorf("the replica elected three hours later posted %v, want %s: the commit the leader before never posted final", got, want)
	}
	readsMu.Lock()
	defer readsMu.Unlock()
	if strings.Contains(strings.Join(reads, " "), earlier) {
		t.Errorf("the host was asked about a commit reported before the time the leaders recorded: %v", reads)
	}
}
