package operator_test

import (
	"context"
	"io/fs"
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
)

// TestAChangeAForcePushWithdrewBeforeItRanEndsWithdrawnOnEveryReplica
// pins what a force push that takes away a lock commit does to its task
// that has not started (it waited behind a long upgrade, say): the change
// is no longer in git, so nothing of it is applied, and every replica
// says so alike. A replica whose clone still holds the commit (the
// leader, which fetched it) ends the task Superseded, reason Withdrawn,
// rather than running it; one whose clone never had it (a standby taking
// over, a restarted agent) ends it so too, rather than Failed
// InvalidTask. A task whose lock commit the branch holds is not touched.
func TestAChangeAForcePushWithdrewBeforeItRanEndsWithdrawnOnEveryReplica(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	git := gitserver.New(t)
	git.Seed("desired", exampleRepo(t), "examples")
	url := git.RepoURL("desired")
	author, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	lockRepo(t, author)
	firstLock, err := author.Head()
	if err != nil {
		t.Fatal(err)
	}
	git.Commit("desired", "hub: three workers", hubConfig("1.4.0", 3, "info"))
	if _, err := author.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	if seq := lockRepo(t, author)["hub"]; seq != 2 {
		t.Fatalf("hub locked at %d, want 2", seq)
	}
	withdrawnLock, err := author.Head()
	if err != nil {
		t.Fatal(err)
	}
	// The leader's clone fetched the lock commit before the force push.
	leaderClone, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	git.Reset("desired", "main", firstLock.String())
	if _, err := leaderClone.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := leaderClone.Holds(withdrawnLock); err != nil || held {
		t.Fatalf("after the force push the leader's clone holds the withdrawn commit on its branch: %v, %v", held, err)
	}
	// A standby's clone, made after it.
	standbyClone, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}

	ref := v1alpha1.LockRef{Commit: withdrawnLock.String(), Path: "locks/local/dev/hub.lock.yaml"}
	in, err := instance.ReadLock(ctx, instance.NewRepoLocks(leaderClone), ref)
	if err != nil {
		t.Fatalf("the leader's clone no longer reads the lock it fetched: %v", err)
	}
	ns := in.Context.Deployment.Namespace
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	id := instance.DeploymentID(in.ID)
	reconciler := func(clone *gitsource.Repo) *task.Reconciler {
		t.Helper()
		r, err := task.NewReconciler(task.Options{
			Client:     e.client,
			Drivers:    &driversource.CatalogSource{Catalog: e.workspace.Catalog},
			Locks:      instance.NewRepoLocks(clone),
			Branch:     clone,
			Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// run makes the task of lock (pending when waiting: planned, as one
	// waiting for its turn is), reconciles it once with r and returns it.
	run := func(r *task.Reconciler, lock v1alpha1.LockRef, seq int64, waiting bool) *v1alpha1.StyrminTask {
		t.Helper()
		tk := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(in.ID.Name, seq), Namespace: ns, Labels: id.Labels()},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: seq,
				Lock: lock},
		}
		if err := e.client.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		if waiting {
			tk.Status.Phase = v1alpha1.TaskPending
			if err := e.client.Status().Update(ctx, tk); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}); err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.StyrminTask
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(tk), &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}
	remove := func(tk *v1alpha1.StyrminTask) {
		t.Helper()
		if err := e.client.Delete(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	withdrawn := func(who string, got *v1alpha1.StyrminTask) {
		t.Helper()
		ready := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if got.Status.Phase != v1alpha1.TaskSuperseded || ready == nil || ready.Reason != v1alpha1.ReasonTaskWithdrawn ||
			!strings.Contains(got.Status.Message, withdrawnLock.Short()) || !strings.Contains(got.Status.Message, "nothing of it was applied") {
			t.Fatalf("%s: task %s: phase %q, Ready %+v, message %q; want Superseded, reason Withdrawn, naming the commit",
				who, got.Name, got.Status.Phase, ready, got.Status.Message)
		}
		for _, st := range got.Status.Steps {
			if st.StartedAt != nil || st.State != v1alpha1.StepSkipped {
				t.Errorf("%s: step %s of the withdrawn task: %s, started %v", who, st.Name, st.State, st.StartedAt)
			}
		}
	}

	// The leader's clone still reads the lock: the task waited, planned.
	got := run(reconciler(leaderClone), ref, 2, true)
	withdrawn("the leader, whose clone holds the commit", got)
	remove(got)

	// The standby's clone has no such commit: the same end, not a failure.
	got = run(reconciler(standbyClone), ref, 2, false)
	withdrawn("a standby, whose clone never had the commit", got)
	remove(got)

	var sds v1alpha1.StyrminDeploymentList
	if err := e.client.List(ctx, &sds, client.InNamespace(ns)); err != nil || len(sds.Items) != 0 {
		t.Fatalf("a withdrawn change wrote a StyrminDeployment: %v, %d", err, len(sds.Items))
	}

	// The first lock is on the branch: its task is not withdrawn.
	first := run(reconciler(standbyClone), v1alpha1.LockRef{Commit: firstLock.String(), Path: ref.Path}, 1, false)
	if first.Status.Phase == v1alpha1.TaskSuperseded || first.Status.Phase == v1alpha1.TaskFailed {
		t.Fatalf("the task of a lock commit the branch holds ended %s: %s", first.Status.Phase, first.Status.Message)
	}
	remove(first)

	// A rewrite that keeps the lockfile (filter-repo, commits signed
	// again): the change is still in git, under another commit.
	old, err := leaderClone.FS(withdrawnLock)
	if err != nil {
		t.Fatal(err)
	}
	lockfile, err := fs.ReadFile(old, ref.Path)
	if err != nil {
		t.Fatal(err)
	}
	files := hubConfig("1.4.0", 3, "info")
	files[ref.Path] = lockfile
	git.Commit("desired", "hub: three workers, locked (rewritten)", files)
	for _, c := range []*gitsource.Repo{leaderClone, standbyClone} {
		if _, err := c.Fetch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rewritten, err := standbyClone.Head()
	if err != nil {
		t.Fatal(err)
	}
	target := &v1alpha1.TaskTarget{Kind: in.Kind, AppVersion: in.AppVersion, SourceCommit: in.SourceCommit, Digest: in.Digest,
		Driver: v1alpha1.DriverRef{Name: in.Driver.Name, Version: in.Driver.Version, Digest: in.Driver.Digest}}
	kept := func(r *task.Reconciler) (*v1alpha1.StyrminTask, error) {
		t.Helper()
		tk := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(in.ID.Name, 2), Namespace: ns, Labels: id.Labels()},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: 2,
				Lock: ref, Target: target},
		}
		if err := e.client.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)})
		var got v1alpha1.StyrminTask
		if gerr := e.client.Get(ctx, client.ObjectKeyFromObject(tk), &got); gerr != nil {
			t.Fatal(gerr)
		}
		return &got, err
	}
	// The standby cannot read the old commit: it reads the lock where the
	// rewritten branch has it, the head, and runs the change.
	got, err = kept(reconciler(standbyClone))
	if err != nil {
		t.Fatalf("a standby's task whose lockfile a rewrite kept: %v", err)
	}
	if got.Spec.Lock.Commit != rewritten.String() || got.Status.Phase == v1alpha1.TaskSuperseded || got.Status.Phase == v1alpha1.TaskFailed || got.Status.Phase == "" {
		t.Fatalf("a standby's task whose lockfile a rewrite kept: lock commit %s (head %s), phase %q, %s; want it pointed at the head and under way",
			got.Spec.Lock.Commit, rewritten, got.Status.Phase, got.Status.Message)
	}
	remove(got)

	// The leader's clone still reads the old commit: the change is kept,
	// not withdrawn.
	got, err = kept(reconciler(leaderClone))
	if err != nil || got.Status.Phase == v1alpha1.TaskSuperseded || got.Status.Phase == v1alpha1.TaskFailed || got.Status.Phase == "" {
		t.Fatalf("the leader's task whose lockfile a rewrite kept: %v, phase %q, %s; want it under way", err, got.Status.Phase, got.Status.Message)
	}
}
