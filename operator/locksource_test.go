package operator_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// lockedClone serves the example repository, locks it and returns a
// clone of the result with its head: what the agent reads locks from.
func lockedClone(t *testing.T) (*gitsource.Repo, gitsource.Hash) {
	t.Helper()
	ctx := context.Background()
	git := gitserver.New(t)
	git.Seed("desired", exampleRepo(t), "examples")
	author, err := gitsource.Clone(ctx, git.RepoURL("desired"), "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	lockRepo(t, author)
	repo, err := gitsource.Clone(ctx, git.RepoURL("desired"), "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	head, err := repo.Head()
	if err != nil {
		t.Fatal(err)
	}
	return repo, head
}

// handOverSequence is the sequence of the lockfile handedLock makes.
const handOverSequence = 99

// handedLock is in's lockfile at handOverSequence.
func handedLock(t *testing.T, in *resolver.Instance) []byte {
	t.Helper()
	out := *in
	out.Sequence = handOverSequence
	data, err := resolver.EncodeLock(&out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestRepoLocksReadTheLockAtItsCommit pins the agent's lock source: a
// task's lock is read at its commit; a lockfile the sync handed over is
// given once, as it is, and then read from git; a lock that is not there
// (unknown commit, no such file, not a hash) is a LockNotFoundError that
// names the path and the commit.
func TestRepoLocksReadTheLockAtItsCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	repo, head := lockedClone(t)
	locks := instance.NewRepoLocks(repo)
	ref := v1alpha1.LockRef{Commit: head.String(), Path: "locks/local/dev/hub.lock.yaml"}

	in, err := locks.Lock(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if in.ID.Name != "hub" || in.Sequence != 1 || in.Digest == "" {
		t.Fatalf("lock read from git: %s sequence %d digest %q", in.ID, in.Sequence, in.Digest)
	}
	// A lockfile handed over is given once, as it is (this one, with a
	// sequence of its own, tells it from the one in git).
	handed := handedLock(t, in)
	locks.HandOver(ref, handed)
	if got, err := locks.Lock(ctx, ref); err != nil || got.Sequence != handOverSequence {
		t.Fatalf("the handed-over lockfile was not given: %+v, %v", got, err)
	}
	again, err := locks.Lock(ctx, ref)
	if err != nil || again.Sequence != in.Sequence || again.Digest != in.Digest {
		t.Fatalf("after the hand-over the lock is read from git again: %+v, %v", again, err)
	}
	locks.HandOver(ref, handed)
	locks.Drop(ref)
	if got, err := locks.Lock(ctx, ref); err != nil || got.Sequence != in.Sequence {
		t.Fatalf("a dropped hand-over was given: %+v, %v", got, err)
	}

	for _, bad := range []struct {
		ref   v1alpha1.LockRef
		cause string
	}{
		{v1alpha1.LockRef{Commit: head.String(), Path: "locks/local/dev/nothing.lock.yaml"}, "no such file at that commit"},
		{v1alpha1.LockRef{Commit: head.String(), Path: "locks/local/dev"}, "not a regular file"},
		{v1alpha1.LockRef{Commit: strings.Repeat("ab", 20), Path: ref.Path}, "commit not found"},
		{v1alpha1.LockRef{Commit: "main", Path: ref.Path}, "main"},
		{v1alpha1.LockRef{Commit: head.String(), Path: "../outside.lock.yaml"}, "not a valid path"},
	} {
		_, err := locks.Lock(ctx, bad.ref)
		var nf *instance.LockNotFoundError
		if !errors.As(err, &nf) || !strings.Contains(err.Error(), bad.cause) {
			t.Errorf("Lock(%+v) = %v, want a LockNotFoundError saying %q", bad.ref, err, bad.cause)
		}
	}
}

// TestTaskWhoseLockCannotBeReadFailsNamingIt pins that a task carrying no
// instance, whose lock is not in the repository or is another
// deployment's, ends Failed with a message naming spec.lock and the file,
// and changes nothing else.
func TestTaskWhoseLockCannotBeReadFailsNamingIt(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	repo, head := lockedClone(t)
	r, err := task.NewReconciler(task.Options{
		Client:     e.client,
		Drivers:    &driversource.CatalogSource{Catalog: e.workspace.Catalog},
		Locks:      instance.NewRepoLocks(repo),
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "dev-ghost"
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "ghost"}
	for seq, c := range map[int64]struct{ path, want string }{
		1: {"locks/local/dev/ghost.lock.yaml", "no such file"},
		2: {"locks/local/dev/hub.lock.yaml", "the lock is of deployment local/dev/hub"},
	} {
		task := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName("ghost", seq), Namespace: ns, Labels: id.Labels()},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: seq,
				Lock: v1alpha1.LockRef{Commit: head.String(), Path: c.path}},
		}
		if err := e.client.Create(ctx, task); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(task)}); err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.StyrminTask
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(task), &got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(got.Status.Message, "spec.lock") ||
			!strings.Contains(got.Status.Message, c.path) || !strings.Contains(got.Status.Message, c.want) {
			t.Errorf("task %s with lock %s: phase %q, message %q; want Failed naming spec.lock, the file and %q", got.Name, c.path, got.Status.Phase, got.Status.Message, c.want)
		}
	}
	var sds v1alpha1.StyrminDeploymentList
	if err := e.client.List(ctx, &sds, client.InNamespace(ns)); err != nil || len(sds.Items) != 0 {
		t.Fatalf("a task that failed before its first step wrote a StyrminDeployment: %v, %d", err, len(sds.Items))
	}
}

// TestATaskWhoseTargetIsNotItsLocksFails pins the check of spec.target
// against the task's lock: the target is what a succeeded task's instance
// is taken to be (instance.Active), so what the next change's workflow is
// chosen against, and a target that names another driver version than
// the lock's would have the next upgrade planned as an update, its
// migration skipped. A task whose target differs from its lock (the
// digest, the driver version) ends Failed with LockMismatch before any
// step; one whose target is edited after the agent first read its lock
// is checked again at its next reconcile.
func TestATaskWhoseTargetIsNotItsLocksFails(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	repo, head := lockedClone(t)
	locks := instance.NewRepoLocks(repo)
	r, err := task.NewReconciler(task.Options{
		Client:     e.client,
		Drivers:    &driversource.CatalogSource{Catalog: e.workspace.Catalog},
		Locks:      locks,
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ref := v1alpha1.LockRef{Commit: head.String(), Path: "locks/local/dev/web.lock.yaml"}
	in, err := locks.Lock(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	ns := in.Context.Deployment.Namespace
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	id := instance.DeploymentID(in.ID)
	locked := func() *v1alpha1.TaskTarget {
		return &v1alpha1.TaskTarget{Kind: in.Kind, AppVersion: in.AppVersion, SourceCommit: in.SourceCommit, Digest: in.Digest,
			Driver: v1alpha1.DriverRef{Name: in.Driver.Name, Version: in.Driver.Version, Digest: in.Driver.Digest}}
	}
	phaseAfter := func(tk *v1alpha1.StyrminTask) *v1alpha1.StyrminTask {
		t.Helper()
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}); err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.StyrminTask
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(tk), &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}
	wantMismatch := func(got *v1alpha1.StyrminTask, what string) {
		t.Helper()
		c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if got.Status.Phase != v1alpha1.TaskFailed || c == nil || c.Reason != v1alpha1.ReasonLockMismatch ||
			!strings.Contains(got.Status.Message, "spec.target") || !strings.Contains(got.Status.Message, ref.Path) {
			t.Errorf("task with %s: phase %q, condition %+v, message %q; want Failed (LockMismatch) naming spec.target and the lock", what, got.Status.Phase, c, got.Status.Message)
		}
	}
	digest, driver := locked(), locked()
	digest.Digest = "sha256:" + strings.Repeat("0", 64)
	driver.Driver.Version = "2.0.0"
	for seq, c := range map[int64]struct {
		what   string
		target *v1alpha1.TaskTarget
	}{
		1: {"another digest", digest},
		2: {"another driver version", driver},
		3: {"its lock's target, edited after the first read", locked()},
	} {
		tk := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(in.ID.Name, seq), Namespace: ns, Labels: id.Labels()},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: in.Sequence,
				Lock: ref, Target: c.target},
		}
		if err := e.client.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		got := phaseAfter(tk)
		if seq < 3 {
			wantMismatch(got, c.what)
			continue
		}
		if got.Status.Phase == v1alpha1.TaskFailed {
			t.Fatalf("task with %s failed at once: %s", c.what, got.Status.Message)
		}
		got.Spec.Target.Driver.Version = "2.0.0"
		if err := e.client.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		wantMismatch(phaseAfter(got), c.what)
	}
}
