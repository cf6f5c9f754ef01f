package drivers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
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
		// Styrmin's own objects, under any policy: a chart applied by the
		// agent would act through it (a restore of another environment).
		{"a StyrminRestore, default policy", nil, scope, obj("styrmin.io/v1alpha1", "StyrminRestore", "r"),
			"StyrminRestore is Styrmin's own API (styrmin.io): a chart may not make or define its objects"},
		{"a StyrminTask, listed by the policy", &Policy{Kinds: []string{"*", "StyrminTask"}}, scope, obj("styrmin.io/v1alpha1", "StyrminTask", "t"),
			"StyrminTask is Styrmin's own API"},
		{"a definition of Styrmin's API", &Policy{Kinds: []string{"*", "CustomResourceDefinition"}}, scope,
			Object{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: "styrmintasks.styrmin.io",
				YAML: []byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: styrmintasks.styrmin.io\nspec:\n  group: styrmin.io\n  scope: Namespaced\n  names: {kind: StyrminTask, plural: styrmintasks}\n")},
			"CustomResourceDefinition is Styrmin's own API"},
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

// TestRenderForPolicyJudgesAsTheWholeRender pins the lock's lighter
// render: the same objects in the same order as Render, with the text of
// CustomResourceDefinitions only, an Ingress's hosts as the whole render reads
// them from its text, and the same verdict of the policy; a
// cluster-scoped kind the chart's own definition declares is refused on
// both, and allowed on both when the policy lists it.
func TestRenderForPolicyJudgesAsTheWholeRender(t *testing.T) {
	fsys := minimalFS()
	fsys["chart/templates/gadgets.yaml"] = &fstest.MapFile{Data: []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clustergadgets.example.com
spec:
  group: example.com
  names: {kind: ClusterGadget, plural: clustergadgets}
  scope: Cluster
  versions: [{name: v1, served: true, storage: true}]
---
apiVersion: example.com/v1
kind: ClusterGadget
metadata:
  name: {{ .Release.Name }}-gadget
`)}
	mini, err := Load(fsys, LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	cat := loadExamples(t)
	webapp, _ := cat.Get("webapp", "1.1.0")
	graphhub, _ := cat.Get("graphhub", "2.0.0")
	for _, d := range []*Driver{mini, webapp, graphhub} {
		c := exampleContext(d)
		vals, err := d.Values(c)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := d.Render(c, vals)
		if err != nil {
			t.Fatal(err)
		}
		light, err := d.RenderForPolicy(context.Background(), c, vals)
		if err != nil {
			t.Fatal(err)
		}
		if len(light.Objects) != len(whole.Objects) {
			t.Fatalf("%s: %d objects for the policy, %d rendered", d.Name, len(light.Objects), len(whole.Objects))
		}
		for i, o := range light.Objects {
			w := whole.Objects[i]
			wantText := []byte(nil)
			if w.Kind == "CustomResourceDefinition" {
				wantText = w.YAML
			}
			wantHosts, err := IngressHosts(Object{APIVersion: w.APIVersion, Kind: w.Kind, Name: w.Name, YAML: w.YAML})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.Hosts, wantHosts) || !slices.Equal(w.Hosts, wantHosts) {
				t.Errorf("%s: %s %s claims %v for the policy and %v rendered, want %v as its text reads", d.Name, w.Kind, w.Name, o.Hosts, w.Hosts, wantHosts)
			}
			if IsIngress(w) && len(wantHosts) == 0 {
				t.Errorf("%s: Ingress %s claims no host", d.Name, w.Name)
			}
			if o.APIVersion != w.APIVersion || o.Kind != w.Kind || o.Namespace != w.Namespace || o.Name != w.Name || o.Component != w.Component || !bytes.Equal(o.YAML, wantText) {
				t.Errorf("%s: object %d for the policy is %+v, rendered %+v", d.Name, i, o, w)
			}
		}
		definesOnly := &Policy{Kinds: []string{"*", "CustomResourceDefinition"}}
		listsTheKind := &Policy{Kinds: []string{"*", "CustomResourceDefinition", "ClusterGadget"}}
		for _, p := range []*Policy{nil, definesOnly, listsTheKind} {
			c.Environment.Policy = p
			got, want := fmt.Sprint(CheckPolicy(c, light, "local/dev/x")), fmt.Sprint(CheckPolicy(c, whole, "local/dev/x"))
			if got != want {
				t.Errorf("%s, policy %+v: %s for the policy render, %s for the whole", d.Name, p, got, want)
			}
			if d != mini {
				continue
			}
			if refused := strings.Contains(got, "kind ClusterGadget is cluster-scoped and not listed"); refused != (p == definesOnly) {
				t.Errorf("mini, policy %+v: %s", p, got)
			}
			if (got == "<nil>") != (p == listsTheKind) {
				t.Errorf("mini, policy %+v: %s", p, got)
			}
		}
	}
}
