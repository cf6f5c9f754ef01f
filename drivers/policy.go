package drivers

import (
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Policy is what the deployments of one environment may do in their
// cluster, as git says (the cluster's default, then the environment's
// own). The resolver puts it in the instance's context, so the agent
// enforces exactly what was reviewed; the zero value is the default
// policy: the deployment's own namespace, namespaced kinds only, and the
// agent's own identity.
type Policy struct {
	// Namespaces the environment's deployments may create objects in,
	// besides each deployment's own namespace (always allowed).
	Namespaces []string `json:"namespaces,omitempty"`
	// Kinds the environment's charts may create. Empty allows every
	// namespaced kind; otherwise only the listed ones ("*" stands for
	// every namespaced kind). A cluster-scoped kind is refused unless it
	// is listed by name: it reaches beyond every namespace.
	Kinds []string `json:"kinds,omitempty"`
	// ServiceAccountName is the service account, in the deployment's
	// namespace, the agent impersonates to apply and prune the
	// deployment's objects, so the cluster's RBAC bounds what it can do.
	// "namespace/name" names one in another namespace. Empty: the agent
	// applies with its own identity.
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// IsZero reports whether p is the default policy (so a lockfile leaves it
// out).
func (p *Policy) IsZero() bool {
	return p == nil || (len(p.Namespaces) == 0 && len(p.Kinds) == 0 && p.ServiceAccountName == "")
}

// AllowsNamespace reports whether a deployment in namespace own may put an
// object into ns.
func (p *Policy) AllowsNamespace(own, ns string) bool {
	if ns == "" || ns == own {
		return true
	}
	return p != nil && slices.Contains(p.Namespaces, ns)
}

// AllowsKind reports whether the policy lets a chart create kind, scoped
// by the kind table (IsClusterScoped).
func (p *Policy) AllowsKind(kind string) bool {
	return p.allowsKind(kind, IsClusterScoped(kind))
}

// allowsKind reports whether the policy lets a chart create kind, a
// cluster-scoped one when clusterScoped.
func (p *Policy) allowsKind(kind string, clusterScoped bool) bool {
	var kinds []string
	if p != nil {
		kinds = p.Kinds
	}
	if slices.Contains(kinds, kind) {
		return true
	}
	if clusterScoped {
		return false
	}
	return len(kinds) == 0 || slices.Contains(kinds, "*")
}

// ServiceAccount returns the namespace and name of the service account
// the agent impersonates for a deployment in namespace own; ok is false
// when the policy names none (the agent's own identity).
func (p *Policy) ServiceAccount(own string) (namespace, name string, ok bool) {
	if p == nil || p.ServiceAccountName == "" {
		return "", "", false
	}
	if ns, n, found := strings.Cut(p.ServiceAccountName, "/"); found {
		return ns, n, true
	}
	return own, p.ServiceAccountName, true
}

// ServiceAccountUser is the user name Kubernetes gives a service account
// (what impersonation asks for).
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// PolicyError is a rendered object the environment's policy does not
// allow.
type PolicyError struct {
	// Deployment is the deployment's cluster/environment/name.
	Deployment string
	Object     Object
	// Rule is the policy field the object breaks ("namespaces", "kinds").
	Rule string
	Msg  string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("deployment %s: %s %s: %s (environment policy %s)", e.Deployment, e.Object.Kind, objectName(e.Object), e.Msg, e.Rule)
}

func objectName(o Object) string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

// CheckPolicy checks every rendered object of the deployment of context c
// against the policy of its environment: namespaces and kinds. It returns
// the first object refused; deployment names the deployment in the error.
// Objects are scoped by the kind table and the chart's own
// CustomResourceDefinitions (the CLI's check at plan and lock time, which
// asks no cluster).
func CheckPolicy(c Context, m *Manifests, deployment string) error {
	return CheckPolicyWith(c, m, deployment, nil)
}

// ScopeFunc tells whether an object's kind is cluster-scoped as a cluster
// serves it; known is false when the cluster does not serve the kind, and
// the kind table decides. An error (the cluster could not be asked) fails
// the check: what the apply would create is not known.
type ScopeFunc func(o Object) (clusterScoped, known bool, err error)

// CheckPolicyWith is CheckPolicy with the objects scoped by scope (nil:
// the kind table); an error of scope is returned as it is, not as a
// PolicyError. A kind scope does not know is cluster-scoped when the
// table says so or a CustomResourceDefinition the chart renders for it
// does (a definition never makes a kind namespaced that the table knows
// as cluster-scoped). The agent passes the cluster's mapping: a kind the
// table does not know (a custom resource, a kind newer than the table) is
// rendered as namespaced but created cluster-wide if the cluster serves it
// so, and the policy must judge what is created.
func CheckPolicyWith(c Context, m *Manifests, deployment string, scope ScopeFunc) error {
	p := c.Environment.Policy
	own := c.Deployment.Namespace
	defined := renderedCRDScopes(m.Objects)
	for _, o := range m.Objects {
		if ownAPI(o) {
			// Whatever the policy lists: a chart that makes Styrmin's own
			// objects (a StyrminRestore of another environment, a task)
			// acts through the agent, around git and the policy both.
			return &PolicyError{Deployment: deployment, Object: o, Rule: "kinds",
				Msg: fmt.Sprintf("%s is Styrmin's own API (%s): a chart may not make or define its objects", o.Kind, styrminGroup)}
		}
		// The chart's own definitions may make a kind cluster-scoped,
		// never namespaced: one declaring Namespaced a kind the table
		// knows as cluster-scoped (its own ClusterRoleBinding of
		// rbac.authorization.k8s.io) would pass the policy with it.
		clusterScoped := tableScope(o, defined)
		if scope != nil {
			cs, known, err := scope(o)
			if err != nil {
				return fmt.Errorf("deployment %s: %s %s: scope of %s %s: %w", deployment, o.Kind, objectName(o), o.APIVersion, o.Kind, err)
			}
			if known {
				clusterScoped = cs
			}
		}
		if !p.allowsKind(o.Kind, clusterScoped) {
			msg := fmt.Sprintf("kind %s is not allowed", o.Kind)
			if clusterScoped {
				msg = fmt.Sprintf("kind %s is cluster-scoped and not listed", o.Kind)
			}
			return &PolicyError{Deployment: deployment, Object: policyObject(o, clusterScoped), Rule: "kinds", Msg: msg + "; allowed: " + describeKinds(p)}
		}
		if !clusterScoped && !p.AllowsNamespace(own, o.Namespace) {
			return &PolicyError{Deployment: deployment, Object: o, Rule: "namespaces",
				Msg: fmt.Sprintf("namespace %q is outside the environment's namespaces (allowed: %s)", o.Namespace, strings.Join(append([]string{own}, policyNamespaces(p)...), ", "))}
		}
	}
	return nil
}

// policyObject is o as an error names it: rendering gave a kind the table
// does not know the deployment's namespace, which a cluster-scoped object
// does not have.
func policyObject(o Object, clusterScoped bool) Object {
	if clusterScoped {
		o.Namespace = ""
	}
	return o
}

// crdKey is the group and kind a CustomResourceDefinition defines.
type crdKey struct{ group, kind string }

// tableScope is whether o is cluster-scoped as the kind table and the
// chart's own definitions tell, without the cluster: the table's verdict
// for a built-in kind, which a definition may make cluster-scoped but
// never namespaced (one declaring its own ClusterRoleBinding of
// rbac.authorization.k8s.io namespaced would pass the policy with it);
// the definition's for a kind the chart defines in a group of its own
// whose name is also a built-in kind's (its own namespaced IPAddress of
// ipam.cluster.x-k8s.io is no networking.k8s.io IPAddress).
func tableScope(o Object, defined map[crdKey]bool) bool {
	key := crdKey{group: apiGroup(o.APIVersion), kind: o.Kind}
	scope, ok := defined[key]
	if k, builtin := lookupKind(o.Kind); builtin && k.ClusterScoped {
		if ok && apiGroup(k.APIVersion) != key.group && !builtinGroup(key.group) {
			return scope
		}
		return true
	}
	return scope
}

// builtinGroup reports whether group is Kubernetes' own: the core group,
// or one of *.k8s.io.
func builtinGroup(group string) bool {
	return group == "" || group == "k8s.io" || strings.HasSuffix(group, ".k8s.io")
}

// styrminGroup is the API group of Styrmin's own resources.
const styrminGroup = "styrmin.io"

// ownAPI reports whether o is an object of Styrmin's own API group, or a
// CustomResourceDefinition of it.
func ownAPI(o Object) bool {
	if apiGroup(o.APIVersion) == styrminGroup {
		return true
	}
	if o.Kind != "CustomResourceDefinition" || apiGroup(o.APIVersion) != "apiextensions.k8s.io" {
		return false
	}
	var crd struct {
		Spec struct {
			Group string `json:"group"`
		} `json:"spec"`
	}
	return yaml.Unmarshal(o.YAML, &crd) == nil && crd.Spec.Group == styrminGroup
}

// renderedCRDScopes returns whether each kind a rendered
// CustomResourceDefinition defines is cluster-scoped: its objects in the
// same chart are unknown to the table, and to the cluster until the
// release applies the definition (which Helm's install order does first).
// CheckPolicyWith takes only Cluster from it: a chart cannot rescope a
// built-in kind.
func renderedCRDScopes(objects []Object) map[crdKey]bool {
	var out map[crdKey]bool
	for _, o := range objects {
		if o.Kind != "CustomResourceDefinition" || apiGroup(o.APIVersion) != "apiextensions.k8s.io" {
			continue
		}
		var crd struct {
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
				Scope string `json:"scope"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(o.YAML, &crd); err != nil || crd.Spec.Names.Kind == "" {
			continue // the API server refuses it: nothing of the kind is created
		}
		if out == nil {
			out = map[crdKey]bool{}
		}
		out[crdKey{group: crd.Spec.Group, kind: crd.Spec.Names.Kind}] = crd.Spec.Scope == "Cluster"
	}
	return out
}

// apiGroup is the group of apiVersion ("" for the core group).
func apiGroup(apiVersion string) string {
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		return g
	}
	return ""
}

func policyNamespaces(p *Policy) []string {
	if p == nil {
		return nil
	}
	return p.Namespaces
}

func describeKinds(p *Policy) string {
	if p == nil || len(p.Kinds) == 0 {
		return "every namespaced kind"
	}
	return strings.Join(p.Kinds, ", ")
}

// Equal reports whether p and o allow the same: the same namespaces and
// kinds in the same order, the same service account (nil and the zero
// policy alike).
func (p *Policy) Equal(o *Policy) bool {
	if p.IsZero() || o.IsZero() {
		return p.IsZero() && o.IsZero()
	}
	return slices.Equal(p.Namespaces, o.Namespaces) && slices.Equal(p.Kinds, o.Kinds) && p.ServiceAccountName == o.ServiceAccountName
}
