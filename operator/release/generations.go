package release

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// Generations are the metadata.generation of the workloads (Deployments,
// StatefulSets, DaemonSets) that the API server answered the agent's last
// writes of them with: an apply, or a drift correction. A cache showing a
// workload at an older generation has not seen that write yet, so its
// rollout status is about the objects before it: the health check reads
// the API server then (health.Written).
type Generations map[string]int64

// Of is the generation the agent's last write of ref was answered with,
// 0 when it wrote none (or before a restart).
func (g Generations) Of(ref v1alpha1.ObjectRef) int64 {
	return g[objectKey(ref)]
}

// note records the generation of an applied object, when it is a
// workload.
func (g Generations) note(ref v1alpha1.ObjectRef, applied *unstructured.Unstructured) {
	if applied == nil || ref.Group() != "apps" {
		return
	}
	switch ref.Kind {
	case "Deployment", "StatefulSet", "DaemonSet":
		g[objectKey(ref)] = applied.GetGeneration()
	}
}
