package install

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/testcluster"
)

func render(t *testing.T, image string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := Render(Options{Cluster: "local", Repo: "https://git.example.com/d.git", Image: image, Version: "v0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func actions(as []Applied) map[string]int {
	out := map[string]int{}
	for _, a := range as {
		out[a.Action]++
	}
	return out
}

// Apply creates every object, a second Apply leaves them all unchanged,
// a changed image configures only the Deployment, and a CRD that would
// drop a version the cluster stores is refused before anything is
// applied.
func TestApplyCreatesUpgradesAndRefusesToDropAStoredVersion(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	ctx := context.Background()
	cl, err := newClient(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}

	objs := render(t, "agent:v0.1.0")
	got, err := Apply(ctx, c.RESTConfig, objs, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(objs) || actions(got)[Created] != len(objs) {
		t.Fatalf("first apply: %v, want %d created", got, len(objs))
	}
	if got[0].Object != "CustomResourceDefinition styrminbackups.styrmin.io" || got[len(got)-1].Object != "Deployment styrmin-system/styrmin-agent" {
		t.Errorf("order: first %s, last %s", got[0].Object, got[len(got)-1].Object)
	}

	got, err = Apply(ctx, c.RESTConfig, render(t, "agent:v0.1.0"), ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if actions(got)[Unchanged] != len(objs) {
		t.Errorf("second apply: %v, want all unchanged", got)
	}

	got, err = Apply(ctx, c.RESTConfig, render(t, "agent:v0.2.0"), ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := actions(got); a[Configured] != 1 || got[len(got)-1].Action != Configured {
		t.Errorf("new image: %v, want only the Deployment configured", got)
	}

	// The next definition renames v1alpha1: the cluster stores objects at
	// it, so it is refused, and nothing else (the image) is applied.
	next := render(t, "agent:v0.3.0")
	for _, u := range next {
		if isCRD(u) && u.GetName() == "styrmintasks.styrmin.io" {
			versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
			versions[0].(map[string]any)["name"] = "v1beta1"
			if err := unstructured.SetNestedSlice(u.Object, versions, "spec", "versions"); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err = Apply(ctx, c.RESTConfig, next, ApplyOptions{})
	var sv *StoredVersionError
	if !errors.As(err, &sv) || sv.CRD != "styrmintasks.styrmin.io" || sv.Version != "v1alpha1" {
		t.Fatalf("err = %v, want a StoredVersionError for styrmintasks.styrmin.io v1alpha1", err)
	}
	t.Log(err)
	var crd apiextensionsv1.CustomResourceDefinition
	if err := cl.Get(ctx, client.ObjectKey{Name: "styrmintasks.styrmin.io"}, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1alpha1" {
		t.Errorf("CRD versions changed: %+v", crd.Spec.Versions)
	}
	var dep appsv1.Deployment
	if err := cl.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: agentDeployment}, &dep); err != nil {
		t.Fatal(err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != "agent:v0.2.0" {
		t.Errorf("image = %s after a refused apply, want agent:v0.2.0", img)
	}
}
