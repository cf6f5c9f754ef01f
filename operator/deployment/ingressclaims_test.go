package deployment

import (
	"context"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/outcome"
	"github.com/styrmin/styrmin/operator/release"
)

// TestALiveIngressClaimsWhatItsRenderClaims: the agent reads a live
// Ingress's claims from the cache's trimmed copy (TrimIngress keeps the
// hosts and paths, not the backends, and each host's TLS Secret), with
// the reader the resolver uses
// on the rendered text (drivers.IngressHostsOf): each path of a host, a
// rule without paths taking them all, a default backend the root. A copy
// trimmed of its paths would let the agent stall a claim the lock passed.
func TestALiveIngressClaimsWhatItsRenderClaims(t *testing.T) {
	text := `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  annotations:
    kubernetes.io/ingress.class: old
spec:
  defaultBackend:
    service: {name: web, port: {number: 80}}
  tls:
    - {hosts: [web.example.com], secretName: web-tls}
  rules:
    - host: Web.Example.com
      http:
        paths:
          - {path: /api/, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
          - {path: /health, pathType: Exact, backend: {service: {name: web, port: {number: 80}}}}
    - host: other.example.com
`
	var ing networkingv1.Ingress
	if err := yaml.Unmarshal([]byte(text), &ing); err != nil {
		t.Fatal(err)
	}
	trimmed, err := TrimIngress(&ing)
	if err != nil {
		t.Fatal(err)
	}
	live := ingressClaims(trimmed.(*networkingv1.Ingress))
	rendered, err := drivers.IngressHosts(drivers.Object{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: "web", YAML: []byte(text)})
	if err != nil {
		t.Fatal(err)
	}
	byHostAndPath := func(a, b drivers.HostClaim) int {
		if c := strings.Compare(a.Host, b.Host); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	}
	slices.SortFunc(live, byHostAndPath)
	if !slices.Equal(live, rendered) {
		t.Errorf("the live Ingress claims %v, its render %v", live, rendered)
	}
	if !slices.Contains(live, drivers.HostClaim{Class: "old", Host: "web.example.com", Path: "/api", TLS: "web-tls"}) {
		t.Errorf("the live Ingress claims %v, want web.example.com path /api served with TLS Secret web-tls among them", live)
	}
}

// TestALiveIngressServingAHostOverTLSApartHoldsItUnlessItsDeploymentIsChanging:
// another deployment's live Ingress routing another path of a host holds
// it against a claim serving it over TLS apart (another Secret, or none),
// stalling naming both; the same Secret does not; an overlapping path is
// the claim's own conflict first. While that deployment has an instance
// to apply yet, it holds nothing on TLS: a Secret changed in both
// deployments at once would otherwise stall each on the other's Ingress
// for good.
func TestALiveIngressServingAHostOverTLSApartHoldsItUnlessItsDeploymentIsChanging(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	sd := func(ns, applied string) *v1alpha1.StyrminDeployment {
		o := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns}}
		o.Spec.Deployment = v1alpha1.DeploymentID{Cluster: "local", Environment: ns, Name: "api"}
		o.Spec.Digest, o.Status.AppliedDigest = "sha256:b", applied
		return o
	}
	r := &Reconciler{client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(sd("steady", "sha256:b"), sd("changing", "sha256:a")).Build()}
	class := "nginx"
	ingress := func(ns string) *networkingv1.Ingress {
		prefix := networkingv1.PathTypePrefix
		return &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api", Annotations: map[string]string{release.ReleaseNamespaceAnnotation: ns}},
			Spec: networkingv1.IngressSpec{
				IngressClassName: &class,
				TLS:              []networkingv1.IngressTLS{{Hosts: []string{"example.com"}, SecretName: "api-tls"}},
				Rules: []networkingv1.IngressRule{{Host: "example.com", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{Path: "/api", PathType: &prefix}}}}}},
			},
		}
	}
	mine := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "web"}}
	for _, tc := range []struct {
		name   string
		ns     string
		claim  drivers.HostClaim
		stalls []string // nil: not held
	}{
		{"another Secret", "steady", drivers.HostClaim{Class: "nginx", Host: "example.com", Path: "/", TLS: "web-tls"},
			[]string{"serves host example.com path / (ingress class nginx) with TLS Secret web-tls", "steady/api", "with TLS Secret api-tls", "one certificate for the host"}},
		{"no TLS", "steady", drivers.HostClaim{Class: "nginx", Host: "example.com", Path: "/"}, []string{"with no TLS", "with TLS Secret api-tls"}},
		{"the same Secret", "steady", drivers.HostClaim{Class: "nginx", Host: "example.com", Path: "/", TLS: "api-tls"}, nil},
		{"the same path", "steady", drivers.HostClaim{Class: "nginx", Host: "example.com", Path: "/api", TLS: "api-tls"}, []string{"claims host example.com path /api", "split or take its traffic"}},
		{"another Secret of a deployment changing", "changing", drivers.HostClaim{Class: "nginx", Host: "example.com", Path: "/", TLS: "web-tls"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := r.heldElsewhere(context.Background(), mine, tc.claim, ingress(tc.ns), "")
			if err != nil {
				t.Fatal(err)
			}
			if tc.stalls == nil {
				if h != nil {
					t.Fatalf("held by %s: %v", h.ingress.Name, h.applyRefusal(ingressClaim{ingress: "web", claim: tc.claim}))
				}
				return
			}
			if h == nil {
				t.Fatal("not held")
			}
			err = h.applyRefusal(ingressClaim{ingress: "web", claim: tc.claim})
			if o := outcome.Map(err, "Fallback"); o.Kind != outcome.Stall || o.Reason != v1alpha1.ReasonHostClaimed {
				t.Errorf("outcome %+v, want stalled %s", o, v1alpha1.ReasonHostClaimed)
			}
			for _, want := range tc.stalls {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
		})
	}
}
