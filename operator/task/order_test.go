package task

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

func TestReadySinceCountsAPeerReadyFromItsActiveTasksEnd(t *testing.T) {
	t.Parallel()
	readyLong := time.Date(2026, 12, 3, 11, 40, 0, 0, time.UTC)
	ended := readyLong.Add(5 * time.Minute)
	now := ended.Add(time.Second)
	finished := func(at *time.Time) *v1alpha1.StyrminTask {
		task := &v1alpha1.StyrminTask{}
		if at != nil {
			mt := metav1.NewTime(*at)
			task.Status.FinishedAt = &mt
		}
		return task
	}
	early := readyLong.Add(-time.Minute)
	for _, tc := range []struct {
		name   string
		active *v1alpha1.StyrminTask
		want   time.Time
	}{
		{"the task that made the instance active ended after the condition turned true", finished(&ended), ended},
		{"the condition turned true after the task ended", finished(&early), readyLong},
		// The task records its instance active before it writes its end:
		// Ready since an older instance is not Ready since this one.
		{"the task has recorded its instance active but not its end yet", finished(nil), now},
		{"the task was pruned from the history", nil, readyLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := readySince(readyLong, tc.active, now); !got.Equal(tc.want) {
				t.Errorf("readySince = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDeletedSinceIsATombstoneThatSucceededAfterTheAwaitedInstance pins
// which of a peer's tasks say it was deleted after the instance a task
// waits for: only a tombstone's, succeeded, numbered above it.
func TestDeletedSinceIsATombstoneThatSucceededAfterTheAwaitedInstance(t *testing.T) {
	t.Parallel()
	task := func(seq int64, kind string, phase v1alpha1.TaskPhase, op bool) v1alpha1.StyrminTask {
		tk := v1alpha1.StyrminTask{Spec: v1alpha1.StyrminTaskSpec{ToSequence: seq, Target: &v1alpha1.TaskTarget{Kind: kind}},
			Status: v1alpha1.StyrminTaskStatus{Phase: phase}}
		if op {
			tk.Spec.Operation = &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: "nightly"}
		}
		return tk
	}
	inst, tomb := v1alpha1.KindInstance, v1alpha1.KindTombstone
	for _, tc := range []struct {
		name  string
		tasks []v1alpha1.StyrminTask
		want  int64
	}{
		{"no tasks (not created yet, or its namespace deleted)", nil, 0},
		{"the awaited instance ran", []v1alpha1.StyrminTask{task(6, inst, v1alpha1.TaskSucceeded, false)}, 0},
		{"deleted after it", []v1alpha1.StyrminTask{task(6, inst, v1alpha1.TaskSucceeded, false), task(7, tomb, v1alpha1.TaskSucceeded, false)}, 7},
		{"deleted before it (a tombstone the awaited instance recreates)", []v1alpha1.StyrminTask{task(5, tomb, v1alpha1.TaskSucceeded, false)}, 0},
		{"the awaited instance is its tombstone, which ran (an object moves from it)", []v1alpha1.StyrminTask{task(6, tomb, v1alpha1.TaskSucceeded, false)}, 6},
		{"its tombstone still running", []v1alpha1.StyrminTask{task(7, tomb, v1alpha1.TaskRunning, false)}, 0},
		{"its tombstone failed", []v1alpha1.StyrminTask{task(7, tomb, v1alpha1.TaskFailed, false)}, 0},
		{"a later change, not a deletion", []v1alpha1.StyrminTask{task(7, inst, v1alpha1.TaskSucceeded, false)}, 0},
		{"an operation", []v1alpha1.StyrminTask{task(7, tomb, v1alpha1.TaskSucceeded, true)}, 0},
		{"a task carrying its instance", []v1alpha1.StyrminTask{{Spec: v1alpha1.StyrminTaskSpec{ToSequence: 8,
			Instance: &v1alpha1.StyrminDeploymentSpec{Kind: tomb}}, Status: v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded}}}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deletedSince(tc.tasks, 6); got != tc.want {
				t.Errorf("deletedSince(…, 6) = %d, want %d", got, tc.want)
			}
		})
	}
}

// commitLocks gives the lockfiles of web at two commits, counting the
// reads: an instance (web@6, namespace dev-web) at the waiting task's,
// and synced's at the last synced commit.
type commitLocks struct {
	t      *testing.T
	synced *resolver.Instance
	reads  map[string]int
}

const (
	lockCommit   = "0123456789abcdef0123456789abcdef01234567"
	syncedCommit = "89abcdef0123456789abcdef0123456789abcdef"
)

// webLock is in as web's lockfile.
func webLock(t *testing.T, in *resolver.Instance) []byte {
	t.Helper()
	out := *in
	out.APIVersion, out.ID = resolver.APIVersion, resolver.ID{Cluster: "local", Environment: "dev", Name: "web"}
	d, err := out.ComputeDigest()
	if err != nil {
		t.Fatal(err)
	}
	out.Digest = d
	data, err := resolver.EncodeLock(&out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (l *commitLocks) LockFile(_ context.Context, ref v1alpha1.LockRef) ([]byte, error) {
	l.reads[ref.Commit]++
	if ref.Path != "locks/local/dev/web.lock.yaml" {
		return nil, &instance.LockNotFoundError{Ref: ref, Err: errors.New("no such file")}
	}
	switch {
	case ref.Commit == lockCommit:
		return webLock(l.t, &resolver.Instance{Kind: resolver.KindInstance, Sequence: 6, Context: &drivers.Context{Deployment: drivers.DeploymentContext{Namespace: "dev-web"}}}), nil
	case ref.Commit == syncedCommit && l.synced != nil:
		return webLock(l.t, l.synced), nil
	}
	return nil, &instance.LockNotFoundError{Ref: ref, Err: errors.New("no such commit")}
}

// TestAPeerDeletedAfterTheAwaitedInstanceHoldsNothingBack pins that a
// task ordered after web@6 goes on once web was deleted after it, web's
// StyrminDeployment gone (the tombstone's end deletes it): web looked
// not created yet then, holding the task back for good (an environment's
// ingress controller never uninstalled). Its tombstone's task says so;
// with its namespace deleted, and its tasks with it, its lock at the last
// synced commit does. A peer that truly is not created yet, or whose
// deletion has not ended, still holds it back. Each lock is read once per
// wait, however often the task looks again.
func TestAPeerDeletedAfterTheAwaitedInstanceHoldsNothingBack(t *testing.T) {
	t.Parallel()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	web := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "web"}
	task := func(seq int64, kind string, phase v1alpha1.TaskPhase) *v1alpha1.StyrminTask {
		return &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Namespace: "dev-web", Name: v1alpha1.TaskName("web", seq), Labels: web.Labels()},
			Spec:   v1alpha1.StyrminTaskSpec{Deployment: web, ToSequence: seq, Target: &v1alpha1.TaskTarget{Kind: kind}},
			Status: v1alpha1.StyrminTaskStatus{Phase: phase}}
	}
	source := types.NamespacedName{Namespace: "styrmin-system", Name: "repo"}
	src := &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: source.Namespace, Name: source.Name},
		Status: v1alpha1.StyrminSourceStatus{LastSyncedCommit: syncedCommit}}
	tomb7 := &resolver.Instance{Kind: resolver.KindTombstone, Sequence: 7}
	web6 := &resolver.Instance{Kind: resolver.KindInstance, Sequence: 6}
	id := resolver.ID{Cluster: "local", Environment: "dev", Name: "web"}
	for _, tc := range []struct {
		name    string
		objects []client.Object
		synced  *resolver.Instance
		done    bool
		// syncedReads: the reads of the lock at the synced commit.
		syncedReads int
	}{
		{"web@6 ran, then web@7 deleted it", []client.Object{src, task(6, v1alpha1.KindInstance, v1alpha1.TaskSucceeded), task(7, v1alpha1.KindTombstone, v1alpha1.TaskSucceeded)}, tomb7, true, 0},
		{"web deleted at 7, its namespace with its tasks", []client.Object{src}, tomb7, true, 1},
		{"web not created yet", []client.Object{src}, web6, false, 1},
		{"web not created yet, the synced commit not in the clone", []client.Object{src}, nil, false, 1},
		{"web deleted at 7, no source to read", nil, tomb7, false, 0},
		{"web@7's deletion not ended", []client.Object{src, task(6, v1alpha1.KindInstance, v1alpha1.TaskSucceeded), task(7, v1alpha1.KindTombstone, v1alpha1.TaskRunning)}, tomb7, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			locks := &commitLocks{t: t, synced: tc.synced, reads: map[string]int{}}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objects...).Build()
			r := &Reconciler{opts: Options{Client: c, Locks: locks, Source: source}}
			var seen peerLocks
			for range 3 {
				got, err := r.peerRan(context.Background(), lockCommit, id, 6, &seen)
				if err != nil {
					t.Fatal(err)
				}
				if got.done != tc.done {
					t.Fatalf("done = %v (%s), want %v", got.done, got.why, tc.done)
				}
				if !got.done && got.why != "its deployment is not created yet" {
					t.Errorf("why = %q", got.why)
				}
				if got.done {
					break
				}
			}
			if seen.ns != "dev-web" || locks.reads[lockCommit] != 1 || locks.reads[syncedCommit] != tc.syncedReads {
				t.Errorf("the peer's namespace %q; lock reads %v, want dev-web, one at the task's commit and %d at the synced one", seen.ns, locks.reads, tc.syncedReads)
			}
		})
	}
}

// tombstoneLocks gives web's lockfile at the waiting task's commit: its
// tombstone at sequence 7, the instance the task runs after.
type tombstoneLocks struct{ t *testing.T }

func (l tombstoneLocks) LockFile(_ context.Context, ref v1alpha1.LockRef) ([]byte, error) {
	if ref.Path != "locks/local/dev/web.lock.yaml" || ref.Commit != lockCommit {
		return nil, &instance.LockNotFoundError{Ref: ref, Err: errors.New("no such file")}
	}
	return webLock(l.t, &resolver.Instance{Kind: resolver.KindTombstone, Sequence: 7}), nil
}

// TestATaskAfterAPeersTombstoneWaitsUntilItIsUninstalled pins the wait of
// a deployment that takes an object from one the lock deletes (it runs
// after the peer's tombstone, resolver.orderMoves): a tombstone was done
// as soon as the StyrminDeployment held it, before its uninstall removed
// the object, and a peer gone after its tombstone looked not created yet
// (its deletion was counted only after the awaited instance). It waits
// while the deletion runs, is held back when it failed, and goes on once
// the tombstone's task succeeded or the StyrminDeployment is gone.
func TestATaskAfterAPeersTombstoneWaitsUntilItIsUninstalled(t *testing.T) {
	t.Parallel()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	web := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "web"}
	deleting := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "dev-web", Name: "dev-web", Labels: web.Labels()},
		Spec: v1alpha1.StyrminDeploymentSpec{Deployment: web, Kind: v1alpha1.KindTombstone, Sequence: 7}}
	tombTask := func(phase v1alpha1.TaskPhase) *v1alpha1.StyrminTask {
		return &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Namespace: "dev-web", Name: v1alpha1.TaskName("web", 7), Labels: web.Labels()},
			Spec:   v1alpha1.StyrminTaskSpec{Deployment: web, ToSequence: 7, Target: &v1alpha1.TaskTarget{Kind: v1alpha1.KindTombstone}},
			Status: v1alpha1.StyrminTaskStatus{Phase: phase, Message: "uninstall timed out"}}
	}
	id := resolver.ID{Cluster: "local", Environment: "dev", Name: "web"}
	for _, tc := range []struct {
		name         string
		objects      []client.Object
		done, failed bool
		why          string
	}{
		{"its deletion runs", []client.Object{deleting, tombTask(v1alpha1.TaskRunning)}, false, false, "it is being deleted"},
		{"its deletion failed", []client.Object{deleting, tombTask(v1alpha1.TaskFailed)}, false, true, "its deletion, task web-7, failed (uninstall timed out)"},
		{"its deletion succeeded", []client.Object{deleting, tombTask(v1alpha1.TaskSucceeded)}, true, false, ""},
		{"its StyrminDeployment is gone, its task with its namespace", nil, true, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objects...).Build()
			r := &Reconciler{opts: Options{Client: c, Locks: tombstoneLocks{t}}}
			var seen peerLocks
			got, err := r.peerRan(context.Background(), lockCommit, id, 7, &seen)
			if err != nil {
				t.Fatal(err)
			}
			if got.done != tc.done || got.failed != tc.failed || (tc.why != "" && !strings.HasPrefix(got.why, tc.why)) {
				t.Fatalf("done %v, failed %v (%q); want %v, %v (%q)", got.done, got.failed, got.why, tc.done, tc.failed, tc.why)
			}
		})
	}
	// Deleted after an instance it awaits, as before: done at once.
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(deleting, tombTask(v1alpha1.TaskRunning)).Build()
	r := &Reconciler{opts: Options{Client: c, Locks: tombstoneLocks{t}}}
	if got, err := r.peerRan(context.Background(), lockCommit, id, 6, &peerLocks{}); err != nil || !got.done {
		t.Fatalf("a task after web@6, web being deleted at 7: done %v (%q), %v; want done", got.done, got.why, err)
	}
}
