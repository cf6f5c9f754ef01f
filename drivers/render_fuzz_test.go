package drivers

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/internal/blockyaml"
)

// FuzzRender feeds arbitrary chart templates and values files to a driver
// and renders it through the Helm engine, the patches and the object
// checks: it must return manifests or an error, never panic, and every
// call must end within the driver's time limit (the limits are what keep a
// hostile template from stalling the agent). A render that succeeds gives
// only objects with a kind, an API version and a name.
func FuzzRender(f *testing.F) {
	f.Add([]byte(""), []byte(""))
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}}\ndata: {a: {{ .Values.a | quote }}}\n"), []byte("a: x\n"))
	f.Add([]byte("{{ range $i := until 3 }}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-{{ $i }}}\n{{ end }}"), []byte("b: [1]\n"))
	f.Add([]byte("{{ define \"x\" }}{{ include \"x\" . }}{{ end }}{{ include \"x\" . }}"), []byte(""))
	f.Add([]byte("apiVersion: v1\nkind: Secret\ntype: helm.sh/release.v1\nmetadata: {name: r}\n"), []byte(""))
	f.Add([]byte("{{ .Values.deep.deeper.deepest }}"), []byte("deep: {deeper: {deepest: [1, [2, [3]]]}}\n"))
	f.Add([]byte("{{ toYaml .Values }}"), []byte("a: &a [1, 2]\nb: *a\n"))
	limits := Limits{Timeout: 2 * time.Second, RenderedBytes: 1 << 20, ChartBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, template, values []byte) {
		m := minimalFS()
		// Next to the driver's own workload, which its components need.
		m["chart/templates/fuzz.yaml"] = &fstest.MapFile{Data: template}
		m["chart/values.yaml"] = &fstest.MapFile{Data: append([]byte("replicas: 1\n"), values...)}
		start := time.Now()
		d, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0", Limits: limits})
		if took := time.Since(start); took > limits.Timeout+time.Second {
			t.Fatalf("load took %s, past its %s limit", took, limits.Timeout)
		}
		if err != nil {
			return
		}
		c, err := d.SampleContextWith(nil)
		if err != nil {
			return
		}
		vals, err := d.Values(c)
		if err != nil {
			return
		}
		var extra map[string]any
		if yaml.Unmarshal(values, &extra) == nil {
			for k, v := range extra {
				if _, set := vals[k]; !set {
					vals[k] = v
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), limits.Timeout)
		defer cancel()
		start = time.Now()
		out, err := d.RenderContext(ctx, c, vals)
		if took := time.Since(start); took > limits.Timeout+time.Second {
			t.Fatalf("render took %s, past its %s limit", took, limits.Timeout)
		}
		if err != nil {
			return
		}
		for _, o := range out.Objects {
			if o.Kind == "" || o.APIVersion == "" || o.Name == "" {
				t.Fatalf("rendered an object without kind, apiVersion or name:\n%s", o.YAML)
			}
		}
	})
}

// FuzzParseObjectFastPathAgrees: a rendered document the block reader
// accepts is read to the same object as go-yaml v2 reads it (what
// Kubernetes clients read), so the fast path never changes a render.
func FuzzParseObjectFastPathAgrees(f *testing.F) {
	for _, doc := range parseObjectSeeds {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		parseObjectAgrees(t, doc)
	})
}

var parseObjectSeeds = []string{
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: \"1\"\n  b: |\n    line\n",
	"apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: 3\n  template:\n    spec:\n      containers:\n        - name: c\n          command: [\"serve\", \"--port\", \"8000\"]\n          resources:\n            limits: {memory: 64Mi}\n",
	"a: yes\nb: 0755\nc: 1.5\nd: ~\n",
	"# only a comment\n",
}

func parseObjectAgrees(t *testing.T, doc []byte) {
	t.Helper()
	v, ok := blockyaml.Decode(doc)
	if !ok {
		return
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		return
	}
	fast := int64Numbers(m)
	slow, err := parseObjectYAML(doc)
	if err != nil {
		t.Fatalf("the fast path read %q, go-yaml refuses it: %v", doc, err)
	}
	if !reflect.DeepEqual(fast, any(slow)) {
		t.Fatalf("the paths read %q differently:\nfast: %#v\nyaml: %#v", doc, fast, slow)
	}
}

// TestTemplateOutputReadsTheSameOnBothPaths: every document the example
// drivers' templates render is read alike by the fast path and go-yaml,
// and most take the fast path (or it saves nothing).
func TestTemplateOutputReadsTheSameOnBothPaths(t *testing.T) {
	cat := loadExamples(t)
	var docs, fast int
	for _, gc := range goldenCases(cat) {
		name, version, _ := strings.Cut(gc.driver, "@")
		d, ok := cat.Get(name, version)
		if !ok {
			t.Fatalf("no driver %s", gc.driver)
		}
		c := exampleContext(d)
		vals, err := d.Values(c)
		if err != nil {
			t.Fatal(err)
		}
		files, err := d.executeChart(c, vals)
		if err != nil {
			t.Fatal(err)
		}
		for _, out := range files {
			for _, doc := range splitDocs(out) {
				if strings.TrimSpace(doc) == "" {
					continue
				}
				docs++
				parseObjectAgrees(t, []byte(doc))
				if _, ok := blockyaml.Decode([]byte(doc)); ok {
					fast++
				}
			}
		}
	}
	if docs == 0 || fast*10 < docs*8 {
		t.Fatalf("%d of %d rendered documents took the fast path, expected at least 80%%", fast, docs)
	}
	t.Logf("%d of %d rendered documents took the fast path", fast, docs)
}
