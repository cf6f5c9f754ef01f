package testcluster_test

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/testcluster"
)

// testStatefulSetGetsVolumes pins the storage stand-in: a StatefulSet with a
// volume claim template of the default class gets its claim bound and its
// pod Ready.
func testStatefulSetGetsVolumes(t *testing.T, cl client.Client) {
	ctx := context.Background()
	createNamespace(t, cl, "storage")
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "storage", Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "db", Image: "postgres:16",
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr.To(testcluster.StorageClass),
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("1Gi"),
					}},
				},
			}},
		},
	}
	if err := cl.Create(ctx, sts); err != nil {
		t.Fatal(err)
	}
	eventually(t, "claim data-db-0 Bound and StatefulSet db ready", func(ctx context.Context) (bool, string) {
		var pvc corev1.PersistentVolumeClaim
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "storage", Name: "data-db-0"}, &pvc); err != nil {
			return false, err.Error()
		}
		var got appsv1.StatefulSet
		if err := cl.Get(ctx, client.ObjectKeyFromObject(sts), &got); err != nil {
			return false, err.Error()
		}
		return pvc.Status.Phase == corev1.ClaimBound && got.Status.ReadyReplicas == 1,
			fmt.Sprintf("claim %s, %d ready replicas", pvc.Status.Phase, got.Status.ReadyReplicas)
	})
}
