package health

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAStatefulSetScalingDownIsReadyOnlyOnceItsExtraPodsAreGone: a
// StatefulSet scaled from 3 to 1 removes its pods one at a time, each
// once the one before is gone, and counts a pod being deleted as a
// replica (and as ready while it runs). It read ready at once: the
// deployment Ready at the new sequence, a task's next step and the
// commit green, while the StatefulSet still ran 3 pods (one held
// terminating by a finalizer here, as a slow shutdown or a node gone
// holds it). It is not ready, saying it scales down, until they are gone.
func TestAStatefulSetScalingDownIsReadyOnlyOnceItsExtraPodsAreGone(t *testing.T) {
	api := workloadWorld(t)
	ctx := context.Background()
	s, ref := dbStatefulSet(t, api, 3, "")
	until := statefulSetUntil(t, api, s, ref)
	until("three replicas ready", func(ws v1alpha1.WorkloadStatus, _ *appsv1.StatefulSet) bool { return ws.Ready && ws.ReadyReplicas == 3 })

	// db-2 shuts down slowly: a finalizer holds it terminating.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db-2"}}
	if err := api.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["styrmin.io/test-shutting-down"]}}`))); err != nil {
		t.Fatal(err)
	}
	if err := api.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))); err != nil {
		t.Fatal(err)
	}
	ws := until("db-2 deleted, still there", func(_ v1alpha1.WorkloadStatus, live *appsv1.StatefulSet) bool {
		if live.Status.ObservedGeneration < live.Generation {
			return false
		}
		var p corev1.Pod
		if err := api.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		return p.DeletionTimestamp != nil
	})
	if ws.Ready || !strings.Contains(ws.Message, "scaling down to 1 replicas: 2 pending termination") {
		t.Fatalf("scaling down with db-2 terminating and db-1 running: %+v; want not ready, scaling down, 2 pending", ws)
	}

	if err := api.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	until("scaled down to one", func(ws v1alpha1.WorkloadStatus, _ *appsv1.StatefulSet) bool { return ws.Ready })
	// Read after the status judged ready: never older than it.
	var live appsv1.StatefulSet
	if err := api.Get(ctx, client.ObjectKeyFromObject(s), &live); err != nil {
		t.Fatal(err)
	}
	if live.Status.Replicas != 1 {
		t.Fatalf("ready at %d replicas, 1 wanted", live.Status.Replicas)
	}
}
