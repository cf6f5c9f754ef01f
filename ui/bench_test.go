package ui_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/ui"
)

// The figures: the overview at 500 deployments under 200 ms of
// server time, the timeline of a deployment with 1,000 lock commits
// under 300 ms. Both are measured on the handler itself (no network),
// over a real API server read through a controller-runtime cache (as the
// agent serves it) and a real go-git repository.
//
//	STYRMIN_TESTCLUSTER_BIN=… go test -p 1 -run '^$' -bench . -benchtime 20x ./ui/

// serve runs one request on the handler and fails on a status other
// than 200.
func serve(b *testing.B, h http.Handler, path string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost"+path, nil))
	if rec.Code != http.StatusOK {
		b.Fatalf("GET %s: %d\n%s", path, rec.Code, rec.Body.String())
	}
}

// BenchmarkOverview500Deployments serves the overview of 500 deployments
// (10 environments of 50, cluster bench) with a task each, 500 lockfiles
// at git's head, read through a started cache (the agent) and straight
// from the API server (styrminctl ui).
func BenchmarkOverview500Deployments(b *testing.B) {
	const envs, perEnv = 10, 50
	c, cl := controlPlane(b)
	ctx := context.Background()
	d := newDesired(b)
	d.lock(b)
	template := d.lockAt(b, d.head(b), idDevWeb)
	files := map[string][]byte{}
	locks := map[string]int{}
	var instances []*resolver.Instance
	for e := range envs {
		for n := range perEnv {
			in := *template
			in.ID = resolver.ID{Cluster: "bench", Environment: fmt.Sprintf("env%02d", e), Name: fmt.Sprintf("app%02d", n)}
			ctxCopy := *template.Context
			ctxCopy.Deployment.Namespace = fmt.Sprintf("bench-%02d-%02d", e, n)
			in.Context = &ctxCopy
			data, err := resolver.EncodeLock(&in)
			if err != nil {
				b.Fatal(err)
			}
			files[in.ID.LockPath()] = data
			locks[in.ID.String()] = int(in.Sequence)
			instances = append(instances, &in)
		}
	}
	if _, err := d.repo.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{Files: files, Locks: locks}, nil
	}}); err != nil {
		b.Fatal(err)
	}
	// The cluster: each deployment written through the guard, Ready, with
	// a succeeded task (created once per control plane).
	var existing v1alpha1.StyrminDeploymentList
	if err := cl.List(ctx, &existing, client.MatchingLabels{v1alpha1.LabelCluster: "bench"}); err != nil {
		b.Fatal(err)
	}
	if len(existing.Items) < len(instances) {
		start := time.Now()
		for _, in := range instances {
			ns := in.Context.Deployment.Namespace
			if err := instance.EnsureNamespace(ctx, cl, ns, instance.DeploymentID(in.ID)); err != nil {
				b.Fatal(err)
			}
			if _, err := instance.WriteInstance(ctx, cl, ns, in); err != nil {
				b.Fatal(err)
			}
			var sd v1alpha1.StyrminDeployment
			if err := cl.Get(ctx, instance.Key(ns), &sd); err != nil {
				b.Fatal(err)
			}
			sd.Status = v1alpha1.StyrminDeploymentStatus{ObservedGeneration: sd.Generation, AppliedSequence: 1, ActiveSequence: 1,
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSucceeded, Message: "all components ready", LastTransitionTime: metav1.Now()}}}
			if err := cl.Status().Update(ctx, &sd); err != nil {
				b.Fatal(err)
			}
			did := instance.DeploymentID(in.ID)
			t := &v1alpha1.StyrminTask{
				ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(in.ID.Name, 1), Namespace: ns, Labels: did.Labels()},
				Spec:       v1alpha1.StyrminTaskSpec{Deployment: did, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: 1, Lock: v1alpha1.LockRef{Commit: d.head(b).String(), Path: in.ID.LockPath()}},
			}
			if err := cl.Create(ctx, t); err != nil {
				b.Fatal(err)
			}
			t.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, Workflow: v1alpha1.WorkflowCreate, StartedAt: at(0), FinishedAt: at(30),
				Steps: []v1alpha1.TaskStep{{Name: "setup/core/0:writeInstance", Mode: "core", Action: "writeInstance", State: v1alpha1.StepSucceeded, StartedAt: at(0), FinishedAt: at(30)}}}
			if err := cl.Status().Update(ctx, t); err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("wrote %d deployments and tasks in %s", len(instances), time.Since(start).Round(time.Millisecond))
	}
	scheme, err := operator.NewScheme()
	if err != nil {
		b.Fatal(err)
	}
	informers, err := cache.New(c.RESTConfig, cache.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = informers.Start(cctx) }()
	for _, r := range []struct {
		name   string
		reader client.Reader
	}{{"cache", informers}, {"direct", cl}} {
		b.Run(r.name, func(b *testing.B) {
			h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "bench", Reader: r.reader, Live: cl}}, Repo: d.repo})
			if err != nil {
				b.Fatal(err)
			}
			// The first request starts the informers and reads git's
			// head once.
			serve(b, h, "/?cluster=bench")
			if !informers.WaitForCacheSync(cctx) {
				b.Fatal("the cache did not sync")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/?cluster=bench", nil))
			if n := countRows(rec.Body.String()); n != envs*perEnv {
				b.Fatalf("the overview shows %d deployments of cluster bench, want %d", n, envs*perEnv)
			}
			start := time.Now()
			for b.Loop() {
				serve(b, h, "/?cluster=bench")
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/page")
		})
	}
	// A new handler for each request: git's head read again (500
	// lockfiles decoded and checked, the configuration loaded for the
	// holds), as after every new commit.
	b.Run("new-head", func(b *testing.B) {
		if !informers.WaitForCacheSync(cctx) {
			b.Fatal("the cache did not sync")
		}
		start := time.Now()
		for b.Loop() {
			h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "bench", Reader: informers, Live: cl}}, Repo: d.repo})
			if err != nil {
				b.Fatal(err)
			}
			serve(b, h, "/?cluster=bench")
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/page")
	})
}

func countRows(body string) int {
	n := 0
	for i := 0; i+len(`<tr class="state-`) <= len(body); i++ {
		if body[i:i+len(`<tr class="state-`)] == `<tr class="state-` {
			n++
		}
	}
	return n
}

// BenchmarkTimeline1000LockCommits serves the timeline of a deployment
// with 1,000 lock commits in a real go-git repository (each locking a new
// sequence of dev/hub, with its configuration-commit trailer). Cold: a
// new handler for each request (nothing read yet), on the agent's clone
// in memory, on disk packed (styrminctl ui's clone) and loose (as go-git
// wrote it); warm: one handler, which remembers the timeline of the
// head.
func BenchmarkTimeline1000LockCommits(b *testing.B) {
	const commits = 1000
	_, cl := controlPlane(b)
	ctx := context.Background()
	d := newDesired(b)
	d.lock(b)
	hub := d.lockAt(b, d.head(b), idDevHub)
	start := time.Now()
	for i := range commits - 1 {
		in := *hub
		in.Sequence = int64(i + 2)
		params := map[string]any{}
		for k, v := range hub.Context.Parameters {
			params[k] = v
		}
		params["workers"] = i + 3
		ctxCopy := *hub.Context
		ctxCopy.Parameters = params
		in.Context = &ctxCopy
		data, err := resolver.EncodeLock(&in)
		if err != nil {
			b.Fatal(err)
		}
		head := d.head(b)
		if _, err := d.repo.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
			return gitsource.Change{
				Files:    map[string][]byte{idDevHub.LockPath(): data},
				Locks:    map[string]int{idDevHub.String(): int(in.Sequence)},
				Trailers: []gitsource.Trailer{{Key: resolver.ConfigCommitTrailer, Value: head.String()}},
			}, nil
		}}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("made %d lock commits in %s", commits, time.Since(start).Round(time.Millisecond))
	path := "/d/local/dev/hub/timeline"
	run := func(b *testing.B, repo *gitsource.Repo, cold bool) {
		newHandler := func() *ui.Handler {
			h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: cl}}, Repo: repo})
			if err != nil {
				b.Fatal(err)
			}
			return h
		}
		rec := httptest.NewRecorder()
		newHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost"+path, nil))
		if n := countSubstring(rec.Body.String(), `<input type="radio" name="a"`); n != commits {
			b.Fatalf("the timeline shows %d entries, want %d", n, commits)
		}
		h := newHandler()
		serve(b, h, path)
		start := time.Now()
		for b.Loop() {
			if cold {
				h = newHandler()
			}
			serve(b, h, path)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/page")
	}
	// On disk as go-git wrote them: one file per object.
	b.Run("cold-loose", func(b *testing.B) { run(b, d.repo, true) })
	// On disk as a clone holds them (styrminctl ui): packed, then
	// opened again.
	git(b, d.dir, "repack", "-adq")
	packed, err := gitsource.Open(d.dir, gitsource.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cold-disk", func(b *testing.B) { run(b, packed, true) })
	// The agent's clone: in memory (its default, no --clone-dir).
	memory, err := gitsource.Clone(ctx, d.dir, "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cold", func(b *testing.B) { run(b, memory, true) })
	b.Run("warm", func(b *testing.B) { run(b, memory, false) })
	// One handler while the branch moves: a new lock commit before each
	// request, whose timeline is the one before and the new commit.
	b.Run("new-commit", func(b *testing.B) {
		h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: cl}}, Repo: packed})
		if err != nil {
			b.Fatal(err)
		}
		serve(b, h, path)
		var spent time.Duration
		for i := 0; i < b.N; i++ {
			in := *hub
			in.Sequence = int64(commits + 1 + i)
			in.Digest = fmt.Sprintf("sha256:bench-%d", i)
			data, err := resolver.EncodeLock(&in)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := packed.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
				return gitsource.Change{Files: map[string][]byte{idDevHub.LockPath(): data}, Locks: map[string]int{idDevHub.String(): int(in.Sequence)}}, nil
			}}); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			serve(b, h, path)
			spent += time.Since(start)
		}
		b.ReportMetric(float64(spent.Microseconds())/1000/float64(b.N), "ms/page")
	})
}

func countSubstring(s, sub string) int {
	n := 0
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			n++
		}
	}
	return n
}
