package drivers

import (
	"slices"
	"strings"
	"testing"
)

// TestHostClaimsOverlapOnOneClassByHostOrWildcard: a host belongs to one
// deployment per ingress class; a wildcard covers the names one label
// below it; different paths of one host do not meet; and LookupKeys find
// through IndexKeys every claim Overlaps says meets it (the index is by
// host: a lookup compares paths after).
func TestHostClaimsOverlapOnOneClassByHostOrWildcard(t *testing.T) {
	cases := []struct {
		a, b HostClaim
		want bool
	}{
		{HostClaim{"nginx", "web.example.com", ""}, HostClaim{"nginx", "web.example.com", ""}, true},
		{HostClaim{"nginx", "web.example.com", ""}, HostClaim{"dev-nginx", "web.example.com", ""}, false},
		{HostClaim{"nginx", "*.example.com", ""}, HostClaim{"nginx", "web.example.com", ""}, true},
		{HostClaim{"nginx", "web.example.com", ""}, HostClaim{"nginx", "*.example.com", ""}, true},
		{HostClaim{"nginx", "*.example.com", ""}, HostClaim{"nginx", "a.web.example.com", ""}, false},
		{HostClaim{"nginx", "*.example.com", ""}, HostClaim{"nginx", "example.com", ""}, false},
		{HostClaim{"nginx", "*.example.com", ""}, HostClaim{"nginx", "*.example.com", ""}, true},
		{HostClaim{"nginx", "*.example.com", ""}, HostClaim{"nginx", "*.web.example.com", ""}, false},
		{HostClaim{"nginx", "", ""}, HostClaim{"nginx", "", ""}, true},
		{HostClaim{"nginx", "", ""}, HostClaim{"nginx", "web.example.com", ""}, false},
		// Paths: one host routed by path to several deployments is no
		// collision; the same path is, and a rule without paths takes
		// them all.
		{HostClaim{"nginx", "example.com", "/api"}, HostClaim{"nginx", "example.com", "/"}, false},
		{HostClaim{"nginx", "example.com", "/api"}, HostClaim{"nginx", "example.com", "/api"}, true},
		{HostClaim{"nginx", "example.com", "/api"}, HostClaim{"nginx", "example.com", "=/api"}, false},
		{HostClaim{"nginx", "example.com", "/api"}, HostClaim{"nginx", "example.com", ""}, true},
		{HostClaim{"nginx", "*.example.com", "/api"}, HostClaim{"nginx", "a.example.com", "/api"}, true},
		{HostClaim{"nginx", "", "/api"}, HostClaim{"nginx", "", "/"}, false},
	}
	for _, c := range cases {
		if got := c.a.Overlaps(c.b); got != c.want {
			t.Errorf("%v overlaps %v: %v, want %v", c.a, c.b, got, c.want)
		}
		found := false
		for _, l := range c.a.LookupKeys() {
			for _, k := range c.b.IndexKeys() {
				found = found || l == k
			}
		}
		if c.want && !found {
			t.Errorf("%v looked up among %v's index keys: not found", c.a, c.b)
		}
	}
}

// TestIngressHostsReadsClassAndHosts: the class from ingressClassName,
// else the legacy annotation; hosts lower-cased, each path once, a
// prefix without its trailing slash and an exact path apart; a rule
// without paths claims them all; a default backend claims the root of
// the rules without a host.
func TestIngressHostsReadsClassAndHosts(t *testing.T) {
	o := Object{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: "web", YAML: []byte(`apiVersion: networking.k8s.io/v1
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
          - {path: /api/, pathType: Prefix}
          - {path: /api, pathType: ImplementationSpecific}
          - {path: /health, pathType: Exact}
    - host: web.example.com
      http:
        paths:
          - {path: /, pathType: Prefix}
    - host: other.example.com
`)}
	got, err := IngressHosts(o)
	if err != nil {
		t.Fatal(err)
	}
	want := []HostClaim{{"old", "", "/"}, {"old", "other.example.com", ""}, {"old", "web.example.com", "/"}, {"old", "web.example.com", "/api"}, {"old", "web.example.com", "=/health"}}
	if !slices.Equal(got, want) {
		t.Errorf("IngressHosts: %v, want %v", got, want)
	}
}

// TestIngressHostsRefuseAHostOrClassThatIsNoStringNamingTheField: the
// hosts are read from the object the render parsed (the lock's render
// keeps no Ingress text), and a host or class the Ingress API would
// refuse fails the read, naming the field and what was expected.
func TestIngressHostsRefuseAHostOrClassThatIsNoStringNamingTheField(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"a number as host", "spec:\n  rules:\n    - host: 5\n", "spec.rules[0].host is float64, expected a string"},
		{"a list as class", "spec:\n  ingressClassName: [a]\n", "spec.ingressClassName is []interface {}, expected a string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Object{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: "web",
				YAML: []byte("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\n" + c.yaml)}
			_, err := IngressHosts(o)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "Ingress web") {
				t.Errorf("IngressHosts: %v, want an error naming Ingress web and %q", err, c.want)
			}
		})
	}
}
