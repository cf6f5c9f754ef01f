package drivers

import (
	"bytes"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"testing/fstest"
)

// TestRenderCacheRendersEachInputOnce pins the cache: the same driver,
// context and values render once (the second call returns the same
// manifests); other values or another context render again; values
// that differ only in their Go types (int and float64 of one number)
// are one input, rendered from their JSON form as the agent renders a
// lockfile's; the output is the uncached render's.
func TestRenderCacheRendersEachInputOnce(t *testing.T) {
	rc := NewRenderCache()
	cat, err := LoadCatalog(os.DirFS(examples), ".", LoadOptions{Source: "examples/drivers", RenderCache: rc})
	if err != nil {
		t.Fatal(err)
	}
	plain := loadExamples(t)
	d, _ := cat.Get("webapp", "1.1.0")
	pd, _ := plain.Get("webapp", "1.1.0")
	c := exampleContext(d)
	vals, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	first, err := d.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	again, err := d.RenderInProcess(t.Context(), c, vals)
	if err != nil || again != first || rc.Len() != 1 {
		t.Fatalf("the same input rendered again (%d cached, same manifests: %v, %v)", rc.Len(), again == first, err)
	}
	want, err := pd.Render(c, vals)
	if err != nil || !bytes.Equal(want.YAML(), first.YAML()) {
		t.Fatalf("the cached render differs from the uncached one (%v)", err)
	}

	asFloat := map[string]any{}
	for k, v := range vals {
		asFloat[k] = v
	}
	asFloat["replicaCount"] = float64(toInt(t, vals["replicaCount"]))
	if m, err := d.Render(c, asFloat); err != nil || m != first || rc.Len() != 1 {
		t.Fatalf("the same number as a float64 is another input (%d cached, %v)", rc.Len(), err)
	}

	asFloat["replicaCount"] = float64(toInt(t, vals["replicaCount"]) + 1)
	other, err := d.Render(c, asFloat)
	if err != nil || other == first || rc.Len() != 2 || bytes.Equal(other.YAML(), first.YAML()) {
		t.Fatalf("other values: %d cached, %v", rc.Len(), err)
	}
	c.Deployment.Name = "other"
	if _, err := d.Render(c, vals); err != nil || rc.Len() != 3 {
		t.Fatalf("another context: %d cached, %v", rc.Len(), err)
	}
}

func toInt(t *testing.T, v any) int {
	t.Helper()
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	}
	t.Fatalf("%T is no number", v)
	return 0
}

// TestRenderCacheSharesDocumentsAndSpecsExactly renders every example
// driver for contexts that share most of their documents and spec
// evaluations (another domain, another namespace, the same again) through
// one cache, and compares each with the uncached render: what the cache
// shares must not leak between renders (a render changes its objects).
func TestRenderCacheSharesDocumentsAndSpecsExactly(t *testing.T) {
	rc := NewRenderCache()
	cat, err := LoadCatalog(os.DirFS(examples), ".", LoadOptions{Source: "examples/drivers", RenderCache: rc})
	if err != nil {
		t.Fatal(err)
	}
	edits := []func(*Context){
		func(*Context) {},
		func(c *Context) { c.Cluster.Domain = "other.example.com" },
		func(c *Context) { c.Deployment.Namespace = "elsewhere" },
		func(c *Context) { c.Cluster.Domain = "other.example.com" },
	}
	// The uncached renders are each a driver's first: a driver remembers
	// its components and patches by context too.
	plain := make([]*Catalog, len(edits))
	for i := range plain {
		plain[i] = loadExamples(t)
	}
	for _, name := range cat.Names() {
		for _, d := range cat.Versions(name) {
			for i, edit := range edits {
				pd, _ := plain[i].Get(name, d.Version)
				c := exampleContext(d)
				edit(&c)
				vals, err := d.Values(c)
				if err != nil {
					t.Fatal(err)
				}
				got, err := d.Render(c, vals)
				if err != nil {
					t.Fatal(err)
				}
				want, err := pd.Render(c, vals)
				if err != nil || !bytes.Equal(want.YAML(), got.YAML()) {
					t.Fatalf("%s@%s: the cached render differs from the uncached one (%v):\n%s\nwant:\n%s", name, d.Version, err, got.YAML(), want.YAML())
				}
			}
		}
	}
	specs := 0
	for _, name := range cat.Names() {
		for _, d := range cat.Versions(name) {
			specs += int(d.compiled.renderSpecCount.Load())
		}
	}
	if len(rc.docs) == 0 || specs == 0 {
		t.Errorf("%d documents cached and %d specs remembered", len(rc.docs), specs)
	}
}

// TestSpecKeyNarrowsToTheSelectedFields pins what the spec cache keys
// on: the context fields a spec selects (webapp 1.1.0's components and
// patches name the deployment and the cluster, not the domain), and the
// whole context parts once the spec constrains the context itself.
func TestSpecKeyNarrowsToTheSelectedFields(t *testing.T) {
	d, _ := loadExamples(t).Get("webapp", "1.1.0")
	p := d.compiled.renderProj
	a := exampleContext(d)
	b := a
	b.Cluster.Domain = "other.example.com"
	ka, _ := json.Marshal(p.keys.evalData(a))
	kb, _ := json.Marshal(p.keys.evalData(b))
	if !p.keys.selectsOnly || string(ka) != string(kb) {
		t.Errorf("keys differ with the domain (selects only: %t):\n%s\n%s", p.keys.selectsOnly, ka, kb)
	}
	b.Cluster.Name = "eu-2"
	kb, _ = json.Marshal(p.keys.evalData(b))
	if string(ka) == string(kb) {
		t.Errorf("keys are the same for another cluster name: %s", ka)
	}

	for _, tc := range []struct {
		src         string
		selectsOnly bool
	}{
		{"x: context.cluster.name\ny: context.deployment.name\n", true},
		{"x: context.cluster.name\ncontext: cluster: domain: =~\"^a\"\n", false},
	} {
		f, err := parseSpec("driver.cue", "driver.cue", []byte(tc.src))
		if err != nil {
			t.Fatal(err)
		}
		ck := findContextKeys(f, f)
		if got := declaresContextOnce(f); got != tc.selectsOnly || ck.whole["cluster"] || !ck.fields["cluster"]["name"] {
			t.Errorf("%q: selects only %t, want %t; keys %+v", tc.src, got, tc.selectsOnly, ck)
		}
	}
}

// TestComponentsAndPatchesAreEvaluatedOncePerContextTheyUse: webapp
// 1.1.0's components and patches name the deployment and the cluster, so
// another domain renders with the same evaluation and another deployment
// name evaluates them again, each render naming its own deployment.
func TestComponentsAndPatchesAreEvaluatedOncePerContextTheyUse(t *testing.T) {
	d, _ := loadExamples(t).Get("webapp", "1.1.0")
	render := func(edit func(*Context)) *Manifests {
		t.Helper()
		c := exampleContext(d)
		edit(&c)
		return valuesAndRender(t, d, c)
	}
	// Load rendered the driver with its sample parameters already.
	before := d.compiled.renderSpecCount.Load()
	render(func(*Context) {})
	render(func(c *Context) { c.Cluster.Domain = "other.example.com" })
	if n := d.compiled.renderSpecCount.Load() - before; n != 1 {
		t.Errorf("%d evaluations for one deployment and cluster name, want 1", n)
	}
	out := render(func(c *Context) { c.Deployment.Name = "shop" })
	if n := d.compiled.renderSpecCount.Load() - before; n != 2 {
		t.Errorf("%d evaluations after another deployment name, want 2", n)
	}
	// The patch (the cluster's annotation) and the component reach the
	// Deployment named for this deployment.
	found := false
	for _, o := range out.Objects {
		if o.Kind != "Deployment" {
			continue
		}
		found = o.Name == "shop" && o.Component == "web" && bytes.Contains(o.YAML, []byte("styrmin.io/cluster: eu-1"))
		if !found {
			t.Errorf("Deployment %s of component %q, without the patch or the component of shop's render:\n%s", o.Name, o.Component, o.YAML)
		}
	}
	if !found {
		t.Error("no Deployment rendered")
	}
}

// valuesAndRender renders d for c with the values d computes for c.
func valuesAndRender(t *testing.T, d *Driver, c Context) *Manifests {
	t.Helper()
	vals, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// patchedMini is the minimal driver with a ConfigMap no patch changes
// and a Deployment three patches change per environment (a strategic
// merge, which changes the object it is given, one of them only in
// staging, and a JSON patch), loaded through a render cache; with the
// contexts of three environments where the deployment has one name (so
// its documents render alike) and each context's render without a
// cache.
func patchedMini(t *testing.T) (*Driver, *RenderCache, map[string]Context, map[string][]byte) {
	t.Helper()
	fsys := minimalFS()
	replaceSpec(`values:`, `patches: [
	{target: {kind: "Deployment"}, patch: {metadata: annotations: env: context.environment.name, spec: template: {
		if context.environment.name == "staging" {metadata: annotations: staging: "only"}
		spec: containers: [{name: "app", env: [{name: "ENV", value: context.environment.name}]}]
	}}},
	{target: {kind: "Deployment"}, jsonPatch: [{op: "add", path: "/spec/template/metadata/labels/env", value: context.environment.name}]},
]
values:`)(fsys)
	fsys["chart/templates/configmap.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\ndata:\n  replicas: \"{{ .Values.replicas }}\"\n")}
	rc := NewRenderCache()
	cached, err := Load(fsys, LoadOptions{Source: "drivers/mini/1.0.0", RenderCache: rc})
	if err != nil {
		t.Fatal(err)
	}
	contexts := map[string]Context{}
	for _, env := range []string{"staging", "prod", "test"} {
		c := exampleContext(cached)
		c.Environment.Name, c.Environment.Namespace = env, env
		c.Deployment.Namespace = env + "-" + c.Deployment.Name
		contexts[env] = c
	}
	want := map[string][]byte{}
	for env, c := range contexts {
		plain, err := Load(fsys, LoadOptions{Source: "drivers/mini/1.0.0"})
		if err != nil {
			t.Fatal(err)
		}
		m, err := plain.Render(c, valuesOf(t, plain, c))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(m.YAML(), []byte("value: "+env)) || !bytes.Contains(m.YAML(), []byte("env: "+env)) {
			t.Fatalf("%s: the patches did not apply:\n%s", env, m.YAML())
		}
		want[env] = m.YAML()
	}
	return cached, rc, contexts, want
}

// renderedAsAlone fails unless d renders c, its documents parsed through
// its cache, as want. renderLocal renders afresh each time, where Render
// and RenderForPolicy would return the cache's first render of c.
func renderedAsAlone(t *testing.T, d *Driver, env string, c Context, want []byte) {
	m, err := d.renderLocal(c, valuesOf(t, d, c))
	if err != nil {
		t.Error(err)
		return
	}
	if !bytes.Equal(m.YAML(), want) {
		t.Errorf("%s: through the cache\n%s\nalone\n%s", env, m.YAML(), want)
	}
}

// Renders through one cache share the documents two deployments render
// alike (one name, one chart, other environments) and copy what they
// change: each patch reaches only its own render, however often and in
// whatever order the renders run; an object no patch changes is encoded
// once per namespace, and a patched one never kept.
func TestRenderCachePatchesOnlyTheRenderTheyBelongTo(t *testing.T) {
	cached, rc, contexts, want := patchedMini(t)
	for _, env := range []string{"staging", "prod", "staging", "test", "prod"} {
		renderedAsAlone(t, cached, env, contexts[env], want[env])
	}
	namespaces := map[string]bool{}
	for k, y := range rc.texts {
		if bytes.Contains(y, []byte("kind: Deployment")) {
			t.Errorf("the text of a patched object was kept:\n%s", y)
		}
		namespaces[k.namespace] = true
	}
	for env, c := range contexts {
		if !namespaces[c.Deployment.Namespace] {
			t.Errorf("%s: no text kept for its namespace %s", env, c.Deployment.Namespace)
		}
	}
}

// The same renders at once (under the race detector in make test): what
// the cache shares is only read.
func TestRenderCacheSharedByRendersAtOnce(t *testing.T) {
	cached, _, contexts, want := patchedMini(t)
	var wg sync.WaitGroup
	for range 4 {
		for env, c := range contexts {
			wg.Go(func() { renderedAsAlone(t, cached, env, c, want[env]) })
		}
	}
	wg.Wait()
}

func valuesOf(t *testing.T, d *Driver, c Context) map[string]any {
	t.Helper()
	v, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
