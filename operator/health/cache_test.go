package health

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

func TestTrimWorkloadKeepsWhatReadinessReadsAndDropsThePodTemplate(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.25.0"}}},
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	meta := metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 3, Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "styrmin"}}}
	status := appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}}
	d := &appsv1.Deployment{ObjectMeta: *meta.DeepCopy(), Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: sel, Template: tmpl}, Status: status}
	s := &appsv1.StatefulSet{ObjectMeta: *meta.DeepCopy(), Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Selector: sel, Template: tmpl,
		UpdateStrategy:       appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
		VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}}}}
	ds := &appsv1.DaemonSet{ObjectMeta: *meta.DeepCopy(), Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tmpl}}

	for _, obj := range []any{d, s, cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: ds}} {
		if _, err := TrimWorkload(obj); err != nil {
			t.Fatal(err)
		}
	}
	if len(d.Spec.Template.Spec.Containers) != 0 || len(s.Spec.Template.Spec.Containers) != 0 || len(ds.Spec.Template.Spec.Containers) != 0 ||
		s.Spec.VolumeClaimTemplates != nil {
		t.Error("a pod template (or a claim template) is still cached")
	}
	for _, m := range []metav1.ObjectMeta{d.ObjectMeta, s.ObjectMeta, ds.ObjectMeta} {
		if m.ManagedFields != nil {
			t.Error("managedFields are still cached")
		}
		if m.Generation != 3 || m.Labels["a"] != "b" {
			t.Errorf("metadata changed: %+v", m)
		}
	}
	if *d.Spec.Replicas != 2 || d.Spec.Selector != sel || d.Status.AvailableReplicas != 2 || len(d.Status.Conditions) != 1 {
		t.Errorf("the Deployment lost what readiness reads: %+v", d)
	}
	if s.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || s.Spec.Selector != sel {
		t.Errorf("the StatefulSet lost what readiness reads: %+v", s.Spec)
	}
	// Readiness reads the same from the trimmed object.
	var ws v1alpha1.WorkloadStatus
	deploymentReady(d, &ws)
	if !ws.Ready {
		t.Errorf("the trimmed, rolled-out Deployment does not read as ready: %s", ws.Message)
	}
}
