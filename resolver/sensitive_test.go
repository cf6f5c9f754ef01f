package resolver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"

	"github.com/styrmin/styrmin/internal/secrettest"
)

func TestPlaceholderIsKeyedByDeploymentAndParameterAndFollowsTheValue(t *testing.T) {
	a := ID{Cluster: "c", Environment: "e", Name: "a"}
	b := ID{Cluster: "c", Environment: "e", Name: "b"}
	p := Placeholder(a, "token", "s3cret")
	if p != Placeholder(a, "token", "s3cret") {
		t.Error("the placeholder is not deterministic")
	}
	for name, other := range map[string]string{
		"another value":      Placeholder(a, "token", "s3cret2"),
		"another deployment": Placeholder(b, "token", "s3cret"),
		"another parameter":  Placeholder(a, "password", "s3cret"),
	} {
		if other == p {
			t.Errorf("%s gives the same placeholder", name)
		}
	}
	if d, ok := PlaceholderDigest(p); !ok || len(d) != 64 || !strings.HasPrefix(p, PlaceholderPrefix) {
		t.Errorf("PlaceholderDigest(%q) = %q, %v", p, d, ok)
	}
	if _, ok := PlaceholderDigest(PlaceholderPrefix + "nothex"); ok {
		t.Error("a malformed placeholder is taken for one")
	}
}

func TestMaskHidesEveryFormOfAValue(t *testing.T) {
	const v = "Pa ss/w0rd+x&y"
	s := Sensitive{Placeholder(ID{}, "p", v): v}
	var text strings.Builder
	for name, f := range secrettest.Forms(v) {
		text.WriteString(name + ": " + f + "\n")
	}
	got := s.Mask(text.String())
	if found := secrettest.Find([]byte(got), v); len(found) > 0 {
		t.Errorf("Mask left %s:\n%s", strings.Join(found, ", "), got)
	}
	if !strings.Contains(got, Masked) {
		t.Errorf("Mask wrote no %s:\n%s", Masked, got)
	}
}

// TestRevealSensitiveFindsTheLockedValueInGitOnly marks webapp's message
// sensitive and sets it in the deployment file: the instance holds a
// placeholder, Resolved.Sensitive the value, RevealSensitiveFS finds it
// again from the configuration, and refuses a configuration that gives
// another value without naming either.
func TestRevealSensitiveFindsTheLockedValueInGitOnly(t *testing.T) {
	const secret = "env-level-s3cret"
	dir := exampleCopy(t)
	spec := "drivers/webapp/1.1.0/driver.cue"
	src, err := os.ReadFile(filepath.Join(dir, spec))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, spec, strings.Replace(string(src), `message: *"Hello from Styrmin" | string & !=""`, `message: *"Hello from Styrmin" | string & !="" @styrmin(sensitive)`, 1))
	devWeb := "clusters/local/environments/dev/deployments/web.cue"
	writeFile(t, dir, devWeb, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \""+secret+"\"}\n")
	res, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	id := ID{Cluster: "local", Environment: "dev", Name: "web"}
	r, ok := res.Get(id)
	if !ok {
		t.Fatal("local/dev/web did not resolve")
	}
	ph, _ := r.Instance.Context.Parameters["message"].(string)
	if ph != Placeholder(id, "message", secret) || r.Sensitive[ph] != secret {
		t.Fatalf("message = %q, sensitive %v: want the placeholder, and its value in Resolved.Sensitive", ph, len(r.Sensitive))
	}
	numbered := *r.Instance
	numbered.Sequence = 1
	lock, err := EncodeLock(&numbered)
	if err != nil {
		t.Fatal(err)
	}
	if found := secrettest.Find(lock, secret); len(found) > 0 {
		t.Fatalf("the lockfile holds %s", strings.Join(found, ", "))
	}
	cat, err := drivers.LoadCatalog(os.DirFS(dir), "drivers", drivers.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	drv, ok := cat.Get("webapp", r.Instance.Driver.Version)
	if !ok {
		t.Fatal("webapp is not in the catalog")
	}
	got, err := RevealSensitiveFS(os.DirFS(dir), drv, r.Instance)
	if err != nil || got[ph] != secret || len(got) != 1 {
		t.Fatalf("RevealSensitiveFS = %d values, %v; want the one value", len(got), err)
	}
	writeFile(t, dir, devWeb, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \"changed-since\"}\n")
	_, err = RevealSensitiveFS(os.DirFS(dir), drv, r.Instance)
	if err == nil || !strings.Contains(err.Error(), "parameter message") || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "changed-since") {
		t.Fatalf("another value in the configuration: %v, want an error naming the parameter and no value", err)
	}
}

// TestRevealSensitiveFindsAnIngressControllersValue: an ingress
// controller's sensitive parameter is set in its cluster's ingress:
// block, which no deployment's layers hold. The agent's reveal looked for
// it among the environments' deployments, so such a controller could
// never be applied; it now reads ingress.parameters.
func TestRevealSensitiveFindsAnIngressControllersValue(t *testing.T) {
	const secret = "ingress-l1cense"
	dir := exampleCopy(t)
	spec := "drivers/ingress-nginx/1.0.0/driver.cue"
	src, err := os.ReadFile(filepath.Join(dir, spec))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, spec, strings.Replace(string(src), "\treplicas: *1 | int & >=1 & <=5\n", "\treplicas: *1 | int & >=1 & <=5\n\tlicense: *\"none\" | string @styrmin(sensitive)\n", 1))
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress("ingress: {driver: \"ingress-nginx\", parameters: license: \""+secret+"\"}"))
	res, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	var ingress *Resolved
	for _, r := range res.Resolved {
		if r.Instance.Internal == InternalIngress {
			ingress = r
		}
	}
	if ingress == nil {
		t.Fatal("no ingress controller resolved")
	}
	ph, _ := ingress.Instance.Context.Parameters["license"].(string)
	if ph != Placeholder(ingress.Instance.ID, "license", secret) {
		t.Fatalf("license = %q, want its placeholder", ph)
	}
	cat, err := drivers.LoadCatalog(os.DirFS(dir), "drivers", drivers.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	drv, ok := cat.Get("ingress-nginx", ingress.Instance.Driver.Version)
	if !ok {
		t.Fatal("ingress-nginx is not in the catalog")
	}
	got, err := RevealSensitiveFS(os.DirFS(dir), drv, ingress.Instance)
	if err != nil || got[ph] != secret || len(got) != 1 {
		t.Fatalf("RevealSensitiveFS = %d values, %v; want the one value", len(got), err)
	}
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress("ingress: {driver: \"ingress-nginx\", parameters: license: \"changed-since\"}"))
	_, err = RevealSensitiveFS(os.DirFS(dir), drv, ingress.Instance)
	if err == nil || !strings.Contains(err.Error(), "parameter license") || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "changed-since") {
		t.Fatalf("another value in the configuration: %v, want an error naming the parameter and no value", err)
	}
}
