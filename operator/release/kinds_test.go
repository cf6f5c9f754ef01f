package release_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/testcluster"
)

// TestKindTableMatchesTheAPIServer pins drivers' static table of
// cluster-scoped kinds to what a real API server serves: rendering and the
// CLI's policy check scope a chart's objects by kind name alone, so a
// built-in cluster-scoped kind missing from the table would be rendered
// into the deployment's namespace, pass the default policy and still be
// created cluster-wide. Every alpha and beta API is served, so the table
// covers kinds a cluster may turn on too. The bare control plane has no
// CRD: custom kinds are the agent's to scope, from discovery.
func TestKindTableMatchesTheAPIServer(t *testing.T) {
	t.Parallel()
	c := testcluster.StartT(t, testcluster.Options{APIServerArgs: []string{"--runtime-config=api/all=true"}})
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{} // kind → cluster-scoped
	for _, l := range lists {
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // a subresource
			}
			if scoped, seen := served[r.Kind]; seen && scoped != !r.Namespaced {
				t.Errorf("kind %s is served both namespaced and cluster-scoped (%s)", r.Kind, l.GroupVersion)
			}
			served[r.Kind] = !r.Namespaced
			if got := drivers.IsClusterScoped(r.Kind); got != !r.Namespaced {
				t.Errorf("%s %s: IsClusterScoped = %v, but the API server serves it with namespaced=%v", l.GroupVersion, r.Kind, got, r.Namespaced)
			}
		}
	}
	// The table has no kind the API server does not serve (a typo, or a
	// kind Kubernetes removed).
	for _, k := range drivers.ClusterScopedKinds() {
		if _, ok := served[k]; !ok {
			t.Errorf("cluster-scoped kind %s in the table is not served by the API server", k)
		}
	}
	if len(served) == 0 || !slices.Contains(drivers.ClusterScopedKinds(), "Namespace") {
		t.Fatalf("discovery found nothing: %d kinds", len(served))
	}
}
