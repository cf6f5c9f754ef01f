package drivers

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestCheckPolicyWithTheClustersScope pins that the agent's check judges
// an object by the scope the cluster serves its kind with, not by the
// kind's name: a custom cluster-scoped kind (unknown to the kind table,
// so rendered into the deployment's namespace) is refused under the
// default policy, naming the object without that namespace, the rule and
// what is allowed; it is allowed when the policy lists it; a namespaced
// custom kind is allowed; a kind the cluster does not serve falls back
// to the table; a kind a CustomResourceDefinition of the same chart
// defines takes that definition's scope, with or without a cluster; and a
// cluster that cannot be asked fails the check without a PolicyError.
func TestCheckPolicyWithTheClustersScope(t *testing.T) {
	served := map[string]bool{ // apiVersion/kind → cluster-scoped
		"cert-manager.io/v1/ClusterIssuer": true,
		"kyverno.io/v1/ClusterPolicy":      true,
		"cert-manager.io/v1/Issuer":        false,
	}
	scope := func(o Object) (bool, bool, error) {
		cs, ok := served[o.APIVersion+"/"+o.Kind]
		return cs, ok, nil
	}
	obj := func(apiVersion, kind, name string) Object {
		// What rendering makes of a kind the table does not know.
		return Object{APIVersion: apiVersion, Kind: kind, Namespace: "dev-web", Name: name}
	}
	for _, tc := range []struct {
		name   string
		policy *Policy
		scope  ScopeFunc
		obj    Object
		want   string // "" allowed, else what the error must say
	}{
		{"custom cluster-scoped kind, default policy", nil, scope, obj("cert-manager.io/v1", "ClusterIssuer", "letsencrypt"),
			"ClusterIssuer letsencrypt: kind ClusterIssuer is cluster-scoped and not listed; allowed: every namespaced kind (environment policy kinds)"},
		{`custom cluster-scoped kind, policy "*"`, &Policy{Kinds: []string{"*"}}, scope, obj("kyverno.io/v1", "ClusterPolicy", "p"),
			"ClusterPolicy p: kind ClusterPolicy is cluster-scoped and not listed; allowed: *"},
		{"custom cluster-scoped kind listed by the policy", &Policy{Kinds: []string{"*", "ClusterIssuer"}}, scope, obj("cert-manager.io/v1", "ClusterIssuer", "letsencrypt"), ""},
		{"custom namespaced kind, default policy", nil, scope, obj("cert-manager.io/v1", "Issuer", "local"), ""},
		{"custom namespaced kind in another namespace", nil, scope, Object{APIVersion: "cert-manager.io/v1", Kind: "Issuer", Namespace: "other", Name: "x"},
			`namespace "other" is outside the environment's namespaces (allowed: dev-web) (environment policy namespaces)`},
		{"kind the cluster does not serve: the table", nil, scope, obj("example.com/v1", "Widget", "w"), ""},
		{"built-in kind the cluster does not serve: the table", nil, scope, Object{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "r"},
			"kind ClusterRole is cluster-scoped and not listed"},
		{"no scope function: the table alone", nil, nil, obj("cert-manager.io/v1", "ClusterIssuer", "letsencrypt"), ""},
	} {
		c := Context{Environment: EnvironmentContext{Policy: tc.policy}, Deployment: DeploymentContext{Namespace: "dev-web"}}
		err := CheckPolicyWith(c, &Manifests{Objects: []Object{tc.obj}}, "local/dev/web", tc.scope)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want allowed", tc.name, err)
			}
			continue
		}
		var pe *PolicyError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "deployment local/dev/web: ") {
			t.Errorf("%s: %v, want a PolicyError of local/dev/web saying %q", tc.name, err, tc.want)
		}
	}

	// A kind a CustomResourceDefinition of the same chart defines is not
	// served yet when the check runs (the release applies the definition
	// first): the definition's scope decides, with or without a cluster.
	crd := func(kind, scope string) Object {
		return Object{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: "gadgets.example.com",
			YAML: []byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec:\n  group: example.com\n  names:\n    kind: " + kind + "\n  scope: " + scope + "\n")}
	}
	mayDefine := Context{Environment: EnvironmentContext{Policy: &Policy{Kinds: []string{"*", "CustomResourceDefinition"}}}, Deployment: DeploymentContext{Namespace: "dev-web"}}
	for _, sc := range []ScopeFunc{nil, scope} {
		err := CheckPolicyWith(mayDefine, &Manifests{Objects: []Object{crd("ClusterGadget", "Cluster"), obj("example.com/v1", "ClusterGadget", "g")}}, "local/dev/web", sc)
		if !strings.Contains(fmt.Sprint(err), "ClusterGadget g: kind ClusterGadget is cluster-scoped and not listed") {
			t.Errorf("a cluster-scoped kind the chart defines (scope func %v): %v, want refused", sc != nil, err)
		}
		if err := CheckPolicyWith(mayDefine, &Manifests{Objects: []Object{crd("Gadget", "Namespaced"), obj("example.com/v1", "Gadget", "g")}}, "local/dev/web", sc); err != nil {
			t.Errorf("a namespaced kind the chart defines (scope func %v): %v, want allowed", sc != nil, err)
		}
	}

	// A cluster that cannot be asked fails the check, but with no
	// PolicyError: the agent retries instead of stalling.
	failing := func(Object) (bool, bool, error) { return false, false, errors.New("discovery unavailable") }
	err := CheckPolicyWith(Context{}, &Manifests{Objects: []Object{obj("cert-manager.io/v1", "ClusterIssuer", "letsencrypt")}}, "local/dev/web", failing)
	var pe *PolicyError
	if err == nil || errors.As(err, &pe) || !strings.Contains(err.Error(), "ClusterIssuer dev-web/letsencrypt") || !strings.Contains(err.Error(), "discovery unavailable") {
		t.Errorf("scope failing: %v, want an error naming the object and the cause, no PolicyError", err)
	}
}
