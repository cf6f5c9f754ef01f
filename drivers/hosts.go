package drivers

import (
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// HostClaim is one host an Ingress routes on an ingress class. A host
// belongs to one deployment per class (as OpenShift's routes admit a host
// for one namespace): an ingress controller merges the rules of every
// Ingress naming it, so a second deployment claiming it splits or takes
// the first one's traffic, and nothing says so.
type HostClaim struct {
	// Class is the Ingress's spec.ingressClassName, else its
	// kubernetes.io/ingress.class annotation; "" is the cluster's
	// default class.
	Class string
	// Host is the rule's host, lower-cased: "" (a rule without one,
	// every host's), a name, or a wildcard "*.example.com".
	Host string
}

// String is "host (ingress class c)", for errors.
func (c HostClaim) String() string {
	host := c.Host
	if host == "" {
		host = `"" (a rule without a host, which takes every host's requests)`
	}
	if c.Class == "" {
		return host + " (the default ingress class)"
	}
	return host + " (ingress class " + c.Class + ")"
}

// Overlaps reports whether c and o route some request alike: the same
// class and the same host, or a wildcard and a host it covers (one label
// deep, as the Ingress API defines "*.example.com": a.example.com, not
// example.com nor a.b.example.com).
func (c HostClaim) Overlaps(o HostClaim) bool {
	if c.Class != o.Class {
		return false
	}
	return c.Host == o.Host || covers(c.Host, o.Host) || covers(o.Host, c.Host)
}

// covers reports whether wildcard w covers host h.
func covers(w, h string) bool {
	suffix, ok := strings.CutPrefix(w, "*")
	if !ok || strings.HasPrefix(h, "*") {
		return false
	}
	label, rest, ok := strings.Cut(h, ".")
	return ok && label != "" && "."+rest == suffix
}

// IndexKeys are the keys a cache indexes an Ingress's claim c under, so
// that LookupKeys of any claim it overlaps finds it: its host, and for a
// name, its parent domain's wildcard's cover key.
func (c HostClaim) IndexKeys() []string {
	keys := []string{c.Class + "|" + c.Host}
	if _, rest, ok := strings.Cut(c.Host, "."); ok && !strings.HasPrefix(c.Host, "*") {
		keys = append(keys, c.Class+"|under *."+rest)
	}
	return keys
}

// LookupKeys are the index keys (IndexKeys) of the claims c overlaps.
func (c HostClaim) LookupKeys() []string {
	keys := []string{c.Class + "|" + c.Host}
	if suffix, ok := strings.CutPrefix(c.Host, "*"); ok {
		return append(keys, c.Class+"|under *"+suffix)
	}
	if _, rest, ok := strings.Cut(c.Host, "."); ok {
		keys = append(keys, c.Class+"|*."+rest)
	}
	return keys
}

// ingressDoc is what IngressHosts reads of an Ingress.
type ingressDoc struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		IngressClassName *string `json:"ingressClassName"`
		DefaultBackend   any     `json:"defaultBackend"`
		Rules            []struct {
			Host string `json:"host"`
		} `json:"rules"`
	} `json:"spec"`
}

// legacyIngressClass is the annotation older Ingresses name their class
// with.
const legacyIngressClass = "kubernetes.io/ingress.class"

// IsIngress reports whether o is a networking.k8s.io Ingress.
func IsIngress(o Object) bool {
	return o.Kind == "Ingress" && strings.HasPrefix(o.APIVersion, "networking.k8s.io/")
}

// IngressHosts are the hosts the Ingress o claims, each once, sorted; nil
// when o is no Ingress. A default backend claims every host, as a rule
// without one does.
func IngressHosts(o Object) ([]HostClaim, error) {
	if !IsIngress(o) {
		return nil, nil
	}
	var doc ingressDoc
	if err := yaml.Unmarshal(o.YAML, &doc); err != nil {
		return nil, fmt.Errorf("Ingress %s: %w", o.Name, err)
	}
	class := doc.Metadata.Annotations[legacyIngressClass]
	if doc.Spec.IngressClassName != nil {
		class = *doc.Spec.IngressClassName
	}
	var out []HostClaim
	for _, r := range doc.Spec.Rules {
		out = append(out, HostClaim{Class: class, Host: strings.ToLower(r.Host)})
	}
	if doc.Spec.DefaultBackend != nil {
		out = append(out, HostClaim{Class: class})
	}
	slices.SortFunc(out, func(a, b HostClaim) int { return strings.Compare(a.Host, b.Host) })
	return slices.Compact(out), nil
}
