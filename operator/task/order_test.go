package task

import (
	"context"
	"path"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

func TestReadySinceCountsAPeerReadyFromItsActiveTasksEnd(t *testing.T) {
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

// peerLocks gives the lock of every deployment at any commit: an instance
// in namespace dev-<name>.
type peerLocks struct{ reads int }

func (l *peerLocks) Lock(_ context.Context, ref v1alpha1.LockRef) (*resolver.Instance, error) {
	l.reads++
	name := strings.TrimSuffix(path.Base(ref.Path), ".lock.yaml")
	return &resolver.Instance{Kind: resolver.KindInstance, Context: &drivers.Context{Deployment: drivers.DeploymentContext{Namespace: "dev-" + name}}}, nil
}

// TestAPeerDeletedAfterTheAwaitedInstanceHoldsNothingBack pins that a
// task ordered after web@6 goes on once web was deleted after it: the
// tombstone's end deletes web's StyrminDeployment, and web looked not
// created yet then, holding the task back for good (an environment's
// ingress controller never uninstalled). A peer that truly is not
// created yet, or whose deletion has not ended, still holds it back; the
// peer's lock is read once per wait.
func TestAPeerDeletedAfterTheAwaitedInstanceHoldsNothingBack(t *testing.T) {
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
	id := resolver.ID{Cluster: "local", Environment: "dev", Name: "web"}
	for _, tc := range []struct {
		name  string
		tasks []client.Object
		done  bool
	}{
		{"web@6 ran, then web@7 deleted it", []client.Object{task(6, v1alpha1.KindInstance, v1alpha1.TaskSucceeded), task(7, v1alpha1.KindTombstone, v1alpha1.TaskSucceeded)}, true},
		{"web not created yet", nil, false},
		{"web@7's deletion not ended", []client.Object{task(6, v1alpha1.KindInstance, v1alpha1.TaskSucceeded), task(7, v1alpha1.KindTombstone, v1alpha1.TaskRunning)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			locks := &peerLocks{}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.tasks...).Build()
			r := &Reconciler{opts: Options{Client: c, Locks: locks}}
			ns := ""
			for range 2 {
				got, err := r.peerRan(context.Background(), "0123456789abcdef0123456789abcdef01234567", id, 6, &ns)
				if err != nil {
					t.Fatal(err)
				}
				if got.done != tc.done {
					t.Fatalf("done = %v (%s), want %v", got.done, got.why, tc.done)
				}
				if !got.done && got.why != "its deployment is not created yet" {
					t.Errorf("why = %q", got.why)
				}
			}
			if ns != "dev-web" || locks.reads != 1 {
				t.Errorf("the peer's namespace %q from %d lock reads, want dev-web from one", ns, locks.reads)
			}
		})
	}
}
