package drivers

import (
	"context"
	"testing"
	"testing/fstest"
	"time"

	"sigs.k8s.io/yaml"
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
