package health

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
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
	c := testcluster.StartT(t, testcluster.Options{Workloads: true})
	api, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := api.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	labels := map[string]string{"app": "db"}
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:       &two,
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "db:1"}}},
			},
		},
	}
	if err := api.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	ref := v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: "app", Name: "db", Component: "db"}
	// until polls the workload until cond holds of its status. The
	// StatefulSet is read before the workload's status, so the status
	// judged is never older than the copy cond looks at.
	until := func(what string, cond func(v1alpha1.WorkloadStatus, *appsv1.StatefulSet) bool) v1alpha1.WorkloadStatus {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			var live appsv1.StatefulSet
			if err := api.Get(ctx, client.ObjectKeyFromObject(s), &live); err != nil {
				t.Fatal(err)
			}
			ws, err := Workload(ctx, api, ref, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if cond(ws, &live) {
				return ws
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 90 s; last %+v, status %+v", what, ws, live.Status)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
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
