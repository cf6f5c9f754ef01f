package config

import (
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestManifestsAreObjects pins that every embedded manifest is one
// Kubernetes object with apiVersion, kind and name, and that the agent's
// objects live in the agent's namespace.
func TestManifestsAreObjects(t *testing.T) {
	for i, doc := range Manifests() {
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("manifest %d: %v", i, err)
		}
		if obj.APIVersion == "" || obj.Kind == "" || obj.Metadata.Name == "" {
			t.Fatalf("manifest %d: missing apiVersion, kind or name:\n%s", i, doc)
		}
		switch obj.Kind {
		case "ServiceAccount", "Role", "RoleBinding", "Deployment":
			if obj.Metadata.Namespace != AgentNamespace {
				t.Errorf("%s %s is in namespace %q, want %s", obj.Kind, obj.Metadata.Name, obj.Metadata.Namespace, AgentNamespace)
			}
		}
	}
	if n := len(CRDs()); n != 3 {
		t.Errorf("%d CRDs embedded, want 3 (StyrminDeployment, StyrminTask, StyrminSource)", n)
	}
}

// TestKustomizationListsEveryFile pins that `kubectl apply -k config/`
// installs every manifest kept here.
func TestKustomizationListsEveryFile(t *testing.T) {
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, dir := range []string{"crd", "rbac", "agent", "admission"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".yaml") {
				files = append(files, path.Join(dir, e.Name()))
			}
		}
	}
	slices.Sort(files)
	got := slices.Clone(k.Resources)
	slices.Sort(got)
	if !slices.Equal(got, files) {
		t.Fatalf("kustomization resources %v, files %v", got, files)
	}
}
