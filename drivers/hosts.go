package drivers

import (
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// HostClaim is one host and path an Ingress routes on an ingress class.
// A host's path belongs to one deployment per class (as OpenShift's
// routes admit a host for one namespace): an ingress controller merges
// the rules of every Ingress naming the host, so a second deployment
// claiming the same path splits or takes the first one's traffic, and
// nothing says so. Different paths of one host (path-based routing of a
// domain to several deployments) are no collision: the controller sends
// each request to the longest path that matches.
type HostClaim struct {
	// Class is the Ingress's spec.ingressClassName, else its
	// kubernetes.io/ingress.class annotation; "" is the cluster's
	// default class.
	Class string
	// Host is the rule's host, lower-cased: "" (a rule without one,
	// every host's), a name, or a wildcard "*.example.com".
	Host string
	// Path is the path routed, as its type matches it: a prefix without
	// its trailing slash ("/" for the root; a default backend's too), an
	// exact path after "=". "" is every path of the host (a rule that
	// lists none).
	Path string
	// TLS is how the Ingress serves Host over TLS (spec.tls): "" not at
	// all, the Secret's name, or DefaultCertificate. An ingress
	// controller serves one certificate per host, whichever of the
	// Ingresses sharing it names it first, so the deployments routing
	// other paths of one host must agree on it (TLSConflicts).
	TLS string
}

// DefaultCertificate is HostClaim.TLS of a host listed in a spec.tls
// entry naming no Secret: the controller's default certificate. It is no
// Secret name (those are DNS subdomains).
const DefaultCertificate = "(default certificate)"

// TLSString says how c serves its host over TLS, for errors.
func (c HostClaim) TLSString() string {
	switch c.TLS {
	case "":
		return "no TLS"
	case DefaultCertificate:
		return "TLS of the controller's default certificate (a spec.tls entry naming no Secret)"
	}
	return "TLS Secret " + c.TLS
}

// TLSConflicts reports whether c and o, claiming one host on one class
// (other paths of it: Overlaps is the claim's own conflict), serve it
// over TLS differently: ingress-nginx, like most controllers, serves one
// certificate for a host, that of the oldest Ingress naming one, and
// serves TLS (redirecting plain HTTP to it) for every path of the host
// once one Ingress of it does. So one deployment's clients would get the
// other's certificate, or TLS it never set up, and lose it when the other
// goes. A wildcard is another server than the names under it, and a rule
// without a host takes no TLS. The same Secret name agrees: each
// deployment's namespace holds its copy of one certificate (one
// cert-manager Certificate in each, or a copy replicated).
func (c HostClaim) TLSConflicts(o HostClaim) bool {
	return c.Class == o.Class && c.Host == o.Host && c.Host != "" && c.TLS != o.TLS
}

// String is "host (ingress class c)", with the path when there is one,
// for errors.
func (c HostClaim) String() string {
	host := c.Host
	if host == "" {
		host = `"" (a rule without a host, which takes every host's requests)`
	}
	switch {
	case strings.HasPrefix(c.Path, "="):
		host += " path " + c.Path[1:] + " (Exact)"
	case c.Path != "":
		host += " path " + c.Path
	}
	if c.Class == "" {
		return host + " (the default ingress class)"
	}
	return host + " (ingress class " + c.Class + ")"
}

// Overlaps reports whether c and o route some request alike: the same
// class, the same host or a wildcard and a host it covers (one label
// deep, as the Ingress API defines "*.example.com": a.example.com, not
// example.com nor a.b.example.com), and the same path or one of them
// every path.
func (c HostClaim) Overlaps(o HostClaim) bool {
	if c.Class != o.Class {
		return false
	}
	if c.Path != o.Path && c.Path != "" && o.Path != "" {
		return false
	}
	return c.Host == o.Host || covers(c.Host, o.Host) || covers(o.Host, c.Host)
}

// PathClaim is HostClaim.Path of a rule's path of type pathType.
func PathClaim(path, pathType string) string {
	if path == "" {
		path = "/"
	}
	if pathType == "Exact" {
		return "=" + path
	}
	if p := strings.TrimRight(path, "/"); p != "" {
		return p
	}
	return "/"
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
// name, its parent domain's wildcard's cover key. The path is not in the
// key: a lookup then compares paths with Overlaps.
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

// legacyIngressClass is the annotation older Ingresses name their class
// with.
const legacyIngressClass = "kubernetes.io/ingress.class"

// IsIngress reports whether o is a networking.k8s.io Ingress.
func IsIngress(o Object) bool {
	return o.Kind == "Ingress" && strings.HasPrefix(o.APIVersion, "networking.k8s.io/")
}

// IngressHosts are the hosts and paths the Ingress o claims, each once,
// sorted; nil when o is no Ingress. A default backend claims the root of
// a rule without a host. A render records them (Object.Hosts) from the object
// it parsed, so a render without the Ingress's text (RenderForPolicy)
// has them too; otherwise they are read from o.YAML.
func IngressHosts(o Object) ([]HostClaim, error) {
	if !IsIngress(o) {
		return nil, nil
	}
	if o.Hosts != nil || o.YAML == nil {
		return o.Hosts, nil
	}
	var obj map[string]any
	if err := yaml.Unmarshal(o.YAML, &obj); err != nil {
		return nil, fmt.Errorf("Ingress %s: %w", o.Name, err)
	}
	return IngressHostsOf(obj)
}

// IngressHostsOf are the hosts the Ingress obj (its JSON form: a render's
// parsed object, or a live one converted) claims, as IngressHosts; an
// error names the field that is not what the Ingress API defines.
func IngressHostsOf(obj map[string]any) ([]HostClaim, error) {
	meta, _ := obj["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	class, _ := annotations[legacyIngressClass].(string)
	spec, _ := obj["spec"].(map[string]any)
	if v, ok := spec["ingressClassName"]; ok && v != nil {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("Ingress %v: spec.ingressClassName is %T, expected a string", meta["name"], v)
		}
		class = s
	}
	tls, err := tlsOf(spec, meta["name"])
	if err != nil {
		return nil, err
	}
	rules, _ := spec["rules"].([]any)
	out := make([]HostClaim, 0, len(rules)+1)
	for i, r := range rules {
		rule, _ := r.(map[string]any)
		host := ""
		if v, ok := rule["host"]; ok && v != nil {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("Ingress %v: spec.rules[%d].host is %T, expected a string", meta["name"], i, v)
			}
			host = strings.ToLower(s)
		}
		http, _ := rule["http"].(map[string]any)
		paths, _ := http["paths"].([]any)
		secret := tls.of(host)
		if len(paths) == 0 {
			out = append(out, HostClaim{Class: class, Host: host, TLS: secret})
		}
		for k, p := range paths {
			path, _ := p.(map[string]any)
			v, _ := path["path"].(string)
			t, _ := path["pathType"].(string)
			if x, ok := path["path"]; ok && x != nil && v == "" {
				return nil, fmt.Errorf("Ingress %v: spec.rules[%d].http.paths[%d].path is %T, expected a string", meta["name"], i, k, x)
			}
			out = append(out, HostClaim{Class: class, Host: host, Path: PathClaim(v, t), TLS: secret})
		}
	}
	if spec["defaultBackend"] != nil {
		out = append(out, HostClaim{Class: class, Path: "/"})
	}
	if len(out) == 0 {
		return nil, nil
	}
	slices.SortFunc(out, func(a, b HostClaim) int {
		if c := strings.Compare(a.Host, b.Host); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
	return slices.Compact(out), nil
}

// ingressTLS is the Secret each host an Ingress's spec.tls lists is
// served with (HostClaim.TLS), by host as listed, lower-cased.
type ingressTLS map[string]string

// tlsOf reads spec.tls of the Ingress name; an error names the field that
// is not what the Ingress API defines. Of two entries listing one host,
// the first is taken, as ingress-nginx takes it.
func tlsOf(spec map[string]any, name any) (ingressTLS, error) {
	entries, _ := spec["tls"].([]any)
	out := ingressTLS{}
	for i, e := range entries {
		entry, _ := e.(map[string]any)
		secret := DefaultCertificate
		if v, ok := entry["secretName"]; ok && v != nil {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("Ingress %v: spec.tls[%d].secretName is %T, expected a string", name, i, v)
			}
			if s != "" {
				secret = s
			}
		}
		hosts, _ := entry["hosts"].([]any)
		for k, h := range hosts {
			s, ok := h.(string)
			if !ok {
				return nil, fmt.Errorf("Ingress %v: spec.tls[%d].hosts[%d] is %T, expected a string", name, i, k, h)
			}
			if s = strings.ToLower(s); out[s] == "" {
				out[s] = secret
			}
		}
	}
	return out, nil
}

// of is how host is served over TLS: the entry listing it, else one
// listing a wildcard covering it (a wildcard certificate, which
// ingress-nginx serves for the names under it); "" for none.
func (t ingressTLS) of(host string) string {
	if host == "" {
		return ""
	}
	if s, ok := t[host]; ok {
		return s
	}
	if _, rest, ok := strings.Cut(host, "."); ok && !strings.HasPrefix(host, "*") {
		return t["*."+rest]
	}
	return ""
}
