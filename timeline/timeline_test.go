package timeline_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/timeline"
)

var hub = resolver.ID{Cluster: "local", Environment: "dev", Name: "hub"}

// lockedRepo is the example repository, committed and locked once, in a
// local git repository.
func lockedRepo(t *testing.T) (*gitsource.Repo, *resolver.Instance) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	if err := examples.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "Merge pull request #3 from team/start"}} {
		cmd := exec.Command("git", append([]string{"-c", "user.name=Ada", "-c", "user.email=ada@example.com"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	repo, err := gitsource.Open(dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resolver.CommitLocksWith(context.Background(), repo, resolver.WorkspaceOptions{}, resolver.LockRequest{}, resolver.CommitOptions{History: repo}); err != nil {
		t.Fatal(err)
	}
	head, _ := repo.Head()
	fsys, _ := repo.TreeAt(head, ".")
	in, err := resolver.ReadLock(fsys, hub.LockPath())
	if err != nil {
		t.Fatal(err)
	}
	return repo, in
}

func commit(t *testing.T, repo *gitsource.Repo, ch gitsource.Change) {
	t.Helper()
	if _, err := repo.CommitLocks(context.Background(), gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) { return ch, nil }}); err != nil {
		t.Fatal(err)
	}
}

// TestTimelineHasEveryLockCommitOfTheDeploymentInOrder locks the hub four
// more times (an upgrade, a retry, a hand edit, a removed lockfile) and
// reads its timeline: every lock commit, oldest first, with the workflow
// against the entry before, the retry marked, the unreadable lockfile an
// entry with an error, and the configuration commit's pull request.
func TestTimelineHasEveryLockCommitOfTheDeploymentInOrder(t *testing.T) {
	repo, first := lockedRepo(t)
	upgrade := *first
	upgrade.Sequence, upgrade.AppVersion, upgrade.Digest = 2, "1.5.0", "sha256:other"
	data, err := resolver.EncodeLock(&upgrade)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, repo, gitsource.Change{Files: map[string][]byte{hub.LockPath(): data}, Locks: map[string]int{hub.String(): 2}})
	retry := upgrade
	retry.Sequence = 3
	data, _ = resolver.EncodeLock(&retry)
	commit(t, repo, gitsource.Change{Files: map[string][]byte{hub.LockPath(): data}, Locks: map[string]int{hub.String(): 3},
		Trailers: []gitsource.Trailer{{Key: resolver.RetryTrailer, Value: hub.String()}}})
	commit(t, repo, gitsource.Change{Subject: "hand edit", Files: map[string][]byte{hub.LockPath(): []byte("apiVersion: nonsense\n")}})
	commit(t, repo, gitsource.Change{Subject: "removed", Files: map[string][]byte{hub.LockPath(): nil}})
	// Another deployment's lock commit is not in the hub's timeline.
	web := resolver.ID{Cluster: "local", Environment: "dev", Name: "web"}
	commit(t, repo, gitsource.Change{Files: map[string][]byte{web.LockPath(): nil}})

	head, err := repo.Head()
	if err != nil {
		t.Fatal(err)
	}
	r := timeline.NewReader(repo, "")
	entries, err := r.Read(head, hub)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 5 {
		t.Fatalf("%d entries, want 5: %+v", len(entries), entries)
	}
	want := []struct {
		seq      int64
		workflow planner.Workflow
		retry    bool
	}{{1, planner.WorkflowCreate, false}, {2, planner.WorkflowUpgrade, false}, {3, "", true}, {0, "", false}, {0, "", false}}
	for i, w := range want {
		e := entries[i]
		if e.Sequence != w.seq || e.Workflow != w.workflow || e.Retry != w.retry {
			t.Errorf("entry %d: sequence %d, workflow %q, retry %v; want %d, %q, %v", i, e.Sequence, e.Workflow, e.Retry, w.seq, w.workflow, w.retry)
		}
	}
	if e := entries[0]; e.ConfigCommit == "" || e.PullRequest != 3 || e.Driver != "graphhub@1.0.0" || e.AppVersion != "1.4.0" {
		t.Errorf("the first entry: %+v; want its configuration commit, pull request #3, graphhub@1.0.0, app 1.4.0", e)
	}
	if e := entries[3]; !strings.Contains(e.Error, "field apiVersion") {
		t.Errorf("the hand edit: %q, want an error naming apiVersion", e.Error)
	}
	if e := entries[4]; !e.Removed {
		t.Errorf("the removal: %+v, want Removed", e)
	}
	if _, err := timeline.Find(entries, 2); err != nil {
		t.Error(err)
	}
	if _, err := timeline.Find(entries, 9); err == nil {
		t.Error("Find(9): no error")
	}
	again, err := r.Read(head, hub)
	if err != nil || len(again) != len(entries) || &again[0] != &entries[0] {
		t.Errorf("reading the same head again should give the remembered timeline (%v)", err)
	}
}

func TestFindDeploymentTakesABareNameOnlyWhenItIsOne(t *testing.T) {
	repo, _ := lockedRepo(t)
	head, _ := repo.Head()
	fsys, _ := repo.TreeAt(head, ".")
	if _, err := timeline.FindDeployment(fsys, "hub"); err == nil || !strings.Contains(err.Error(), "local/dev/hub, local/staging/hub") {
		t.Errorf("hub is two deployments: %v", err)
	}
	if id, err := timeline.FindDeployment(fsys, "local/dev/hub"); err != nil || id != hub {
		t.Errorf("a full ID: %v %v", id, err)
	}
	if _, err := timeline.FindDeployment(fsys, "nope"); err == nil {
		t.Error("an unknown name: no error")
	}
}

// TestSummaryOfACanonicalLockfileIsWhatTheResolverDecodes reads the
// example's lockfiles with the timeline's scanner and with the resolver:
// the summary fields agree.
func TestSummaryOfACanonicalLockfileIsWhatTheResolverDecodes(t *testing.T) {
	repo, _ := lockedRepo(t)
	head, _ := repo.Head()
	r := timeline.NewReader(repo, "")
	fsys, _ := repo.TreeAt(head, ".")
	for _, id := range []resolver.ID{hub, {Cluster: "local", Environment: "staging", Name: "web"}} {
		want, err := resolver.ReadLock(fsys, id.LockPath())
		if err != nil {
			t.Fatal(err)
		}
		entries, err := r.Read(head, id)
		if err != nil || len(entries) != 1 {
			t.Fatalf("%s: %v %v", id, entries, err)
		}
		e := entries[0]
		if e.Sequence != want.Sequence || e.Kind != want.Kind || e.Digest != want.Digest || e.AppVersion != want.AppVersion ||
			e.Driver != want.Driver.String() || e.ConfigCommit != want.SourceCommit {
			t.Errorf("%s: the timeline reads %+v, the resolver %+v", id, e, want)
		}
	}
}

// TestSummaryReadsAHandWrittenLockfileThroughYAML gives Summary a lockfile
// in another YAML style than the engine's: it is read by the YAML parser,
// and a wrong path or a missing checksum is refused.
func TestSummaryReadsAHandWrittenLockfileThroughYAML(t *testing.T) {
	const file = "locks/local/dev/hub.lock.yaml"
	doc := "apiVersion: 'styrmin.io/v1alpha1'\nkind: Instance\ndeployment: {cluster: local, environment: dev, name: hub}\nsequence: 7\ndigest: sha256:x\nchecksum: sha256:y\ndriver: {name: graphhub, version: 1.0.0}\n"
	in, err := timeline.Summary(file, []byte(doc))
	if err != nil || in.Sequence != 7 || in.Driver.Name != "graphhub" || in.ID != hub {
		t.Fatalf("%+v %v", in, err)
	}
	if _, err := timeline.Summary("locks/local/dev/web.lock.yaml", []byte(doc)); err == nil || !strings.Contains(err.Error(), "field deployment") {
		t.Errorf("the lockfile of another deployment: %v", err)
	}
	if _, err := timeline.Summary(file, []byte(strings.Replace(doc, "checksum: sha256:y\n", "", 1))); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("no checksum: %v", err)
	}
}

// TestTimelineReadAgainAfterNewCommitsEqualsAFreshRead reads a timeline,
// adds lock commits, and reads it at the new head: extended with the new
// commits only, it equals what a new reader reads from the root.
func TestTimelineReadAgainAfterNewCommitsEqualsAFreshRead(t *testing.T) {
	repo, first := lockedRepo(t)
	r := timeline.NewReader(repo, "")
	head1, _ := repo.Head()
	before, err := r.Read(head1, hub)
	if err != nil || len(before) != 1 {
		t.Fatalf("%v %v", before, err)
	}
	for seq := int64(2); seq <= 4; seq++ {
		in := *first
		in.Sequence, in.AppVersion, in.Digest = seq, fmt.Sprintf("1.4.%d", seq), fmt.Sprintf("sha256:%d", seq)
		data, err := resolver.EncodeLock(&in)
		if err != nil {
			t.Fatal(err)
		}
		commit(t, repo, gitsource.Change{Files: map[string][]byte{hub.LockPath(): data}, Locks: map[string]int{hub.String(): int(seq)}})
	}
	head2, _ := repo.Head()
	extended, err := r.Read(head2, hub)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := timeline.NewReader(repo, "").Read(head2, hub)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(extended, fresh) || len(fresh) != 4 || fresh[1].Workflow != planner.WorkflowUpgrade {
		t.Errorf("extended:\n%+v\nfresh:\n%+v", extended, fresh)
	}
	if len(before) != 1 {
		t.Errorf("the earlier timeline changed: %d entries", len(before))
	}
}
