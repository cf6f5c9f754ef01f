package drivers

import (
	"errors"
	"strings"
	"testing"
)

// TestAChartsOwnDefinitionNeverMakesABuiltInClusterScopedKindNamespaced
// pins that a CustomResourceDefinition the chart renders cannot rescope a
// kind the table knows as cluster-scoped: with its own definition of
// ClusterRoleBinding (rbac.authorization.k8s.io, Namespaced) beside a
// binding to cluster-admin, the binding is still judged cluster-scoped
// and refused by a policy that allows every namespaced kind and
// CustomResourceDefinitions, with or without the cluster's scope; and a
// definition of the core group declaring Namespace namespaced changes
// nothing either.
func TestAChartsOwnDefinitionNeverMakesABuiltInClusterScopedKindNamespaced(t *testing.T) {
	crd := func(group, kind string) Object {
		return Object{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: "x." + group,
			YAML: []byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec:\n  group: " + group + "\n  names:\n    kind: " + kind + "\n  scope: Namespaced\n")}
	}
	binding := Object{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding", Name: "grab",
		YAML: []byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: grab\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: default\n  namespace: dev-web\n")}
	namespace := Object{APIVersion: "v1", Kind: "Namespace", Name: "elsewhere"}
	c := Context{Environment: EnvironmentContext{Policy: &Policy{Kinds: []string{"*", "CustomResourceDefinition"}}}, Deployment: DeploymentContext{Namespace: "dev-web"}}
	// A cluster that does not serve the kinds yet: the table decides.
	unserved := func(Object) (bool, bool, error) { return false, false, nil }
	for _, tc := range []struct {
		name    string
		objects []Object
		want    string
	}{
		{"ClusterRoleBinding", []Object{crd("rbac.authorization.k8s.io", "ClusterRoleBinding"), binding},
			"ClusterRoleBinding grab: kind ClusterRoleBinding is cluster-scoped and not listed"},
		{"Namespace of the core group", []Object{crd("", "Namespace"), namespace},
			"Namespace elsewhere: kind Namespace is cluster-scoped and not listed"},
	} {
		for _, scope := range []ScopeFunc{nil, unserved} {
			err := CheckPolicyWith(c, &Manifests{Objects: tc.objects}, "local/dev/web", scope)
			var pe *PolicyError
			if !errors.As(err, &pe) || pe.Rule != "kinds" || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s (scope func %t): %v, want a PolicyError saying %q", tc.name, scope != nil, err, tc.want)
			}
		}
	}
}

// TestAChartsOwnNamespacedKindNamedLikeABuiltInOneStaysNamespaced: the kind
// table goes by name, and IPAddress is a cluster-scoped kind of
// networking.k8s.io; a chart's own namespaced IPAddress of another group,
// defined beside its objects, is judged as its definition says, as it was
// before definitions were kept from rescoping built-in kinds.
func TestAChartsOwnNamespacedKindNamedLikeABuiltInOneStaysNamespaced(t *testing.T) {
	def := Object{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: "ipaddresses.ipam.cluster.x-k8s.io",
		YAML: []byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec:\n  group: ipam.cluster.x-k8s.io\n  names:\n    kind: IPAddress\n  scope: Namespaced\n")}
	addr := Object{APIVersion: "ipam.cluster.x-k8s.io/v1beta1", Kind: "IPAddress", Namespace: "dev-web", Name: "a"}
	c := Context{Environment: EnvironmentContext{Policy: &Policy{Kinds: []string{"*", "CustomResourceDefinition"}}}, Deployment: DeploymentContext{Namespace: "dev-web"}}
	if err := CheckPolicyWith(c, &Manifests{Objects: []Object{def, addr}}, "local/dev/web", nil); err != nil {
		t.Fatalf("the chart's own namespaced IPAddress: %v, want it allowed", err)
	}
	// Without its definition, the name decides, as Helm's does.
	if err := CheckPolicyWith(c, &Manifests{Objects: []Object{addr}}, "local/dev/web", nil); err == nil {
		t.Fatal("an IPAddress nothing defines was allowed as namespaced")
	}
}
