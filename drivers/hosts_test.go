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
		{HostClaim{"nginx", "web.example.com", "", ""}, HostClaim{"nginx", "web.example.com", "", ""}, true},
		{HostClaim{"nginx", "web.example.com", "", ""}, HostClaim{"dev-nginx", "web.example.com", "", ""}, false},
		{HostClaim{"nginx", "*.example.com", "", ""}, HostClaim{"nginx", "web.example.com", "", ""}, true},
		{HostClaim{"nginx", "web.example.com", "", ""}, HostClaim{"nginx", "*.example.com", "", ""}, true},
		{HostClaim{"nginx", "*.example.com", "", ""}, HostClaim{"nginx", "a.web.example.com", "", ""}, false},
		{HostClaim{"nginx", "*.example.com", "", ""}, HostClaim{"nginx", "example.com", "", ""}, false},
		{HostClaim{"nginx", "*.example.com", "", ""}, HostClaim{"nginx", "*.example.com", "", ""}, true},
		{HostClaim{"nginx", "*.example.com", "", ""}, HostClaim{"nginx", "*.web.example.com", "", ""}, false},
		{HostClaim{"nginx", "", "", ""}, HostClaim{"nginx", "", "", ""}, true},
		{HostClaim{"nginx", "", "", ""}, HostClaim{"nginx", "web.example.com", "", ""}, false},
		// Paths: one host routed by path to several deployments is no
		// collision; the same path is, and a rule without paths takes
		// them all.
		{HostClaim{"nginx", "example.com", "/api", ""}, HostClaim{"nginx", "example.com", "/", ""}, false},
		{HostClaim{"nginx", "example.com", "/api", ""}, HostClaim{"nginx", "example.com", "/api", ""}, true},
		{HostClaim{"nginx", "example.com", "/api", ""}, HostClaim{"nginx", "example.com", "=/api", ""}, false},
		{HostClaim{"nginx", "example.com", "/api", ""}, HostClaim{"nginx", "example.com", "", ""}, true},
		{HostClaim{"nginx", "*.example.com", "/api", ""}, HostClaim{"nginx", "a.example.com", "/api", ""}, true},
		{HostClaim{"nginx", "", "/api", ""}, HostClaim{"nginx", "", "/", ""}, false},
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
	want := []HostClaim{{"old", "", "/", ""}, {"old", "other.example.com", "", ""}, {"old", "web.example.com", "/", ""}, {"old", "web.example.com", "/api", ""}, {"old", "web.example.com", "=/health", ""}}
	if !slices.Equal(got, want) {
		t.Errorf("IngressHosts: %v, want %v", got, want)
	}
}

// TestIngressHostsReadHowEachHostIsServedOverTLS: a claim carries how its
// Ingress serves its host over TLS (spec.tls): the Secret of the entry
// listing the host (the first when two do, any case), else of one
// listing a wildcard over it; the default certificate for an entry
// naming no Secret; none for a host no entry lists and for a rule
// without a host.
func TestIngressHostsReadHowEachHostIsServedOverTLS(t *testing.T) {
	o := Object{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: "web", YAML: []byte(`apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  ingressClassName: nginx
  tls:
    - {hosts: [Web.Example.com], secretName: web-tls}
    - {hosts: [web.example.com, api.example.com], secretName: other-tls}
    - {hosts: ["*.apps.example.com"], secretName: apps-tls}
    - {hosts: [default.example.com]}
  rules:
    - {host: web.example.com, http: {paths: [{path: /, pathType: Prefix}, {path: /api, pathType: Prefix}]}}
    - {host: api.example.com}
    - {host: a.apps.example.com}
    - {host: default.example.com}
    - {host: plain.example.com}
    - {http: {paths: [{path: /, pathType: Prefix}]}}
`)}
	got, err := IngressHosts(o)
	if err != nil {
		t.Fatal(err)
	}
	want := []HostClaim{
		{"nginx", "", "/", ""},
		{"nginx", "a.apps.example.com", "", "apps-tls"},
		{"nginx", "api.example.com", "", "other-tls"},
		{"nginx", "default.example.com", "", DefaultCertificate},
		{"nginx", "plain.example.com", "", ""},
		{"nginx", "web.example.com", "/", "web-tls"},
		{"nginx", "web.example.com", "/api", "web-tls"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("IngressHosts:\n%v\nwant\n%v", got, want)
	}
}

// TestClaimsOfOneHostConflictWhenTheyServeItOverTLSApart: two Ingresses
// of one host on one class, on other paths of it (no Overlaps), conflict
// when they name different TLS Secrets, or one TLS and the other none
// (the controller serves one certificate per host); the same Secret name
// agrees; another class, another host, a wildcard over the host (another
// server) and rules without a host do not meet on TLS.
func TestClaimsOfOneHostConflictWhenTheyServeItOverTLSApart(t *testing.T) {
	cases := []struct {
		a, b HostClaim
		want bool
	}{
		{HostClaim{"nginx", "example.com", "/api", "api-tls"}, HostClaim{"nginx", "example.com", "/", "web-tls"}, true},
		{HostClaim{"nginx", "example.com", "/api", ""}, HostClaim{"nginx", "example.com", "/", "web-tls"}, true},
		{HostClaim{"nginx", "example.com", "/api", DefaultCertificate}, HostClaim{"nginx", "example.com", "/", "web-tls"}, true},
		{HostClaim{"nginx", "example.com", "/api", "web-tls"}, HostClaim{"nginx", "example.com", "/", "web-tls"}, false},
		{HostClaim{"nginx", "example.com", "/api", ""}, HostClaim{"nginx", "example.com", "/", ""}, false},
		{HostClaim{"nginx", "example.com", "/api", "api-tls"}, HostClaim{"dev-nginx", "example.com", "/", "web-tls"}, false},
		{HostClaim{"nginx", "api.example.com", "/", "api-tls"}, HostClaim{"nginx", "example.com", "/", "web-tls"}, false},
		{HostClaim{"nginx", "a.example.com", "/", "a-tls"}, HostClaim{"nginx", "*.example.com", "/", "wild-tls"}, false},
	}
	for _, c := range cases {
		if got := c.a.TLSConflicts(c.b); got != c.want {
			t.Errorf("%v (%s) and %v (%s): TLSConflicts %v, want %v", c.a, c.a.TLSString(), c.b, c.b.TLSString(), got, c.want)
		}
		if got := c.b.TLSConflicts(c.a); got != c.want {
			t.Errorf("%v and %v: TLSConflicts is not symmetric", c.b, c.a)
		}
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
		{"a number as TLS host", "spec:\n  tls:\n    - hosts: [5]\n", "spec.tls[0].hosts[0] is float64, expected a string"},
		{"a map as TLS Secret", "spec:\n  tls:\n    - {hosts: [a.example.com], secretName: {a: b}}\n", "spec.tls[0].secretName is map[string]interface {}, expected a string"},
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
