package testcluster

import (
	"context"
	"fmt"
	"path"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// StorageClass is the default storage class of a cluster with workloads.
// Fake nodes have no disks, so a small provisioner in this process answers
// each claim of this class with a hostPath volume bound to it (like kwok
// stands in for kubelets); StatefulSets with volume claim templates then
// run as on a real cluster.
const StorageClass = "standard"

// storageProvisioner is the provisioner name of StorageClass.
const storageProvisioner = "testcluster.styrmin.io/hostpath"

// defaultVolumeRoot holds the provisioned hostPath volumes; no fake node
// ever makes these folders. With a real node they are in its folder.
const defaultVolumeRoot = "/var/lib/testcluster"

// startStorage creates the default storage class and provisions volumes
// for its claims until ctx ends.
func (c *Cluster) startStorage(ctx context.Context, volumeRoot string) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("testcluster: storage: %w", err)
	}
	immediate := storagev1.VolumeBindingImmediate
	reclaim := corev1.PersistentVolumeReclaimDelete
	_, err = cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClass,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       storageProvisioner,
		VolumeBindingMode: &immediate,
		ReclaimPolicy:     &reclaim,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testcluster: storage class: %w", err)
	}
	go provisionLoop(ctx, cs, volumeRoot)
	return nil
}

// provisionLoop polls for pending claims of StorageClass; a poll is one
// list call, cheap next to what tests do.
func provisionLoop(ctx context.Context, cs kubernetes.Interface, volumeRoot string) {
	t := time.NewTicker(300 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pvcs, err := cs.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for i := range pvcs.Items {
			pvc := &pvcs.Items[i]
			if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" {
				continue
			}
			if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != StorageClass {
				continue
			}
			_ = provision(ctx, cs, pvc, volumeRoot)
		}
	}
}

// provision creates a hostPath volume pre-bound to pvc; the persistent
// volume binder controller completes the binding.
func provision(ctx context.Context, cs kubernetes.Interface, pvc *corev1.PersistentVolumeClaim, volumeRoot string) error {
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	modes := pvc.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "pvc-" + string(pvc.UID),
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": storageProvisioner},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   modes,
			StorageClassName:              StorageClass,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path.Join(volumeRoot, string(pvc.UID))}},
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
		},
	}
	_, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
