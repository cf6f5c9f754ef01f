package deployment

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/internal/outcome"
	"github.com/styrmin/styrmin/operator/release"
)

// HostIndex is the cache's index of Ingresses by the hosts they claim
// (drivers.HostClaim.IndexKeys): an apply finds the Ingresses its own
// would meet in the cache, with no request to the API server.
const HostIndex = "styrmin.io/ingress-host"

// releasedHostRetry is how soon an apply waiting for a host that a
// deployment being deleted holds looks again: its uninstall frees it.
const releasedHostRetry = 10 * time.Second

// ingressClaims are the host claims of a live Ingress, as IngressHosts
// reads a rendered one.
func ingressClaims(ing *networkingv1.Ingress) []drivers.HostClaim {
	class := ing.Annotations["kubernetes.io/ingress.class"]
	if ing.Spec.IngressClassName != nil {
		class = *ing.Spec.IngressClassName
	}
	var out []drivers.HostClaim
	for _, r := range ing.Spec.Rules {
		out = append(out, drivers.HostClaim{Class: class, Host: strings.ToLower(r.Host)})
	}
	if ing.Spec.DefaultBackend != nil {
		out = append(out, drivers.HostClaim{Class: class})
	}
	return out
}

// IndexHosts is the index function of HostIndex.
func IndexHosts(o client.Object) []string {
	ing, ok := o.(*networkingv1.Ingress)
	if !ok {
		return nil
	}
	var keys []string
	for _, c := range ingressClaims(ing) {
		keys = append(keys, c.IndexKeys()...)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// TrimIngress is the cache's transform for Ingresses: only what the host
// check reads (the release annotations, the class, the hosts), so the
// cache of a cluster's Ingresses stays small.
func TrimIngress(o any) (any, error) {
	ing, ok := o.(*networkingv1.Ingress)
	if !ok {
		return o, nil
	}
	keep := map[string]string{}
	for _, k := range []string{release.ReleaseNameAnnotation, release.ReleaseNamespaceAnnotation, "kubernetes.io/ingress.class"} {
		if v, ok := ing.Annotations[k]; ok {
			keep[k] = v
		}
	}
	out := &networkingv1.Ingress{TypeMeta: ing.TypeMeta}
	out.Name, out.Namespace, out.UID, out.ResourceVersion = ing.Name, ing.Namespace, ing.UID, ing.ResourceVersion
	out.Labels, out.Annotations = ing.Labels, keep
	out.Spec.IngressClassName = ing.Spec.IngressClassName
	if ing.Spec.DefaultBackend != nil {
		out.Spec.DefaultBackend = &networkingv1.IngressBackend{}
	}
	for _, r := range ing.Spec.Rules {
		out.Spec.Rules = append(out.Spec.Rules, networkingv1.IngressRule{Host: r.Host})
	}
	return out, nil
}

// checkHosts refuses objects whose Ingresses claim a host an Ingress of
// another StyrminDeployment holds on the same class (read from the
// cache): applied, the ingress controller would merge the two and split
// or take the other's traffic, and both would read Ready. It stalls
// (HostClaimed, naming the other deployment and its Ingress) until git
// changes one of them; while the other is being deleted it waits for
// its uninstall instead. Ingresses of no StyrminDeployment (made by hand,
// or by another tool) are not looked at.
func (r *Reconciler) checkHosts(ctx context.Context, sd *v1alpha1.StyrminDeployment, objects []drivers.Object) error {
	for _, o := range objects {
		claims, err := drivers.IngressHosts(o)
		if err != nil {
			return outcome.Stalled(v1alpha1.ReasonRenderFailed, err)
		}
		for _, c := range claims {
			if err := r.checkHost(ctx, sd, o, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkHost is checkHosts for one claim c of Ingress o.
func (r *Reconciler) checkHost(ctx context.Context, sd *v1alpha1.StyrminDeployment, o drivers.Object, c drivers.HostClaim) error {
	for _, key := range c.LookupKeys() {
		var list networkingv1.IngressList
		if err := r.client.List(ctx, &list, client.MatchingFields{HostIndex: key}); err != nil {
			return outcome.Retryable(v1alpha1.ReasonApplyFailed, fmt.Errorf("list the Ingresses claiming %s: %w", c, err))
		}
		for i := range list.Items {
			if err := r.heldElsewhere(ctx, sd, o, c, &list.Items[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// heldElsewhere is the error of claim c of Ingress o when the live
// Ingress ing holds a host c overlaps for another StyrminDeployment; nil
// when ing is this release's, or no StyrminDeployment's.
func (r *Reconciler) heldElsewhere(ctx context.Context, sd *v1alpha1.StyrminDeployment, o drivers.Object, c drivers.HostClaim, ing *networkingv1.Ingress) error {
	ns := ing.Annotations[release.ReleaseNamespaceAnnotation]
	if ns == "" || ns == sd.Namespace {
		return nil
	}
	var held *drivers.HostClaim
	for _, h := range ingressClaims(ing) {
		if h.Overlaps(c) {
			held = &h
			break
		}
	}
	if held == nil {
		return nil
	}
	var other v1alpha1.StyrminDeployment
	err := r.client.Get(ctx, instance.Key(ns), &other)
	if apierrors.IsNotFound(err) {
		return nil // a Helm release of no deployment of Styrmin's
	}
	if err != nil {
		return outcome.Retryable(v1alpha1.ReasonApplyFailed, fmt.Errorf("read the StyrminDeployment of namespace %s: %w", ns, err))
	}
	what := fmt.Sprintf("Ingress %s claims host %s, which Ingress %s/%s of deployment %s (namespace %s) holds",
		o.Name, c, ing.Namespace, ing.Name, other.Spec.Deployment, ns)
	if held.Host != c.Host {
		what = fmt.Sprintf("Ingress %s claims host %s, which Ingress %s/%s of deployment %s (namespace %s) holds as %s",
			o.Name, c, ing.Namespace, ing.Name, other.Spec.Deployment, ns, held.Host)
	}
	if !other.DeletionTimestamp.IsZero() || other.Spec.Tombstone() {
		return outcome.RetryableAfter(v1alpha1.ReasonHostClaimed, releasedHostRetry,
			fmt.Errorf("%s; waiting for that deployment, being deleted, to release it", what))
	}
	return outcome.Stalled(v1alpha1.ReasonHostClaimed, fmt.Errorf(
		"%s: applied, the ingress controller would split or take its traffic; nothing was applied: give one of the two another host in git (a host belongs to one deployment per ingress class)", what))
}
