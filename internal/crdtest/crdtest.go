package crdtest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

// Start starts a control plane (stopped when the test ends) serving the
// styrmin.io CRDs, makes namespace ns and returns an administrator's
// client of a scheme holding the built-in kinds, the CRDs' and
// Styrmin's, made once discovery serves every Styrmin kind.
func Start(t testing.TB, ns string) client.Client {
	t.Helper()
	c := testcluster.StartT(t, testcluster.Options{})
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kinds := map[string]bool{}
	for _, doc := range config.CRDs() {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(doc, &crd); err != nil {
			t.Fatal(err)
		}
		if err := cl.Create(ctx, &crd); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(&crd), &crd); err != nil {
				return false, err
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("CRD %s not established: %v", crd.Name, err)
		}
		kinds[crd.Spec.Names.Kind] = true
	}
	// Established is not yet served by discovery: a client that looked
	// the group up in between knows it without the last kinds (seen with
	// tests running side by side). A client made once discovery lists
	// every kind does not.
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
		if err != nil {
			return false, nil
		}
		served := 0
		for _, r := range list.APIResources {
			if kinds[r.Kind] && !strings.Contains(r.Name, "/") {
				served++
			}
		}
		return served == len(kinds), nil
	})
	if err != nil {
		t.Fatalf("discovery does not serve every styrmin.io kind: %v", err)
	}
	if cl, err = client.New(c.RESTConfig, client.Options{Scheme: s}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return cl
}
