package config

import (
	"os"
	"path"
	"regexp"
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
		case "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service":
			if obj.Metadata.Namespace != AgentNamespace {
				t.Errorf("%s %s is in namespace %q, want %s", obj.Kind, obj.Metadata.Name, obj.Metadata.Namespace, AgentNamespace)
			}
		}
	}
	if n := len(CRDs()); n != 5 {
		t.Errorf("%d CRDs embedded, want 5 (StyrminBackup, StyrminDeployment, StyrminRestore, StyrminSource, StyrminTask)", n)
	}
}

// TestKustomizationListsEveryFileButTheExamples pins that `kubectl apply
// -k config/` installs every manifest kept here, and none of the Secret
// examples, whose placeholders would replace real credentials.
func TestKustomizationListsEveryFileButTheExamples(t *testing.T) {
	var files []string
	for _, dir := range []string{"crd", "rbac", "agent", "admission"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".yaml") && !strings.HasSuffix(e.Name(), ".example.yaml") {
				files = append(files, path.Join(dir, e.Name()))
			}
		}
	}
	slices.Sort(files)
	got := slices.Clone(readKustomization(t).Resources)
	slices.Sort(got)
	if !slices.Equal(got, files) {
		t.Fatalf("kustomization resources %v, files %v", got, files)
	}
	if n := len(SecretExamples()); n != 2 {
		t.Errorf("%d Secret examples, want 2 (repository, webhook)", n)
	}
}

// TestAgentImageIsAVersionAndKustomizeSetsIt pins that the Deployment
// runs a released version of the agent, never a moving tag, and that
// kustomization.yaml names the same image and tag, so `kustomize edit set
// image` is the one place to change it.
func TestAgentImageIsAVersionAndKustomizeSetsIt(t *testing.T) {
	image := agentContainer(t)["image"].(string)
	repo, tag, ok := strings.Cut(image, ":")
	if !ok || repo != AgentImage || !releaseTag.MatchString(tag) || tag != AgentImageTag {
		t.Fatalf("agent image %q, want %s:%s (a vX.Y.Z)", image, AgentImage, AgentImageTag)
	}
	k := readKustomization(t)
	if len(k.Images) != 1 || k.Images[0].Name != AgentImage || k.Images[0].NewTag != tag {
		t.Fatalf("kustomization images %+v, want one entry %s with newTag %s", k.Images, AgentImage, tag)
	}
}

var releaseTag = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

// TestAgentWritesOnlyToItsVolumes pins that the root filesystem is
// read-only and /tmp (known_hosts for ssh repositories) and the clone
// folder are emptyDir volumes.
func TestAgentWritesOnlyToItsVolumes(t *testing.T) {
	c := agentContainer(t)
	sc, _ := c["securityContext"].(map[string]any)
	if sc["readOnlyRootFilesystem"] != true {
		t.Errorf("securityContext %v, want readOnlyRootFilesystem: true", sc)
	}
	var d struct {
		Spec struct {
			Template struct {
				Spec struct {
					Volumes []struct {
						Name     string          `json:"name"`
						EmptyDir *map[string]any `json:"emptyDir"`
					} `json:"volumes"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(AgentDeployment(), &d); err != nil {
		t.Fatal(err)
	}
	emptyDirs := map[string]bool{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		emptyDirs[v.Name] = v.EmptyDir != nil
	}
	mounts := map[string]string{}
	for _, m := range c["volumeMounts"].([]any) {
		m := m.(map[string]any)
		mounts[m["mountPath"].(string)] = m["name"].(string)
	}
	for _, p := range []string{"/tmp", "/var/lib/styrmin"} {
		if name, ok := mounts[p]; !ok || !emptyDirs[name] {
			t.Errorf("%s: mounted from %q (emptyDir %v), want an emptyDir volume", p, name, emptyDirs[name])
		}
	}
	if !slices.Contains(stringArgs(c), "--clone-dir=/var/lib/styrmin/repo") {
		t.Errorf("args %v do not clone into the work volume", c["args"])
	}
}

type kustomization struct {
	Resources []string `json:"resources"`
	Images    []struct {
		Name   string `json:"name"`
		NewTag string `json:"newTag"`
	} `json:"images"`
}

func readKustomization(t *testing.T) kustomization {
	t.Helper()
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	return k
}

// agentContainer returns the Deployment's container "agent".
func agentContainer(t *testing.T) map[string]any {
	t.Helper()
	var d map[string]any
	if err := yaml.Unmarshal(AgentDeployment(), &d); err != nil {
		t.Fatal(err)
	}
	spec := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	for _, c := range spec["containers"].([]any) {
		if c := c.(map[string]any); c["name"] == "agent" {
			return c
		}
	}
	t.Fatal("the Deployment has no container named agent")
	return nil
}

func stringArgs(c map[string]any) []string {
	var out []string
	for _, a := range c["args"].([]any) {
		out = append(out, a.(string))
	}
	return out
}
