package deployment

import (
	"context"
	"fmt"
	"slices"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
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

// ingressClaims are the host claims of a live Ingress, read as the
// resolver reads a rendered one (drivers.IngressHostsOf), so the lock and
// the agent judge a host alike; nil for one that cannot be converted.
func ingressClaims(ing *networkingv1.Ingress) []drivers.HostClaim {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ing)
	if err != nil {
		return nil
	}
	claims, _ := drivers.IngressHostsOf(obj)
	return claims
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
// check reads (the release annotations, the class, the hosts and paths,
// the TLS hosts and Secret names), so the cache of a cluster's Ingresses
// stays small.
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
	// How each host is served over TLS: the deployments sharing a host
	// must agree on it (drivers.HostClaim.TLSConflicts).
	for _, t := range ing.Spec.TLS {
		out.Spec.TLS = append(out.Spec.TLS, networkingv1.IngressTLS{Hosts: t.Hosts, SecretName: t.SecretName})
	}
	for _, r := range ing.Spec.Rules {
		rule := networkingv1.IngressRule{Host: r.Host}
		if r.HTTP != nil {
			// The paths without their backends: a host's path is what
			// one deployment claims.
			rule.HTTP = &networkingv1.HTTPIngressRuleValue{}
			for _, p := range r.HTTP.Paths {
				rule.HTTP.Paths = append(rule.HTTP.Paths, networkingv1.HTTPIngressPath{Path: p.Path, PathType: p.PathType})
			}
		}
		out.Spec.Rules = append(out.Spec.Rules, rule)
	}
	return out, nil
}

// takeHosts takes the hosts the Ingresses among objects claim for the
// apply of sd: in the agent's table of the hosts applies are taking (two
// workers applying one host for two deployments at the same moment both
// found it free in the cache), then against the cache's Ingresses
// (checkHost). A host an Ingress of another StyrminDeployment holds on
// the same class is refused: applied, the ingress controller would merge
// the two and split or take the other's traffic, and both would read
// Ready. So is another path of such a host served over TLS apart from
// it (heldClaim): the controller serves one certificate per host. It stalls (HostClaimed, naming the other deployment and its
// Ingress) until git changes one of them; while the other is being
// deleted, or another apply takes it, it waits instead. Ingresses of no
// StyrminDeployment (made by hand, or by another tool) are not looked at.
// The claims taken are ended (hostTable.end) when the apply ends.
func (r *Reconciler) takeHosts(ctx context.Context, sd *v1alpha1.StyrminDeployment, objects []drivers.Object) (*pendingHosts, error) {
	claims, err := claimsOf(objects)
	if err != nil {
		return nil, outcome.Stalled(v1alpha1.ReasonRenderFailed, err)
	}
	if len(claims) == 0 {
		// Its earlier claims, if any, go.
		r.hosts.take(sd.Namespace, "", nil, hostMatch{}, r.now())
		return nil, nil
	}
	d, err := r.defaultClass(ctx)
	if err != nil {
		return nil, err
	}
	p, conflict := r.hosts.take(sd.Namespace, sd.Spec.Deployment.String(), claims, r.hostMatch(ctx, d), r.now())
	if conflict != nil {
		return nil, outcome.RetryableAfter(v1alpha1.ReasonHostClaimed, pendingHostRetry, conflict)
	}
	for _, c := range claims {
		h, err := r.checkHost(ctx, sd, c.claim, d)
		if err == nil && h != nil {
			err = h.applyRefusal(c)
		}
		if err != nil {
			r.hosts.end(sd.Namespace, p, false, r.now())
			return nil, err
		}
	}
	return p, nil
}

// claimsOf are the host claims of the Ingresses among objects.
func claimsOf(objects []drivers.Object) ([]ingressClaim, error) {
	var out []ingressClaim
	for _, o := range objects {
		claims, err := drivers.IngressHosts(o)
		if err != nil {
			return nil, err
		}
		for _, c := range claims {
			out = append(out, ingressClaim{ingress: o.Name, claim: c})
		}
	}
	return out, nil
}

// hostMatch is how the table compares claims, and asks the cache whether
// it shows one.
func (r *Reconciler) hostMatch(ctx context.Context, d defaultClass) hostMatch {
	return hostMatch{
		overlap: d.meets,
		shown: func(namespace string, c ingressClaim) bool {
			var ing networkingv1.Ingress
			if err := r.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: c.ingress}, &ing); err != nil {
				return false
			}
			return slices.ContainsFunc(ingressClaims(&ing), func(h drivers.HostClaim) bool { return d.canon(h) == d.canon(c.claim) })
		},
	}
}

// hostHolder is a live Ingress of another StyrminDeployment holding a
// host a claim overlaps.
type hostHolder struct {
	ingress *networkingv1.Ingress
	// held is the Ingress's claim the claim overlaps.
	held drivers.HostClaim
	// deployment is the other StyrminDeployment.
	deployment *v1alpha1.StyrminDeployment
	// tls: held routes another path of the host, served over TLS apart
	// from c (drivers.HostClaim.TLSConflicts).
	tls bool
}

// what says which of its Ingresses' claims c the holder holds.
func (h *hostHolder) what(c ingressClaim) string {
	if h.tls {
		return fmt.Sprintf("Ingress %s serves host %s with %s, which Ingress %s/%s of deployment %s (namespace %s) serves with %s",
			c.ingress, c.claim, c.claim.TLSString(), h.ingress.Namespace, h.ingress.Name, h.deployment.Spec.Deployment, h.deployment.Namespace, h.held.TLSString())
	}
	what := fmt.Sprintf("Ingress %s claims host %s, which Ingress %s/%s of deployment %s (namespace %s) holds",
		c.ingress, c.claim, h.ingress.Namespace, h.ingress.Name, h.deployment.Spec.Deployment, h.deployment.Namespace)
	if h.held.Host != c.claim.Host {
		what += " as " + h.held.Host
	}
	return what
}

// deleting reports whether the holder's deployment is being deleted: its
// uninstall frees the host.
func (h *hostHolder) deleting() bool {
	return !h.deployment.DeletionTimestamp.IsZero() || h.deployment.Spec.Tombstone()
}

// applyRefusal is the error of an apply whose claim c h holds.
func (h *hostHolder) applyRefusal(c ingressClaim) error {
	if h.deleting() {
		return outcome.RetryableAfter(v1alpha1.ReasonHostClaimed, releasedHostRetry,
			fmt.Errorf("%s; waiting for that deployment, being deleted, to release it", h.what(c)))
	}
	if h.tls {
		return outcome.Stalled(v1alpha1.ReasonHostClaimed, fmt.Errorf(
			"%s: applied, the ingress controller would serve one certificate for the host, and one deployment's clients would get the other's, or TLS it did not set up; nothing was applied: name the same TLS Secret for the host in both in git (each namespace holds its copy), or TLS in neither", h.what(c)))
	}
	return outcome.Stalled(v1alpha1.ReasonHostClaimed, fmt.Errorf(
		"%s: applied, the ingress controller would split or take its traffic; nothing was applied: give one of the two another host in git (a host belongs to one deployment per ingress class)", h.what(c)))
}

// checkHost is the live Ingress of another StyrminDeployment that holds
// a host claim c overlaps, read from the cache (nil: none).
func (r *Reconciler) checkHost(ctx context.Context, sd *v1alpha1.StyrminDeployment, c drivers.HostClaim, d defaultClass) (*hostHolder, error) {
	for _, key := range d.lookupKeys(c) {
		var list networkingv1.IngressList
		if err := r.client.List(ctx, &list, client.MatchingFields{HostIndex: key}); err != nil {
			return nil, outcome.Retryable(v1alpha1.ReasonApplyFailed, fmt.Errorf("list the Ingresses claiming %s: %w", c, err))
		}
		for i := range list.Items {
			h, err := r.heldElsewhere(ctx, sd, c, &list.Items[i], d)
			if h != nil || err != nil {
				return h, err
			}
		}
	}
	return nil, nil
}

// heldElsewhere is the holder of claim c when the live Ingress ing holds
// a host c overlaps for another StyrminDeployment; nil when ing is this
// release's, or no StyrminDeployment's.
func (r *Reconciler) heldElsewhere(ctx context.Context, sd *v1alpha1.StyrminDeployment, c drivers.HostClaim, ing *networkingv1.Ingress, d defaultClass) (*hostHolder, error) {
	ns := ing.Annotations[release.ReleaseNamespaceAnnotation]
	if ns == "" || ns == sd.Namespace {
		return nil, nil
	}
	held, tls := heldClaim(ingressClaims(ing), c, d)
	if held == nil {
		return nil, nil
	}
	var other v1alpha1.StyrminDeployment
	err := r.client.Get(ctx, instance.Key(ns), &other)
	if apierrors.IsNotFound(err) {
		return nil, nil // a Helm release of no deployment of Styrmin's
	}
	if err != nil {
		return nil, outcome.Retryable(v1alpha1.ReasonApplyFailed, fmt.Errorf("read the StyrminDeployment of namespace %s: %w", ns, err))
	}
	if tls && other.Spec.Digest != other.Status.AppliedDigest && !other.Spec.Tombstone() {
		// The other has an instance to apply yet: the lock judged the
		// two as they will both be (a Secret changed in both at once),
		// and waiting for each other, neither would apply. Its apply
		// then meets this one's Ingress.
		return nil, nil
	}
	return &hostHolder{ingress: ing, held: *held, deployment: &other, tls: tls}, nil
}

// heldClaim is the claim among live that c overlaps, else the one that
// serves c's host over TLS apart from it (tls); nil when neither is.
func heldClaim(live []drivers.HostClaim, c drivers.HostClaim, d defaultClass) (held *drivers.HostClaim, tls bool) {
	for _, h := range live {
		if d.overlap(h, c) {
			return &h, false
		}
	}
	for _, h := range live {
		if d.canon(h).TLSConflicts(d.canon(c)) {
			return &h, true
		}
	}
	return nil, false
}

// driftRefusal is why a correction leaves out the Ingress whose claim c
// h holds.
func (h *hostHolder) driftRefusal(c ingressClaim) error {
	if h.deleting() {
		return fmt.Errorf("%s: not put back until that deployment, being deleted, releases it", h.what(c))
	}
	if h.tls {
		return fmt.Errorf("%s now: not put back, which would serve one deployment's clients the other's certificate; it is put back once the two agree, or name the same TLS Secret for the host in both in git", h.what(c))
	}
	return fmt.Errorf("%s now: not put back, which would split or take its traffic; it is put back once that deployment gives the host up, or give one of the two another host in git", h.what(c))
}

// leaveHeldHosts splits drifts into those the correction may put back,
// whose Ingress hosts are taken for it in the agent's table (ended with
// hostTable.end once put back), and the Ingresses it leaves out, with
// why: a host another deployment's Ingress holds now, or another apply
// is taking. An Ingress deleted by hand (or its host edited) may have
// let another deployment take its host in between: put back, both would
// claim it, as an apply is refused to.
func (r *Reconciler) leaveHeldHosts(ctx context.Context, sd *v1alpha1.StyrminDeployment, drifts []release.Drift) ([]release.Drift, []release.RefusedCorrection, *pendingHosts, error) {
	var claims []ingressClaim
	for _, d := range drifts {
		c, err := claimsOf([]drivers.Object{d.Object()})
		if err != nil {
			return nil, nil, nil, err
		}
		claims = append(claims, c...)
	}
	if len(claims) == 0 {
		return drifts, nil, nil, nil
	}
	d, err := r.defaultClass(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	why := map[string]error{} // by Ingress name
	p := r.takeLeaving(ctx, sd, claims, why, d)
	for _, c := range claims {
		if why[c.ingress] != nil {
			continue
		}
		h, err := r.checkHost(ctx, sd, c.claim, d)
		if err != nil {
			r.hosts.end(sd.Namespace, p, false, r.now())
			return nil, nil, nil, err
		}
		if h != nil {
			why[c.ingress] = h.driftRefusal(c)
		}
	}
	if len(why) > 0 {
		// Only the hosts of the Ingresses put back stay taken.
		p = r.takeLeaving(ctx, sd, claims, why, d)
	}
	var keep []release.Drift
	var refused []release.RefusedCorrection
	for _, d := range drifts {
		if err := why[d.Ref().Name]; err != nil && drivers.IsIngress(d.Object()) {
			refused = append(refused, release.RefusedCorrection{Drift: d, Err: err})
			continue
		}
		keep = append(keep, d)
	}
	return keep, refused, p, nil
}

// takeLeaving takes in the agent's table the claims of the Ingresses why
// does not name, adding to why those another apply is taking.
func (r *Reconciler) takeLeaving(ctx context.Context, sd *v1alpha1.StyrminDeployment, claims []ingressClaim, why map[string]error, d defaultClass) *pendingHosts {
	for {
		var left []ingressClaim
		for _, c := range claims {
			if why[c.ingress] == nil {
				left = append(left, c)
			}
		}
		p, conflict := r.hosts.take(sd.Namespace, sd.Spec.Deployment.String(), left, r.hostMatch(ctx, d), r.now())
		if conflict == nil {
			return p
		}
		why[conflict.mine.ingress] = fmt.Errorf("%w: not put back meanwhile", conflict)
	}
}

// defaultClass is the cluster's default IngressClass ("": none).
type defaultClass string

// canon is c with an Ingress without a class taken as the default
// class's: the API server's DefaultIngressClass admission names that
// class on the Ingresses made while it is the default (not on those made
// before), and ingress controllers serve both as one, so a rendered
// Ingress without a class and a live one naming the default class (or
// the other way round) claim one host.
func (d defaultClass) canon(c drivers.HostClaim) drivers.HostClaim {
	if c.Class == "" {
		c.Class = string(d)
	}
	return c
}

// overlap is drivers.HostClaim.Overlaps, the default class named.
func (d defaultClass) overlap(a, b drivers.HostClaim) bool {
	return d.canon(a).Overlaps(d.canon(b))
}

// meets reports whether a and b cannot both be applied: they overlap,
// or serve one host over TLS apart (the default class named).
func (d defaultClass) meets(a, b drivers.HostClaim) bool {
	a, b = d.canon(a), d.canon(b)
	return a.Overlaps(b) || a.TLSConflicts(b)
}

// lookupKeys are the index keys (HostIndex) of the live claims c
// overlaps: on the default class, under its name and without one.
func (d defaultClass) lookupKeys(c drivers.HostClaim) []string {
	c = d.canon(c)
	keys := c.LookupKeys()
	if d != "" && c.Class == string(d) {
		bare := c
		bare.Class = ""
		keys = append(keys, bare.LookupKeys()...)
	}
	return keys
}

// defaultClass reads the cluster's default IngressClass from the cache
// (the IngressClasses are few): the newest of those annotated
// ingressclass.kubernetes.io/is-default-class "true", as the API
// server's admission picks it.
func (r *Reconciler) defaultClass(ctx context.Context) (defaultClass, error) {
	var list networkingv1.IngressClassList
	if err := r.client.List(ctx, &list); err != nil {
		return "", outcome.Retryable(v1alpha1.ReasonApplyFailed, fmt.Errorf("list the IngressClasses (which one is the default): %w", err))
	}
	var def *networkingv1.IngressClass
	for i := range list.Items {
		c := &list.Items[i]
		if c.Annotations[networkingv1.AnnotationIsDefaultIngressClass] != "true" {
			continue
		}
		if def == nil || newerClass(c, def) {
			def = c
		}
	}
	if def == nil {
		return "", nil
	}
	return defaultClass(def.Name), nil
}

// newerClass reports whether a is picked over b among default classes:
// the newer, then the first by name.
func newerClass(a, b *networkingv1.IngressClass) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.After(b.CreationTimestamp.Time)
	}
	return a.Name < b.Name
}
