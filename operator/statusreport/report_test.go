package statusreport_test

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

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/statusreport"
	"github.com/styrmin/styrmin/testcluster"
)

const token = "ghp_reporter-test-token-42"

// gitHub implements POST /repos/{owner}/{repo}/statuses/{sha}, recording
// the accepted statuses in order, and GET
// /repos/{owner}/{repo}/commits/{sha}/status, the newest of each context.
type gitHub struct {
	mu  sync.Mutex
	got []posted
	// all is every status accepted, take does not clear it.
	all []posted
}

type posted struct {
	sha string
	commitstatus.Status
}

func (g *gitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if r.Method == http.MethodGet && len(parts) == 6 && strings.Join(parts[:4], "/") == "repos/acme/desired/commits" && parts[5] == "status" {
		g.serveCombined(w, r, parts[4])
		return
	}
	if r.Method != http.MethodPost || len(parts) != 5 || parts[0] != "repos" || parts[1] != "acme" || parts[2] != "desired" || parts[3] != "statuses" {
		http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+token {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	var s commitstatus.Status
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil || s.Context == "" {
		http.Error(w, `{"message":"Validation Failed"}`, http.StatusUnprocessableEntity)
		return
	}
	g.mu.Lock()
	g.got = append(g.got, posted{parts[4], s})
	g.all = append(g.all, posted{parts[4], s})
	g.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{}`))
}

func (g *gitHub) serveCombined(w http.ResponseWriter, r *http.Request, sha string) {
	if r.Header.Get("Authorization") != "Bearer "+token {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	g.mu.Lock()
	newest := map[string]commitstatus.Status{}
	for _, p := range g.all {
		if p.sha == sha {
			newest[p.Context] = p.Status
		}
	}
	g.mu.Unlock()
	var out struct {
		Statuses []commitstatus.Status `json:"statuses"`
	}
	for _, s := range newest {
		out.Statuses = append(out.Statuses, s)
	}
	_ = json.NewEncoder(w).Encode(out)
}

func (g *gitHub) take() []posted {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.got
	g.got = nil
	return out
}

// TestReporterPostsEachLockCommitsResultOnceItChanges writes the tasks of
// two lock commits into a real API server and reports: pending while one
// runs, then failure when a task of the commit fails, success for the
// commit whose tasks succeeded or were superseded; nothing is posted
// again while nothing changes, and the token is in no log line.
func TestReporterPostsEachLockCommitsResultOnceItChanges(t *testing.T) {
	_, cl := agenttest.StartCluster(t, testcluster.Options{})
	ctx := context.Background()
	gh := &gitHub{}
	srv := httptest.NewServer(gh)
	defer srv.Close()
	poster, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var logMu sync.Mutex
	log := funcr.New(func(prefix, args string) {
		logMu.Lock()
		logs.WriteString(prefix + " " + args + "\n")
		logMu.Unlock()
	}, funcr.Options{Verbosity: 10})
	r, err := statusreport.New(statusreport.Options{Reader: cl, Poster: poster, Cluster: "prod", TargetURL: "https://styrmin.example.com/", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	first, second := strings.Repeat("a", 40), strings.Repeat("b", 40)
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		t.Fatal(err)
	}
	task := func(name, env, commit string, phase v1alpha1.TaskPhase) *v1alpha1.StyrminTask {
		did := v1alpha1.DeploymentID{Cluster: "prod", Environment: env, Name: name}
		tk := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: env + "-" + name + "-" + commit[:1], Namespace: "apps", Labels: did.Labels()},
			Spec:       v1alpha1.StyrminTaskSpec{Deployment: did, Namespace: "apps", Workflow: v1alpha1.WorkflowUpdate, ToSequence: 2, Lock: v1alpha1.LockRef{Commit: commit, Path: "locks/prod/" + env + "/" + name + ".lock.yaml"}},
		}
		if err := cl.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		tk.Status.Phase = phase
		if phase.Terminal() {
			tk.Status.FinishedAt = &metav1.Time{Time: time.Now()}
		}
		if err := cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	task("web", "dev", first, v1alpha1.TaskSucceeded)
	task("hub", "dev", first, v1alpha1.TaskRunning)
	task("web", "staging", second, v1alpha1.TaskSucceeded)
	task("hub", "staging", second, v1alpha1.TaskSuperseded)
	// Another cluster's task (a shared API server in a test) is not ours.
	other := v1alpha1.DeploymentID{Cluster: "edge", Environment: "dev", Name: "web"}
	if err := cl.Create(ctx, &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: "edge-web", Namespace: "apps"},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: other, Namespace: "apps", Workflow: v1alpha1.WorkflowCreate, ToSequence: 1, Lock: v1alpha1.LockRef{Commit: strings.Repeat("c", 40), Path: "x"}}}); err != nil {
		t.Fatal(err)
	}

	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	got := gh.take()
	if len(got) != 2 {
		t.Fatalf("posted %d statuses, want one per lock commit: %+v", len(got), got)
	}
	if g := got[0]; g.sha != first || g.State != commitstatus.Pending || g.Context != "styrmin/prod" || g.TargetURL != "https://styrmin.example.com/" ||
		g.Description != "prod: 1 deployment applied; 1 deployment running or waiting" {
		t.Errorf("the first commit: %+v", g)
	}
	if g := got[1]; g.sha != second || g.State != commitstatus.Success || g.Description != "prod: 1 deployment applied; 1 deployment superseded by a newer instance" {
		t.Errorf("the second commit: %+v", g)
	}
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gh.take(); len(got) != 0 {
		t.Errorf("nothing changed, yet it posted %+v", got)
	}

	var hub v1alpha1.StyrminTask
	if err := cl.Get(ctx, keyOf("apps", "dev-hub-a"), &hub); err != nil {
		t.Fatal(err)
	}
	hub.Status.Phase = v1alpha1.TaskFailed
	if err := cl.Status().Update(ctx, &hub); err != nil {
		t.Fatal(err)
	}
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	got = gh.take()
	if len(got) != 1 || got[0].sha != first || got[0].State != commitstatus.Failure || got[0].Description != "prod: prod/dev/hub failed; 1 deployment applied" {
		t.Errorf("after the hub's task failed: %+v", got)
	}

	// The agent keeps the newest finished tasks of each deployment: the
	// failed task of the first commit is pruned while its web task stays.
	// The commit failed; what is left must not post it as a success.
	if err := cl.Delete(ctx, &hub); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*time.Second, "the pruned task to be gone from the reader", func(ctx context.Context) (bool, string, error) {
		var list v1alpha1.StyrminTaskList
		if err := cl.List(ctx, &list); err != nil {
			return false, err.Error(), nil
		}
		return len(list.Items) == 4, fmt.Sprintf("%d tasks", len(list.Items)), nil
	})
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gh.take(); len(got) != 0 {
		t.Errorf("a failed commit whose failed task was pruned was posted again: %+v", got)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), "reported a lock commit's result") || strings.Contains(logs.String(), token) {
		t.Errorf("the log should tell what was reported and never hold the token:\n%s", logs.String())
	}
}

func keyOf(namespace, name string) client.ObjectKey {
	return client.ObjectKey{Namespace: namespace, Name: name}
}

// TestAStatusRefusedForAnExpiredTokenIsPostedWithTheNextToken: a refused
// token (401: expired, revoked) is no verdict on the status. It was
// remembered like a refusal for good, so the commit's status was never
// posted, not even once the token was replaced.
func TestAStatusRefusedForAnExpiredTokenIsPostedWithTheNextToken(t *testing.T) {
	_, cl := agenttest.StartCluster(t, testcluster.Options{})
	ctx := context.Background()
	gh := &gitHub{}
	srv := httptest.NewServer(gh)
	defer srv.Close()
	var mu sync.Mutex
	current := "ghs_expired"
	poster, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired",
		TokenSource: func(context.Context) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			return current, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := statusreport.New(statusreport.Options{Reader: cl, Poster: poster, Cluster: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		t.Fatal(err)
	}
	sha := strings.Repeat("d", 40)
	did := v1alpha1.DeploymentID{Cluster: "prod", Environment: "dev", Name: "web"}
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: "dev-web-2", Namespace: "apps", Labels: did.Labels()},
		Spec:       v1alpha1.StyrminTaskSpec{Deployment: did, Namespace: "apps", Workflow: v1alpha1.WorkflowUpdate, ToSequence: 2, Lock: v1alpha1.LockRef{Commit: sha, Path: "locks/prod/dev/web.lock.yaml"}},
	}
	if err := cl.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	tk.Status.Phase, tk.Status.FinishedAt = v1alpha1.TaskSucceeded, &metav1.Time{Time: time.Now()}
	if err := cl.Status().Update(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if err := r.Report(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("with an expired token: %v, want the 401", err)
	}
	mu.Lock()
	current = token
	mu.Unlock()
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gh.take(); len(got) != 1 || got[0].sha != sha || got[0].State != commitstatus.Success {
		t.Fatalf("with the token that replaced it: posted %+v, want the commit's success", got)
	}
}

// TestALockCommitWhoseLockfileTheAgentRefusedIsAFailure: a lockfile the
// sync refused (recorded on the StyrminSource) makes its commit's status
// a failure naming the deployment, whatever its other tasks did; a commit
// whose every lockfile was refused has no task and is reported too. Once
// the refusal is no longer kept (the newest few are), the failure posted
// stands.
func TestALockCommitWhoseLockfileTheAgentRefusedIsAFailure(t *testing.T) {
	_, cl := agenttest.StartCluster(t, testcluster.Options{})
	ctx := context.Background()
	gh := &gitHub{}
	srv := httptest.NewServer(gh)
	defer srv.Close()
	poster, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	srcKey := keyOf("styrmin-system", "styrmin")
	r, err := statusreport.New(statusreport.Options{Reader: cl, Poster: poster, Cluster: "prod", Source: srcKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"apps", srcKey.Namespace} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	mixed, allRefused := strings.Repeat("e", 40), strings.Repeat("f", 40)
	web := v1alpha1.DeploymentID{Cluster: "prod", Environment: "dev", Name: "web"}
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: "dev-web-2", Namespace: "apps", Labels: web.Labels()},
		Spec:       v1alpha1.StyrminTaskSpec{Deployment: web, Namespace: "apps", Workflow: v1alpha1.WorkflowUpdate, ToSequence: 2, Lock: v1alpha1.LockRef{Commit: mixed, Path: "locks/prod/dev/web.lock.yaml"}},
	}
	if err := cl.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	tk.Status.Phase, tk.Status.FinishedAt = v1alpha1.TaskSucceeded, &metav1.Time{Time: time.Now()}
	if err := cl.Status().Update(ctx, tk); err != nil {
		t.Fatal(err)
	}
	src := &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: srcKey.Namespace, Name: srcKey.Name},
		Spec: v1alpha1.StyrminSourceSpec{URL: "https://github.com/acme/desired", Cluster: "prod"}}
	if err := cl.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	src.Status.Refused = []v1alpha1.RefusedLock{
		{Commit: mixed, Path: "locks/prod/dev/api.lock.yaml", Reason: v1alpha1.ReasonInvalidLock, Message: "sequence 3 does not follow 4", Time: now},
		{Commit: allRefused, Path: "locks/prod/staging/api.lock.yaml", Reason: v1alpha1.ReasonLockDeleted, Message: "deleted by hand", Time: now},
		// Another cluster's (the source followed it before): not ours.
		{Commit: mixed, Path: "locks/edge/dev/api.lock.yaml", Reason: v1alpha1.ReasonInvalidLock, Message: "x", Time: now},
	}
	if err := cl.Status().Update(ctx, src); err != nil {
		t.Fatal(err)
	}

	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	got := gh.take()
	if len(got) != 2 {
		t.Fatalf("posted %+v; want a status for each commit", got)
	}
	if g := got[0]; g.sha != mixed || g.State != commitstatus.Failure ||
		g.Description != "prod: prod/dev/api not applied: lockfile refused (see the StyrminSource); 1 deployment applied" {
		t.Errorf("the commit with a refused lockfile beside a task that succeeded: %+v", g)
	}
	if g := got[1]; g.sha != allRefused || g.State != commitstatus.Failure || !strings.HasPrefix(g.Description, "prod: prod/staging/api not applied") {
		t.Errorf("the commit whose only lockfile was refused: %+v", g)
	}

	// The refusals age out of the StyrminSource's list: the failures stand.
	src.Status.Refused = nil
	if err := cl.Status().Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*time.Second, "the reader to see the refusals gone", func(ctx context.Context) (bool, string, error) {
		var s v1alpha1.StyrminSource
		if err := cl.Get(ctx, srcKey, &s); err != nil {
			return false, err.Error(), nil
		}
		return len(s.Status.Refused) == 0, fmt.Sprintf("%d refused", len(s.Status.Refused)), nil
	})
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gh.take(); len(got) != 0 {
		t.Errorf("a failed commit whose refusal is no longer kept was posted again: %+v", got)
	}

	// A commit whose task still runs beside a refusal: failure; the
	// refusal ages out of the StyrminSource while the task runs, then the
	// task ends: still a failure.
	running := strings.Repeat("9", 40)
	hub := v1alpha1.DeploymentID{Cluster: "prod", Environment: "dev", Name: "hub"}
	ht := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: "dev-hub-3", Namespace: "apps", Labels: hub.Labels()},
		Spec:       v1alpha1.StyrminTaskSpec{Deployment: hub, Namespace: "apps", Workflow: v1alpha1.WorkflowUpdate, ToSequence: 3, Lock: v1alpha1.LockRef{Commit: running, Path: "locks/prod/dev/hub.lock.yaml"}},
	}
	if err := cl.Create(ctx, ht); err != nil {
		t.Fatal(err)
	}
	ht.Status.Phase = v1alpha1.TaskRunning
	if err := cl.Status().Update(ctx, ht); err != nil {
		t.Fatal(err)
	}
	src.Status.Refused = []v1alpha1.RefusedLock{{Commit: running, Path: "locks/prod/dev/api.lock.yaml", Reason: v1alpha1.ReasonInvalidLock, Message: "m", Time: metav1.Now()}}
	if err := cl.Status().Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	waitRefused := func(n int) {
		agenttest.WaitUntil(t, 10*time.Second, "the reader to see the refusals", func(ctx context.Context) (bool, string, error) {
			var s v1alpha1.StyrminSource
			if err := cl.Get(ctx, srcKey, &s); err != nil {
				return false, err.Error(), nil
			}
			return len(s.Status.Refused) == n, fmt.Sprintf("%d refused", len(s.Status.Refused)), nil
		})
	}
	waitRefused(1)
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gh.take(); len(got) != 1 || got[0].sha != running || got[0].State != commitstatus.Failure {
		t.Fatalf("a refusal beside a running task: posted %+v; want the commit's failure", got)
	}
	src.Status.Refused = nil
	if err := cl.Status().Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	waitRefused(0)
	ht.Status.Phase, ht.Status.FinishedAt = v1alpha1.TaskSucceeded, &metav1.Time{Time: time.Now()}
	if err := cl.Status().Update(ctx, ht); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*time.Second, "the reader to see the task end", func(ctx context.Context) (bool, string, error) {
		var got v1alpha1.StyrminTask
		if err := cl.Get(ctx, keyOf("apps", "dev-hub-3"), &got); err != nil {
			return false, err.Error(), nil
		}
		return got.Status.Phase == v1alpha1.TaskSucceeded, string(got.Status.Phase), nil
	})
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	for _, g := range gh.take() {
		if g.sha == running && g.State != commitstatus.Failure {
			t.Errorf("the refused commit's status turned %s once its refusal aged out and its task ended: %+v", g.State, g)
		}
	}
}
