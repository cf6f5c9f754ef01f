package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/ui"
)

// TestAStandbyReplicasPagesFetchTheHeadItsStyrminSourceRecordsFetched
// pins ui.Follow, what keeps the pages of an agent replica that is not
// elected (whose clone no syncer fetches) from showing the repository as
// it was when the pod started: when the StyrminSource records a fetched
// head the clone is not at, the page fetches before it reads; the
// requests that arrive meanwhile wait for that one fetch; there is at
// most one fetch every 10 s; an elected replica, and a clone at the
// recorded head, fetch nothing.
func TestAStandbyReplicasPagesFetchTheHeadItsStyrminSourceRecordsFetched(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t)
	first := srv.Commit("desired", "first", map[string][]byte{"styrmin.cue": []byte("// repository settings\n")})
	clone, err := gitsource.Clone(ctx, srv.RepoURL("desired"), "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "styrmin-system", Name: "styrmin"}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&v1alpha1.StyrminSource{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec:       v1alpha1.StyrminSourceSpec{URL: srv.RepoURL("desired"), Branch: "main", Cluster: "local"},
	}).Build()
	// fetched is what the elected replica's syncer records.
	fetched := func(commit string) {
		t.Helper()
		var src v1alpha1.StyrminSource
		if err := cl.Get(ctx, key, &src); err != nil {
			t.Fatal(err)
		}
		src.Status.LastFetchedCommit = commit
		if err := cl.Update(ctx, &src); err != nil {
			t.Fatal(err)
		}
	}
	var clockMu sync.Mutex
	clock := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock() }
	var standby atomic.Bool
	var fetches atomic.Int32
	h, err := ui.New(ui.Options{
		Clusters: []ui.Cluster{{Name: "local", Reader: cl}},
		Repo:     clone,
		Now:      func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock },
		Follow: &ui.Follow{Reader: cl, Source: key, Standby: standby.Load,
			Fetch: func(ctx context.Context) error {
				fetches.Add(1)
				// Slow enough that the concurrent requests arrive while
				// it runs.
				time.Sleep(100 * time.Millisecond)
				_, err := clone.Fetch(ctx)
				return err
			}},
	})
	if err != nil {
		t.Fatal(err)
	}
	headShown := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET /: %d\n%s", rec.Code, rec.Body)
			return ""
		}
		body := rec.Body.String()
		_, after, ok := strings.Cut(body, "git head <code>")
		head, _, _ := strings.Cut(after, "</code>")
		if !ok {
			t.Errorf("the overview shows no git head:\n%s", body)
		}
		return head
	}
	short := func(commit string) string {
		t.Helper()
		h, err := gitsource.ParseHash(commit)
		if err != nil {
			t.Fatal(err)
		}
		return h.Short()
	}

	second := srv.Commit("desired", "second", map[string][]byte{"README.md": []byte("second\n")})
	fetched(second)
	// Elected: its syncer fetches; the pages do not.
	if got := headShown(); got != short(first) || fetches.Load() != 0 {
		t.Fatalf("elected: the overview shows %s after %d fetches; want the clone's %s, no fetch", got, fetches.Load(), short(first))
	}

	standby.Store(true)
	var wg sync.WaitGroup
	shown := make([]string, 6)
	for i := range shown {
		wg.Add(1)
		go func() { defer wg.Done(); shown[i] = headShown() }()
	}
	wg.Wait()
	for i, got := range shown {
		if got != short(second) {
			t.Errorf("standby, request %d: the overview shows %s; want the fetched %s", i, got, short(second))
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d concurrent requests made %d fetches; want 1, shared", len(shown), n)
	}

	// At most one fetch every 10 s.
	third := srv.Commit("desired", "third", map[string][]byte{"README.md": []byte("third\n")})
	fetched(third)
	advance(5 * time.Second)
	if got := headShown(); got != short(second) || fetches.Load() != 1 {
		t.Errorf("5 s after a fetch: the overview shows %s after %d fetches; want %s, no new fetch yet", got, fetches.Load(), short(second))
	}
	advance(6 * time.Second)
	if got := headShown(); got != short(third) || fetches.Load() != 2 {
		t.Errorf("11 s after a fetch: the overview shows %s after %d fetches; want %s, a second fetch", got, fetches.Load(), short(third))
	}

	// At the recorded head: nothing to fetch.
	advance(time.Minute)
	if got := headShown(); got != short(third) || fetches.Load() != 2 {
		t.Errorf("at the recorded head: the overview shows %s after %d fetches; want %s, no fetch", got, fetches.Load(), short(third))
	}
}

// TestSettingsAtACommitTheCloneLacksAreReadAgainOnceItIsFetched: the
// settings of a deployment whose source commit the repository does not
// hold yet (a replica's clone behind the StyrminDeployment) fail, but
// that failure is not remembered: once the commit is fetched, the page
// shows them.
func TestSettingsAtACommitTheCloneLacksAreReadAgainOnceItIsFetched(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t)
	dir := t.TempDir()
	if err := examples.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	srv.Seed("desired", os.DirFS(dir), "first")
	clone, err := gitsource.Clone(ctx, srv.RepoURL("desired"), "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	second := srv.Commit("desired", "web: three replicas", map[string][]byte{
		devWeb: []byte("driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 3}\n")})
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	did := instance.DeploymentID(idDevWeb)
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&v1alpha1.StyrminDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "dev-web", Name: "dev-web", Labels: did.Labels()},
		Spec:       v1alpha1.StyrminDeploymentSpec{Deployment: did, Sequence: 2, SourceCommit: second},
	}).Build()
	h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: cl}}, Repo: clone})
	if err != nil {
		t.Fatal(err)
	}
	page := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/d/local/dev/web", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /d/local/dev/web: %d\n%s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	if body := page(); strings.Contains(body, `<table class="settings">`) {
		t.Fatalf("settings shown at a commit the clone lacks:\n%s", body)
	}
	if _, err := clone.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	if body := page(); !strings.Contains(body, `<table class="settings">`) || !strings.Contains(body, "parameters.replicas") {
		t.Errorf("after the fetch, the page shows no settings of %s:\n%s", second, body)
	}
}
