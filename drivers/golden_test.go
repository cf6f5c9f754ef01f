package drivers

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// examples is the folder of the example drivers, relative to this package.
const examples = "../examples/drivers"

func loadExamples(t testing.TB) *Catalog {
	t.Helper()
	cat, err := LoadCatalog(os.DirFS(examples), ".", LoadOptions{Source: "examples/drivers"})
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// goldenCase renders one example driver version for a context.
type goldenCase struct {
	name   string
	driver string
	edit   func(*Context)
	params map[string]any
}

func goldenCases(cat *Catalog) []goldenCase {
	var cases []goldenCase
	for _, name := range cat.Names() {
		for _, d := range cat.Versions(name) {
			cases = append(cases, goldenCase{name: name + "-" + d.Version, driver: name + "@" + d.Version})
		}
	}
	cases = append(cases,
		goldenCase{name: "webapp-1.1.0-ingress-dedicated", driver: "webapp@1.1.0",
			params: map[string]any{"ingress": true, "replicas": 3, "size": "large", "message": "Drift me"},
			edit:   func(c *Context) { c.Cluster.DedicatedIngress = true }},
		goldenCase{name: "graphhub-2.0.0-tuned", driver: "graphhub@2.0.0",
			params: map[string]any{"workers": 0, "ingress": false, "storageRole": "fast", "databaseSize": "20Gi",
				"databasePassword": map[string]any{"name": "hub-db", "key": "pw"}},
			edit: func(c *Context) { c.Environment.BackupLocation = ""; c.Services = nil }},
	)
	return cases
}

// renderCase returns the golden text of one case: values, endpoints and
// the object→component map, then the manifests.
func renderCase(t testing.TB, cat *Catalog, gc goldenCase) []byte {
	t.Helper()
	var name, version string
	for i := range gc.driver {
		if gc.driver[i] == '@' {
			name, version = gc.driver[:i], gc.driver[i+1:]
		}
	}
	d, ok := cat.Get(name, version)
	if !ok {
		t.Fatalf("no driver %s", gc.driver)
	}
	c := exampleContext(d)
	if gc.params != nil {
		p, err := d.ApplyParameters(gc.params)
		if err != nil {
			t.Fatal(err)
		}
		c.Parameters = p
	}
	if gc.edit != nil {
		gc.edit(&c)
	}
	vals, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := d.Endpoints(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	comps := map[string]string{}
	for _, o := range m.Objects {
		comps[o.Kind+"/"+o.Name] = o.Component
	}
	j, err := json.Marshal(map[string]any{
		"driver": gc.driver, "parameters": c.Parameters, "values": vals, "endpoints": eps, "components": comps,
	})
	if err != nil {
		t.Fatal(err)
	}
	hm, err := decodeJSONObject(j)
	if err != nil {
		t.Fatal(err)
	}
	head, err := encodeYAML(hm)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString("# Rendered by drivers tests; regenerate with: go test ./drivers -run TestGolden -update\n")
	b.Write(head)
	b.Write(m.YAML())
	return b.Bytes()
}

// TestGoldenRender pins the rendered manifests (and values, endpoints,
// component tags) of every example driver version.
func TestGoldenRender(t *testing.T) {
	cat := loadExamples(t)
	cases := goldenCases(cat)
	seen := map[string]bool{}
	for _, gc := range cases {
		seen[gc.name+".yaml"] = true
		t.Run(gc.name, func(t *testing.T) {
			got := renderCase(t, cat, gc)
			path := filepath.Join("testdata", "golden", gc.name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered output differs from %s (run with -update to accept):\n%s", path, lineDiff(string(want), string(got)))
			}
		})
	}
	// A golden file nobody renders any more is stale.
	entries, _ := os.ReadDir(filepath.Join("testdata", "golden"))
	var stale []string
	for _, e := range entries {
		if !seen[e.Name()] {
			stale = append(stale, e.Name())
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 && !*update {
		t.Errorf("stale golden files: %v", stale)
	}
}

// lineDiff shows the first lines where two texts differ.
func lineDiff(a, b string) string {
	al, bl := bytes.Split([]byte(a), []byte("\n")), bytes.Split([]byte(b), []byte("\n"))
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y []byte
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if !bytes.Equal(x, y) {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, x, y)
		}
	}
	return ""
}
