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

// TestAStatefulSetOnDeleteIsReadyOnlyOnceItsPodsRunTheCurrentTemplate: a
// StatefulSet of updateStrategy OnDelete takes a change of its template
// into a pod only once the pod is deleted. It was ready at once: the
// deployment Ready "sequence N runs", the task's waitReady and the
// commit green, while every pod ran the template before. It is not
// ready, saying why and what updates it, until each pod runs the current
// template (the StatefulSet controller's updated count, on a control
// plane that runs it).
func TestAStatefulSetOnDeleteIsReadyOnlyOnceItsPodsRunTheCurrentTemplate(t *testing.T) {
	api := workloadWorld(t)
	ctx := context.Background()
	s, ref := dbStatefulSet(t, api, 2, appsv1.OnDeleteStatefulSetStrategyType)
	until := statefulSetUntil(t, api, s, ref)
	until("the first rollout ready", func(ws v1alpha1.WorkloadStatus, _ *appsv1.StatefulSet) bool { return ws.Ready })

	// A change of the template: the controller observes it, its pods stay.
	if err := api.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"db","image":"db:2"}]}}}}`))); err != nil {
		t.Fatal(err)
	}
	observed := func(_ v1alpha1.WorkloadStatus, live *appsv1.StatefulSet) bool {
		return live.Status.ObservedGeneration >= live.Generation && live.Status.UpdateRevision != live.Status.CurrentRevision
	}
	ws := until("the change observed", observed)
	if ws.Ready || !strings.Contains(ws.Message, "0 of 2 replicas updated") || !strings.Contains(ws.Message, "OnDelete") {
		t.Fatalf("with every pod on the template before the change: %+v; want not ready, 0 of 2 updated, naming OnDelete", ws)
	}

	// One pod deleted: made again from the current template; the other
	// still runs the old one.
	if err := api.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db-1"}}); err != nil {
		t.Fatal(err)
	}
	ws = until("one pod updated", func(_ v1alpha1.WorkloadStatus, live *appsv1.StatefulSet) bool {
		return live.Status.UpdatedReplicas == 1 && live.Status.ReadyReplicas == 2
	})
	if ws.Ready || !strings.Contains(ws.Message, "1 of 2 replicas updated") {
		t.Fatalf("with one pod on the template before the change: %+v; want not ready, 1 of 2 updated", ws)
	}
	if err := api.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db-0"}}); err != nil {
		t.Fatal(err)
	}
	until("both pods updated and ready", func(ws v1alpha1.WorkloadStatus, _ *appsv1.StatefulSet) bool { return ws.Ready })
}
