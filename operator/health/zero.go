package health

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// zeroed judges a Deployment or StatefulSet that reads ready at 0 of 0
// replicas (ws), reading it from live (the API server: the cache keeps no
// managedFields). Its replicas are the chart's when the agent's apply
// holds them (a chart that asks for 0), and the agent's own when a
// driver's stop step set them (a task runs, or a failed one holds them:
// the deployment says so), and the release's when it handed them over at
// their live value (a revision that stopped setting them). Set by anyone else (kubectl scale), nothing
// serves while the chart asks for more: not ready until the drift check
// puts the chart's replicas back. With a HorizontalPodAutoscaler scaling
// the workload, the autoscaler leaves a workload at 0 alone (the HPA
// controller disables scaling), and the drift check leaves its replicas
// to it: nothing puts them back, so the message says what to do. An
// autoscaler that may scale to zero (minReplicas 0, or KEDA's for a
// ScaledObject) idles it there: ready.
//
// lasting is false for a verdict that must not be remembered (the
// autoscalers could not be read).
func zeroed(ctx context.Context, live client.Reader, r v1alpha1.ObjectRef, ws v1alpha1.WorkloadStatus) (_ v1alpha1.WorkloadStatus, lasting bool, _ error) {
	var obj client.Object
	switch r.Kind {
	case "Deployment":
		obj = &appsv1.Deployment{}
	case "StatefulSet":
		obj = &appsv1.StatefulSet{}
	default:
		return ws, true, nil
	}
	key := client.ObjectKey{Namespace: r.Namespace, Name: r.Name}
	if err := live.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return ws, true, nil
		}
		return ws, false, fmt.Errorf("read %s: %w", r, err)
	}
	if replicasOf(obj) != 0 {
		// Scaled up since the cache's copy: its next event judges it.
		return ws, true, nil
	}
	by := replicasManagers(obj.GetManagedFields())
	if slices.ContainsFunc(by, isStyrmins) {
		return ws, true, nil
	}
	who := "outside Styrmin"
	if len(by) > 0 {
		who = "outside Styrmin (by " + strings.Join(by, ", ") + ")"
	}
	hpa, err := autoscalerOf(ctx, live, r)
	if apierrors.IsForbidden(err) {
		ws.Message = fmt.Sprintf("scaled to 0 %s: nothing serves (whether an autoscaler scales it cannot be read: %v)", who, err)
		return ws, false, nil
	}
	if err != nil {
		return ws, false, err
	}
	switch {
	case hpa == nil:
		ws.Message = fmt.Sprintf("scaled to 0 %s: nothing serves until the drift check puts the chart's replicas back "+
			"(a chart that sets none leaves them: scale it up)", who)
	case idlesAtZero(hpa):
		return ws, true, nil
	default:
		want := int32(1)
		if hpa.Spec.MinReplicas != nil {
			want = *hpa.Spec.MinReplicas
		}
		ws.Message = fmt.Sprintf("scaled to 0 %s while HorizontalPodAutoscaler %s scales it: an autoscaler does not scale a workload at 0 "+
			"(its scaling is disabled), so nothing serves and nothing puts it back; scale it up (kubectl scale -n %s %s/%s --replicas=%d)",
			who, hpa.Name, r.Namespace, strings.ToLower(r.Kind), r.Name, want)
	}
	ws.Ready = false
	return ws, true, nil
}

// replicasOf is a Deployment's or StatefulSet's spec.replicas.
func replicasOf(obj client.Object) int32 {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return ReplicasOf(o.Spec.Replicas)
	case *appsv1.StatefulSet:
		return ReplicasOf(o.Spec.Replicas)
	}
	return 1
}

// isStyrmins reports whether a field manager is one of the agent's:
// its apply's (the chart's count), its stop step's, or the replicas it
// handed over at their live value when a revision stopped setting them.
func isStyrmins(manager string) bool {
	switch manager {
	case v1alpha1.FieldManager, v1alpha1.ActionsFieldManager, v1alpha1.ReplicasHandoverManager:
		return true
	}
	return false
}

// replicasManagers are the field managers that hold a workload's
// spec.replicas, sorted.
func replicasManagers(fields []metav1.ManagedFieldsEntry) []string {
	var out []string
	for _, f := range fields {
		if f.FieldsV1 == nil {
			continue
		}
		var set struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if json.Unmarshal(f.FieldsV1.Raw, &set) != nil {
			continue
		}
		if _, ok := set.Spec["f:replicas"]; ok && !slices.Contains(out, f.Manager) {
			out = append(out, f.Manager)
		}
	}
	slices.Sort(out)
	return out
}

// autoscalerOf is the HorizontalPodAutoscaler of r's namespace that
// scales r (nil: none).
func autoscalerOf(ctx context.Context, live client.Reader, r v1alpha1.ObjectRef) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	var list autoscalingv2.HorizontalPodAutoscalerList
	if err := live.List(ctx, &list, client.InNamespace(r.Namespace)); err != nil {
		if apierrors.IsNotFound(err) {
			// The cluster serves no autoscalers.
			return nil, nil
		}
		return nil, fmt.Errorf("list the autoscalers of %s: %w", r, err)
	}
	group, _, _ := strings.Cut(r.APIVersion, "/")
	for i := range list.Items {
		h := &list.Items[i]
		ref := h.Spec.ScaleTargetRef
		refGroup, _, _ := strings.Cut(ref.APIVersion, "/")
		if ref.Kind == r.Kind && ref.Name == r.Name && refGroup == group {
			return h, nil
		}
	}
	return nil, nil
}

// idlesAtZero reports whether an autoscaler may leave its workload at 0:
// one of minReplicas 0 (the HPAScaleToZero feature), or KEDA's for a
// ScaledObject (KEDA scales to 0 and back itself).
func idlesAtZero(h *autoscalingv2.HorizontalPodAutoscaler) bool {
	if h.Spec.MinReplicas != nil && *h.Spec.MinReplicas == 0 {
		return true
	}
	for _, o := range h.OwnerReferences {
		if o.Kind == "ScaledObject" && strings.HasPrefix(o.APIVersion, "keda.sh/") {
			return true
		}
	}
	return false
}

// Zeroes remembers the verdicts zeroed gave one deployment's workloads
// at 0 replicas, by UID, each standing while the workload's
// resourceVersion (the cache's copy) is unchanged: who holds its replicas
// changes only with the workload. A workload that idles at 0 (a chart's
// 0, an autoscaler's minReplicas 0, a failed task's stop hold) was read
// from the API server, with its namespace's autoscalers, on every health
// check: at thousands of deployments, a steady load on the API server
// for nothing. An autoscaler made or changed later, its workload left
// as it is, is seen with the workload's next change. It keeps only the
// workloads the last check judged at 0. The zero value is ready to use;
// a nil *Zeroes remembers nothing.
type Zeroes struct {
	mu    sync.Mutex
	byUID map[types.UID]zeroVerdict
}

// zeroVerdict is what zeroed said of a workload at resourceVersion.
type zeroVerdict struct {
	resourceVersion string
	notReady        bool
	message         string
}

// judge is zeroed, remembered in z by the cached copy's uid and
// resourceVersion; seen collects the verdicts this check gave, which
// keep (at its end) leaves as the only ones z holds.
func (z *Zeroes) judge(ctx context.Context, live client.Reader, r v1alpha1.ObjectRef, ws v1alpha1.WorkloadStatus,
	cached metav1.Object, seen map[types.UID]zeroVerdict) (v1alpha1.WorkloadStatus, error) {
	if z == nil || cached == nil || cached.GetUID() == "" || cached.GetResourceVersion() == "" {
		ws, _, err := zeroed(ctx, live, r, ws)
		return ws, err
	}
	uid, rv := cached.GetUID(), cached.GetResourceVersion()
	z.mu.Lock()
	v, ok := z.byUID[uid]
	z.mu.Unlock()
	if !ok || v.resourceVersion != rv {
		judged, lasting, err := zeroed(ctx, live, r, ws)
		if err != nil || !lasting {
			return judged, err
		}
		v = zeroVerdict{resourceVersion: rv, notReady: !judged.Ready, message: judged.Message}
	}
	seen[uid] = v
	if v.notReady {
		ws.Ready, ws.Message = false, v.message
	}
	return ws, nil
}

// keep leaves in z only the verdicts of seen.
func (z *Zeroes) keep(seen map[types.UID]zeroVerdict) {
	if z == nil {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.byUID = seen
}
