package release

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// ReplicasHandoverManager is the field manager that holds a workload's
// replicas at their live value once a revision stops setting them (see
// handOverReplicas); an autoscaler, or whoever scales it next, takes
// them from it. The health check knows it as Styrmin's (a workload
// handed over at 0 is not scaled to 0 outside Styrmin).
const ReplicasHandoverManager = v1alpha1.ReplicasHandoverManager

// handOverReplicas keeps the live replicas of each scalable workload the
// release created whose new revision no longer sets spec.replicas where a
// revision before (before: their objects) did, and whose replicas
// Styrmin's manager still holds: they are applied at their live value by
// ReplicasHandoverManager first, as the Kubernetes documentation
// describes the handover of replicas to an autoscaler. Applied without
// them by the sole manager of the field, the apply removed it and the API
// server defaulted it to 1: a chart that drops replicas for its new
// autoscaler cut a workload of 10 pods to 1 until the autoscaler scaled it
// out again. Costs a GET and an apply per such workload, only in the
// revision that drops them; a workload whose replicas another manager
// already took (an autoscaler scaled it) keeps them as it is.
func (d *releaseObjects) handOverReplicas(ctx context.Context, objs, before []*desiredObject, created map[string]bool) error {
	had := map[string]bool{}
	for _, o := range before {
		if setsReplicas(o.data) {
			had[objectKey(o.ref)] = true
		}
	}
	for _, o := range objs {
		key := objectKey(o.ref)
		if !created[key] || !had[key] || !drivers.CanScale(o.ref.Kind) || setsReplicas(o.data) {
			continue
		}
		if err := d.handOverReplicasOf(ctx, o); err != nil {
			return fmt.Errorf("keep the live replicas of %s, which the revision no longer sets: %w", o.ref, err)
		}
	}
	return nil
}

// handOverReplicasOf applies the live replicas of o with
// ReplicasHandoverManager, when Styrmin's manager holds them and nobody
// scaled o since they were read.
func (d *releaseObjects) handOverReplicasOf(ctx context.Context, o *desiredObject) error {
	live, err := o.resource.Get(ctx, o.ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	held, err := holdsReplicas(ownedFields(live))
	if err != nil || !held {
		return err
	}
	n, found, err := unstructured.NestedInt64(live.Object, "spec", "replicas")
	if err != nil || !found {
		return err
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": o.ref.APIVersion, "kind": o.ref.Kind,
		"metadata": map[string]any{"name": o.ref.Name, "namespace": live.GetNamespace()},
		"spec":     map[string]any{"replicas": n},
	})
	if err != nil {
		return err
	}
	// Not forced: the value is the live one, shared with Styrmin's
	// manager without a conflict. A conflict is a scale between the read
	// and this apply (an autoscaler's, through the scale subresource):
	// whoever moved the replicas holds them now, and the apply after
	// leaves them to it. Forced, the handover took them back at the
	// count read: 12 pods cut to 10.
	force := false
	_, err = o.resource.Patch(ctx, o.ref.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: ReplicasHandoverManager, Force: &force})
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// setsReplicas reports whether an object's apply body (JSON) sets
// spec.replicas.
func setsReplicas(data []byte) bool {
	var o struct {
		Spec struct {
			Replicas json.RawMessage `json:"replicas"`
		} `json:"spec"`
	}
	return json.Unmarshal(data, &o) == nil && len(o.Spec.Replicas) > 0 && string(o.Spec.Replicas) != "null"
}

// stoppedAtZero is objs with the scalable workloads of the stopped
// components (Request.Stopped) at zero replicas, where their chart sets
// them; objs itself is kept as the revision's desired objects, the
// chart's count in them: the task's startComponents scales the workloads
// to it, and the drift check then finds them at the release's value
// (taken by the actions' field manager, as after any start). A chart
// that leaves replicas out leaves them as they are live (at zero).
// objs is returned as it is when nothing is stopped.
func stoppedAtZero(objs []*desiredObject, stopped []string) ([]*desiredObject, error) {
	if len(stopped) == 0 {
		return objs, nil
	}
	out := slices.Clone(objs)
	for i, o := range objs {
		if !slices.Contains(stopped, o.ref.Component) || !drivers.CanScale(o.ref.Kind) || !setsReplicas(o.data) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(o.data, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", o.ref, err)
		}
		if err := unstructured.SetNestedField(m, int64(0), "spec", "replicas"); err != nil {
			return nil, fmt.Errorf("%s: %w", o.ref, err)
		}
		data, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.ref, err)
		}
		c := *o
		c.data = data
		out[i] = &c
	}
	return out, nil
}
