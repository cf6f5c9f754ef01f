package statusreport_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/statusreport"
	"github.com/styrmin/styrmin/testcluster"
)

// lockRepo is a desired-state repository on disk, driven by the git
// command: lock commits with their lockfiles and Styrmin-Lock trailers.
type lockRepo struct {
	t   *testing.T
	dir string
}

func newLockRepo(t *testing.T) *lockRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	r := &lockRepo{t: t, dir: t.TempDir()}
	r.git("init", "--quiet", "--initial-branch=main")
	return r
}

func (r *lockRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = []string{"HOME=" + r.dir, "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_AUTHOR_NAME=styrmin", "GIT_AUTHOR_EMAIL=styrmin@localhost", "GIT_COMMITTER_NAME=styrmin", "GIT_COMMITTER_EMAIL=styrmin@localhost"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// lock commits a lockfile per key ("cluster/env/name") at its sequence,
// with one trailer each, and returns the commit.
func (r *lockRepo) lock(locks map[string]int) string {
	r.t.Helper()
	msg := "styrmin: lock\n\n"
	for key, seq := range locks {
		p := filepath.Join(r.dir, "locks", filepath.FromSlash(key)+".lock.yaml")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("sequence: "+strconv.Itoa(seq)+"\n"), 0o644); err != nil {
			r.t.Fatal(err)
		}
		msg += "Styrmin-Lock: " + key + "=" + strconv.Itoa(seq) + "\n"
	}
	r.git("add", "-A")
	r.git("commit", "--quiet", "-m", msg)
	return r.git("rev-parse", "HEAD")
}

// TestALockCommitStaysPendingWhileTheSyncHasStillToMakeATask: the sync
// makes the other deployments' tasks when the API server refuses one (a
// namespace being deleted, a quota, a webhook) and tries it again at its
// next sync. A commit locking three deployments was posted a success
// once the two tasks made had succeeded, the third having none yet. Now
// a lockfile of a commit after the sync's position with neither a task
// nor a refusal keeps the commit pending, counted in the description;
// another cluster's lockfile and trailer are not waited for, nor a
// commit the branch no longer holds, nor, once the sync passed its
// commit, a lockfile it rightly made no task for.
func TestALockCommitStaysPendingWhileTheSyncHasStillToMakeATask(t *testing.T) {
	_, cl := agenttest.StartCluster(t, testcluster.Options{})
	ctx := context.Background()
	gh := &gitHub{}
	srv := httptest.NewServer(gh)
	defer srv.Close()
	poster, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", Token: token})
	if err != nil {
		t.Fatal(err)
	}

	repo := newLockRepo(t)
	synced := repo.lock(map[string]int{"prod/dev/web": 1})
	// A branch the main one never merged (a force push dropped it): its
	// lock commit's tasks were made, and no more will be.
	repo.git("checkout", "--quiet", "-b", "dropped")
	dropped := repo.lock(map[string]int{"prod/dev/web": 2, "prod/dev/api": 1})
	repo.git("checkout", "--quiet", "main")
	// Three deployments of this cluster, and one of another whose
	// trailer the commit carries too.
	three := repo.lock(map[string]int{"prod/dev/web": 2, "prod/dev/hub": 3, "prod/dev/api": 2, "edge/dev/web": 4})
	// A tombstone of a deployment never applied here: the sync makes no
	// task of it.
	tomb := repo.lock(map[string]int{"prod/dev/web": 3, "prod/dev/gone": 9})
	clone, err := gitsource.Open(repo.dir, gitsource.OpenOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}

	srcKey := keyOf("styrmin-system", "styrmin")
	r, err := statusreport.New(statusreport.Options{Reader: cl, Poster: poster, Cluster: "prod", Source: srcKey, History: clone})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"apps", srcKey.Namespace} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	src := &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: srcKey.Namespace, Name: srcKey.Name},
		Spec: v1alpha1.StyrminSourceSpec{URL: "https://github.com/acme/desired", Cluster: "prod"}}
	if err := cl.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	// The sync walked up to tomb, the API server refused api's task: its
	// position stays.
	src.Status.LastSyncedCommit = synced
	if err := cl.Status().Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	task := func(name, commit string, seq int64, phase v1alpha1.TaskPhase) *v1alpha1.StyrminTask {
		t.Helper()
		tk := taskOf(name, commit, seq, phase, time.Now().Truncate(time.Second))
		tk.Name = name + "-" + commit[:7]
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
	task("web", three, 2, v1alpha1.TaskSucceeded)
	task("hub", three, 3, v1alpha1.TaskSucceeded)
	task("web", tomb, 3, v1alpha1.TaskSucceeded)
	task("web", dropped, 2, v1alpha1.TaskSucceeded)

	report := func() map[string]commitstatus.Status {
		t.Helper()
		if err := r.Report(ctx); err != nil {
			t.Fatal(err)
		}
		got := map[string]commitstatus.Status{}
		for _, p := range gh.take() {
			got[p.sha] = p.Status
		}
		return got
	}
	got := report()
	if s := got[three]; s.State != commitstatus.Pending ||
		s.Description != "prod: 1 deployment waiting for its task (see the StyrminSource); 2 deployments applied" {
		t.Errorf("the commit whose api task the sync has still to make: %+v, want pending, api waiting (not edge's web)", s)
	}
	// Until the sync passes it, the tombstone counts as waiting: nothing
	// in the cluster tells it from a task refused.
	if s := got[tomb]; s.State != commitstatus.Pending || !strings.Contains(s.Description, "1 deployment waiting for its task") {
		t.Errorf("the commit with a tombstone the sync has not passed: %+v, want pending", s)
	}
	if s := got[dropped]; s.State != commitstatus.Success || s.Description != "prod: 1 deployment applied" {
		t.Errorf("the commit the branch no longer holds: %+v, want success (the sync will not walk it)", s)
	}
	if len(got) != 3 {
		t.Errorf("posted %d statuses, want 3: %+v", len(got), got)
	}
	if got := report(); len(got) != 0 {
		t.Errorf("nothing changed, yet it posted %+v", got)
	}

	// The next sync makes api's task and goes through.
	api := task("api", three, 2, v1alpha1.TaskRunning)
	src.Status.LastSyncedCommit = tomb
	if err := cl.Status().Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	got = report()
	if s := got[three]; s.State != commitstatus.Pending || s.Description != "prod: 2 deployments applied; 1 deployment running or waiting" {
		t.Errorf("with api's task running: %+v", s)
	}
	if s := got[tomb]; s.State != commitstatus.Success || s.Description != "prod: 1 deployment applied" {
		t.Errorf("the tombstone's commit once the sync passed it: %+v, want success", s)
	}
	api.Status.Phase, api.Status.FinishedAt = v1alpha1.TaskSucceeded, &metav1.Time{Time: time.Now()}
	if err := cl.Status().Update(ctx, api); err != nil {
		t.Fatal(err)
	}
	got = report()
	if s := got[three]; s.State != commitstatus.Success || s.Description != "prod: 3 deployments applied" || len(got) != 1 {
		t.Errorf("once api's task succeeded: posted %+v, want the commit's success alone", got)
	}

	// A lost position: the next sync walks from the root, meeting the
	// tombstone again. A final status stands.
	src.Status.LastSyncedCommit = ""
	if err := cl.Status().Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	if got := report(); len(got) != 0 {
		t.Errorf("a walk from the root to come turned final statuses into %+v", got)
	}
}
