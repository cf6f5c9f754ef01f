package operator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/cachetest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/source"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// TestSyncSkipsABadTrailerAndFollowsARewrittenHistory runs the syncer
// against a real git server and API server (no task runs: the test reads
// the tasks the sync creates). A lock commit with a malformed Styrmin-Lock
// trailer is synced from its lockfiles, with an InvalidLockTrailer event.
// A force push that rewinds the branch is reported (event and condition
// HistoryRewritten); the new history's lock that reuses a sequence the
// cluster ran makes no task and the condition names its deployment; a
// lock numbered after the cluster's (as the lock mode numbers) is applied
// and clears the condition.
func TestSyncSkipsABadTrailerAndFollowsARewrittenHistory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, cl := agenttest.StartCluster(t, testcluster.Options{})
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "styrmin-system"}}); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()

	git := gitserver.New(t)
	git.Seed("desired", exampleRepo(t), "examples")
	url := git.RepoURL("desired")
	author, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	agentRepo, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	sourceKey := types.NamespacedName{Namespace: "styrmin-system", Name: "styrmin"}
	// lag, once filled, is the copy of the StyrminSource the syncer's
	// cache serves: a cache behind the syncer's own writes.
	var lag v1alpha1.StyrminSource
	s, err := source.NewSyncer(source.SyncerOptions{
		Client: cachetest.Stale{Client: cl, Copy: &lag}, APIReader: cl, Repo: agentRepo, Cluster: "local", Source: sourceKey,
		Spec:     v1alpha1.StyrminSourceSpec{URL: url, Branch: "main"},
		Interval: time.Hour, Recorder: broadcaster.NewRecorder(cl.Scheme(), "styrmin-agent"), Log: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	sync := func() source.SyncResult {
		t.Helper()
		res, err := s.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	condition := func() *metav1.Condition {
		t.Helper()
		var src v1alpha1.StyrminSource
		if err := cl.Get(ctx, sourceKey, &src); err != nil {
			t.Fatal(err)
		}
		return apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionHistoryRewritten)
	}
	hubTask := func(seq int64) *v1alpha1.StyrminTask {
		var task v1alpha1.StyrminTask
		if err := cl.Get(ctx, client.ObjectKey{Namespace: hubNamespace, Name: v1alpha1.TaskName("hub", seq)}, &task); err != nil {
			return nil
		}
		return &task
	}

	lockRepo(t, author)
	firstLock := git.Head("desired", "main")
	if res := sync(); len(res.Created) != 2 {
		t.Fatalf("first sync: %+v, want hub-1 and web-1", res)
	}

	// A lock commit made by hand with a malformed trailer: its lockfile is
	// synced, the trailer reported.
	git.Commit("desired", "hub: three workers", hubConfig("1.4.0", 3, "info"))
	files := lockFiles(t, author, nil)
	git.Commit("desired", "lock by hand\n\nStyrmin-Lock: local/dev/hub=two", files)
	if res := sync(); strings.Join(res.Created, " ") != "dev-hub/hub-2" || res.BadTrailers != 1 {
		t.Fatalf("sync of a lock commit with a bad trailer: %+v, want hub-2 created and the trailer skipped", res)
	}
	waitSourceEvent(t, cl, v1alpha1.ReasonInvalidLockTrailer, "local/dev/hub=two")

	// A force push rewinds the branch to the first lock; the new history
	// locks another change of hub, numbered from its own history: 2 again.
	git.Reset("desired", "main", firstLock)
	git.Commit("desired", "hub: four workers", hubConfig("1.4.0", 4, "info"))
	if seq := lockRepo(t, author)["hub"]; seq != 2 {
		t.Fatalf("the rewound branch locked hub at %d, want 2 (its history only knows 1)", seq)
	}
	var beforeRewrite v1alpha1.StyrminSource
	if err := cl.Get(ctx, sourceKey, &beforeRewrite); err != nil {
		t.Fatal(err)
	}
	res := sync()
	if !res.Rewritten || len(res.Created) != 0 || strings.Join(res.SequenceUsed, " ") != "local/dev/hub" {
		t.Fatalf("sync of the rewritten branch: %+v, want it rewritten, nothing created, hub named", res)
	}
	if cond := condition(); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonSequenceUsed ||
		!strings.Contains(cond.Message, "local/dev/hub (the branch locks 2, the cluster ran 2; the next lock must be 3 or above)") {
		t.Fatalf("HistoryRewritten condition: %+v", cond)
	}
	waitSourceEvent(t, cl, v1alpha1.ReasonHistoryRewritten, "does not descend")
	waitSourceEvent(t, cl, v1alpha1.ReasonSequenceUsed, "local/dev/hub")
	if task := hubTask(2); task == nil || task.Spec.Target.Digest == lockDigest(t, author, "hub") {
		t.Fatal("hub-2 was replaced by the new history's instance under the same number")
	}

	// The next sync comes before the syncer's cache has seen the
	// condition it wrote (a push right after the force push): it reads the
	// StyrminSource from the API server, and the condition stands while
	// hub's lock still reuses 2. From the cached copy it would have found no
	// condition to follow and written that copy's conditions back.
	beforeRewrite.DeepCopyInto(&lag)
	git.Commit("desired", "a note, nothing locked", map[string][]byte{"NOTES.md": []byte("hub waits for a lock past 2\n")})
	if res := sync(); res.Rewritten || len(res.Created) != 0 || strings.Join(res.SequenceUsed, " ") != "local/dev/hub" {
		t.Fatalf("sync after the rewrite from a cache behind it: %+v, want hub still named", res)
	}
	lag = v1alpha1.StyrminSource{}
	if cond := condition(); cond == nil || cond.Reason != v1alpha1.ReasonSequenceUsed {
		t.Fatalf("HistoryRewritten after a sync from a cache behind the syncer's write: %+v, want it standing for hub", cond)
	}

	// The next lock numbers after what the cluster ran (as the lock mode
	// does): it is applied, and the condition goes.
	used, err := operator.UsedSequences(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	git.Commit("desired", "hub: five workers", hubConfig("1.4.0", 5, "info"))
	next := lockFiles(t, author, used)
	git.Commit("desired", "styrmin: lock local/dev/hub=3\n\nStyrmin-Lock: local/dev/hub=3", next)
	res = sync()
	if res.Rewritten || strings.Join(res.Created, " ") != "dev-hub/hub-3" || len(res.SequenceUsed) != 0 {
		t.Fatalf("sync of a lock after the cluster's: %+v, want hub-3 created", res)
	}
	if cond := condition(); cond != nil {
		t.Fatalf("HistoryRewritten condition left after the deployment caught up: %+v", cond)
	}
	if task := hubTask(3); task == nil || task.Spec.FromSequence != 2 {
		t.Fatalf("hub-3: %+v, want it to follow 2", task)
	}
}

// lockFiles resolves the head of clone's branch, numbering after used too,
// and returns the lockfiles that change, uncommitted.
func lockFiles(t *testing.T, clone *gitsource.Repo, used resolver.UsedSequences) map[string][]byte {
	t.Helper()
	fsys := mustFS(t, clone)
	head, err := clone.Head()
	if err != nil {
		t.Fatal(err)
	}
	ws, err := resolver.LoadWorkspace(fsys, resolver.WorkspaceOptions{SourceCommit: head.String(), Used: used})
	if err != nil {
		t.Fatal(err)
	}
	changes, _, err := ws.Lock(resolver.LockAllOrNothing)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, c := range changes {
		files[c.Path()] = c.Data
	}
	if len(files) == 0 {
		t.Fatal("nothing to lock")
	}
	return files
}

// lockDigest is the digest of a deployment's lockfile at the head of clone.
func lockDigest(t *testing.T, clone *gitsource.Repo, name string) string {
	t.Helper()
	in, err := resolver.ReadLock(mustFS(t, clone), resolver.ID{Cluster: agentCluster, Environment: "dev", Name: name}.LockPath())
	if err != nil {
		t.Fatal(err)
	}
	return in.Digest
}

// waitSourceEvent waits for an event of reason on a StyrminSource whose
// note contains text.
func waitSourceEvent(t *testing.T, cl client.Client, reason, text string) {
	t.Helper()
	agenttest.WaitUntil(t, 20*time.Second, reason+" event on the StyrminSource", func(ctx context.Context) (bool, string, error) {
		var evs eventsv1.EventList
		if err := cl.List(ctx, &evs, client.InNamespace("styrmin-system")); err != nil {
			return false, err.Error(), nil
		}
		var notes []string
		for _, ev := range evs.Items {
			if ev.Reason == reason && ev.Regarding.Kind == "StyrminSource" {
				if strings.Contains(ev.Note, text) {
					return true, "", nil
				}
				notes = append(notes, ev.Note)
			}
		}
		return false, strings.Join(notes, "\n"), nil
	})
}
