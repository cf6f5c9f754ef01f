package deployment

import (
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/drivers"
)

// TestALiveIngressClaimsWhatItsRenderClaims: the agent reads a live
// Ingress's claims from the cache's trimmed copy (TrimIngress keeps the
// hosts and paths, not the backends), with the reader the resolver uses
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
	if !slices.Contains(live, drivers.HostClaim{Class: "old", Host: "web.example.com", Path: "/api"}) {
		t.Errorf("the live Ingress claims %v, want web.example.com path /api among them", live)
	}
}
