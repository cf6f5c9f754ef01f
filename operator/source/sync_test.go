package source_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/source"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// The syncer's tests run it against a local control plane (etcd and
// kube-apiserver, no controllers: nothing runs the tasks, and a deleted
// namespace stays Terminating until the test finalizes it as the
// namespace controller would) and a git smart-HTTP server whose lock
// commits hold lockfiles the resolver encodes.

// syncEnv is a control plane, a git server with a desired-state
// repository and the agent's clone of it.
type syncEnv struct {
	t     *testing.T
	ctx   context.Context
	cl    client.Client
	cs    kubernetes.Interface
	git   *gitserver.Server
	dir   string // the agent's clone
	repo  *gitsource.Repo
	locks *instance.RepoLocks
	key   types.NamespacedName
	// taskCreates counts the tasks posted through countingCreates.
	taskCreates atomic.Int64
	// lockMode makes the syncers of the agent's lock mode.
	lockMode bool
}

const repoName = "desired"

func startSyncEnv(t *testing.T, opts ...gitserver.Option) *syncEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, cl := agenttest.StartCluster(t, testcluster.Options{})
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "styrmin-system"}}); err != nil {
		t.Fatal(err)
	}
	git := gitserver.New(t, opts...)
	git.Seed(repoName, fstest.MapFS{"README.md": {Data: []byte("desired state\n")}}, "seed")
	dir := t.TempDir()
	repo, err := gitsource.Clone(ctx, git.RepoURL(repoName), dir, gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: git.Token()}})
	if err != nil {
		t.Fatal(err)
	}
	return &syncEnv{t: t, ctx: ctx, cl: cl, cs: cs, git: git, dir: dir, repo: repo, locks: instance.NewRepoLocks(repo),
		key: types.NamespacedName{Namespace: "styrmin-system", Name: "styrmin"}}
}

// syncer returns a new syncer, as an agent (re)started.
func (e *syncEnv) syncer() *source.Syncer {
	e.t.Helper()
	return e.syncerOf(e.repo)
}

// countingCreates is the environment's client, counting the tasks it
// posts in taskCreates.
func (e *syncEnv) countingCreates() client.Client {
	return &countingClient{Client: e.cl, tasks: &e.taskCreates}
}

// countingClient counts the tasks it creates.
type countingClient struct {
	client.Client
	tasks *atomic.Int64
}

func (c *countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*v1alpha1.StyrminTask); ok {
		c.tasks.Add(1)
	}
	return c.Client.Create(ctx, obj, opts...)
}

// syncerWith returns a new syncer of the environment's repository that
// uses c.
func (e *syncEnv) syncerWith(c client.Client) *source.Syncer {
	e.t.Helper()
	return e.newSyncer(c, e.repo)
}

// syncerOf returns a new syncer of repo.
func (e *syncEnv) syncerOf(repo source.SourceRepo) *source.Syncer {
	e.t.Helper()
	return e.newSyncer(e.cl, repo)
}

func (e *syncEnv) newSyncer(c client.Client, repo source.SourceRepo) *source.Syncer {
	e.t.Helper()
	s, err := source.NewSyncer(source.SyncerOptions{
		Client: c, Repo: repo, Cluster: "local", Source: e.key, Locks: e.locks,
		Spec:     v1alpha1.StyrminSourceSpec{URL: e.git.RepoURL(repoName), Branch: "main"},
		Interval: time.Hour, LockMode: e.lockMode, Log: testr.New(e.t),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// lock commits the lockfiles of ins as one lock commit and returns it.
func (e *syncEnv) lock(message string, ins ...*resolver.Instance) string {
	e.t.Helper()
	files := map[string][]byte{}
	for _, in := range ins {
		data, err := resolver.EncodeLock(in)
		if err != nil {
			e.t.Fatal(err)
		}
		files[in.ID.LockPath()] = data
	}
	return e.git.Commit(repoName, message, files)
}

func deploymentID(name string) resolver.ID {
	return resolver.ID{Cluster: "local", Environment: "dev", Name: name}
}

// instanceAt is deployment name's instance at seq, in namespace ns.
func instanceAt(name, ns string, seq int64) *resolver.Instance {
	return &resolver.Instance{APIVersion: resolver.APIVersion, Kind: resolver.KindInstance, ID: deploymentID(name), Sequence: seq,
		Digest: fmt.Sprintf("sha256:%064x", seq), Driver: resolver.DriverRef{Name: "webapp", Version: "1.0.0"}, AppVersion: "1.0",
		Context: &drivers.Context{Deployment: drivers.DeploymentContext{Name: name, Namespace: ns, AppVersion: "1.0", Driver: "webapp", DriverVersion: "1.0.0"}}}
}

// tombstoneAt is deployment name's deletion at seq.
func tombstoneAt(name string, seq int64) *resolver.Instance {
	return &resolver.Instance{APIVersion: resolver.APIVersion, Kind: resolver.KindTombstone, ID: deploymentID(name), Sequence: seq,
		Digest: fmt.Sprintf("sha256:%064x", 1000+seq)}
}

// running writes the StyrminDeployment of in, as its task would have: the
// deployment runs in in's namespace.
func (e *syncEnv) running(in *resolver.Instance) {
	e.t.Helper()
	spec, err := instance.SpecFromInstance(in)
	if err != nil {
		e.t.Fatal(err)
	}
	ns := in.Context.Deployment.Namespace
	if err := e.cl.Create(e.ctx, &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns,
		Labels: instance.DeploymentID(in.ID).Labels()}, Spec: spec}); err != nil {
		e.t.Fatal(err)
	}
}

// source reads the StyrminSource from the API server.
func (e *syncEnv) source() *v1alpha1.StyrminSource {
	e.t.Helper()
	var src v1alpha1.StyrminSource
	if err := e.cl.Get(e.ctx, e.key, &src); err != nil {
		e.t.Fatal(err)
	}
	return &src
}

// tasks lists the names ("namespace/name") of every StyrminTask, sorted.
func (e *syncEnv) tasks() []string {
	e.t.Helper()
	var list v1alpha1.StyrminTaskList
	if err := e.cl.List(e.ctx, &list); err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, t := range list.Items {
		out = append(out, t.Namespace+"/"+t.Name)
	}
	slices.Sort(out)
	return out
}

// deleteNamespace deletes a namespace: it stays Terminating (no namespace
// controller runs) until finalizeNamespace.
func (e *syncEnv) deleteNamespace(name string) {
	e.t.Helper()
	if err := e.cl.Delete(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		e.t.Fatal(err)
	}
}

// finalizeNamespace does the namespace controller's last step for a
// Terminating namespace (its content already deleted): it removes the
// finalizer, and the namespace is gone.
func (e *syncEnv) finalizeNamespace(name string) {
	e.t.Helper()
	ns, err := e.cs.CoreV1().Namespaces().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := e.cs.CoreV1().Namespaces().Finalize(e.ctx, ns, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	agenttest.WaitUntil(e.t, 20*time.Second, "namespace "+name+" to be gone", func(ctx context.Context) (bool, string, error) {
		_, err := e.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found"), fmt.Sprint(err), nil
	})
}

// noRoomForTasks puts a quota of no StyrminTask on namespace ns, counted
// as the quota controller would count it (none runs): the API server
// refuses a task there.
func (e *syncEnv) noRoomForTasks(ns string) *corev1.ResourceQuota {
	e.t.Helper()
	const tasks = corev1.ResourceName("count/styrmintasks.styrmin.io")
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-tasks", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{tasks: resource.MustParse("0")}}}
	if err := e.cl.Create(e.ctx, q); err != nil {
		e.t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{tasks: resource.MustParse("0")}}
	if err := e.cl.Status().Update(e.ctx, q); err != nil {
		e.t.Fatal(err)
	}
	return q
}

// TestASyncMakesTheOtherTasksWhenTheAPIServerRefusesOne: one lock commit
// locks 40 deployments, one whose namespace has no room for a task (a
// quota: the API server refuses its task) and one whose namespace is no
// DNS label. Every other deployment's task is made; the sync fails naming
// the refused deployment and why, and the position stays, so the next
// sync tries it again and, the quota gone, makes it and moves on. The
// lockfile with a namespace the API server could never take is skipped as
// invalid.
func TestASyncMakesTheOtherTasksWhenTheAPIServerRefusesOne(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	if err := e.cl.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dev-aaa"}}); err != nil {
		t.Fatal(err)
	}
	quota := e.noRoomForTasks("dev-aaa")
	ins := []*resolver.Instance{instanceAt("aaa", "dev-aaa", 1), instanceAt("bad", "Not_A_Namespace", 1)}
	var want []string
	for i := range 40 {
		n := fmt.Sprintf("d%02d", i)
		ins = append(ins, instanceAt(n, "dev-"+n, 1))
		want = append(want, "dev-"+n+"/"+n+"-1")
	}
	e.lock("lock 42 deployments", ins...)

	s := e.syncerWith(e.countingCreates())
	res, err := s.Sync(e.ctx)
	if err == nil || !strings.Contains(err.Error(), "local/dev/aaa") || !strings.Contains(err.Error(), "exceeded quota") {
		t.Fatalf("sync with no room for aaa's task: %v, want an error naming local/dev/aaa and the quota", err)
	}
	if got := e.tasks(); !slices.Equal(got, want) || len(res.Created) != 40 || res.Ignored != 1 {
		t.Fatalf("after the refused sync: tasks %v (created %d, ignored %d), want every other deployment's task and bad's lockfile ignored", got, len(res.Created), res.Ignored)
	}
	src := e.source()
	if src.Status.LastSyncedCommit != "" {
		t.Errorf("the position moved to %s past the commit whose task for aaa was refused", src.Status.LastSyncedCommit)
	}
	if ready := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse ||
		!strings.Contains(ready.Message, "local/dev/aaa") || !strings.Contains(ready.Message, "exceeded quota") {
		t.Errorf("Ready after the refused sync: %+v, want False naming local/dev/aaa and the quota", ready)
	}

	// While it is refused, each sync tries aaa's task again, and does
	// not post the others' again (they are found made).
	e.taskCreates.Store(0)
	if _, err := s.Sync(e.ctx); err == nil {
		t.Fatal("a sync while aaa's task is still refused passed")
	}
	if n := e.taskCreates.Load(); n != 1 {
		t.Errorf("a sync while aaa's task is still refused posted %d tasks, want aaa's alone", n)
	}

	// The quota gone, the next sync makes aaa's task and moves on; the
	// others' are found made.
	if err := e.cl.Delete(e.ctx, quota); err != nil {
		t.Fatal(err)
	}
	res, err = s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Created, " ") != "dev-aaa/aaa-1" || res.Existing != 40 {
		t.Errorf("sync after the quota went: %+v, want aaa-1 created and the 40 others found", res)
	}
	if src := e.source(); src.Status.LastSyncedCommit != res.Head.String() {
		t.Errorf("position %q, want %s", src.Status.LastSyncedCommit, res.Head)
	}
}

// TestASyncMakesADeletedNamespaceAgain: the syncer made hub's namespace
// once; someone deletes it (its content first, as the namespace
// controller does). The next lock's sync makes the namespace again, with
// hub's labels, and its task; the same syncer, no restart. A namespace
// still being deleted refuses the task and is not taken as made: once it
// is gone, the next sync makes it again.
func TestASyncMakesADeletedNamespaceAgain(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	s := e.syncer()
	sync := func() source.SyncResult {
		t.Helper()
		res, err := s.Sync(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	gone := func(seq int64) {
		t.Helper()
		if err := e.cl.Delete(e.ctx, &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Namespace: "dev-hub", Name: v1alpha1.TaskName("hub", seq)}}); err != nil {
			t.Fatal(err)
		}
		e.deleteNamespace("dev-hub")
	}
	e.lock("lock hub 1", instanceAt("hub", "dev-hub", 1))
	if res := sync(); strings.Join(res.Created, " ") != "dev-hub/hub-1" {
		t.Fatalf("first sync: %+v", res)
	}

	gone(1)
	e.finalizeNamespace("dev-hub")
	e.lock("lock hub 2", instanceAt("hub", "dev-hub", 2))
	if res := sync(); strings.Join(res.Created, " ") != "dev-hub/hub-2" {
		t.Fatalf("sync after dev-hub was deleted: %+v, want hub-2 created", res)
	}
	var ns corev1.Namespace
	if err := e.cl.Get(e.ctx, client.ObjectKey{Name: "dev-hub"}, &ns); err != nil || ns.Labels[v1alpha1.LabelDeployment] != "hub" || ns.DeletionTimestamp != nil {
		t.Fatalf("namespace dev-hub after the sync: %v, labels %v, deleted %v; want it made again for hub", err, ns.Labels, ns.DeletionTimestamp)
	}

	// Being deleted when the next lock comes: refused, not taken as made.
	gone(2)
	e.lock("lock hub 3", instanceAt("hub", "dev-hub", 3))
	if _, err := s.Sync(e.ctx); err == nil || !strings.Contains(err.Error(), "local/dev/hub") || !strings.Contains(err.Error(), "dev-hub") {
		t.Fatalf("sync while dev-hub is being deleted: %v, want the refusal naming local/dev/hub", err)
	}
	e.finalizeNamespace("dev-hub")
	if res := sync(); strings.Join(res.Created, " ") != "dev-hub/hub-3" {
		t.Fatalf("sync after dev-hub went: %+v, want hub-3 created", res)
	}
	if err := e.cl.Get(e.ctx, client.ObjectKey{Name: "dev-hub"}, &ns); err != nil || ns.DeletionTimestamp != nil {
		t.Fatalf("namespace dev-hub: %v, deleted %v; want it made again", err, ns.DeletionTimestamp)
	}
}

// TestAFetchThatWorksAgainMakesTheSourceReadyWithoutANewCommit: the
// branch does not move while fetches fail, first for refused credentials
// (an agent started with a wrong token: Ready False, Stalled), then for a
// git host outage. The first fetch that works again, with nothing new to
// walk, makes the StyrminSource Ready and not Stalled, with the fetch and
// its time recorded; a further poll of the unchanged branch writes
// nothing.
func TestAFetchThatWorksAgainMakesTheSourceReadyWithoutANewCommit(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t, gitserver.WithToken("test-token-not-a-secret"))
	e.lock("lock hub 1", instanceAt("hub", "dev-hub", 1))
	head, err := e.syncer().Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	conditions := func() (ready, stalled *metav1.Condition, src *v1alpha1.StyrminSource) {
		src = e.source()
		return apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionReady),
			apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionStalled), src
	}
	recovered := func(what string, before *v1alpha1.StyrminSource) *v1alpha1.StyrminSource {
		t.Helper()
		ready, stalled, src := conditions()
		if ready == nil || ready.Status != metav1.ConditionTrue || stalled != nil {
			t.Errorf("%s: Ready %+v, Stalled %+v; want Ready True and no Stalled", what, ready, stalled)
		}
		if src.Status.LastFetchedCommit != head.Head.String() || src.Status.LastSyncTime == nil ||
			!src.Status.LastSyncTime.After(before.Status.LastSyncTime.Time) {
			t.Errorf("%s: lastFetchedCommit %s at %v, want %s after %v", what, src.Status.LastFetchedCommit, src.Status.LastSyncTime, head.Head, before.Status.LastSyncTime)
		}
		return src
	}

	// An agent started with a wrong token (the repository Secret's): the
	// git host refuses it.
	wrong, err := gitsource.Open(e.dir, gitsource.OpenOptions{Remote: "origin", Branch: "main", Auth: gitsource.Auth{Token: "a-wrong-token"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.syncerOf(wrong).Sync(e.ctx); !errors.Is(err, gitsource.ErrAuth) {
		t.Fatalf("sync with a wrong token: %v, want an authentication failure", err)
	}
	ready, stalled, failed := conditions()
	if ready == nil || ready.Status != metav1.ConditionFalse || stalled == nil || stalled.Status != metav1.ConditionTrue {
		t.Fatalf("after the refused fetch: Ready %+v, Stalled %+v; want Ready False and Stalled", ready, stalled)
	}
	time.Sleep(time.Second) // lastSyncTime has a resolution of a second
	s := e.syncer()         // the token put right, the agent restarted
	if res, err := s.Sync(e.ctx); err != nil || !res.Skipped {
		t.Fatalf("sync with the token put right: %+v, %v; want the unchanged head skipped", res, err)
	}
	ok := recovered("after a fetch with the right token", failed)

	// A git host outage, then the host back.
	e.git.Stop()
	if _, err := s.Sync(e.ctx); err == nil {
		t.Fatal("sync during the outage worked")
	}
	if ready, _, _ := conditions(); ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.ReasonFetchFailed {
		t.Fatalf("during the outage: Ready %+v, want False (%s)", ready, v1alpha1.ReasonFetchFailed)
	}
	e.git.Start()
	time.Sleep(time.Second)
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	ok = recovered("after the outage", ok)

	// Nothing failed, nothing moved: nothing is written.
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, src := conditions(); src.ResourceVersion != ok.ResourceVersion {
		t.Errorf("a poll of the unchanged branch wrote the StyrminSource (resourceVersion %s, was %s)", src.ResourceVersion, ok.ResourceVersion)
	}
}

// TestAWalkFromTheRootDoesNotBringBackADeletedDeployment: hub was locked
// three times, then deleted (a tombstone at 4); its StyrminDeployment is
// gone and its first tasks were pruned. A walk from the root (the sync
// position lost, as after a force push and an agent restart) makes none
// of hub's earlier tasks again, which would install it again; web, whose
// lock at the head is an instance, gets its pruned task made again as
// before.
func TestAWalkFromTheRootDoesNotBringBackADeletedDeployment(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	s := e.syncer()
	for _, locks := range [][]*resolver.Instance{
		{instanceAt("hub", "dev-hub", 1), instanceAt("web", "dev-web", 1)},
		{instanceAt("hub", "dev-hub", 2)},
		{instanceAt("hub", "dev-hub", 3)},
		{tombstoneAt("hub", 4)},
	} {
		e.lock("a lock", locks...)
		if _, err := s.Sync(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.tasks(); len(got) != 5 {
		t.Fatalf("tasks %v, want hub-1 to hub-4 and web-1", got)
	}
	// What the cluster keeps after hub's tombstone ran (no task runs
	// here, so no StyrminDeployment was ever written): its newest tasks.
	for _, name := range []string{"dev-hub/hub-1", "dev-hub/hub-2", "dev-web/web-1"} {
		ns, n, _ := strings.Cut(name, "/")
		if err := e.cl.Delete(e.ctx, &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	src := e.source()
	src.Status.LastSyncedCommit = ""
	if err := e.cl.Status().Update(e.ctx, src); err != nil {
		t.Fatal(err)
	}

	res, err := e.syncer().Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.tasks(); strings.Join(got, " ") != "dev-hub/hub-3 dev-hub/hub-4 dev-web/web-1" || strings.Join(res.Created, " ") != "dev-web/web-1" {
		t.Errorf("walk from the root: tasks %v (created %v), want hub's earlier tasks not made again and web-1 made", got, res.Created)
	}
}

// TestASyncMakesNoTaskInTheAgentsNamespace: a lockfile whose namespace is
// the agent's own (named here as an installation may name it, so the
// resolver's reserved list does not know it; its checksum is no signature)
// is skipped as invalid: the agent's Secrets and service account are no
// deployment's to touch.
func TestASyncMakesNoTaskInTheAgentsNamespace(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	if err := e.cl.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform"}}); err != nil {
		t.Fatal(err)
	}
	e.key = types.NamespacedName{Namespace: "platform", Name: "styrmin"}
	// A policy that lets a deployment put objects there: a chart's pod
	// with the agent's service account would run as the agent.
	reaching := instanceAt("reacher", "dev-reacher", 1)
	reaching.Context.Environment.Policy = &drivers.Policy{Namespaces: []string{"shared", "platform"}}
	// And one allowed into kube-system (a lockfile from before the
	// resolver refused such a policy).
	system := instanceAt("system", "dev-system", 1)
	system.Context.Environment.Policy = &drivers.Policy{Namespaces: []string{"kube-system"}}
	e.lock("lock four deployments, one into the agent's namespace, one allowed there, one allowed into kube-system", instanceAt("web", "dev-web", 1), instanceAt("intruder", "platform", 1), reaching, system)
	rec := &noteRecorder{}
	s, err := source.NewSyncer(source.SyncerOptions{
		Client: e.cl, Repo: e.repo, Cluster: "local", Source: e.key, Locks: e.locks, Recorder: rec,
		Spec:     v1alpha1.StyrminSourceSpec{URL: e.git.RepoURL(repoName), Branch: "main"},
		Interval: time.Hour, Log: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.tasks(); !slices.Equal(got, []string{"dev-web/web-1"}) || res.Ignored != 3 {
		t.Fatalf("tasks %v (ignored %d), want web's only and the lockfiles into the agent's namespace ignored", got, res.Ignored)
	}
	if !slices.ContainsFunc(rec.notes, func(n string) bool {
		return strings.HasPrefix(n, v1alpha1.ReasonInvalidLock+": ") && strings.Contains(n, `field context.environment.policy.namespaces[1]: "platform" is the agent's namespace`)
	}) {
		t.Errorf("warnings %q, want an InvalidLock naming the policy's namespace", rec.notes)
	}
	if !slices.ContainsFunc(rec.notes, func(n string) bool {
		return strings.HasPrefix(n, v1alpha1.ReasonInvalidLock+": ") && strings.Contains(n, `field context.environment.policy.namespaces[0]: "kube-system" is reserved`)
	}) {
		t.Errorf("warnings %q, want an InvalidLock naming kube-system", rec.notes)
	}
}

// TestAChangedClusterOrPathWalksFromTheRoot pins the scope of the sync
// position: an agent started with the wrong cluster (a typo) walks the
// lock commits, finds none of its cluster and records the head; started
// again with the right one, it must not resume from that head (the
// commits walked hold its locks, never read) but walk from the root and
// make their tasks. The same for the repository's folder (--path): a
// position recorded for another folder is not resumed either.
func TestAChangedClusterOrPathWalksFromTheRoot(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	head := e.lock("lock hub", instanceAt("hub", "dev-hub", 1))
	syncerFor := func(cluster, path string) *source.Syncer {
		t.Helper()
		s, err := source.NewSyncer(source.SyncerOptions{
			Client: e.cl, Repo: e.repo, Cluster: cluster, Path: path, Source: e.key, Locks: e.locks,
			Spec:     v1alpha1.StyrminSourceSpec{URL: e.git.RepoURL(repoName), Branch: "main"},
			Interval: time.Hour, Log: testr.New(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	res, err := syncerFor("lcoal", "").Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 0 || e.source().Status.LastSyncedCommit != head {
		t.Fatalf("the mistyped cluster's sync: created %v, position %s; want none, %s", res.Created, e.source().Status.LastSyncedCommit, head)
	}
	res, err = syncerFor("local", "").Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dev-hub/hub-1"}; !slices.Equal(e.tasks(), want) || res.Skipped {
		t.Fatalf("after the cluster was corrected: tasks %v (skipped: %v); want %v", e.tasks(), res.Skipped, want)
	}
	if src := e.source(); src.Status.LastSyncedCommit != head || src.Spec.Cluster != "local" {
		t.Fatalf("position %s for cluster %q; want %s for local", src.Status.LastSyncedCommit, src.Spec.Cluster, head)
	}
	// Another folder: the head is walked again from the root (its task
	// found made), not skipped as synced.
	res, err = syncerFor("local", "apps").Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped || res.Existing != 1 {
		t.Fatalf("after the folder changed: skipped %v, existing %d; want the history walked again from the root", res.Skipped, res.Existing)
	}
	if src := e.source(); src.Annotations[v1alpha1.AnnotationSyncPath] != "apps" || src.Status.LastSyncedCommit != head {
		t.Fatalf("folder %q, position %s; want apps, %s", src.Annotations[v1alpha1.AnnotationSyncPath], src.Status.LastSyncedCommit, head)
	}
	// The same agent again, the folder written otherwise: resumed,
	// nothing walked.
	if res, err = syncerFor("local", "apps/").Sync(e.ctx); err != nil || !res.Skipped {
		t.Fatalf("an agent restarted with the same flags: %+v, %v; want the sync skipped at its position", res, err)
	}
	// A StyrminSource an earlier agent wrote records no folder: its
	// position is kept (an upgrade does not walk from the root).
	src := e.source()
	delete(src.Annotations, v1alpha1.AnnotationSyncPath)
	if err := e.cl.Update(e.ctx, src); err != nil {
		t.Fatal(err)
	}
	if res, err = syncerFor("local", "deploy").Sync(e.ctx); err != nil || !res.Skipped {
		t.Fatalf("an agent upgraded from one that recorded no folder: %+v, %v; want the sync skipped at its position", res, err)
	}
	if got := e.source().Annotations[v1alpha1.AnnotationSyncPath]; got != "deploy" {
		t.Errorf("folder recorded %q after the upgrade; want deploy", got)
	}
}

// TestARefusedSyncDoesNotBringBackADeploymentDeletedMeanwhile: a sync
// whose position is held by a task the API server refuses (a quota on
// aaa's namespace) walks the same commits at every poll. Meanwhile hub's
// update and its tombstone, in those commits, ran: hub is gone, its tasks
// pruned, and someone deleted the namespace the agent left. The next walk
// from the held position must not make hub's update again (a deleted
// deployment installed again, its namespace made again): the head's lock
// of hub is a tombstone after it and nothing of hub runs, as for a walk
// from the root.
func TestARefusedSyncDoesNotBringBackADeploymentDeletedMeanwhile(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	s := e.syncer()
	e.lock("lock hub", instanceAt("hub", "dev-hub", 1))
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	held := e.source().Status.LastSyncedCommit
	// Hub's first task ran: its StyrminDeployment holds sequence 1.
	spec, err := instance.SpecFromInstance(instanceAt("hub", "dev-hub", 1))
	if err != nil {
		t.Fatal(err)
	}
	sd := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "dev-hub", Name: "dev-hub",
		Labels: instance.DeploymentID(deploymentID("hub")).Labels()}, Spec: spec}
	if err := e.cl.Create(e.ctx, sd); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dev-aaa"}}); err != nil {
		t.Fatal(err)
	}
	e.noRoomForTasks("dev-aaa")
	e.lock("aaa, and hub's update", instanceAt("aaa", "dev-aaa", 1), instanceAt("hub", "dev-hub", 2))
	e.lock("delete hub", tombstoneAt("hub", 3))
	if _, err := s.Sync(e.ctx); err == nil {
		t.Fatal("the sync with aaa's task refused passed")
	}
	if got := e.tasks(); strings.Join(got, " ") != "dev-hub/hub-1 dev-hub/hub-2 dev-hub/hub-3" {
		t.Fatalf("tasks %v; want hub's three", got)
	}
	// Hub's tasks ran (its StyrminDeployment deleted by the last), were
	// pruned, and its namespace was deleted.
	if err := e.cl.Delete(e.ctx, sd); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"hub-1", "hub-2", "hub-3"} {
		if err := e.cl.Delete(e.ctx, &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Namespace: "dev-hub", Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	e.deleteNamespace("dev-hub")
	e.finalizeNamespace("dev-hub")

	if _, err := s.Sync(e.ctx); err == nil {
		t.Fatal("the sync with aaa's task still refused passed")
	}
	if src := e.source(); src.Status.LastSyncedCommit != held {
		t.Fatalf("position %s; want it held at %s", src.Status.LastSyncedCommit, held)
	}
	if got := e.tasks(); len(got) != 0 {
		t.Errorf("tasks %v after the walk from the held position; want hub's not made again", got)
	}
	var ns corev1.Namespace
	if err := e.cl.Get(e.ctx, client.ObjectKey{Name: "dev-hub"}, &ns); err == nil {
		t.Errorf("namespace dev-hub made again (%s)", ns.Status.Phase)
	}
}

// TestATombstoneBetweenACreateAndARecreationInOneWalkIsMade: one walk
// meets a deployment's create, its tombstone and its re-creation (several
// pushes between two polls). Nothing of it runs in the cluster yet, but
// the walk's own create task will: the tombstone's task is made, so the
// deletion (and its hooks) runs between the two creates, and the
// re-creation is a create, not an update over the first.
func TestATombstoneBetweenACreateAndARecreationInOneWalkIsMade(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	e.lock("create hub", instanceAt("hub", "dev-hub", 1))
	e.lock("delete hub", tombstoneAt("hub", 2))
	e.lock("create hub again", instanceAt("hub", "dev-hub", 3))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.tasks(), " "); got != "dev-hub/hub-1 dev-hub/hub-2 dev-hub/hub-3" {
		t.Fatalf("tasks %s; want hub-1, its tombstone hub-2 and hub-3", got)
	}
}

// TestALockfileThatMovesARunningDeploymentToAnotherNamespaceMakesNoTask:
// a lockfile (hand-edited, or locked by a styrminctl that did not refuse
// it) placing a running deployment in another namespace makes no task,
// with an InvalidLock warning naming both namespaces: a task there would
// install the deployment afresh and leave the old namespace's release
// running with no lock to delete it. Its tombstone still deletes it where
// it runs, and it is then added back in the new namespace; a walk from
// the root meets the same history and makes the same tasks.
func TestALockfileThatMovesARunningDeploymentToAnotherNamespaceMakesNoTask(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	e.lock("create web", instanceAt("web", "dev-web", 1))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	// Web's first task ran: its StyrminDeployment holds sequence 1.
	e.running(instanceAt("web", "dev-web", 1))
	e.lock("move web", instanceAt("web", "develop-web", 2))
	rec := &noteRecorder{}
	s, err := source.NewSyncer(source.SyncerOptions{
		Client: e.cl, Repo: e.repo, Cluster: "local", Source: e.key, Locks: e.locks, Recorder: rec,
		Spec:     v1alpha1.StyrminSourceSpec{URL: e.git.RepoURL(repoName), Branch: "main"},
		Interval: time.Hour, Log: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.tasks(), " "); got != "dev-web/web-1" || res.Ignored != 1 {
		t.Fatalf("tasks %s (ignored %d), want web-1 only and the move ignored", got, res.Ignored)
	}
	if !slices.ContainsFunc(rec.notes, func(n string) bool {
		return strings.HasPrefix(n, v1alpha1.ReasonInvalidLock+": ") && strings.Contains(n, `"develop-web"`) && strings.Contains(n, `"dev-web"`)
	}) {
		t.Errorf("warnings %q, want an InvalidLock naming both namespaces", rec.notes)
	}
	// A second push on the refused lockfile is refused too: the walk
	// starts from it, but the deployment runs in dev-web.
	e.lock("move web again", instanceAt("web", "develop-web", 3))
	if res, err = s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.tasks(), " "); got != "dev-web/web-1" || res.Ignored != 1 {
		t.Fatalf("tasks %s (ignored %d), want web-1 only and the second move ignored", got, res.Ignored)
	}
	e.lock("delete web", tombstoneAt("web", 4))
	e.lock("add web back", instanceAt("web", "develop-web", 5))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	want := "dev-web/web-1 dev-web/web-4 develop-web/web-5"
	if got := strings.Join(e.tasks(), " "); got != want {
		t.Fatalf("tasks %s, want %s: the tombstone where web runs, then web in its new namespace", got, want)
	}
	// From the root: the same history, the same refusal.
	fresh := startSyncEnv(t)
	for _, in := range []*resolver.Instance{instanceAt("web", "dev-web", 1), instanceAt("web", "develop-web", 2), instanceAt("web", "develop-web", 3), tombstoneAt("web", 4), instanceAt("web", "develop-web", 5)} {
		fresh.lock(fmt.Sprintf("web %d", in.Sequence), in)
	}
	if _, err := fresh.syncer().Sync(fresh.ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(fresh.tasks(), " "); got != want {
		t.Fatalf("a walk from the root made tasks %s, want %s", got, want)
	}
}

// noteRecorder keeps the events a syncer records, as "reason: note".
type noteRecorder struct {
	mu    sync.Mutex
	notes []string
}

func (r *noteRecorder) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, reason+": "+fmt.Sprintf(note, args...))
}

// TestANamespaceHeldByAnotherDeploymentDoesNotCountAsApplied: a lockfile
// placing a deployment in a namespace whose StyrminDeployment holds
// another deployment at a later sequence (not deleted yet, or a lock
// naming a taken namespace) gets its task made, which fails where it
// shows; the other deployment's sequence said it ran already, and the
// change was dropped without a word.
func TestANamespaceHeldByAnotherDeploymentDoesNotCountAsApplied(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	if err := e.cl.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dev-x"}}); err != nil {
		t.Fatal(err)
	}
	e.running(instanceAt("a", "dev-x", 5))
	e.lock("b into a's namespace", instanceAt("b", "dev-x", 1))
	// Not dropped: the sync says why b's first task waits (a holds the
	// namespace) and tries again at the next sync.
	res, err := e.syncer().Sync(e.ctx)
	if err == nil || !strings.Contains(err.Error(), "namespace dev-x holds deployment local/dev/a") {
		t.Fatalf("sync %+v, %v; want b's task held back, naming a", res, err)
	}
	if got := strings.Join(e.tasks(), " "); strings.Contains(got, "b-1") {
		t.Fatalf("tasks %s: b's made while a holds its namespace", got)
	}
}

// TestALockfileTheCloneFailsToReadIsReadAgainAtTheNextSync: a lockfile
// the clone fails to give (a missing object after a kill mid-fetch, too
// many open files) is not an invalid lockfile: the sync fails and keeps
// its position, and the next one makes the task. It was counted as
// invalid, the position moved past it and the change was never made.
func TestALockfileTheCloneFailsToReadIsReadAgainAtTheNextSync(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	e.lock("lock web", instanceAt("web", "dev-web", 1))
	flaky := &failingReads{SourceRepo: e.repo, file: deploymentID("web").LockPath()}
	flaky.failures.Store(1)
	s := e.syncerOf(flaky)
	if _, err := s.Sync(e.ctx); err == nil || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("sync with the lockfile unreadable: %v, want the read's error", err)
	}
	if got := e.tasks(); len(got) != 0 {
		t.Fatalf("tasks %v after a failed read", got)
	}
	if pos := e.source().Status.LastSyncedCommit; pos != "" {
		t.Fatalf("position moved to %s past a lockfile not read", pos)
	}
	res, err := s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Created, " ") != "dev-web/web-1" {
		t.Fatalf("the next sync: %+v, want web-1 made", res)
	}
	// The lockfile before a change, at the commit the walk starts from:
	// without it the order check, the workflow and a tombstone's
	// namespace would be guessed.
	from, err := gitsource.ParseHash(e.source().Status.LastSyncedCommit)
	if err != nil {
		t.Fatal(err)
	}
	e.lock("delete web", tombstoneAt("web", 2))
	flaky.only = from
	flaky.failures.Store(1)
	if _, err := s.Sync(e.ctx); err == nil || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("sync with the lockfile before the change unreadable: %v, want the read's error", err)
	}
	if pos := e.source().Status.LastSyncedCommit; pos != from.String() {
		t.Fatalf("position moved to %s past a lockfile not read", pos)
	}
	if res, err = s.Sync(e.ctx); err != nil || strings.Join(res.Created, " ") != "dev-web/web-2" {
		t.Fatalf("the next sync: %+v, %v; want web-2 made", res, err)
	}
}

// failingReads is a repository whose trees fail to open file while
// failures lasts, as a damaged clone or a process out of files does.
type failingReads struct {
	source.SourceRepo
	file     string
	failures atomic.Int64
	// only, when set, is the one commit whose trees fail.
	only gitsource.Hash
}

func (r *failingReads) FS(commit gitsource.Hash) (fs.FS, error) {
	fsys, err := r.SourceRepo.FS(commit)
	if err != nil || (!r.only.IsZero() && commit != r.only) {
		return fsys, err
	}
	return failingFS{fsys: fsys, r: r}, nil
}

type failingFS struct {
	fsys fs.FS
	r    *failingReads
}

func (f failingFS) Open(name string) (fs.File, error) {
	if name == f.r.file && f.r.failures.Add(-1) >= 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EMFILE}
	}
	return f.fsys.Open(name)
}

// TestADeploymentDeletedAndAddedBackElsewhereFollowsItsNewNamespace: the
// documented move (a tombstone, then the deployment added back in
// another namespace) is not taken for a move while the tombstone's task
// has not run yet, and the old StyrminDeployment still exists: in one
// walk (the tombstone, the re-creation and a change after it), and over
// later walks (a change, then a tombstone, of the deployment in its new
// namespace), every task goes where the deployment is.
func TestADeploymentDeletedAndAddedBackElsewhereFollowsItsNewNamespace(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	e.lock("create web", instanceAt("web", "dev-web", 1))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.running(instanceAt("web", "dev-web", 1))
	e.lock("delete web", tombstoneAt("web", 2))
	e.lock("add web back in develop-web", instanceAt("web", "develop-web", 3))
	e.lock("change web", instanceAt("web", "develop-web", 4))
	s := e.syncer()
	res, err := s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := "dev-web/web-1 dev-web/web-2 develop-web/web-3 develop-web/web-4"
	if got := strings.Join(e.tasks(), " "); got != want || res.Ignored != 0 {
		t.Fatalf("tasks %s (ignored %d), want %s", got, res.Ignored, want)
	}
	// Later walks, the tombstone's task still not run: a change, then a
	// deletion, of web where it is now.
	e.lock("change web again", instanceAt("web", "develop-web", 5))
	if res, err = s.Sync(e.ctx); err != nil || res.Ignored != 0 {
		t.Fatalf("sync: %+v, %v", res, err)
	}
	e.lock("delete web again", tombstoneAt("web", 6))
	if res, err = s.Sync(e.ctx); err != nil || res.Ignored != 0 {
		t.Fatalf("sync: %+v, %v", res, err)
	}
	want += " develop-web/web-5 develop-web/web-6"
	if got := strings.Join(e.tasks(), " "); got != want {
		t.Fatalf("tasks %s, want %s", got, want)
	}
}

// TestALockfileDeletedByHandThenPutBackElsewhereIsAMove: with no
// lockfile before it (deleted by hand, which the agent ignores), a
// lockfile placing a running deployment in another namespace is refused
// all the same: where the deployment runs is read from the cluster.
func TestALockfileDeletedByHandThenPutBackElsewhereIsAMove(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	e.lock("create web", instanceAt("web", "dev-web", 1))
	s := e.syncer()
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.running(instanceAt("web", "dev-web", 1))
	e.git.Commit(repoName, "delete web's lockfile by hand", map[string][]byte{deploymentID("web").LockPath(): nil})
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.lock("put web back elsewhere", instanceAt("web", "develop-web", 2))
	res, err := s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.tasks(), " "); got != "dev-web/web-1" || res.Ignored != 1 {
		t.Fatalf("tasks %s (ignored %d), want web-1 only and the move ignored", got, res.Ignored)
	}
}

// TestANewDeploymentInTheNamespaceOfADeletedOneGetsItsTask: dev/web is
// deleted, and qa/web is added later in the same namespace (environment
// qa's namespacePrefix is dev): its first task has the name of dev/web's
// first, still kept in the namespace as history. The sync does not take
// the old task for the new one (qa/web would never be installed): while
// that task has not ended, dev/web's StyrminDeployment is there, or its
// tombstone's task has not ended, the sync fails, saying so; then the old
// task is deleted and qa/web's made.
func TestANewDeploymentInTheNamespaceOfADeletedOneGetsItsTask(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	e.lock("create dev/web", instanceAt("web", "dev-web", 1))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.running(instanceAt("web", "dev-web", 1))
	e.lock("delete dev/web", tombstoneAt("web", 2))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.tasks(), " "); got != "dev-web/web-1 dev-web/web-2" {
		t.Fatalf("tasks %s, want dev/web's two", got)
	}
	finish := func(name string) {
		t.Helper()
		var task v1alpha1.StyrminTask
		if err := e.cl.Get(e.ctx, client.ObjectKey{Namespace: "dev-web", Name: name}, &task); err != nil {
			t.Fatal(err)
		}
		task.Status.Phase = v1alpha1.TaskSucceeded
		if err := e.cl.Status().Update(e.ctx, &task); err != nil {
			t.Fatal(err)
		}
	}

	qa := instanceAt("web", "dev-web", 1)
	qa.ID.Environment = "qa"
	e.lock("create qa/web in dev-web", qa)
	_, err := e.syncer().Sync(e.ctx)
	if err == nil || !strings.Contains(err.Error(), "task dev-web/web-1 is deployment local/dev/web's (not ended: new)") {
		t.Fatalf("sync while dev/web's web-1 has not ended: %v, want an error saying so", err)
	}
	finish("web-1")
	// Its tombstone's task not ended, its StyrminDeployment still there.
	var tomb v1alpha1.StyrminTask
	if err := e.cl.Get(e.ctx, client.ObjectKey{Namespace: "dev-web", Name: "web-2"}, &tomb); err != nil {
		t.Fatal(err)
	}
	tomb.Status.Phase = v1alpha1.TaskRunning
	if err := e.cl.Status().Update(e.ctx, &tomb); err != nil {
		t.Fatal(err)
	}
	if _, err := e.syncer().Sync(e.ctx); err == nil || !strings.Contains(err.Error(), "(its StyrminDeployment is still there)") {
		t.Fatalf("sync while dev/web still runs: %v, want an error saying so", err)
	}
	if err := e.cl.DeleteAllOf(e.ctx, &v1alpha1.StyrminDeployment{}, client.InNamespace("dev-web")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.syncer().Sync(e.ctx); err == nil || !strings.Contains(err.Error(), "(its task web-2 has not ended: Running)") {
		t.Fatalf("sync while dev/web's tombstone task runs: %v, want an error saying so", err)
	}
	finish("web-2")
	owner := func() string {
		t.Helper()
		var task v1alpha1.StyrminTask
		if err := e.cl.Get(e.ctx, client.ObjectKey{Namespace: "dev-web", Name: "web-1"}, &task); err != nil {
			t.Fatal(err)
		}
		return task.Spec.Deployment.String()
	}
	if got := owner(); got != "local/dev/web" {
		t.Fatalf("web-1 is %s's, want dev/web's kept while it runs", got)
	}

	agenttest.WaitUntil(t, 30*time.Second, "qa/web's task", func(ctx context.Context) (bool, string, error) {
		if _, err := e.syncer().Sync(ctx); err != nil {
			return false, err.Error(), nil
		}
		got := owner()
		return got == "local/qa/web", got, nil
	})
	if got := strings.Join(e.tasks(), " "); got != "dev-web/web-1 dev-web/web-2" {
		t.Errorf("tasks %s, want qa/web's web-1 and dev/web's web-2", got)
	}
}

// TestANewDeploymentWaitsForTheOneItsNamespaceHeldWhateverTheTaskNames:
// dev/web deleted and qa/web added in dev-web in one push. A task at the
// new one's name held it back, but only when dev/web's first task was
// still there: pruned (past the tasks kept), qa/web's create was made at
// once, beside dev/web's pending uninstall, and failed against its
// release. Now the create waits, naming why, until dev/web is gone.
func TestANewDeploymentWaitsForTheOneItsNamespaceHeldWhateverTheTaskNames(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	e.lock("create dev/web", instanceAt("web", "dev-web", 1))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.running(instanceAt("web", "dev-web", 1))
	e.lock("delete dev/web", tombstoneAt("web", 2))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	var old v1alpha1.StyrminTask
	if err := e.cl.Get(e.ctx, client.ObjectKey{Namespace: "dev-web", Name: "web-1"}, &old); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Delete(e.ctx, &old); err != nil { // pruned
		t.Fatal(err)
	}
	qa := instanceAt("web", "dev-web", 1)
	qa.ID.Environment = "qa"
	e.lock("create qa/web in dev-web", qa)
	if _, err := e.syncer().Sync(e.ctx); err == nil || !strings.Contains(err.Error(), "namespace dev-web holds deployment local/dev/web (its StyrminDeployment is still there)") {
		t.Fatalf("sync while dev/web is still installed: %v, want an error saying so", err)
	}
	if got := strings.Join(e.tasks(), " "); got != "dev-web/web-2" {
		t.Fatalf("tasks %s, want only dev/web's tombstone", got)
	}
	if err := e.cl.DeleteAllOf(e.ctx, &v1alpha1.StyrminDeployment{}, client.InNamespace("dev-web")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.syncer().Sync(e.ctx); err == nil || !strings.Contains(err.Error(), "(its task web-2 has not ended: new)") {
		t.Fatalf("sync while dev/web's tombstone task has not run: %v, want an error saying so", err)
	}
	var tomb v1alpha1.StyrminTask
	if err := e.cl.Get(e.ctx, client.ObjectKey{Namespace: "dev-web", Name: "web-2"}, &tomb); err != nil {
		t.Fatal(err)
	}
	tomb.Status.Phase = v1alpha1.TaskSucceeded
	if err := e.cl.Status().Update(e.ctx, &tomb); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*time.Second, "qa/web's first task", func(ctx context.Context) (bool, string, error) {
		_, err := e.syncer().Sync(ctx)
		var task v1alpha1.StyrminTask
		if gerr := e.cl.Get(ctx, client.ObjectKey{Namespace: "dev-web", Name: "web-1"}, &task); gerr != nil {
			return false, fmt.Sprintf("sync: %v; %v", err, gerr), nil
		}
		return task.Spec.Deployment.Environment == "qa", task.Spec.Deployment.String(), nil
	})
}

// TestARefusedLockfileIsRecordedOnTheSourceOncePerCommit: a lockfile the
// sync refuses (here a move of a running deployment to another namespace)
// is recorded on the StyrminSource with its commit, path and why, which
// the lock commit's status on the git host counts as a failure (it showed
// green for the commit's other tasks). A walk that meets the commit again
// (from the root) does not record it twice, and only the newest
// MaxRefusedLocks are kept.
func TestARefusedLockfileIsRecordedOnTheSourceOncePerCommit(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	e.lock("create web", instanceAt("web", "dev-web", 1))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.running(instanceAt("web", "dev-web", 1))
	moved := e.lock("move web", instanceAt("web", "develop-web", 2), instanceAt("api", "dev-api", 1))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	refused := e.source().Status.Refused
	if len(refused) != 1 || refused[0].Commit != moved || refused[0].Path != deploymentID("web").LockPath() ||
		refused[0].Reason != v1alpha1.ReasonInvalidLock || !strings.Contains(refused[0].Message, `"develop-web"`) || refused[0].Time.IsZero() {
		t.Fatalf("refused %+v; want web's lockfile at %s, InvalidLock, naming the namespace it moves to", refused, moved)
	}
	if got := strings.Join(e.tasks(), " "); got != "dev-api/api-1 dev-web/web-1" {
		t.Fatalf("tasks %s; want api's made beside the refusal", got)
	}

	// From the root again: the same refusal, recorded once, its time kept.
	src := e.source()
	src.Status.LastSyncedCommit = ""
	if err := e.cl.Status().Update(e.ctx, src); err != nil {
		t.Fatal(err)
	}
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if again := e.source().Status.Refused; len(again) != 1 || !again[0].Time.Equal(&refused[0].Time) || again[0].Sequence != 2 {
		t.Fatalf("after a walk from the root, refused %+v; want the one refusal as first recorded, at sequence 2", again)
	}
	// A walk from the root records none: it meets commits synced long ago
	// (a new agent, a lost position), decided from the cluster as it is
	// now, whose statuses were reported then.
	fresh := startSyncEnv(t)
	fresh.lock("create web", instanceAt("web", "dev-web", 1))
	if _, err := fresh.syncer().Sync(fresh.ctx); err != nil {
		t.Fatal(err)
	}
	fresh.running(instanceAt("web", "dev-web", 1))
	fresh.lock("move web", instanceAt("web", "develop-web", 2))
	src = fresh.source()
	src.Status.LastSyncedCommit = ""
	if err := fresh.cl.Status().Update(fresh.ctx, src); err != nil {
		t.Fatal(err)
	}
	if res, err := fresh.syncer().Sync(fresh.ctx); err != nil || res.Ignored != 1 {
		t.Fatalf("a walk from the root: %+v, %v; want the move ignored", res, err)
	}
	if got := fresh.source().Status.Refused; len(got) != 0 {
		t.Fatalf("a walk from the root recorded %+v; want none", got)
	}

	// Many refusals: the newest are kept.
	var last string
	for seq := int64(3); seq < 3+v1alpha1.MaxRefusedLocks+5; seq++ {
		last = e.lock(fmt.Sprintf("move web %d", seq), instanceAt("web", "develop-web", seq))
	}
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	refused = e.source().Status.Refused
	if len(refused) != v1alpha1.MaxRefusedLocks || refused[len(refused)-1].Commit != last || refused[0].Commit == moved {
		t.Fatalf("%d refusals kept, the newest at %s; want the newest %d, the last at %s", len(refused), refused[len(refused)-1].Commit, v1alpha1.MaxRefusedLocks, last)
	}
}

// rewriteAll force-pushes a copy of every commit of main with the same
// tree and another message (what git filter-repo leaves when the file it
// rewrites is not under locks/, or commits amended or signed again): new
// commit objects, the same lockfiles. It returns the new head.
func (e *syncEnv) rewriteAll() string {
	e.t.Helper()
	dir := e.git.Dir(repoName)
	parent := ""
	for _, c := range strings.Fields(e.git.Git(dir, "rev-list", "--reverse", "--first-parent", "main")) {
		args := []string{"commit-tree", c + "^{tree}", "-m", e.git.Git(dir, "log", "-1", "--format=%B", c) + " (rewritten)"}
		if parent != "" {
			args = append(args, "-p", parent)
		}
		parent = e.git.Git(dir, args...)
	}
	e.git.Reset(repoName, "main", parent)
	return parent
}

// syncerRecording returns a new syncer whose events go to rec.
func (e *syncEnv) syncerRecording(c client.Client, rec *noteRecorder) *source.Syncer {
	e.t.Helper()
	s, err := source.NewSyncer(source.SyncerOptions{
		Client: c, Repo: e.repo, Cluster: "local", Source: e.key, Locks: e.locks, Recorder: rec,
		Spec:     v1alpha1.StyrminSourceSpec{URL: e.git.RepoURL(repoName), Branch: "main"},
		Interval: time.Hour, LockMode: e.lockMode, Log: testr.New(e.t),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// refusalNotes are the notes of rec's InvalidLock and LockDeleted events.
func (r *noteRecorder) refusalNotes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.notes {
		if strings.HasPrefix(n, v1alpha1.ReasonInvalidLock+": ") || strings.HasPrefix(n, v1alpha1.ReasonLockDeleted+": ") {
			out = append(out, n)
		}
	}
	return out
}

// TestARewriteThatKeepsEveryLockfileRefusesNone: a force push that gives
// every commit of a synced branch a new name and keeps every tree (a
// secret removed from another file's history, commits signed again) is
// the history the cluster follows: the walk from the old position meets
// every lock again, at or below the sequence the old position holds, and
// refuses none of them (no event, nothing on the StyrminSource, which
// would turn the new commits' statuses red) and makes no task, as a walk
// from the root on a fresh clone would not. It holds for a lock whose
// task was pruned too (read from the history the rewrite replaced). A
// rewrite that changes what a lockfile locks at an old sequence is still
// refused.
func TestARewriteThatKeepsEveryLockfileRefusesNone(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	web1, web2 := instanceAt("web", "dev-web", 1), instanceAt("web", "dev-web", 2)
	e.lock("create web and api", web1, instanceAt("api", "dev-api", 1))
	e.lock("web 2", web2)
	e.git.Commit(repoName, "a note", map[string][]byte{"NOTES.md": []byte("nothing locked\n")})
	e.lock("web 3, api 2", instanceAt("web", "dev-web", 3), instanceAt("api", "dev-api", 2))
	e.lock("delete api", tombstoneAt("api", 3))
	rec := &noteRecorder{}
	s := e.syncerRecording(e.countingCreates(), rec)
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.running(instanceAt("web", "dev-web", 3))
	// web-1's task was pruned: the cluster no longer tells that it ran.
	if err := e.cl.Delete(e.ctx, &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Namespace: "dev-web", Name: "web-1"}}); err != nil {
		t.Fatal(err)
	}
	before := e.tasks()

	head := e.rewriteAll()
	e.taskCreates.Store(0)
	res, err := s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Head.String() != head || !res.Rewritten || len(res.Created) != 0 || len(res.SequenceUsed) != 0 {
		t.Fatalf("sync of the rewritten branch: %+v, want it rewritten at %s, nothing created, no sequence used", res, head)
	}
	if n := e.taskCreates.Load(); n != 0 {
		t.Errorf("the sync of the rewritten branch posted %d tasks, want none", n)
	}
	if got := e.tasks(); !slices.Equal(got, before) {
		t.Errorf("tasks %v after the rewrite, want %v", got, before)
	}
	src := e.source()
	if len(src.Status.Refused) != 0 {
		t.Errorf("refused after a rewrite that keeps every lockfile: %+v, want none", src.Status.Refused)
	}
	if notes := rec.refusalNotes(); len(notes) != 0 {
		t.Errorf("refusal events after a rewrite that keeps every lockfile: %q, want none", notes)
	}
	if cond := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionHistoryRewritten); cond == nil || cond.Reason != v1alpha1.ReasonHistoryRewritten {
		t.Errorf("HistoryRewritten: %+v, want it set, every deployment following the new history", cond)
	}
	if src.Status.LastSyncedCommit != head {
		t.Errorf("position %s, want %s", src.Status.LastSyncedCommit, head)
	}

	// Rewritten again from web 1's commit on, with web 2 locking other
	// content: that lock is refused, on its new commit; web 3, the same
	// as before, is not.
	dir := e.git.Dir(repoName)
	first := strings.Fields(e.git.Git(dir, "rev-list", "--reverse", "--first-parent", "main"))[1]
	e.git.Reset(repoName, "main", first)
	other := instanceAt("web", "dev-web", 2)
	other.AppVersion, other.Digest = "2.0", fmt.Sprintf("sha256:%064x", 200)
	changed := e.lock("web 2, other content", other)
	e.lock("web 3, api 2", instanceAt("web", "dev-web", 3), instanceAt("api", "dev-api", 2))
	e.lock("delete api", tombstoneAt("api", 3))
	res, err = s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Rewritten || len(res.Created) != 0 {
		t.Fatalf("sync of the second rewrite: %+v, want it rewritten, nothing created", res)
	}
	e.requireOneRefusalOfWeb(t, rec, changed, "sequence 2 does not follow 3")
}

// TestARefusalBehindATaskTheAPIServerKeepsRefusingIsRecordedOnce: one
// deployment's task is refused by the API server at every poll (no room
// for it in its namespace), so every sync fails and the position stays.
// A lockfile refused in a later commit is recorded on the StyrminSource
// all the same (its commit's status fails, where it went green once the
// commit's other tasks succeeded), and its event is recorded once across
// the polls. A force push meanwhile is reported (HistoryRewritten); once
// the task is made, the refusals stay.
func TestARefusalBehindATaskTheAPIServerKeepsRefusingIsRecordedOnce(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	rec := &noteRecorder{}
	s := e.syncerRecording(e.cl, rec)
	e.lock("create web", instanceAt("web", "dev-web", 1))
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dev-aaa"}}); err != nil {
		t.Fatal(err)
	}
	quota := e.noRoomForTasks("dev-aaa")
	e.lock("create aaa", instanceAt("aaa", "dev-aaa", 1))
	if _, err := s.Sync(e.ctx); err == nil || !strings.Contains(err.Error(), "exceeded quota") {
		t.Fatalf("sync with no room for aaa's task: %v, want it refused", err)
	}
	bad := e.lock("create bad", instanceAt("bad", "Not_A_Namespace", 1))
	badPath := deploymentID("bad").LockPath()
	for range 3 {
		if _, err := s.Sync(e.ctx); err == nil || !strings.Contains(err.Error(), "exceeded quota") {
			t.Fatalf("sync while aaa's task is refused: %v, want it refused", err)
		}
	}
	src := e.source()
	if src.Status.LastSyncedCommit == bad {
		t.Fatal("the position moved past aaa's refused task")
	}
	if refused := src.Status.Refused; len(refused) != 1 || refused[0].Commit != bad || refused[0].Path != badPath || refused[0].Reason != v1alpha1.ReasonInvalidLock {
		t.Fatalf("refused %+v while aaa's task is refused; want bad's lockfile at %s", refused, bad)
	}
	if notes := rec.refusalNotes(); len(notes) != 1 || !strings.Contains(notes[0], badPath) {
		t.Fatalf("refusal events over three polls: %q; want bad's once", notes)
	}
	// A new syncer (the agent restarted) does not record it again either:
	// the StyrminSource holds it.
	s = e.syncerRecording(e.cl, rec)
	if _, err := s.Sync(e.ctx); err == nil {
		t.Fatal("a sync while aaa's task is refused passed")
	}
	if notes := rec.refusalNotes(); len(notes) != 1 {
		t.Fatalf("refusal events after a restart: %q; want bad's once", notes)
	}

	// A force push while the sync fails is reported.
	e.rewriteAll()
	if _, err := s.Sync(e.ctx); err == nil {
		t.Fatal("a sync of the rewritten branch while aaa's task is refused passed")
	}
	src = e.source()
	if cond := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionHistoryRewritten); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("HistoryRewritten after a force push while the sync fails: %+v, want it set", cond)
	}
	if ready := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse {
		t.Errorf("Ready after a force push while the sync fails: %+v, want False", ready)
	}

	// The quota gone, aaa's task is made and the position moves; bad's
	// refusals (of the commit and of its rewritten copy) stay.
	if err := e.cl.Delete(e.ctx, quota); err != nil {
		t.Fatal(err)
	}
	res, err := s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Created, " ") != "dev-aaa/aaa-1" {
		t.Errorf("sync after the quota went: %+v, want aaa-1 created", res)
	}
	src = e.source()
	if src.Status.LastSyncedCommit != res.Head.String() || !slices.ContainsFunc(src.Status.Refused, func(r v1alpha1.RefusedLock) bool { return r.Commit == bad }) {
		t.Errorf("after the quota went: position %s, refused %+v; want %s and bad's refusal at %s kept", src.Status.LastSyncedCommit, src.Status.Refused, res.Head, bad)
	}
}

// TestALockCommitRevertedByHandWhileItsTaskWaitsIsRefused: a lock commit
// reverted by hand (git revert, a forward push) while its task waits (its
// wave, a restore, its pre steps) puts back the lockfile the cluster
// still runs; the task runs anyway, and the cluster ends on the reverted
// lock while git says the older one. The revert is refused and recorded
// on its commit, whose status then fails, rather than met because the
// StyrminDeployment holds what it locks.
func TestALockCommitRevertedByHandWhileItsTaskWaitsIsRefused(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	web1 := instanceAt("web", "dev-web", 1)
	e.lock("create web", web1)
	rec := &noteRecorder{}
	s := e.syncerRecording(e.cl, rec)
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.running(web1)
	e.lock("web 2", instanceAt("web", "dev-web", 2))
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	// web-2's task waits: the StyrminDeployment still holds web 1.
	revert := e.lock(`Revert "web 2"`, web1)
	res, err := s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rewritten || len(res.Created) != 0 {
		t.Fatalf("sync of the revert: %+v, want a forward move, nothing created", res)
	}
	if got := strings.Join(e.tasks(), " "); got != "dev-web/web-1 dev-web/web-2" {
		t.Fatalf("tasks %s, want web-1 and web-2", got)
	}
	e.requireOneRefusalOfWeb(t, rec, revert, "sequence 1 does not follow 2")
}

// TestARewriteThatKeepsARefusedLockRefusesItAgain: a force push that keeps
// every lockfile, the head's lock among them refused when it was synced
// (it moves the deployment to another namespace), gives that lock a new
// commit: the new head locks what never runs, so it is refused again and
// recorded on the new commit, not met because the old position locked the
// same.
func TestARewriteThatKeepsARefusedLockRefusesItAgain(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	web1 := instanceAt("web", "dev-web", 1)
	e.lock("create web", web1)
	rec := &noteRecorder{}
	s := e.syncerRecording(e.cl, rec)
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.running(web1)
	moved := e.lock("move web", instanceAt("web", "develop-web", 2))
	if _, err := s.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if refused := e.source().Status.Refused; len(refused) != 1 || refused[0].Commit != moved {
		t.Fatalf("refused %+v, want the move at %s", refused, moved)
	}

	head := e.rewriteAll()
	res, err := s.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Rewritten || len(res.Created) != 0 {
		t.Fatalf("sync of the rewritten branch: %+v, want it rewritten, nothing created", res)
	}
	if got := strings.Join(e.tasks(), " "); got != "dev-web/web-1" {
		t.Fatalf("tasks %s, want web-1 only", got)
	}
	refused := e.source().Status.Refused
	if !slices.ContainsFunc(refused, func(r v1alpha1.RefusedLock) bool {
		return r.Commit == head && r.Path == deploymentID("web").LockPath() && strings.Contains(r.Message, "refused before")
	}) {
		t.Fatalf("refused %+v; want web's lockfile refused again at the new head %s", refused, head)
	}
	if notes := rec.refusalNotes(); len(notes) != 2 || !strings.Contains(notes[1], "refused before") {
		t.Errorf("refusal events %q, want the move's, then its refusal on the new commit", notes)
	}
}

// requireOneRefusalOfWeb checks that the StyrminSource records one refused
// lockfile, web's at commit, and the sync one refusal event, both saying
// why.
func (e *syncEnv) requireOneRefusalOfWeb(t *testing.T, rec *noteRecorder, commit, why string) {
	t.Helper()
	refused := e.source().Status.Refused
	if len(refused) != 1 || refused[0].Commit != commit || refused[0].Path != deploymentID("web").LockPath() || !strings.Contains(refused[0].Message, why) {
		t.Fatalf("refused %+v; want web's lockfile at %s alone, saying %q", refused, commit, why)
	}
	if notes := rec.refusalNotes(); len(notes) != 1 || !strings.Contains(notes[0], why) {
		t.Errorf("refusal events %q, want one saying %q", notes, why)
	}
}

// racingStatus is a client whose first status write of the StyrminSource
// is preceded by another writer's (the lock mode's condition), between
// the sync's read and its write.
type racingStatus struct {
	client.Client
	race func()
	once sync.Once
}

func (c *racingStatus) Status() client.SubResourceWriter {
	return &racingWriter{SubResourceWriter: c.Client.Status(), c: c}
}

type racingWriter struct {
	client.SubResourceWriter
	c *racingStatus
}

func (w *racingWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if _, ok := obj.(*v1alpha1.StyrminSource); ok {
		w.c.once.Do(w.c.race)
	}
	return w.SubResourceWriter.Update(ctx, obj, opts...)
}

// lockModeSource is a sync environment of an agent in lock mode whose
// StyrminSource, synced at a first lock commit, holds the lock mode's
// condition c, and the setter that wrote it.
func lockModeSource(t *testing.T, c metav1.Condition) (*syncEnv, *source.SourceConditions) {
	t.Helper()
	e := startSyncEnv(t)
	e.lockMode = true
	e.lock("lock hub 1", instanceAt("hub", "dev-hub", 1))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	conditions := &source.SourceConditions{Client: e.cl, Reader: e.cl, Source: e.key}
	if err := conditions.SetCondition(e.ctx, nil, c); err != nil {
		t.Fatal(err)
	}
	return e, conditions
}

// The lock mode writes its Locked condition on the StyrminSource while
// the syncer writes the others: a sync whose copy was read before the
// lock mode's write conflicts, reads the source again and keeps that
// condition, rather than putting back what its older copy held.
func TestASyncThatConflictsWithTheLockModeKeepsItsCondition(t *testing.T) {
	t.Parallel()
	first := metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonLocked, Message: "every deployment locked at the first head"}
	e, conditions := lockModeSource(t, first)
	e.lock("lock hub 2", instanceAt("hub", "dev-hub", 2))
	heldBack := metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonDeploymentsHeldBack, Message: "held back: local/dev/web"}
	waiting := []v1alpha1.LockStatus{{Commit: strings.Repeat("ab", 20), State: "success", Description: "2 deployments locked"}}
	c := &racingStatus{Client: e.cl, race: func() {
		if err := conditions.SetCondition(e.ctx, &first, heldBack); err != nil {
			t.Error(err)
		}
		if err := conditions.SetLockStatuses(e.ctx, nil, waiting); err != nil {
			t.Error(err)
		}
	}}
	if _, err := e.syncerWith(c).Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	src := e.source()
	ready := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionReady)
	locked := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionLocked)
	if ready == nil || ready.Status != metav1.ConditionTrue || !strings.Contains(ready.Message, shortHash(t, src.Status.LastSyncedCommit)) {
		t.Errorf("Ready %+v, want True at the second lock commit", ready)
	}
	if locked == nil || locked.Reason != v1alpha1.ReasonDeploymentsHeldBack || locked.Message != heldBack.Message {
		t.Errorf("Locked %+v after the sync's conflict, want the lock mode's last write %+v", locked, heldBack)
	}
	if !slices.Equal(src.Status.LockStatuses, waiting) {
		t.Errorf("the lock statuses waiting for the host after the sync's conflict: %+v, want the lock mode's %+v", src.Status.LockStatuses, waiting)
	}
}

// shortHash is the short form of the hex commit name h.
func shortHash(t *testing.T, h string) string {
	t.Helper()
	hash, err := gitsource.ParseHash(h)
	if err != nil {
		t.Fatal(err)
	}
	return hash.Short()
}

// An agent started without the lock mode removes the Locked condition
// one that ran it left: it would otherwise say forever what a lock long
// ago held back (styrminctl status prints it). An agent in lock mode
// keeps it.
func TestASyncerWithoutTheLockModeRemovesItsLeftCondition(t *testing.T) {
	t.Parallel()
	e, conditions := lockModeSource(t, metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonDeploymentsHeldBack, Message: "held back: local/dev/web"})
	locked := func() *metav1.Condition {
		return apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionLocked)
	}
	// Restarted in lock mode: kept.
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if locked() == nil {
		t.Fatal("a syncer in lock mode removed the Locked condition")
	}
	// What it kept for the next lock mode: removed with it.
	if err := conditions.SetLockStatuses(e.ctx, nil, []v1alpha1.LockStatus{{Commit: strings.Repeat("ab", 20), State: "pending"}}); err != nil {
		t.Fatal(err)
	}
	if err := conditions.SetLockAgain(e.ctx, nil, &v1alpha1.LockAgain{Commit: strings.Repeat("ab", 20), Head: strings.Repeat("cd", 20)}); err != nil {
		t.Fatal(err)
	}
	// Restarted without it, on a head it synced already: removed.
	e.lockMode = false
	if res, err := e.syncer().Sync(e.ctx); err != nil || !res.Skipped {
		t.Fatalf("sync of the synced head: %+v, %v", res, err)
	}
	if c := locked(); c != nil {
		t.Fatalf("the Locked condition of a lock mode no longer run is still there: %+v", c)
	}
	if st := e.source().Status; len(st.LockStatuses) != 0 || st.LockAgain != nil {
		t.Fatalf("what a lock mode no longer run kept for the next is still there: %+v, %+v", st.LockStatuses, st.LockAgain)
	}
	if r := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v after the removal, want True as before", r)
	}
}

// TestALockfilePlacingItsDeploymentOutsideItsEnvironmentIsRefused pins
// that a lockfile whose deployment's namespace is not the one the
// configuration at its lock commit gives it (the environment's namespace
// prefix and the deployment's name) is refused at the sync: no task is
// made, and the namespace it names (another tenant's, existing; or a new
// one) is neither adopted nor created. The agent creates the namespace a
// lockfile names and takes it as the deployment's own, so a lockfile
// written by hand (its checksum recomputed) could otherwise run a chart
// in any namespace the policy never gave it. A lockfile placed as the
// configuration says, in the same commit, makes its task.
func TestALockfilePlacingItsDeploymentOutsideItsEnvironmentIsRefused(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	e.git.Commit(repoName, "configuration", map[string][]byte{
		"clusters/local/cluster.cue":                      []byte("domain: \"local.styrmin.dev\"\n"),
		"clusters/local/environments/dev/environment.cue": []byte("namespacePrefix: \"dev\"\n"),
	})
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	tenant := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-b", Labels: map[string]string{"team": "b"}}}
	if err := e.cl.Create(e.ctx, tenant); err != nil {
		t.Fatal(err)
	}
	intruder := instanceAt("intruder", "tenant-b", 1)
	fresh := instanceAt("fresh", "brand-new", 1)
	misnamed := instanceAt("api", "dev-api", 1)
	misnamed.Context.Deployment.Name = "web"
	ghost := instanceAt("x", "tenant-b", 1)
	ghost.ID.Environment = "ghost"
	ingress := instanceAt(resolver.IngressName, "tenant-b", 1)
	ingress.ID, ingress.Internal = resolver.SharedIngressID("local"), resolver.InternalIngress
	commit := e.lock("by hand", instanceAt("web", "dev-web", 1), intruder, fresh, misnamed)
	// A commit's refusals are kept four at the most.
	second := e.lock("by hand again", ghost, ingress)
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.tasks(), " "); got != "dev-web/web-1" {
		t.Errorf("tasks %q; want web's alone", got)
	}
	refused := map[string]string{}
	for _, r := range e.source().Status.Refused {
		if r.Commit != commit && r.Commit != second || r.Reason != v1alpha1.ReasonInvalidLock {
			t.Errorf("refused %+v; want at %s or %s, InvalidLock", r, commit, second)
		}
		refused[r.Path] = r.Message
	}
	for in, want := range map[*resolver.Instance]string{
		intruder: `in namespace "tenant-b"; the configuration runs it in "dev-intruder"`,
		fresh:    `in namespace "brand-new"; the configuration runs it in "dev-fresh"`,
		misnamed: `records the release name "web"`,
		ghost:    `does not declare the deployment so: clusters/local/environments/ghost/environment.cue: missing`,
		ingress:  `does not declare the deployment so: clusters/local/cluster.cue: field ingress: missing`,
	} {
		if msg := refused[in.ID.LockPath()]; !strings.Contains(msg, want) {
			t.Errorf("%s refused with %q; want %q", in.ID, msg, want)
		}
	}
	var ns corev1.Namespace
	if err := e.cl.Get(e.ctx, client.ObjectKey{Name: "tenant-b"}, &ns); err != nil || len(ns.Labels) != 2 {
		t.Errorf("tenant-b after the sync: labels %v (%v); want its own alone", ns.Labels, err)
	}
	if err := e.cl.Get(e.ctx, client.ObjectKey{Name: "brand-new"}, &ns); err == nil {
		t.Errorf("namespace brand-new was created for a refused lockfile")
	}
}

// endTask writes the status a task controller would have ended task
// dev-web/name with: Superseded by by (0: none), Ready's reason given,
// and phase as asked; a started step when started.
func (e *syncEnv) endTask(name string, phase v1alpha1.TaskPhase, reason string, by int64, started bool) *v1alpha1.StyrminTask {
	e.t.Helper()
	var tk v1alpha1.StyrminTask
	if err := e.cl.Get(e.ctx, client.ObjectKey{Namespace: "dev-web", Name: name}, &tk); err != nil {
		e.t.Fatal(err)
	}
	tk.Status.Phase, tk.Status.SupersededBy = phase, by
	if reason != "" {
		apimeta.SetStatusCondition(&tk.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: reason, Message: "ended by the test"})
	}
	if started {
		now := metav1.Now()
		tk.Status.Steps = []v1alpha1.TaskStep{{Name: "apply", Mode: "core", State: v1alpha1.StepRunning, StartedAt: &now, Attempts: 1}}
	}
	if err := e.cl.Status().Update(e.ctx, &tk); err != nil {
		e.t.Fatal(err)
	}
	return &tk
}

// walkAgainFrom records from as the sync position and no
// HistoryRewritten condition: the next syncer walks from there.
func (e *syncEnv) walkAgainFrom(from string) {
	e.t.Helper()
	src := e.source()
	src.Status.LastSyncedCommit = from
	apimeta.RemoveStatusCondition(&src.Status.Conditions, v1alpha1.ConditionHistoryRewritten)
	if err := e.cl.Status().Update(e.ctx, src); err != nil {
		e.t.Fatal(err)
	}
}

// TestAChangeSupersededByOneAForcePushThenWithdrewIsMadeAgain pins that
// a change superseded before it ran by a newer one, whose lock commit a
// force push back to the older change's then took away, is made again:
// neither was applied, and the branch locks the older one. The rewind
// walks no commit, so the sync's look at the head after a rewrite makes
// it, while the newer one still waits (withdrawn at its own turn, from
// the fetch this sync made); a walk meeting its commit again makes it
// once the newer one ended withdrawn.
func TestAChangeSupersededByOneAForcePushThenWithdrewIsMadeAgain(t *testing.T) {
	t.Parallel()
	e, commits, superseded := supersededByAPendingChange(t)

	madeAgain := func(how string, res source.SyncResult, old *v1alpha1.StyrminTask) *v1alpha1.StyrminTask {
		t.Helper()
		if !slices.Contains(res.Created, "dev-web/web-2") {
			t.Fatalf("%s: created %v; want web-2 made again", how, res.Created)
		}
		var again v1alpha1.StyrminTask
		if err := e.cl.Get(e.ctx, client.ObjectKey{Namespace: "dev-web", Name: "web-2"}, &again); err != nil {
			t.Fatal(err)
		}
		if again.UID == old.UID || again.Status.Phase.Terminal() || again.Spec.Lock.Commit != commits[1] {
			t.Fatalf("%s: web-2: uid changed %v, phase %q, lock %s; want a new task at %s", how, again.UID != old.UID, again.Status.Phase, again.Spec.Lock.Commit, commits[1])
		}
		return &again
	}

	// Back to web 2's lock commit while web-3 waits.
	e.git.Reset(repoName, "main", commits[1])
	res, err := e.syncer().Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	again := madeAgain("the sync of the rewind", res, superseded)
	for _, d := range res.SequenceUsed {
		t.Errorf("the rewind reports %s as locking a sequence the cluster used; web 2 is made again", d)
	}

	// Superseded again before web-3 ended withdrawn (two replicas' views),
	// then web-3 withdrawn: a walk meeting web 2's commit makes it again.
	superseded = e.endTask("web-2", v1alpha1.TaskSuperseded, string(v1alpha1.TaskSuperseded), 3, false)
	if superseded.UID != again.UID {
		t.Fatal("web-2 was made again twice")
	}
	e.endTask("web-3", v1alpha1.TaskSuperseded, v1alpha1.ReasonTaskWithdrawn, 0, false)
	e.walkAgainFrom(commits[0])
	if res, err = e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	madeAgain("a walk meeting its commit", res, superseded)
}

// TestAChangeSupersededByANewerOneOnTheBranchIsNotMadeAgain pins the other
// side: a change superseded before it ran by a newer one the branch still
// holds, or by one that started (it wrote), stays superseded, whether a
// walk from the root meets its commit again (an agent restarted) or a
// rewind back to its commit comes after the newer one started.
func TestAChangeSupersededByANewerOneOnTheBranchIsNotMadeAgain(t *testing.T) {
	t.Parallel()
	e, commits, superseded := supersededByAPendingChange(t)
	kept := func(how string, res source.SyncResult) {
		t.Helper()
		var got v1alpha1.StyrminTask
		if err := e.cl.Get(e.ctx, client.ObjectKey{Namespace: "dev-web", Name: "web-2"}, &got); err != nil {
			t.Fatal(err)
		}
		if len(res.Created) > 0 || got.UID != superseded.UID || got.Status.Phase != v1alpha1.TaskSuperseded {
			t.Fatalf("%s: created %v, web-2 made again %v, phase %q; want web-2 left superseded", how, res.Created, got.UID != superseded.UID, got.Status.Phase)
		}
	}

	e.walkAgainFrom("")
	res, err := e.syncer().Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	kept("a walk from the root, web-3 waiting on the branch", res)

	// web-3 started before the rewind: it writes, and carries web 2.
	e.endTask("web-3", v1alpha1.TaskRunning, "", 0, true)
	e.git.Reset(repoName, "main", commits[1])
	if res, err = e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	kept("a rewind after web-3 started", res)
}

// TestAWithdrawnChangeBackOnTheBranchRunsAgain pins that a change whose
// task ended withdrawn (its lock commit left the branch before its turn:
// a force push) is made again when its lock commit comes back (the force
// push undone, a mirror behind catching up): the task found at its name
// ran nothing, and counting it as made would leave the deployment at the
// older change for good while the branch says the newer.
func TestAWithdrawnChangeBackOnTheBranchRunsAgain(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	c1 := e.lock("web 1", instanceAt("web", "dev-web", 1))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	c2 := e.lock("web 2", instanceAt("web", "dev-web", 2))
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	// The branch goes back to c1; web-2's turn finds its lock gone.
	e.git.Reset(repoName, "main", c1)
	if _, err := e.syncer().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	var withdrawn v1alpha1.StyrminTask
	if err := e.cl.Get(e.ctx, client.ObjectKey{Namespace: "dev-web", Name: "web-2"}, &withdrawn); err != nil {
		t.Fatal(err)
	}
	withdrawn.Status.Phase = v1alpha1.TaskSuperseded
	apimeta.SetStatusCondition(&withdrawn.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonTaskWithdrawn, Message: "withdrawn before it ran"})
	if err := e.cl.Status().Update(e.ctx, &withdrawn); err != nil {
		t.Fatal(err)
	}

	e.git.Reset(repoName, "main", c2)
	res, err := e.syncer().Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Created, "dev-web/web-2") {
		t.Fatalf("created %v (%d existing); want web-2 made again", res.Created, res.Existing)
	}
	var again v1alpha1.StyrminTask
	if err := e.cl.Get(e.ctx, client.ObjectKey{Namespace: "dev-web", Name: "web-2"}, &again); err != nil {
		t.Fatal(err)
	}
	if again.UID == withdrawn.UID || again.Status.Phase.Terminal() || again.Spec.Lock.Commit != c2 {
		t.Fatalf("web-2 after the branch came back: uid changed %v, phase %q, lock %s; want a new task at %s", again.UID != withdrawn.UID, again.Status.Phase, again.Spec.Lock.Commit, c2)
	}
	// A task ended otherwise (superseded by a newer change) is not made
	// again by a walk that meets its commit.
	again.Status.Phase = v1alpha1.TaskSuperseded
	apimeta.SetStatusCondition(&again.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: string(v1alpha1.TaskSuperseded), Message: "superseded"})
	if err := e.cl.Status().Update(e.ctx, &again); err != nil {
		t.Fatal(err)
	}
	src := e.source()
	src.Status.LastSyncedCommit = c1
	if err := e.cl.Status().Update(e.ctx, src); err != nil {
		t.Fatal(err)
	}
	if res, err := e.syncer().Sync(e.ctx); err != nil || len(res.Created) > 0 {
		t.Fatalf("a walk meeting a superseded task's commit again: created %v, %v; want none", res.Created, err)
	}
}

// supersededByAPendingChange syncs three lock commits of web, runs the
// first, and ends web-2 Superseded by web-3, which waits: it returns the
// env, the three commits and web-2.
func supersededByAPendingChange(t *testing.T) (*syncEnv, []string, *v1alpha1.StyrminTask) {
	t.Helper()
	e := startSyncEnv(t)
	var commits []string
	for seq := int64(1); seq <= 3; seq++ {
		commits = append(commits, e.lock(fmt.Sprintf("web %d", seq), instanceAt("web", "dev-web", seq)))
		if _, err := e.syncer().Sync(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.running(instanceAt("web", "dev-web", 1))
	superseded := e.endTask("web-2", v1alpha1.TaskSuperseded, string(v1alpha1.TaskSuperseded), 3, false)
	e.endTask("web-3", v1alpha1.TaskPending, "", 0, false)
	return e, commits, superseded
}
