package health

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

// workloadWorld is an API server with workload controllers, a namespace
// app and a client of it.
func workloadWorld(t *testing.T) client.Client {
	t.Helper()
	c := testcluster.StartT(t, testcluster.Options{Workloads: true})
	api, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	return api
}

// dbStatefulSet creates StatefulSet app/db (image db:1) of replicas and
// update strategy ("" the API server's default), and returns it with its
// reference as component db.
func dbStatefulSet(t *testing.T, api client.Client, replicas int32, strategy appsv1.StatefulSetUpdateStrategyType) (*appsv1.StatefulSet, v1alpha1.ObjectRef) {
	t.Helper()
	labels := map[string]string{"app": "db"}
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:       &replicas,
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: strategy},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "db:1"}}},
			},
		},
	}
	if err := api.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s, v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: "app", Name: "db", Component: "db"}
}

// statefulSetUntil polls the workload ref of StatefulSet s until cond
// holds of its status, for at most 90 s. The StatefulSet is read before
// the workload's status, so the status judged is never older than the
// copy cond looks at.
func statefulSetUntil(t *testing.T, api client.Client, s *appsv1.StatefulSet, ref v1alpha1.ObjectRef) func(what string, cond func(v1alpha1.WorkloadStatus, *appsv1.StatefulSet) bool) v1alpha1.WorkloadStatus {
	return func(what string, cond func(v1alpha1.WorkloadStatus, *appsv1.StatefulSet) bool) v1alpha1.WorkloadStatus {
		t.Helper()
		ctx := context.Background()
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
}
