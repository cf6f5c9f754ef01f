package drivers

import (
	"strings"
	"testing"
)

// TestHostClaimsOverlapOnOneClassByHostOrWildcard: a host belongs to one
// deployment per ingress class; a wildcard covers the names one label
// below it, and LookupKeys find through IndexKeys every claim Overlaps
// says meets it.
func TestHostClaimsOverlapOnOneClassByHostOrWildcard(t *testing.T) {
	cases := []struct {
		a, b HostClaim
		want bool
	}{
		{HostClaim{"nginx", "web.example.com"}, HostClaim{"nginx", "web.example.com"}, true},
		{HostClaim{"nginx", "web.example.com"}, HostClaim{"dev-nginx", "web.example.com"}, false},
		{HostClaim{"nginx", "*.example.com"}, HostClaim{"nginx", "web.example.com"}, true},
		{HostClaim{"nginx", "web.example.com"}, HostClaim{"nginx", "*.example.com"}, true},
		{HostClaim{"nginx", "*.example.com"}, HostClaim{"nginx", "a.web.example.com"}, false},
		{HostClaim{"nginx", "*.example.com"}, HostClaim{"nginx", "example.com"}, false},
		{HostClaim{"nginx", "*.example.com"}, HostClaim{"nginx", "*.example.com"}, true},
		{HostClaim{"nginx", "*.example.com"}, HostClaim{"nginx", "*.web.example.com"}, false},
		{HostClaim{"nginx", ""}, HostClaim{"nginx", ""}, true},
		{HostClaim{"nginx", ""}, HostClaim{"nginx", "web.example.com"}, false},
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
		if found != c.want {
			t.Errorf("%v looked up among %v's index keys: found %v, want %v", c.a, c.b, found, c.want)
		}
	}
}

// TestIngressHostsReadsClassAndHosts: the class from ingressClassName,
// else the legacy annotation; hosts lower-cased, each once; a default
// backend claims every host.
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
    - host: web.example.com
`)}
	got, err := IngressHosts(o)
	if err != nil {
		t.Fatal(err)
	}
	want := []HostClaim{{"old", ""}, {"old", "web.example.com"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
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
