package release

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// Inventory lists the objects a release applies, sorted; a namespaced
// object without a namespace is in the release's.
func Inventory(objects []drivers.Object, namespace string) []v1alpha1.ObjectRef {
	out := make([]v1alpha1.ObjectRef, 0, len(objects))
	for _, o := range objects {
		ns := o.Namespace
		if ns == "" && !drivers.IsClusterScoped(o.Kind) {
			ns = namespace
		}
		out = append(out, v1alpha1.ObjectRef{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: ns, Name: o.Name, Component: o.Component})
	}
	slices.SortFunc(out, func(a, b v1alpha1.ObjectRef) int { return strings.Compare(objectKey(a), objectKey(b)) })
	return out
}

// Name returns the release's name.
func (r *Revision) Name() string { return r.name }

// Number returns the revision's number (Helm's version).
func (r *Revision) Number() int { return r.number }

// Status is the revision as a StyrminDeployment's status records it,
// applied at now.
func (r *Revision) Status(now metav1.Time) v1alpha1.ReleaseStatus {
	return v1alpha1.ReleaseStatus{
		Name:            r.name,
		Revision:        r.number,
		Chart:           r.chart,
		Status:          r.status,
		ManifestDigest:  r.manifestDigest,
		LastAppliedTime: &now,
	}
}

// truncate bounds a text recorded in a release (Helm's description).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
