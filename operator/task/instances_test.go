package task

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// countingLocks gives each task's lock a fresh instance of its
// deployment and counts the reads.
type countingLocks struct{ reads map[v1alpha1.LockRef]int }

func (c *countingLocks) Lock(_ context.Context, ref v1alpha1.LockRef) (*resolver.Instance, error) {
	c.reads[ref]++
	return &resolver.Instance{ID: resolver.ID{Cluster: "c", Environment: "e", Name: ref.Path}, Sequence: 1}, nil
}

var _ instance.LockSource = (*countingLocks)(nil)

// TestTaskInstancesAreReadOnceUpToTheBoundThenAtEachReconcile pins the
// bound of the instances the task controller keeps for unfinished tasks:
// the first maxCachedInstances tasks read their lock once however often
// they reconcile, the tasks past the bound read it at each reconcile (and
// get the same instance), and a kept task keeps its entry.
func TestTaskInstancesAreReadOnceUpToTheBoundThenAtEachReconcile(t *testing.T) {
	locks := &countingLocks{reads: map[v1alpha1.LockRef]int{}}
	r := &Reconciler{opts: Options{Locks: locks}, instances: map[types.NamespacedName]lockedInstance{}}
	tasks := make([]*v1alpha1.StyrminTask, maxCachedInstances+5)
	for i := range tasks {
		name := fmt.Sprintf("d%d", i)
		tasks[i] = &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: name + "-1", UID: types.UID(name)},
			Spec: v1alpha1.StyrminTaskSpec{
				Deployment: v1alpha1.DeploymentID{Cluster: "c", Environment: "e", Name: name},
				Namespace:  name, ToSequence: 1,
				Lock: v1alpha1.LockRef{Commit: "abc", Path: name},
			},
		}
	}
	const reconciles = 3
	for range reconciles {
		for _, task := range tasks {
			in, _, err := r.instance(context.Background(), task)
			if err != nil {
				t.Fatal(err)
			}
			if in.ID.Name != task.Spec.Deployment.Name {
				t.Fatalf("task %s got the instance of %s", task.Name, in.ID.Name)
			}
		}
	}
	if len(r.instances) != maxCachedInstances {
		t.Errorf("%d instances kept; want %d", len(r.instances), maxCachedInstances)
	}
	for i, task := range tasks {
		want := 1
		if i >= maxCachedInstances {
			want = reconciles
		}
		if got := locks.reads[task.Spec.Lock]; got != want {
			t.Errorf("task %d read its lock %d times in %d reconciles; want %d", i, got, reconciles, want)
		}
	}
}
