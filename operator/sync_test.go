package operator_test

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/cachetest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/source"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

func TestSelectWorkflow(t *testing.T) {
	inst := func(kind, driver, version, app string) *resolver.Instance {
		return &resolver.Instance{Kind: kind, Driver: resolver.DriverRef{Name: driver, Version: version}, AppVersion: app,
			Digest: kind + driver + version + app}
	}
	v1 := inst(resolver.KindInstance, "graphhub", "1.0.0", "1.4.0")
	for _, tc := range []struct {
		name       string
		prev, next *resolver.Instance
		want       v1alpha1.Workflow
	}{
		{"no instance before: create", nil, v1, v1alpha1.WorkflowCreate},
		{"a tombstone before: create again", inst(resolver.KindTombstone, "", "", ""), v1, v1alpha1.WorkflowCreate},
		{"same driver and app version: update", v1, &resolver.Instance{Kind: resolver.KindInstance, Driver: v1.Driver, AppVersion: "1.4.0", Digest: "other"}, v1alpha1.WorkflowUpdate},
		{"same digest under a new sequence: still an update", v1, inst(resolver.KindInstance, "graphhub", "1.0.0", "1.4.0"), v1alpha1.WorkflowUpdate},
		{"a tombstone after a tombstone: delete", inst(resolver.KindTombstone, "", "", ""), inst(resolver.KindTombstone, "", "", ""), v1alpha1.WorkflowDelete},
		{"app version changed: upgrade", v1, inst(resolver.KindInstance, "graphhub", "1.0.0", "1.4.1"), v1alpha1.WorkflowUpgrade},
		{"driver version changed: upgrade", v1, inst(resolver.KindInstance, "graphhub", "2.0.0", "1.4.0"), v1alpha1.WorkflowUpgrade},
		{"driver changed: upgrade", v1, inst(resolver.KindInstance, "webapp", "1.0.0", "1.4.0"), v1alpha1.WorkflowUpgrade},
		{"tombstone: delete", v1, inst(resolver.KindTombstone, "", "", ""), v1alpha1.WorkflowDelete},
		{"tombstone without instance: delete", nil, inst(resolver.KindTombstone, "", "", ""), v1alpha1.WorkflowDelete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := source.SelectWorkflow(tc.prev, tc.next); got != tc.want {
				t.Errorf("SelectWorkflow = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestTaskAndJobNamesAreDeterministic(t *testing.T) {
	if got := v1alpha1.TaskName("hub", 12); got != "hub-12" {
		t.Errorf("TaskName = %q", got)
	}
	if got := task.JobName("hub", "migrate", 3); got != "hub-migrate-3" {
		t.Errorf("JobName = %q", got)
	}
	long := task.JobName(strings.Repeat("d", 63), strings.Repeat("j", 40), 123456)
	if len(long) > 63 || long != task.JobName(strings.Repeat("d", 63), strings.Repeat("j", 40), 123456) {
		t.Errorf("long JobName = %q (%d chars)", long, len(long))
	}
	if long == task.JobName(strings.Repeat("d", 63), strings.Repeat("j", 40), 123457) {
		t.Error("two sequences share a job name")
	}
}

// TestSyncCreatesOneTaskPerNewSequenceAndResumes runs the syncer against
// a real git server and API server: it creates one task per new
// (deployment, sequence) of its own cluster with the workflow the previous
// instance calls for, keeps its position in the StyrminSource so a new
// syncer resumes there, creates nothing twice when walking again from the
// root, reports invalid and deleted lockfiles without stopping, and syncs
// at once when triggered.
func TestSyncCreatesOneTaskPerNewSequenceAndResumes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, cl := agenttest.StartCluster(t, testcluster.Options{})
	scheme := cl.Scheme()
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
	recorder := broadcaster.NewRecorder(scheme, "styrmin-agent")

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
	repoLocks := instance.NewRepoLocks(agentRepo)
	files := &filesRepo{SourceRepo: agentRepo, asked: map[gitsource.Hash]int{}}
	newSyncer := func() *source.Syncer {
		s, err := source.NewSyncer(source.SyncerOptions{
			Client: cl, Repo: files, Cluster: "local", Source: sourceKey, Locks: repoLocks,
			Spec:     v1alpha1.StyrminSourceSpec{URL: url, Branch: "main"},
			Interval: time.Hour, Recorder: recorder, Log: testr.New(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sync := func(s *source.Syncer) source.SyncResult {
		t.Helper()
		res, err := s.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	task := func(ns, name string) *v1alpha1.StyrminTask {
		t.Helper()
		var task v1alpha1.StyrminTask
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &task); err != nil {
			t.Fatal(err)
		}
		return &task
	}

	// The first lock, and a lock of another cluster in the same repository.
	lockRepo(t, author)
	locks, err := resolver.LoadLocks(mustFS(t, author))
	if err != nil {
		t.Fatal(err)
	}
	other := *locks[resolver.ID{Cluster: "local", Environment: "dev", Name: "hub"}]
	other.ID.Cluster = "elsewhere"
	other.After = nil // local's order means nothing in another cluster
	otherLock, err := resolver.EncodeLock(&other)
	if err != nil {
		t.Fatal(err)
	}
	git.Commit("desired", "lock another cluster", map[string][]byte{other.ID.LockPath(): otherLock})

	s := newSyncer()
	res := sync(s)
	if strings.Join(res.Created, " ") != "dev-hub/hub-1 dev-web/web-1" || res.Existing != 0 || res.Ignored != 0 {
		t.Fatalf("first sync: %+v, want hub-1 and web-1 created (the other cluster's lock not even listed)", res)
	}
	// The lock commit's two lockfiles are read from one tree: a commit of
	// hundreds would otherwise decode its folder once per lockfile.
	for commit, n := range files.reads() {
		if n > 1 {
			t.Errorf("the files of %s were read %d times in one sync, want once", commit.Short(), n)
		}
	}
	hub1 := task("dev-hub", "hub-1")
	if hub1.Spec.Workflow != v1alpha1.WorkflowCreate || hub1.Spec.FromSequence != 0 || hub1.Spec.ToSequence != 1 ||
		hub1.Spec.Lock.Path != "locks/local/dev/hub.lock.yaml" || hub1.Spec.Instance != nil || hub1.Labels[v1alpha1.LabelSequence] != "1" {
		t.Errorf("hub-1 spec: %+v labels %v (a task refers to its lock, without a copy of the instance)", hub1.Spec, hub1.Labels)
	}
	in, err := repoLocks.Lock(ctx, hub1.Spec.Lock)
	if err != nil || in.ID.Name != "hub" || in.Sequence != 1 {
		t.Fatalf("the instance of hub-1 from its lock: %v", err)
	}
	if tg := hub1.Spec.Target; tg == nil || tg.Digest != in.Digest || tg.AppVersion != in.AppVersion || tg.Driver.Version != in.Driver.Version || tg.Kind != in.Kind {
		t.Errorf("hub-1 target %+v does not summarise its instance", tg)
	}
	var ns corev1.Namespace
	if err := cl.Get(ctx, client.ObjectKey{Name: "dev-hub"}, &ns); err != nil || ns.Labels[v1alpha1.LabelDeployment] != "hub" {
		t.Errorf("namespace dev-hub: %v labels %v", err, ns.Labels)
	}
	var src v1alpha1.StyrminSource
	if err := cl.Get(ctx, sourceKey, &src); err != nil || src.Status.LastSyncedCommit != res.Head.String() {
		t.Fatalf("StyrminSource: %v synced %q, want %s", err, src.Status.LastSyncedCommit, res.Head)
	}

	// Nothing new: skipped, also by a new syncer (an agent restart).
	if res := sync(s); !res.Skipped {
		t.Errorf("second sync: %+v, want skipped", res)
	}
	s = newSyncer()
	if res := sync(s); !res.Skipped {
		t.Errorf("sync after a restart: %+v, want skipped (resumed at the recorded commit)", res)
	}

	// Two lock commits: every sequence gets its task and workflow.
	git.Commit("desired", "three workers", hubConfig("1.4.0", 3, "info"))
	lockRepo(t, author)
	git.Commit("desired", "app 1.4.1", hubConfig("1.4.1", 3, "info"))
	lockRepo(t, author)
	res = sync(s)
	if strings.Join(res.Created, " ") != "dev-hub/hub-2 dev-hub/hub-3" {
		t.Fatalf("sync of two lock commits: %+v", res)
	}
	if h2, h3 := task("dev-hub", "hub-2"), task("dev-hub", "hub-3"); h2.Spec.Workflow != v1alpha1.WorkflowUpdate || h2.Spec.FromSequence != 1 ||
		h3.Spec.Workflow != v1alpha1.WorkflowUpgrade || h3.Spec.FromSequence != 2 || h2.Spec.Lock.Commit == h3.Spec.Lock.Commit {
		t.Errorf("hub-2 %s from %d at %s, hub-3 %s from %d at %s", h2.Spec.Workflow, h2.Spec.FromSequence, h2.Spec.Lock.Commit, h3.Spec.Workflow, h3.Spec.FromSequence, h3.Spec.Lock.Commit)
	}
	// Deployments are created in parallel, a deployment's tasks in
	// sequence order: the store's revisions show the order.
	if rv2, rv3 := resourceVersion(t, task("dev-hub", "hub-2")), resourceVersion(t, task("dev-hub", "hub-3")); rv2 >= rv3 {
		t.Errorf("hub-3 was created (revision %d) before hub-2 (revision %d)", rv3, rv2)
	}

	// Walking again from the root (the sync position lost) creates
	// nothing twice.
	fromRoot := func() source.SyncResult {
		t.Helper()
		if err := cl.Get(ctx, sourceKey, &src); err != nil {
			t.Fatal(err)
		}
		src.Status.LastSyncedCommit = ""
		if err := cl.Status().Update(ctx, &src); err != nil {
			t.Fatal(err)
		}
		s = newSyncer()
		return sync(s)
	}
	if res := fromRoot(); len(res.Created) != 0 || res.Existing != 4 {
		t.Errorf("walk from the root: %+v, want the 4 tasks found existing", res)
	}
	// A task deleted with the history it fell out of is not made again
	// when the StyrminDeployment holds its sequence.
	hub3 := task("dev-hub", "hub-3")
	in3, err := repoLocks.Lock(ctx, hub3.Spec.Lock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := instance.WriteInstance(ctx, cl, "dev-hub", in3); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, task("dev-hub", "hub-2")); err != nil {
		t.Fatal(err)
	}
	if res := fromRoot(); len(res.Created) != 0 || res.Existing != 4 {
		t.Errorf("walk from the root with hub-2 deleted and hub at sequence 3: %+v, want nothing created", res)
	}

	// A trigger syncs at once (the poll interval is an hour).
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Start(runCtx) }()
	git.Commit("desired", "debug logs", hubConfig("1.4.1", 3, "debug"))
	lockRepo(t, author)
	s.Trigger()
	agenttest.WaitUntil(t, 20*time.Second, "the triggered sync to create hub-4", func(ctx context.Context) (bool, string, error) {
		err := cl.Get(ctx, client.ObjectKey{Namespace: "dev-hub", Name: "hub-4"}, &v1alpha1.StyrminTask{})
		return err == nil, fmt.Sprint(err), nil
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A lockfile edited by hand, and one deleted by hand: reported, skipped.
	fsys := mustFS(t, author)
	data, err := fs.ReadFile(fsys, "locks/local/dev/hub.lock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), "appVersion: 1.4.1", "appVersion: 9.9.9", 1)
	git.Commit("desired", "hand edit", map[string][]byte{"locks/local/dev/hub.lock.yaml": []byte(edited), "locks/local/dev/web.lock.yaml": nil})
	res = sync(s)
	if len(res.Created) != 0 || res.Ignored != 2 {
		t.Errorf("sync of a hand-edited and a deleted lockfile: %+v, want both ignored", res)
	}
	if err := cl.Get(ctx, sourceKey, &src); err != nil || src.Status.LastSyncedCommit != res.Head.String() {
		t.Errorf("the position did not advance past the bad commit: %v %s", err, src.Status.LastSyncedCommit)
	}
	agenttest.WaitUntil(t, 20*time.Second, "InvalidLock and LockDeleted events on the StyrminSource", func(ctx context.Context) (bool, string, error) {
		var evs eventsv1.EventList
		if err := cl.List(ctx, &evs, client.InNamespace("styrmin-system")); err != nil {
			return false, err.Error(), nil
		}
		var notes []string
		for _, ev := range evs.Items {
			if (ev.Reason == "InvalidLock" || ev.Reason == "LockDeleted") && ev.Regarding.Kind == "StyrminSource" {
				notes = append(notes, ev.Note)
			}
		}
		all := strings.Join(notes, "\n")
		return strings.Contains(all, "edited by hand") && strings.Contains(all, "was deleted"), all, nil
	})

	t.Log("a cache behind the last sync's write: the position goes on a copy read from the API server")
	var behind v1alpha1.StyrminSource
	if err := cl.Get(ctx, sourceKey, &behind); err != nil {
		t.Fatal(err)
	}
	webLock, err := fs.ReadFile(fsys, "locks/local/dev/web.lock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	git.Commit("desired", "the locks restored", map[string][]byte{"locks/local/dev/hub.lock.yaml": data, "locks/local/dev/web.lock.yaml": webLock})
	git.Commit("desired", "info logs", hubConfig("1.4.1", 3, "info"))
	lockRepo(t, author)
	sync(s) // the status moves on; behind is now a stale copy
	git.Commit("desired", "debug logs again", hubConfig("1.4.1", 3, "debug"))
	lockRepo(t, author)
	lagging := func(reader client.Reader) *source.Syncer {
		s, err := source.NewSyncer(source.SyncerOptions{
			Client: cachetest.Stale{Client: cl, Copy: &behind}, APIReader: reader, Repo: files, Cluster: "local", Source: sourceKey, Locks: repoLocks,
			Spec:     v1alpha1.StyrminSourceSpec{URL: url, Branch: "main"},
			Interval: time.Hour, Recorder: recorder, Log: testr.New(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Read again from the same cache, the copy is as stale: the sync fails.
	if _, err := lagging(nil).Sync(ctx); err == nil || !strings.Contains(err.Error(), "recording") {
		t.Fatalf("a sync re-reading a stale cache: %v, want its conflict", err)
	}
	res = sync(lagging(cl))
	if err := cl.Get(ctx, sourceKey, &src); err != nil || src.Status.LastSyncedCommit != res.Head.String() {
		t.Errorf("the position after a sync from a stale copy: %v %s, want %s", err, src.Status.LastSyncedCommit, res.Head)
	}
}

func mustFS(t *testing.T, r *gitsource.Repo) fs.FS {
	t.Helper()
	if _, err := r.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	head, err := r.Head()
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := r.FS(head)
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

// resourceVersion is an object's store revision (etcd's revisions grow
// with every write, which the test relies on to order creations).
func resourceVersion(t *testing.T, o client.Object) int64 {
	t.Helper()
	rv, err := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("%s: resourceVersion %q: %v", o.GetName(), o.GetResourceVersion(), err)
	}
	return rv
}

// filesRepo counts, by commit, the trees a syncer reads.
type filesRepo struct {
	source.SourceRepo
	mu    sync.Mutex
	asked map[gitsource.Hash]int
}

func (r *filesRepo) FS(commit gitsource.Hash) (fs.FS, error) {
	r.mu.Lock()
	r.asked[commit]++
	r.mu.Unlock()
	return r.SourceRepo.FS(commit)
}

// reads returns the counts so far and starts again.
func (r *filesRepo) reads() map[gitsource.Hash]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.asked
	r.asked = map[gitsource.Hash]int{}
	return out
}
