package health

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// TrimWorkload is the cache transform of the workloads the agent watches
// (Deployments, StatefulSets, DaemonSets of its releases): it keeps what
// readiness, kstatus and the actions read (metadata, replicas, selector,
// update strategy, status) and drops the pod template and managedFields,
// most of a workload's size. At thousands of deployments the cached
// workloads were a large part of the agent's heap. The actions read a
// pod template from the rendered release, never from the cache; a
// trimmed object is never written back (replicas are patched).
func TrimWorkload(obj any) (any, error) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		trimmed, err := TrimWorkload(t.Obj)
		return cache.DeletedFinalStateUnknown{Key: t.Key, Obj: trimmed}, err
	}
	switch w := obj.(type) {
	case *appsv1.Deployment:
		w.ManagedFields = nil
		w.Spec.Template = corev1.PodTemplateSpec{}
	case *appsv1.StatefulSet:
		w.ManagedFields = nil
		w.Spec.Template = corev1.PodTemplateSpec{}
		// Claims' templates are read from the rendered release too.
		w.Spec.VolumeClaimTemplates = nil
	case *appsv1.DaemonSet:
		w.ManagedFields = nil
		w.Spec.Template = corev1.PodTemplateSpec{}
	}
	return obj, nil
}
