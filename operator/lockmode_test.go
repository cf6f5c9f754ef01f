package operator_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/source"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// The lock mode locks a configuration head and pushes the lock commit; the
// lock commit itself, and a configuration commit whose locks are current,
// make no further commit (no loop).
func TestLockerLocksConfigurationHeadsOnceAndNeverItsOwnCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	var pushed []source.LockResult
	repo := cloneOf(t, srv)
	l, err := source.NewLocker(source.LockModeOptions{
		Repo:     repo,
		OnLocked: func(r source.LockResult) { pushed = append(pushed, r) },
	})
	if err != nil {
		t.Fatal(err)
	}

	res, err := l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit.IsZero() || len(res.Locked) != 2 {
		t.Fatalf("first lock: commit %v, locked %v; want a commit locking web and hub", res.Commit, res.Locked)
	}
	if got := srv.Head(agentRepoName, "main"); got != res.Commit.String() {
		t.Fatalf("remote head %s, want the lock commit %s", got, res.Commit)
	}

	// The next round sees its own lock commit: nothing to do.
	res, err = l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Skipped || !res.Commit.IsZero() {
		t.Fatalf("round on the lock commit: %+v; want skipped", res)
	}

	// A lock commit by someone else (CI) is skipped too, without resolving.
	other, err := gitsource.Clone(ctx, srv.RepoURL(agentRepoName), "", gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: agentGitToken}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Commit(agentRepoName, "more workers", hubConfig("1.4.0", 3, "debug"))
	if locked := lockRepo(t, other); locked["hub"] != 2 {
		t.Fatalf("CI lock: %v, want hub=2", locked)
	}
	res, err = l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Skipped {
		t.Fatalf("round on CI's lock commit: %+v; want skipped", res)
	}

	// A configuration commit that changes no instance makes no lock commit.
	before := srv.Head(agentRepoName, "main")
	srv.Commit(agentRepoName, "same config again", nil)
	res, err = l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped || !res.Commit.IsZero() || len(res.Locked) != 0 {
		t.Fatalf("round on an unchanged configuration: %+v; want resolved, no commit", res)
	}
	if got := srv.Head(agentRepoName, "main"); got == before {
		t.Fatal("the empty configuration commit did not land")
	}

	// A real change is locked, once.
	srv.Commit(agentRepoName, "log less", hubConfig("1.4.0", 3, "warning"))
	res, err = l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Locked) != 1 || res.Locked[0] != "local/dev/hub=3" {
		t.Fatalf("locked %v, want [local/dev/hub=3]", res.Locked)
	}
	if len(pushed) != 2 {
		t.Fatalf("OnLocked called %d times, want 2 (one per lock commit pushed)", len(pushed))
	}
}

// The lock mode takes drivers from another repository listed in
// styrmin.cue, with the repository's credentials, and records the commit
// it resolved; a driver repository it cannot fetch yet is tried again on
// the same head.
func TestLockerLocksDriversFromAnotherRepository(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := gitserver.New(t, gitserver.WithToken(agentGitToken))
	repo := exampleRepo(t)
	for p := range repo {
		if strings.HasPrefix(p, "drivers/webapp/1.1.0/") {
			delete(repo, p)
		}
	}
	repo["styrmin.cue"] = &fstest.MapFile{Data: []byte("deletionThreshold: 1\ndrivers: [{name: \"webapp\", version: \"1.1.0\", url: \"" +
		srv.RepoURL("drivers") + "\", ref: \"main\", path: \"webapp/1.1.0\"}]\n")}
	srv.Seed(agentRepoName, repo, "examples")
	clone, err := gitsource.Clone(ctx, srv.RepoURL(agentRepoName), "", gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: agentGitToken}})
	if err != nil {
		t.Fatal(err)
	}
	remotes := driversource.Remotes{RepoURL: srv.RepoURL(agentRepoName), Auth: gitsource.Auth{Token: agentGitToken}}
	l, err := source.NewLocker(source.LockModeOptions{Repo: clone, FetchDriver: remotes.LockFetcher})
	if err != nil {
		t.Fatal(err)
	}

	// The driver repository does not exist yet: not a reason to give up
	// on this head.
	if _, err := l.LockHead(ctx); err == nil {
		t.Fatal("locking without the driver repository succeeded")
	}
	srv.Commit("drivers", "webapp 1.1.0", driverFiles(t, "drivers/webapp/1.1.0", "webapp/1.1.0/"))
	res, err := l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Locked) != 2 {
		t.Fatalf("locked %v, want web and hub", res.Locked)
	}
	lock := srv.Git(srv.Dir(agentRepoName), "show", "main:locks/local/dev/web.lock.yaml")
	if want := "commit: " + srv.Head("drivers", "main"); !strings.Contains(lock, want) || !strings.Contains(lock, "url: "+srv.RepoURL("drivers")) {
		t.Fatalf("web's lock does not record the driver's source (%s):\n%s", want, lock)
	}
}

// TestLockerNumbersAfterWhatTheClusterRanWhenTheBranchIsRewound: a branch
// force-pushed back forgets lock commits the cluster already ran; the lock
// mode still numbers after the cluster's highest sequence, so no number is
// used twice.
func TestLockerNumbersAfterWhatTheClusterRanWhenTheBranchIsRewound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	repo := cloneOf(t, srv)
	ran, used, onLocked := clusterRuns()
	l, err := source.NewLocker(source.LockModeOptions{Repo: repo, Used: used, OnLocked: onLocked})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.LockHead(ctx); err != nil {
		t.Fatal(err)
	}
	before := srv.Head(agentRepoName, "main")
	for _, workers := range []int{3, 4} {
		srv.Commit(agentRepoName, "more workers", hubConfig("1.4.0", workers, "debug"))
		if _, err := l.LockHead(ctx); err != nil {
			t.Fatal(err)
		}
	}
	hub := resolver.ID{Cluster: "local", Environment: "dev", Name: "hub"}
	if ran[hub] != 3 {
		t.Fatalf("hub ran up to %d, want 3", ran[hub])
	}
	// Rewind: the branch is force-pushed back to the first lock.
	srv.Git(srv.Dir(agentRepoName), "update-ref", "refs/heads/main", before)
	srv.Commit(agentRepoName, "five workers", hubConfig("1.4.0", 5, "debug"))
	res, err := l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Locked) != 1 || res.Locked[0] != "local/dev/hub=4" {
		t.Fatalf("after the rewind locked %v, want [local/dev/hub=4] (after the 3 the cluster ran)", res.Locked)
	}
}

// A retry committed by someone else on top of a configuration commit no
// lock took yet is a lock commit at the head, but it locks no
// configuration: the lock mode still locks the commit under it, as its
// own change (its source commit the configuration commit).
func TestLockerLocksAConfigurationCommitUnderARetryCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	l, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.LockHead(ctx); err != nil {
		t.Fatal(err)
	}
	config := srv.Commit(agentRepoName, "more workers", hubConfig("1.4.0", 3, "debug"))
	other := cloneOf(t, srv)
	web := resolver.ID{Cluster: "local", Environment: "dev", Name: "web"}
	if out, err := resolver.CommitRetries(ctx, other, []resolver.ID{web}, resolver.CommitOptions{History: other}); err != nil || !out.Committed {
		t.Fatalf("the retry of web: %+v, %v", out, err)
	}
	res, err := l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped || len(res.Locked) != 1 || res.Locked[0] != "local/dev/hub=2" {
		t.Fatalf("round on the retry commit: %+v; want hub locked at 2", res)
	}
	if hub := headLock(t, cloneOf(t, srv), "locks/local/dev/hub.lock.yaml"); hub.SourceCommit != config {
		t.Errorf("hub's lock is of %s; want the configuration commit %s", hub.SourceCommit, config)
	}
}

// A branch force-pushed back to an older lock commit (a rollback by
// rewind) holds lockfiles below what the cluster ran: the agent never
// applies them again, so the lock mode locks their content again past
// the sequences the cluster ran, though the head is a lock commit.
func TestLockerRelocksARewindToAnOlderLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	repo := cloneOf(t, srv)
	_, used, onLocked := clusterRuns()
	l, err := source.NewLocker(source.LockModeOptions{Repo: repo, Used: used, OnLocked: onLocked})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.LockHead(ctx); err != nil {
		t.Fatal(err)
	}
	first := srv.Head(agentRepoName, "main")
	srv.Commit(agentRepoName, "more workers", hubConfig("1.4.0", 3, "debug"))
	if _, err := l.LockHead(ctx); err != nil {
		t.Fatal(err)
	}
	// Unchanged lock commits are skipped without a resolve.
	if res, err := l.LockHead(ctx); err != nil || !res.Skipped {
		t.Fatalf("round on the lock mode's own commit: %+v, %v; want skipped", res, err)
	}
	srv.Git(srv.Dir(agentRepoName), "update-ref", "refs/heads/main", first)
	res, err := l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Locked) != 1 || res.Locked[0] != "local/dev/hub=3" {
		t.Fatalf("after the rewind to the first lock: %+v; want hub locked again at 3 (after the 2 the cluster ran)", res)
	}
}

// clusterRuns stands for a cluster that runs every lock the lock mode
// pushes: the sequences it ran, the lock mode's Used reading them and
// its OnLocked recording each pushed lock.
func clusterRuns() (resolver.UsedSequences, func(context.Context) (resolver.UsedSequences, error), func(source.LockResult)) {
	ran := resolver.UsedSequences{}
	used := func(context.Context) (resolver.UsedSequences, error) { return maps.Clone(ran), nil }
	onLocked := func(r source.LockResult) {
		for _, k := range r.Locked {
			key, seq, _ := strings.Cut(k, "=")
			id, _ := resolver.ParseID(key)
			n, _ := strconv.ParseInt(seq, 10, 64)
			ran[id] = max(ran[id], n)
		}
	}
	return ran, used, onLocked
}

// lockStatusHost is a git host's commit status API and the lock mode's
// client of it.
func lockStatusHost(t *testing.T) (*statusHost, *commitstatus.Client) {
	t.Helper()
	host := &statusHost{got: map[string][]map[string]string{}}
	gh := httptest.NewServer(host)
	t.Cleanup(gh.Close)
	poster, err := commitstatus.New(commitstatus.Options{BaseURL: gh.URL, Owner: "acme", Repo: "desired", Token: agentGitToken})
	if err != nil {
		t.Fatal(err)
	}
	return host, poster
}

// exampleServer is a git server holding the example repository.
func exampleServer(t *testing.T) *gitserver.Server {
	t.Helper()
	srv := gitserver.New(t, gitserver.WithToken(agentGitToken))
	srv.Seed(agentRepoName, exampleRepo(t), "examples")
	return srv
}

// cloneOf clones the example repository of srv, as the lock mode does.
func cloneOf(t *testing.T, srv *gitserver.Server) *gitsource.Repo {
	t.Helper()
	repo, err := gitsource.Clone(context.Background(), srv.RepoURL(agentRepoName), "", gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: agentGitToken}})
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// headLock is the lockfile at path at repo's head, decoded.
func headLock(t *testing.T, repo *gitsource.Repo, path string) *resolver.Instance {
	t.Helper()
	head, err := repo.Head()
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := repo.FS(head)
	if err != nil {
		t.Fatal(err)
	}
	in, err := resolver.ReadLock(fsys, path)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestLockerRelocksASquashMergeAtASequenceAnotherMergeUsed: pull requests
// A and B, branched from one commit, each locked hub at 2 for a change of
// its own. A merged, then B was squash-merged: its squash carries B's lock
// trailers and is a lock commit at the head, so the lock mode skipped it,
// and hub stayed at a lockfile the agent refuses ("2 does not follow 2").
// The lock mode now locks it again, at 3.
func TestLockerRelocksASquashMergeAtASequenceAnotherMergeUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	l, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.LockHead(ctx); err != nil {
		t.Fatal(err)
	}
	base := srv.Head(agentRepoName, "main")
	lockHub := func(workers int) string {
		t.Helper()
		srv.Commit(agentRepoName, fmt.Sprintf("%d workers", workers), hubConfig("1.4.0", workers, "debug"))
		res, err := l.LockHead(ctx)
		if err != nil || len(res.Locked) != 1 || res.Locked[0] != "local/dev/hub=2" {
			t.Fatalf("locking %d workers: %+v, %v; want hub at 2", workers, res, err)
		}
		return srv.Head(agentRepoName, "main")
	}
	a := lockHub(3)
	srv.Reset(agentRepoName, "main", base)
	b := lockHub(4)
	// B squash-merged onto A: B's tree and lock commit message, A its parent.
	dir := srv.Dir(agentRepoName)
	squash := srv.Git(dir, "commit-tree", b+"^{tree}", "-p", a, "-m", srv.Git(dir, "log", "-1", "--format=%B", b))
	srv.Reset(agentRepoName, "main", squash)

	res, err := l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped || len(res.Locked) != 1 || res.Locked[0] != "local/dev/hub=3" {
		t.Fatalf("round on the squash merge: %+v; want hub locked again at 3", res)
	}
	if res, err := l.LockHead(ctx); err != nil || !res.Skipped {
		t.Fatalf("the round after: %+v, %v; want nothing more to lock", res, err)
	}
}

// TestALockWhoseSandboxCouldNotStartLocksTheSameHeadOnTheNextRound: a
// driver load whose sandbox child the machine could not start (a process
// limit) fails the whole lock of a head; that is the machine's trouble,
// not the configuration's, so the next round locks the same head once the
// machine has recovered. (Deployments one such render left unlocked while
// others were locked: TestOnlyTheMachinesTroubleLocksTheSameHeadAgain.)
func TestALockWhoseSandboxCouldNotStartLocksTheSameHeadOnTheNextRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	sb, err := drivers.SelfSandbox(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	exe := sb.Path
	sb.Path = filepath.Join(t.TempDir(), "agent")
	host, poster := lockStatusHost(t)
	l, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Sandbox: sb, Statuses: poster, StatusContext: "styrmin/local/lock"})
	if err != nil {
		t.Fatal(err)
	}
	// Two rounds while the machine is in trouble: the head's status is
	// pending, posted once.
	var res source.LockResult
	for range 2 {
		res, err = l.LockHead(ctx)
		if res.Commit != (gitsource.Hash{}) || (err == nil && res.Failed == nil) {
			t.Fatalf("a lock whose sandbox cannot start: %+v, %v; want its deployments failed", res, err)
		}
		if err == nil {
			err = res.Failed
		}
		if !errors.Is(err, drivers.ErrSandboxStart) {
			t.Fatalf("the lock failed with %v, want the sandbox's start", err)
		}
	}
	head := res.Head.String()
	if got := host.states(head); strings.Join(got, " ") != "styrmin/local/lock=pending" {
		t.Fatalf("the head's statuses after two rounds in trouble: %v, want one pending", got)
	}
	// The machine recovers; the head has not moved.
	if err := os.Symlink(exe, sb.Path); err != nil {
		t.Fatal(err)
	}
	res, err = l.LockHead(ctx)
	if err != nil || res.Skipped || len(res.Locked) == 0 {
		t.Fatalf("the next round on the same head: %+v, %v; want its deployments locked", res, err)
	}
	if got := host.states(head); strings.Join(got, " ") != "styrmin/local/lock=pending styrmin/local/lock=success" {
		t.Fatalf("the head's statuses once locked: %v, want pending then success", got)
	}
}

// TestABrokenDriverVersionHoldsBackOnlyTheDeploymentsItCouldBeChosenFor
// pins the lock mode's isolation of a driver version that does not load
// (a syntax error pushed with it, one team's driver): the deployments
// whose version a broken one could be the choice for are left out,
// naming its folder and why, and every other deployment's change is
// locked, as a deployment whose own configuration does not resolve is.
// A deployment that keeps its locked driver version is not affected.
//
// Each lock says so on the StyrminSource (its Locked condition): the
// deployments held back, the folders, or that nothing was locked, seen
// with kubectl rather than only in the agent's log; a head that locks
// whole again puts it back to True.
func TestABrokenDriverVersionHoldsBackOnlyTheDeploymentsItCouldBeChosenFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	_, cl := agenttest.StartCluster(t, testcluster.Options{})
	key := types.NamespacedName{Namespace: "styrmin-system", Name: "styrmin"}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.Namespace}}); err != nil {
		t.Fatal(err)
	}
	host, poster := lockStatusHost(t)
	l, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv),
		Conditions: &source.SourceConditions{Client: cl, Reader: cl, Source: key},
		Statuses:   poster, StatusContext: "styrmin/local/lock"})
	if err != nil {
		t.Fatal(err)
	}
	// status checks the commit status of the lock of the head, on the
	// configuration commit pushed.
	status := func(what, head, state string, says ...string) {
		t.Helper()
		s := host.last(head, "styrmin/local/lock")
		if s == nil || s["state"] != state {
			t.Fatalf("%s: the head's lock status %v, want %s", what, s, state)
		}
		for _, w := range says {
			if !strings.Contains(s["description"], w) {
				t.Errorf("%s: the status's description %q does not say %q", what, s["description"], w)
			}
		}
	}
	// Before the syncer made the StyrminSource: the condition waits.
	if res, err := l.LockHead(ctx); err != nil || len(res.Locked) != 2 {
		t.Fatalf("first lock: %+v, %v; want web and hub locked", res, err)
	}
	if err := cl.Create(ctx, &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: v1alpha1.StyrminSourceSpec{URL: srv.RepoURL(agentRepoName), Cluster: "local"}}); err != nil {
		t.Fatal(err)
	}
	locked := func(what string, status metav1.ConditionStatus, reason string, says ...string) {
		t.Helper()
		var src v1alpha1.StyrminSource
		if err := cl.Get(ctx, key, &src); err != nil {
			t.Fatal(err)
		}
		c := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionLocked)
		if c == nil || c.Status != status || c.Reason != reason {
			t.Fatalf("%s: Locked %+v, want %s %s", what, c, status, reason)
		}
		for _, s := range says {
			if !strings.Contains(c.Message, s) {
				t.Errorf("%s: the Locked condition's message %q does not say %q", what, c.Message, s)
			}
		}
	}
	if res, err := l.LockHead(ctx); err != nil || !res.Skipped {
		t.Fatalf("the head locked again: %+v, %v; want it skipped", res, err)
	}
	locked("the first lock, written on the next round", metav1.ConditionTrue, v1alpha1.ReasonLocked, "every deployment locked", "2 deployments locked")
	broken := []byte("name: \"webapp\"\nversion: \"9.0.0\"\nappVersions: \">=1.0.0\"\nparameters: {\n")
	unused := []byte("name: \"unused\"\nversion: \"1.0.0\"\nchart: \"chart\"\nparameters: {\n")

	// A broken version of a driver no deployment uses, and another of
	// web's driver, which web keeps at its locked version: hub's change
	// is locked, web is not held back.
	files := hubConfig("1.4.0", 3, "debug")
	files["drivers/unused/1.0.0/driver.cue"] = unused
	files["drivers/webapp/9.0.0/driver.cue"] = broken
	head := srv.Commit(agentRepoName, "hub: debug; two drivers that do not load", files)
	res, err := l.LockHead(ctx)
	if err != nil {
		t.Fatalf("a lock of a head with broken driver versions: %v", err)
	}
	if strings.Join(res.Locked, " ") != "local/dev/hub=2" || res.Failed != nil {
		t.Fatalf("locked %v, failed %v; want hub=2 and no deployment held back", res.Locked, res.Failed)
	}
	locked("broken versions no deployment could choose", metav1.ConditionTrue, v1alpha1.ReasonLocked,
		"1 deployment locked", "driver folders that do not load: drivers/unused/1.0.0, drivers/webapp/9.0.0")
	status("broken versions no deployment could choose", head, "success", "1 deployment locked in ")

	// hub moves to another application version, and a broken graphhub
	// 3.0.0, above the version that fits, might fit it too: hub is held
	// back, named; web's change (it does not connect to hub) is locked.
	files = hubConfig("1.4.1", 3, "debug")
	files["drivers/graphhub/3.0.0/driver.cue"] = []byte("name: \"graphhub\"\nversion: \"3.0.0\"\nappVersions: \">=1.0.0\"\nparameters: {\n")
	files[webDeployment] = []byte("driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	head = srv.Commit(agentRepoName, "hub: 1.4.1; web: three replicas; graphhub 3.0.0 that does not load", files)
	res, err = l.LockHead(ctx)
	if err != nil {
		t.Fatalf("a lock with one deployment held back by a broken driver: %v", err)
	}
	var be *drivers.BrokenDriverError
	if strings.Join(res.Locked, " ") != "local/dev/web=2" || !errors.As(res.Failed, &be) ||
		!strings.Contains(res.Failed.Error(), "local/dev/hub") || !strings.Contains(res.Failed.Error(), "graphhub@3.0.0") ||
		!strings.Contains(res.Failed.Error(), "drivers/graphhub/3.0.0/driver.cue") {
		t.Fatalf("locked %v, failed %v; want web=2 and hub held back naming drivers/graphhub/3.0.0", res.Locked, res.Failed)
	}
	locked("hub held back", metav1.ConditionFalse, v1alpha1.ReasonDeploymentsHeldBack,
		"1 deployment locked", "held back: ", "local/dev/hub", "drivers/graphhub/3.0.0/driver.cue")
	status("hub held back", head, "failure", "held back: local/dev/hub: ")

	// The folder of a version a deployment runs breaks (a released
	// version edited): what that deployment's objects are is no longer
	// known, so nothing is locked, naming the folder and who runs it.
	repo := cloneOf(t, srv)
	webLock := headLock(t, repo, "locks/local/dev/web.lock.yaml")
	running := "drivers/webapp/" + webLock.Driver.Version + "/driver.cue"
	files = hubConfig("1.4.1", 5, "debug")
	files[running] = []byte("name: \"webapp\"\nversion: \"" + webLock.Driver.Version + "\"\nparameters: {\n")
	head = srv.Commit(agentRepoName, "hub: five workers; the webapp web runs breaks", files)
	res, err = l.LockHead(ctx)
	if err == nil || !strings.Contains(err.Error(), running) || !strings.Contains(err.Error(), "local/dev/web runs it") || len(res.Locked) != 0 {
		t.Fatalf("a lock while a running driver version does not load: %+v, %v; want nothing locked, naming %s and web", res, err, running)
	}
	locked("a running version broken", metav1.ConditionFalse, v1alpha1.ReasonLockFailed, "nothing locked at", running, "local/dev/web runs it")
	status("a running version broken", head, "failure", "nothing locked: ")

	// The folders put right (the broken versions removed, the running
	// one restored): everything is locked, and the source says so.
	fixed := map[string][]byte{"drivers/graphhub/3.0.0/driver.cue": nil, "drivers/webapp/9.0.0/driver.cue": nil, "drivers/unused/1.0.0/driver.cue": nil}
	fixed[running] = exampleRepo(t)[running].Data
	head = srv.Commit(agentRepoName, "drivers: the broken folders put right", fixed)
	if res, err = l.LockHead(ctx); err != nil || res.Failed != nil || len(res.Locked) == 0 {
		t.Fatalf("the lock once the folders are right: %+v, %v; want hub's changes locked", res, err)
	}
	locked("the folders put right", metav1.ConditionTrue, v1alpha1.ReasonLocked, "every deployment locked")
	status("the folders put right", head, "success", "locked in ")
}

// TestALockCommitTheLockModeDidNotMakeEndsWhatItSaidOfAnOlderHead: the
// lock mode held hub back at a head (a driver version that does not
// load); the fix was pushed with its lock (styrminctl lock --push, CI).
// The lock mode skips a lock commit at the head, and its Locked condition
// went on saying hub was held back, for ever, while hub was locked. Now
// it says the head was locked by a lock commit it did not make (Unknown,
// LockedElsewhere, naming it); a retry commit over its own lock leaves
// what it said standing.
func TestALockCommitTheLockModeDidNotMakeEndsWhatItSaidOfAnOlderHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	cl, key := clusterWithSource(t, srv.RepoURL(agentRepoName))
	l, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Conditions: &source.SourceConditions{Client: cl, Reader: cl, Source: key}})
	if err != nil {
		t.Fatal(err)
	}
	locked := func(what string, status metav1.ConditionStatus, reason string, says ...string) {
		t.Helper()
		var src v1alpha1.StyrminSource
		if err := cl.Get(ctx, key, &src); err != nil {
			t.Fatal(err)
		}
		c := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionLocked)
		if c == nil || c.Status != status || c.Reason != reason {
			t.Fatalf("%s: Locked %+v, want %s %s", what, c, status, reason)
		}
		for _, s := range says {
			if !strings.Contains(c.Message, s) {
				t.Errorf("%s: the Locked condition's message %q does not say %q", what, c.Message, s)
			}
		}
	}
	if res, err := l.LockHead(ctx); err != nil || len(res.Locked) != 2 {
		t.Fatalf("first lock: %+v, %v; want web and hub locked", res, err)
	}
	// A retry over the lock mode's own lock locks no configuration: what
	// the lock mode said of it stands.
	retry := cloneOf(t, srv)
	web := resolver.ID{Cluster: "local", Environment: "dev", Name: "web"}
	if out, err := resolver.CommitRetries(ctx, retry, []resolver.ID{web}, resolver.CommitOptions{History: retry}); err != nil || !out.Committed {
		t.Fatalf("the retry of web: %+v, %v", out, err)
	}
	if res, err := l.LockHead(ctx); err != nil || !res.Skipped {
		t.Fatalf("the round on the retry commit: %+v, %v; want it skipped", res, err)
	}
	locked("a retry over the own lock", metav1.ConditionTrue, v1alpha1.ReasonLocked, "every deployment locked")
	files := hubConfig("1.4.1", 3, "debug")
	files["drivers/graphhub/3.0.0/driver.cue"] = []byte("name: \"graphhub\"\nversion: \"3.0.0\"\nappVersions: \">=1.0.0\"\nparameters: {\n")
	srv.Commit(agentRepoName, "hub: 1.4.1; graphhub 3.0.0 that does not load", files)
	if res, err := l.LockHead(ctx); err != nil || res.Failed == nil {
		t.Fatalf("a lock with hub held back: %+v, %v", res, err)
	}
	locked("hub held back", metav1.ConditionFalse, v1alpha1.ReasonDeploymentsHeldBack, "local/dev/hub")

	// The fix, locked and pushed by CI before the lock mode's next round.
	ci := cloneOf(t, srv)
	srv.Commit(agentRepoName, "drivers: graphhub 3.0.0 removed", map[string][]byte{"drivers/graphhub/3.0.0/driver.cue": nil})
	if got := lockRepo(t, ci); got["hub"] == 0 {
		t.Fatalf("CI's lock: %v, want hub locked", got)
	}
	ciLock, err := gitsource.ParseHash(srv.Head(agentRepoName, "main"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := l.LockHead(ctx); err != nil || !res.Skipped {
		t.Fatalf("the round on CI's lock commit: %+v, %v; want it skipped", res, err)
	}
	locked("CI's lock of the fix", metav1.ConditionUnknown, v1alpha1.ReasonLockedElsewhere, ciLock.Short()+" is locked by "+ciLock.Short())
}

// awayPoster posts through its poster unless away is set: a host that
// does not answer (503).
type awayPoster struct {
	source.StatusPoster
	away atomic.Bool
}

func (p *awayPoster) Post(ctx context.Context, sha string, s commitstatus.Status) error {
	if p.away.Load() {
		return &commitstatus.HTTPError{Code: http.StatusServiceUnavailable, Message: "unavailable"}
	}
	return p.StatusPoster.Post(ctx, sha, s)
}

// TestTheNextAgentPostsTheLockStatusTheHostDidNotTakeFromTheSource pins,
// on a real API server, that the lock mode's statuses the host did not
// take are kept on the StyrminSource (status.lockStatuses) only while
// they wait, and that the next agent's lock mode, whose head is their
// lock commit (skipped), posts them: the configuration commit got no lock
// status at all when the agent stopped before the host answered. The head
// it locks again (status.lockAgain) is kept and dropped alike.
func TestTheNextAgentPostsTheLockStatusTheHostDidNotTakeFromTheSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, sc := lockModeSource(t)
	cl, key := sc.Client, sc.Source
	host, poster := lockStatusHost(t)
	away := &awayPoster{StatusPoster: poster}
	away.away.Store(true)
	config := srv.Head(agentRepoName, "main")
	first, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Conditions: sc, State: sc, Statuses: away, StatusContext: "styrmin/local/lock"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := first.LockHead(ctx); err != nil || len(res.Locked) != 2 {
		t.Fatalf("the first agent's lock: %+v, %v; want web and hub locked", res, err)
	}
	kept, again, err := sc.LockState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || kept[0].Commit != config || kept[0].State != string(commitstatus.Success) || !strings.Contains(kept[0].Description, "2 deployments locked") || again != nil {
		t.Fatalf("the source keeps %+v (again %+v), want the success of %s only", kept, again, config[:12])
	}

	// The first agent stops; the host answers again; the next agent's
	// first round is at the lock commit.
	away.away.Store(false)
	next, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Conditions: sc, State: sc, Statuses: away, StatusContext: "styrmin/local/lock"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := next.LockHead(ctx); err != nil || !res.Skipped {
		t.Fatalf("the next agent's round at the lock commit: %+v, %v; want it skipped", res, err)
	}
	if got := host.states(config); strings.Join(got, " ") != "styrmin/local/lock=success" {
		t.Fatalf("the configuration commit's statuses %v, want the success the first agent decided", got)
	}
	var src v1alpha1.StyrminSource
	if err := cl.Get(ctx, key, &src); err != nil {
		t.Fatal(err)
	}
	if len(src.Status.LockStatuses) != 0 {
		t.Fatalf("the source still keeps %+v once the host took it", src.Status.LockStatuses)
	}

	// The head to lock again is kept and removed by the API server alike.
	want := &v1alpha1.LockAgain{Commit: config, Head: srv.Head(agentRepoName, "main")}
	if err := sc.SetLockAgain(ctx, nil, want); err != nil {
		t.Fatal(err)
	}
	if _, got, err := sc.LockState(ctx); err != nil || got == nil || *got != *want {
		t.Fatalf("the head to lock again read back %+v, %v; want %+v", got, err, want)
	}
	// Written over only as it was read: another writer's is not replaced.
	if err := sc.SetLockAgain(ctx, nil, &v1alpha1.LockAgain{Commit: want.Head, Head: want.Head}); !errors.Is(err, source.ErrLockStateMoved) {
		t.Fatalf("the head to lock again written over one not read: %v, want ErrLockStateMoved", err)
	}
	if err := sc.SetLockAgain(ctx, want, nil); err != nil {
		t.Fatal(err)
	}
	if _, got, err := sc.LockState(ctx); err != nil || got != nil {
		t.Fatalf("the head to lock again once removed: %+v, %v", got, err)
	}
}

// TestALeaderDeposedMidRoundDoesNotWriteItsLockStatusesOverTheNextLeaders
// pins, on a real API server, that the lock mode's writes of what it
// keeps on the StyrminSource are made only over what it last read or
// wrote there: a leader paused past its lease (a long GC, a frozen node)
// finishes its round once it wakes, and its merge patch replaced the
// statuses the next leader had kept while the host was away, so a
// configuration commit that leader locked never got its lock status. Its
// write is now refused; it reads the source again, and its next write
// keeps both leaders' statuses.
func TestALeaderDeposedMidRoundDoesNotWriteItsLockStatusesOverTheNextLeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, sc := lockModeSource(t)
	host, poster := lockStatusHost(t)
	away := &awayPoster{StatusPoster: poster}
	away.away.Store(true)
	locker := func() *source.Locker {
		l, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Conditions: sc, State: sc, Statuses: away, StatusContext: "styrmin/local/lock"})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	lock := func(who string, l *source.Locker) {
		t.Helper()
		if res, err := l.LockHead(ctx); err != nil || res.Commit.IsZero() && !res.Skipped {
			t.Fatalf("%s's round: %+v, %v", who, res, err)
		}
	}
	deposed := locker()
	first := srv.Head(agentRepoName, "main")
	lock("the first leader", deposed)

	// The first leader pauses past its lease; the next one keeps the
	// status of the configuration commit it locks, the host still away.
	next := locker()
	second := srv.Commit(agentRepoName, "more workers", hubConfig("1.4.0", 3, "debug"))
	lock("the next leader", next)
	// The deposed leader wakes and finishes a round.
	third := srv.Commit(agentRepoName, "log less", hubConfig("1.4.0", 3, "warning"))
	lock("the deposed leader", deposed)
	kept, _, err := sc.LockState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(kept, func(k v1alpha1.LockStatus) bool { return k.Commit == second }) {
		t.Fatalf("the source keeps %+v: the next leader's status of %s was written over", kept, second[:12])
	}
	// Read again, its next write keeps both leaders' statuses.
	lock("the deposed leader", deposed)

	// The host answers; the leader after posts what was kept.
	away.away.Store(false)
	lock("the leader after", locker())
	for _, c := range []string{first, second, third} {
		if got := host.states(c); !slices.Contains(got, "styrmin/local/lock=success") {
			t.Errorf("configuration commit %s got the lock statuses %v, want its success", c[:12], got)
		}
	}
}

// TestALeaderDeposedMidRoundDoesNotWriteItsLockedConditionOverTheNextLeaders
// pins, on a real API server, that the lock mode's Locked condition is
// written only over the one its locker last read or wrote: a leader
// paused past its lease after locking a head (a long GC, a frozen node)
// wakes and writes its condition, and it replaced the one the next leader
// had written of a newer head, the StyrminSource saying the older head's
// lock for good. It is now refused and dropped; the next leader's stays.
func TestALeaderDeposedMidRoundDoesNotWriteItsLockedConditionOverTheNextLeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, sc := lockModeSource(t)
	paused := &pausedConditions{ConditionSetter: sc}
	deposed, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Conditions: paused})
	if err != nil {
		t.Fatal(err)
	}
	next, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Conditions: sc})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := deposed.LockHead(ctx); err != nil || len(res.Locked) != 2 {
		t.Fatalf("the first leader's first lock: %+v, %v; want web and hub locked", res, err)
	}
	second := srv.Commit(agentRepoName, "more workers", hubConfig("1.4.0", 3, "debug"))
	var third string
	// The first leader locks the second head, then pauses past its lease
	// before it writes the condition: the next leader locks a newer head.
	paused.race = func() {
		third = srv.Commit(agentRepoName, "log less", hubConfig("1.4.0", 3, "warning"))
		if res, err := next.LockHead(ctx); err != nil || res.Commit.IsZero() {
			t.Errorf("the next leader's lock of %s: %+v, %v", third[:12], res, err)
		}
	}
	if res, err := deposed.LockHead(ctx); err != nil || res.Commit.IsZero() {
		t.Fatalf("the deposed leader's lock of %s: %+v, %v", second[:12], res, err)
	}
	c, err := sc.Condition(ctx, v1alpha1.ConditionLocked)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil || !strings.Contains(c.Message, third[:12]) {
		t.Fatalf("the source's Locked condition %+v; want the next leader's, of %s, not the deposed leader's of %s", c, third[:12], second[:12])
	}
}

// pausedConditions runs race once before the first condition it writes
// once race is set: a leader paused before its write while another locks.
type pausedConditions struct {
	source.ConditionSetter
	race func()
	once sync.Once
}

func (p *pausedConditions) SetCondition(ctx context.Context, was *metav1.Condition, c metav1.Condition) error {
	if p.race != nil {
		p.once.Do(p.race)
	}
	return p.ConditionSetter.SetCondition(ctx, was, c)
}

// TestTheNextLeadersLockedConditionIsWrittenOverADeposedLeadersThatLandedMidRound
// pins, on a real API server, the order the test above does not take: the
// next leader reads the Locked condition before its round, and the leader
// before it, paused past its lease, wakes while that round runs and writes
// its older head's condition. The next leader's write of its newer head
// was refused as another agent's (its compare-and-swap failed) and
// dropped, and its later rounds skipped the head as handled: the source
// named the older head until the next commit. The head the held
// condition is about decides: an ancestor of the next leader's head is
// written over.
func TestTheNextLeadersLockedConditionIsWrittenOverADeposedLeadersThatLandedMidRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, sc := lockModeSource(t)
	pausedDeposed, pausedNext := &pausedConditions{ConditionSetter: sc}, &pausedConditions{ConditionSetter: sc}
	deposed, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Conditions: pausedDeposed})
	if err != nil {
		t.Fatal(err)
	}
	next, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Conditions: pausedNext})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := deposed.LockHead(ctx); err != nil || len(res.Locked) != 2 {
		t.Fatalf("the first leader's first lock: %+v, %v; want web and hub locked", res, err)
	}
	second := srv.Commit(agentRepoName, "more workers", hubConfig("1.4.0", 3, "debug"))
	var third string
	nextPaused, deposedWrote, nextDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	// The next leader has read the first head's condition and locked a
	// newer head; it writes once the deposed leader wrote.
	pausedNext.race = func() {
		close(nextPaused)
		<-deposedWrote
	}
	// The first leader locks the second head and pauses past its lease
	// before it writes the condition: the next leader's round starts.
	pausedDeposed.race = func() {
		third = srv.Commit(agentRepoName, "log less", hubConfig("1.4.0", 3, "warning"))
		go func() {
			defer close(nextDone)
			if res, err := next.LockHead(ctx); err != nil || res.Commit.IsZero() {
				t.Errorf("the next leader's lock of %s: %+v, %v", third[:12], res, err)
			}
		}()
		<-nextPaused
	}
	if res, err := deposed.LockHead(ctx); err != nil || res.Commit.IsZero() {
		t.Fatalf("the deposed leader's lock of %s: %+v, %v", second[:12], res, err)
	}
	if c, err := sc.Condition(ctx, v1alpha1.ConditionLocked); err != nil || c == nil || !strings.Contains(c.Message, second[:12]) {
		t.Fatalf("the deposed leader's condition did not land before the next leader's write: %+v, %v", c, err)
	}
	close(deposedWrote)
	<-nextDone
	c, err := sc.Condition(ctx, v1alpha1.ConditionLocked)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil || !strings.Contains(c.Message, third[:12]) {
		t.Fatalf("the source's Locked condition %+v; want the next leader's, of %s, not the deposed leader's of %s", c, third[:12], second[:12])
	}
	// Its next round skips the head as handled: nothing would write it.
	if res, err := next.LockHead(ctx); err != nil || !res.Skipped {
		t.Fatalf("the next leader's next round: %+v, %v; want the head skipped", res, err)
	}
}

// TestALockedConditionWhoseAnswerWasLostIsNotTakenForAnotherAgentsOnTheNextHead
// pins, on a real API server, that the lock mode's own write of the
// Locked condition that landed though its answer was lost (a timeout) is
// not taken for another agent's: the next head's condition was written
// on what the locker had read before that write, refused, and dropped,
// the log blaming another agent and the source naming the older head
// until the next commit.
func TestALockedConditionWhoseAnswerWasLostIsNotTakenForAnotherAgentsOnTheNextHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, sc := lockModeSource(t)
	lost := &lostAnswers{ConditionSetter: sc, lose: 1}
	l, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Conditions: lost})
	if err != nil {
		t.Fatal(err)
	}
	first, err := l.LockHead(ctx)
	if err != nil || len(first.Locked) != 2 {
		t.Fatalf("the first lock: %+v, %v; want web and hub locked", first, err)
	}
	if c, err := sc.Condition(ctx, v1alpha1.ConditionLocked); err != nil || c == nil || !strings.Contains(c.Message, first.Head.Short()) {
		t.Fatalf("the first head's condition did not land: %+v, %v", c, err)
	}
	second := srv.Commit(agentRepoName, "more workers", hubConfig("1.4.0", 3, "debug"))
	if res, err := l.LockHead(ctx); err != nil || res.Commit.IsZero() {
		t.Fatalf("the lock of %s: %+v, %v", second[:12], res, err)
	}
	c, err := sc.Condition(ctx, v1alpha1.ConditionLocked)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil || !strings.Contains(c.Message, second[:12]) {
		t.Fatalf("the source's Locked condition %+v; want the one of %s, not the first head's %s", c, second[:12], first.Head.Short())
	}
}

// lostAnswers writes each condition and, for the first lose of them,
// returns an error as if the API server's answer had been lost.
type lostAnswers struct {
	source.ConditionSetter
	lose int
}

func (p *lostAnswers) SetCondition(ctx context.Context, was *metav1.Condition, c metav1.Condition) error {
	if err := p.ConditionSetter.SetCondition(ctx, was, c); err != nil {
		return err
	}
	if p.lose > 0 {
		p.lose--
		return errors.New("the answer of the API server was lost: context deadline exceeded")
	}
	return nil
}

// TestALockModePushWhoseAnswerWasLostEndsItsHeadsStatusOnceTheLockIsSeen
// drops the answer of the lock mode's push after the git server stored
// it, the host away for the look after: the round fails, and the
// configuration commit's status says it is locked again soon. The next
// round finds the lock commit at the head, made over that configuration
// commit: the commit's status is the lock's success, not pending for
// ever.
func TestALockModePushWhoseAnswerWasLostEndsItsHeadsStatusOnceTheLockIsSeen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	host, poster := lockStatusHost(t)
	l, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv), Statuses: poster, StatusContext: "styrmin/local/lock"})
	if err != nil {
		t.Fatal(err)
	}
	config := srv.Head(agentRepoName, "main")
	srv.LosePushAnswer()
	if res, err := l.LockHead(ctx); err == nil {
		t.Fatalf("a round whose push's answer was lost, the host away after: %+v, no error", res)
	}
	srv.Start()
	lock := srv.Head(agentRepoName, "main")
	if lock == config {
		t.Fatal("the git server did not store the push whose answer it dropped")
	}
	if res, err := l.LockHead(ctx); err != nil || res.Commit.String() != lock || len(res.Locked) != 2 {
		t.Fatalf("the round after: %+v, %v; want the lock %s that landed, of web and hub", res, err, lock[:12])
	}
	if head := srv.Head(agentRepoName, "main"); head != lock {
		t.Fatalf("the round after moved the branch from the lock %s to %s", lock[:12], head[:12])
	}
	got := host.last(config, "styrmin/local/lock")
	if got == nil || got["state"] != "success" || !strings.Contains(got["description"], lock[:12]) {
		t.Fatalf("the configuration commit's lock status %v, want the success of its lock %s", got, lock[:12])
	}
}

// TestALockStateWrittenBetweenTheReadAndThePatchIsNotWrittenOver pins, on a
// real API server, that the lock mode's patch of what it keeps carries the
// resourceVersion of the copy it compared: a write landing between that
// read and the patch makes it conflict, read again and refuse, rather than
// replace the statuses another agent kept.
func TestALockStateWrittenBetweenTheReadAndThePatchIsNotWrittenOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl, key := clusterWithSource(t, "https://git.example/desired")
	sc := &source.SourceConditions{Client: cl, Reader: cl, Source: key}
	theirs := []v1alpha1.LockStatus{{Commit: strings.Repeat("ab", 20), State: "pending", Description: "locked again soon"}}
	mine := []v1alpha1.LockStatus{{Commit: strings.Repeat("cd", 20), State: "success", Description: "1 deployment locked"}}
	racing := &patchRace{Client: cl, race: func() {
		if err := sc.SetLockStatuses(ctx, nil, theirs); err != nil {
			t.Error(err)
		}
	}}
	stale := &source.SourceConditions{Client: racing, Reader: cl, Source: key}
	if err := stale.SetLockStatuses(ctx, nil, mine); !errors.Is(err, source.ErrLockStateMoved) {
		t.Fatalf("a write over statuses kept between its read and its patch: %v, want ErrLockStateMoved", err)
	}
	if kept, _, err := sc.LockState(ctx); err != nil || !slices.Equal(kept, theirs) {
		t.Fatalf("the source keeps %+v, %v; want the other agent's %+v", kept, err, theirs)
	}
}

// TestALockedConditionWrittenBetweenTheReadAndTheUpdateIsNotWrittenOver
// pins, on a real API server, that the Locked condition's write carries
// the resourceVersion of the copy it compared: another agent's condition
// landing between that read and the update makes it conflict, read again
// and refuse, rather than replace it.
func TestALockedConditionWrittenBetweenTheReadAndTheUpdateIsNotWrittenOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl, key := clusterWithSource(t, "https://git.example/desired")
	sc := &source.SourceConditions{Client: cl, Reader: cl, Source: key}
	theirs := metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonLocked, Message: "every deployment locked at the newer head"}
	mine := metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDeploymentsHeldBack, Message: "held back at the older head"}
	racing := &patchRace{Client: cl, race: func() {
		if err := sc.SetCondition(ctx, nil, theirs); err != nil {
			t.Error(err)
		}
	}}
	stale := &source.SourceConditions{Client: racing, Reader: cl, Source: key}
	if err := stale.SetCondition(ctx, nil, mine); !errors.Is(err, source.ErrLockStateMoved) {
		t.Fatalf("a write over a condition written between its read and its update: %v, want ErrLockStateMoved", err)
	}
	if got, err := sc.Condition(ctx, v1alpha1.ConditionLocked); err != nil || !source.SameCondition(got, &theirs) {
		t.Fatalf("the source's Locked condition %+v, %v; want the other agent's %+v", got, err, theirs)
	}
}

// patchRace runs race once before the first status patch or update it
// sends.
type patchRace struct {
	client.Client
	race func()
	once sync.Once
}

func (c *patchRace) Status() client.SubResourceWriter {
	return &patchRaceWriter{SubResourceWriter: c.Client.Status(), c: c}
}

type patchRaceWriter struct {
	client.SubResourceWriter
	c *patchRace
}

func (w *patchRaceWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	w.c.once.Do(w.c.race)
	return w.SubResourceWriter.Update(ctx, obj, opts...)
}

func (w *patchRaceWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	w.c.once.Do(w.c.race)
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// clusterWithSource is a control plane holding the StyrminSource
// styrmin-system/styrmin of cluster local, reading url.
func clusterWithSource(t *testing.T, url string) (client.Client, types.NamespacedName) {
	t.Helper()
	ctx := context.Background()
	_, cl := agenttest.StartCluster(t, testcluster.Options{})
	key := types.NamespacedName{Namespace: "styrmin-system", Name: "styrmin"}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.Namespace}}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: v1alpha1.StyrminSourceSpec{URL: url, Cluster: "local"}}); err != nil {
		t.Fatal(err)
	}
	return cl, key
}

// The lock mode says what `styrminctl lock` warns of, and still locks: a
// second cluster whose cluster.cue kept the first's domain gives its
// environment dev the same external hosts.
func TestTheLockModeLocksAndSaysWhatTheLockWarnsOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	srv.Commit(agentRepoName, "a second cluster, its cluster.cue copied", map[string][]byte{
		"clusters/other/cluster.cue":                      []byte("domain: \"local.styrmin.dev\"\n"),
		"clusters/other/environments/dev/environment.cue": []byte("config: logLevel: \"info\"\n"),
	})
	l, err := source.NewLocker(source.LockModeOptions{Repo: cloneOf(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit.IsZero() || len(res.Locked) != 2 {
		t.Fatalf("lock: commit %v, locked %v; want a commit locking web and hub", res.Commit, res.Locked)
	}
	if w := strings.Join(res.Warnings, "\n"); !strings.Contains(w, "clusters local, other each give environment dev the domain") {
		t.Errorf("warnings %q, want the two clusters giving dev one domain", res.Warnings)
	}
}

// lockModeSource is the example's git server, a StyrminSource of it on
// the API server, and the Locked condition's writer of that source.
func lockModeSource(t *testing.T) (*gitserver.Server, *source.SourceConditions) {
	t.Helper()
	srv := exampleServer(t)
	cl, key := clusterWithSource(t, srv.RepoURL(agentRepoName))
	return srv, &source.SourceConditions{Client: cl, Reader: cl, Source: key}
}
