package operator_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

func TestCompareVersionsOrdersReleasesPseudoVersionsAndGitDescribe(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
		ok   bool
	}{
		{"v0.2.0", "v0.1.9", 1, true},
		{"v0.2.0", "0.2.0", 0, true},
		{"v0.2.0-rc.1", "v0.2.0", -1, true},
		{"v0.3.1-0.20261201150405-abcdef123456", "v0.3.0", 1, true},
		{"v0.3.1-0.20261201150405-abcdef123456", "v0.3.1", -1, true},
		{"v0.3.0-5-gabcdef1", "v0.3.0", 1, true},
		{"v0.3.0-5-gabcdef1-dirty", "v0.3.0-12-g0123456", -1, true},
		{"v0.3.0-dirty", "v0.3.0", 0, true},
		{"v0.3.0-5-gabcdef1", "v0.3.1-rc.1", -1, true},
		{"(devel)", "v0.1.0", 0, false},
		{"v0.1.0", "", 0, false},
		{"abcdef1", "v0.1.0", 0, false},
	} {
		got, ok := operator.CompareVersions(tc.a, tc.b)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CompareVersions(%q, %q) = %d, %v; want %d, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct {
		live, self string
		want       bool
	}{
		{"v0.3.0", "v0.2.0", true},
		{"v0.3.0", "(devel)", true}, // cannot tell: a build without a version does not replace a release's
		{"v0.2.0", "v0.2.0", false},
		{"v0.2.0", "v0.3.0", false},
		{"(devel)", "v0.1.0", false},
		{"", "v0.1.0", false},
	} {
		if got := operator.NewerVersion(tc.live, tc.self); got != tc.want {
			t.Errorf("NewerVersion(%q, %q) = %v, want %v", tc.live, tc.self, got, tc.want)
		}
	}
}

// A rolled-back agent (--install-crds) must not roll the CRDs back: a CRD
// applied by a newer version is left as it is, with a log line naming it
// and both versions; the others are applied and stamped with the agent's
// version, and a newer agent applies them all again.
func TestInstallCRDsLeavesCRDsOfANewerVersionAndStampsItsOwn(t *testing.T) {
	t.Parallel()
	c := testcluster.StartT(t, testcluster.Options{})
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logged []string
	ctx := logr.NewContext(context.Background(), funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{}))
	get := func(name string) *apiextensionsv1.CustomResourceDefinition {
		t.Helper()
		var crd apiextensionsv1.CustomResourceDefinition
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			t.Fatal(err)
		}
		return &crd
	}
	const tasks, deployments = "styrmintasks.styrmin.io", "styrmindeployments.styrmin.io"

	if err := operator.InstallCRDsAs(ctx, c.RESTConfig, "v0.2.0"); err != nil {
		t.Fatal(err)
	}
	if v := get(tasks).Annotations[operator.AnnotationCRDVersion]; v != "v0.2.0" {
		t.Fatalf("CRD %s stamped %q, want v0.2.0", tasks, v)
	}

	// v0.3.0's agent applied its own schema (here: a description it
	// added), as InstallCRDs applies.
	crd := get(tasks)
	crd.Annotations[operator.AnnotationCRDVersion] = "v0.3.0"
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Description = "the schema of v0.3.0"
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	crd.ResourceVersion, crd.ManagedFields, crd.Status = "", nil, apiextensionsv1.CustomResourceDefinitionStatus{}
	//nolint:staticcheck // as InstallCRDs applies
	if err := cl.Patch(ctx, crd, client.Apply, client.FieldOwner(v1alpha1.FieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}

	// The agent rolled back to v0.2.0 starts.
	if err := operator.InstallCRDsAs(ctx, c.RESTConfig, "v0.2.0"); err != nil {
		t.Fatal(err)
	}
	crd = get(tasks)
	if crd.Annotations[operator.AnnotationCRDVersion] != "v0.3.0" || crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Description != "the schema of v0.3.0" {
		t.Errorf("an agent of v0.2.0 rolled back CRD %s of v0.3.0: annotation %q, description %q", tasks,
			crd.Annotations[operator.AnnotationCRDVersion], crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Description)
	}
	if v := get(deployments).Annotations[operator.AnnotationCRDVersion]; v != "v0.2.0" {
		t.Errorf("CRD %s stamped %q, want v0.2.0 (only the newer CRD is left)", deployments, v)
	}
	mu.Lock()
	log := strings.Join(logged, "\n")
	mu.Unlock()
	for _, want := range []string{"not applying CRD", `"crd"="` + tasks + `"`, `"appliedBy"="v0.3.0"`, `"agentVersion"="v0.2.0"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, deployments) {
		t.Errorf("the log names %s, which was applied:\n%s", deployments, log)
	}

	// A build without a release version cannot tell either: it leaves it.
	if err := operator.InstallCRDsAs(ctx, c.RESTConfig, "(devel)"); err != nil {
		t.Fatal(err)
	}
	if v := get(tasks).Annotations[operator.AnnotationCRDVersion]; v != "v0.3.0" {
		t.Errorf("a (devel) agent replaced CRD %s of v0.3.0 (annotation %q)", tasks, v)
	}

	// A newer agent applies it.
	if err := operator.InstallCRDsAs(ctx, c.RESTConfig, "v0.3.1"); err != nil {
		t.Fatal(err)
	}
	crd = get(tasks)
	if crd.Annotations[operator.AnnotationCRDVersion] != "v0.3.1" || crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Description == "the schema of v0.3.0" {
		t.Errorf("v0.3.1 did not apply CRD %s: annotation %q, description %q", tasks,
			crd.Annotations[operator.AnnotationCRDVersion], crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Description)
	}
}
