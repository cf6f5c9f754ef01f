package config_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/operator"
)

// TestMemoryLimitFlagFollowsTheContainerLimit pins that the agent's soft
// memory limit comes from its container's limit through the downward API,
// and that what the kubelet puts into --memory-limit parses to a limit
// below the container's, with at most 10% of it left to what Go does not
// count.
func TestMemoryLimitFlagFollowsTheContainerLimit(t *testing.T) {
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(config.AgentDeployment(), &d); err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	var flag string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--memory-limit="); ok {
			flag = v
		}
	}
	if flag == "" {
		t.Fatalf("args %v have no --memory-limit", c.Args)
	}
	limit := c.Resources.Limits.Memory()
	if limit.IsZero() {
		t.Fatal("the agent's container has no memory limit")
	}
	expanded := flag
	for _, e := range c.Env {
		ref := e.ValueFrom
		if ref == nil || ref.ResourceFieldRef == nil {
			continue
		}
		if r := ref.ResourceFieldRef; r.Resource != "limits.memory" || r.ContainerName != c.Name {
			t.Fatalf("env %s reads %s of container %q, want limits.memory of %q", e.Name, r.Resource, r.ContainerName, c.Name)
		}
		// What the kubelet sets: the limit in units of the divisor, rounded up.
		divisor := ref.ResourceFieldRef.Divisor
		if divisor.IsZero() {
			divisor = resource.MustParse("1")
		}
		v := int64(math.Ceil(float64(limit.Value()) / float64(divisor.Value())))
		expanded = strings.ReplaceAll(expanded, "$("+e.Name+")", fmt.Sprint(v))
	}
	if expanded == flag {
		t.Fatalf("--memory-limit=%s reads no env from the downward API", flag)
	}
	got, err := operator.SoftMemoryLimit(expanded, "", nil)
	if err != nil {
		t.Fatalf("--memory-limit=%s (the kubelet's %s): %v", flag, expanded, err)
	}
	if hard := limit.Value(); got >= hard || got < hard*9/10 {
		t.Fatalf("--memory-limit=%s: soft limit %d bytes for a container limit of %d, want in [90%%, 100%%)", expanded, got, hard)
	}
}

// TestKustomizeBuildsTheManifests pins that `kubectl apply -k config/`
// (kustomize, as kubectl links it) builds and gives the embedded
// manifests plus the admission policy.
func TestKustomizeBuildsTheManifests(t *testing.T) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.Resources() {
		got = append(got, r.GetKind()+"/"+r.GetName())
	}
	var want []string
	for _, doc := range append(config.Manifests(), splitDocs(config.AdmissionPolicy())...) {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		want = append(want, obj.Kind+"/"+obj.Metadata.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("kustomize build gives %v, want %v", got, want)
	}
}

func splitDocs(b []byte) [][]byte {
	var out [][]byte
	for _, doc := range strings.Split(string(b), "\n---\n") {
		out = append(out, []byte(doc))
	}
	return out
}

// TestInstallOverlayExampleSetsTheClusterAndRepository pins that the
// overlay README's install section shows (examples/install) builds on
// this base and sets the flags it means to: the base's first two args are
// --cluster and --repo.
func TestInstallOverlayExampleSetsTheClusterAndRepository(t *testing.T) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../examples/install")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Resources() {
		if r.GetKind() != "Deployment" {
			continue
		}
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict(doc, &d); err != nil {
			t.Fatal(err)
		}
		c := d.Spec.Template.Spec.Containers[0]
		if len(c.Args) < 2 || c.Args[0] != "--cluster=prod-eu" || c.Args[1] != "--repo=https://github.com/acme/desired-state.git" {
			t.Errorf("args %v, want --cluster=prod-eu and the repository first", c.Args)
		}
		if c.Image != config.AgentImage+":v0.1.0" {
			t.Errorf("image %s", c.Image)
		}
		return
	}
	t.Fatal("the overlay has no Deployment")
}
