package ui_test

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/ui"
)

// countedRepo is the real repository with the reads of its whole history
// a page can make counted: the walk of a timeline (LockChanges, slowed by
// delay so that requests arriving together overlap) and the resolution of
// a ref.
type countedRepo struct {
	*gitsource.Repo
	delay    time.Duration
	walks    atomic.Int32
	resolves atomic.Int32
}

func (r *countedRepo) LockChanges(from, to gitsource.Hash, prefix string) ([]gitsource.LockChange, error) {
	r.walks.Add(1)
	time.Sleep(r.delay)
	return r.Repo.LockChanges(from, to, prefix)
}

func (r *countedRepo) Resolve(rev string) (gitsource.Hash, error) {
	r.resolves.Add(1)
	return r.Repo.Resolve(rev)
}

// boundedWorld serves the pages over a locked copy of the examples, the
// shared control plane as the cluster and repo as the repository.
func boundedWorld(t *testing.T, delay time.Duration) (*countedRepo, http.Handler) {
	t.Helper()
	_, cl := controlPlane(t)
	d := newDesired(t)
	d.lock(t)
	repo := &countedRepo{Repo: d.repo, delay: delay}
	h, err := ui.New(ui.Options{
		// The demo's cluster: other tests may have written its
		// deployments, never one named nosuch.
		Clusters: []ui.Cluster{{Name: "local", Reader: cl}},
		Repo:     repo,
		Planner: ui.PlannerFunc(func(planner.Trees, planner.Options) (*planner.Plan, error) {
			return &planner.Plan{}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return repo, h
}

// A timeline walks every commit of the branch, holding the repository's
// lock the agent's syncer needs: a request for a deployment neither git's
// head locks nor the cluster has (any name a script makes up, each one
// new) is answered 404 without reading the history.
func TestATimelineOfADeploymentNeitherGitNorTheClusterKnowsReadsNoHistory(t *testing.T) {
	repo, h := boundedWorld(t, 0)
	for _, path := range []string{"/d/local/dev/nosuch/timeline", "/d/local/nosuch/web/timeline", "/d/local/dev/web.lock.yaml/timeline", "/d/local/dev/nosuch/timeline?a=1&b=2"} {
		rec := getHost(h, "localhost", path)
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404\n%s", path, rec.Code, rec.Body)
		}
		if body := rec.Body.String(); !strings.Contains(body, "has no lockfile") {
			t.Errorf("GET %s does not say git's head has no lockfile of it:\n%s", path, body)
		}
	}
	if n := repo.walks.Load(); n != 0 {
		t.Errorf("%d walks of the history for deployments that do not exist, want none", n)
	}
	// A deployment git locks is read (once).
	for range 2 {
		if rec := getHost(h, "localhost", "/d/local/dev/web/timeline"); rec.Code != http.StatusOK {
			t.Fatalf("GET dev/web's timeline: %d\n%s", rec.Code, rec.Body)
		}
	}
	if n := repo.walks.Load(); n != 1 {
		t.Errorf("%d walks for dev/web's timeline read twice, want 1", n)
	}
}

// Requests that arrive together for a timeline not read yet (a page
// opened in many tabs, a script) walk the history once, not once each
// behind one another on the repository's lock.
func TestRequestsTogetherForATimelineNotReadYetWalkTheHistoryOnce(t *testing.T) {
	repo, h := boundedWorld(t, 300*time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if rec := getHost(h, "localhost", "/d/local/dev/web/timeline"); rec.Code != http.StatusOK {
				t.Errorf("GET dev/web's timeline: %d\n%s", rec.Code, rec.Body)
			}
		})
	}
	wg.Wait()
	if n := repo.walks.Load(); n != 1 {
		t.Errorf("8 requests together walked the history %d times, want once", n)
	}
}
