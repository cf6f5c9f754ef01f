package drivers

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
)

// renderBothWays renders ch on values through Helm's engine and through
// the parsed template set, each from its own copy of the inputs.
func renderBothWays(t *testing.T, h *helmTemplates, ch *chartv2.Chart, values map[string]any, caps *common.Capabilities) (helm, fast map[string]string, helmErr, fastErr error) {
	t.Helper()
	top := func() common.Values {
		c := *ch
		if c.Values != nil {
			c.Values = deepCopyJSON(c.Values).(map[string]any)
		}
		v, err := chartutil.ToRenderValues(&c, deepCopyJSON(values).(map[string]any),
			common.ReleaseOptions{Name: "rel", Namespace: "ns", Revision: 1, IsInstall: true}, caps)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	helm, helmErr = engine.Engine{}.RenderWithContext(context.Background(), ch, top())
	fast, fastErr = h.render(top())
	return helm, fast, helmErr, fastErr
}

func sameRender(t *testing.T, what string, helm, fast map[string]string, helmErr, fastErr error) {
	t.Helper()
	if helmErr != nil {
		if fastErr == nil {
			t.Errorf("%s: Helm's engine fails (%v), the parsed set renders", what, helmErr)
		}
		return
	}
	if fastErr != nil {
		t.Errorf("%s: the parsed set fails where Helm's engine renders: %v", what, fastErr)
		return
	}
	if !maps.Equal(helm, fast) {
		for _, n := range slices.Sorted(maps.Keys(helm)) {
			if helm[n] != fast[n] {
				t.Errorf("%s: %s differs:\nHelm:\n%s\nparsed set:\n%s", what, n, helm[n], fast[n])
			}
		}
		t.Errorf("%s: files %v, want Helm's %v", what, slices.Sorted(maps.Keys(fast)), slices.Sorted(maps.Keys(helm)))
	}
}

// TestParsedTemplatesRenderAsHelm pins the parsed template set to Helm's
// engine: every driver of the repository (the examples and the
// operator's test drivers) and the agent's chart, over several value
// sets, render the same files byte for byte; and the set is used for
// all of them.
func TestParsedTemplatesRenderAsHelm(t *testing.T) {
	compared := 0
	for _, dir := range []string{examples, "../operator/testdata/drivers"} {
		cat, err := LoadCatalog(os.DirFS(dir), ".", LoadOptions{Source: dir})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range cat.Names() {
			for _, d := range cat.Versions(name) {
				h := newHelmTemplates(d.compiled.chart)
				if h == nil {
					t.Errorf("%s@%s: the parsed set does not take the chart", name, d.Version)
					continue
				}
				for i, params := range paramVariants(d) {
					c := exampleContext(d)
					p, err := d.ApplyParameters(params)
					if err != nil {
						continue
					}
					c.Parameters = p
					if i%2 == 1 {
						c.Cluster.DedicatedIngress = true
						c.Environment.BackupLocation = ""
						c.Deployment.Name, c.Deployment.Namespace = "other", "prod-other"
					}
					vals, err := d.Values(c)
					if err != nil {
						continue
					}
					helm, fast, he, fe := renderBothWays(t, h, d.compiled.chart, vals, d.compiled.caps)
					sameRender(t, name+"@"+d.Version, helm, fast, he, fe)
					compared++
				}
			}
		}
	}

	if compared < 40 {
		t.Errorf("%d renders compared, want at least 40", compared)
	}
	agent, err := loader.LoadDir(filepath.Join("..", "charts", "styrmin-agent"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHelmTemplates(agent)
	if h == nil {
		t.Fatal("the parsed set does not take the agent's chart")
	}
	base := map[string]any{"cluster": "eu-1", "repository": map[string]any{"url": "https://git.example.com/state.git"}}
	for i, extra := range []map[string]any{
		nil,
		{"webhook": map[string]any{"enabled": true, "secretName": "hook"}},
		{"webhook": map[string]any{"enabled": true}}, // required fails
		{"cluster": ""}, // required fails
		{"replicaCount": 3, "serviceMonitor": map[string]any{"enabled": true}},
	} {
		vals := deepCopyJSON(base).(map[string]any)
		maps.Copy(vals, extra)
		helm, fast, he, fe := renderBothWays(t, h, agent, vals, common.DefaultCapabilities)
		sameRender(t, "styrmin-agent values "+string(rune('0'+i)), helm, fast, he, fe)
	}
}

// paramVariants are parameter sets for d: none, then each parameter
// changed from its default on its own.
func paramVariants(d *Driver) []map[string]any {
	out := []map[string]any{{}, {}}
	for _, p := range d.Parameters {
		var v any
		switch p.Type {
		case "bool":
			b, _ := p.Default.(bool)
			v = !b
		case "int":
			v = 2
		case "string":
			v = "changed"
		default:
			continue
		}
		out = append(out, map[string]any{p.Name: v}, map[string]any{p.Name: v})
	}
	base := exampleContext(d).Parameters
	for _, m := range out {
		for k, v := range base {
			if _, set := m[k]; !set {
				if _, secret := v.(SecretRef); secret {
					m[k] = v
				}
			}
		}
	}
	return out
}

// TestParsedTemplatesMirrorHelmFeatures renders a chart using what the
// parsed set must mirror: include and tpl (defines inside tpl, nested
// tpl), .Files, .Template, .Capabilities, .Chart, sprig's set on values
// shared between templates, missing keys, required and fail; and one
// using a function the set lacks, which falls back to Helm's engine.
func TestParsedTemplatesMirrorHelmFeatures(t *testing.T) {
	ch := &chartv2.Chart{
		Metadata: &chartv2.Metadata{Name: "feat", Version: "0.1.0", APIVersion: "v2", AppVersion: "9.9"},
		Values:   map[string]any{"greeting": "hi {{ .Release.Name }}", "list": []any{"a", "b"}, "n": 3},
		Files:    []*common.File{{Name: "files/conf.txt", Data: []byte("k=v\n")}, {Name: "files/other.txt", Data: []byte("x")}},
		Templates: []*common.File{
			{Name: "templates/_helpers.tpl", Data: []byte(`{{ define "feat.name" }}{{ .Release.Name }}-{{ .Chart.Name }}{{ end }}{{ define "feat.rec" }}{{ if gt (int .) 0 }}{{ include "feat.rec" (sub (int .) 1) }}.{{ end }}{{ end }}`)},
			{Name: "templates/a.yaml", Data: []byte(`{{ $_ := set .Values "seen" "a" }}name: {{ include "feat.name" . }}
tpl: {{ tpl .Values.greeting . }}
nested: {{ tpl "{{ define \"inner\" }}in{{ end }}{{ include \"inner\" . }}-{{ tpl \"{{ .Chart.AppVersion }}\" . }}" . }}
file: {{ .Files.Get "files/conf.txt" | quote }}
glob: {{ range $p, $_ := .Files.Glob "files/*" }}{{ $p }},{{ end }}
tmpl: {{ .Template.Name }} {{ .Template.BasePath }}
kube: {{ .Capabilities.KubeVersion.Version }} {{ .Capabilities.APIVersions.Has "apps/v1" }}
root: {{ .Chart.IsRoot }}
missing: {{ .Values.nope }} {{ index .Values "nope" | default "d" }}
rec: {{ include "feat.rec" 5 }}
req: {{ required "n" .Values.n }}
yaml: {{ toYaml .Values.list | nindent 2 }}
json: {{ toJson .Values.list }}
lookup: {{ lookup "v1" "Secret" "ns" "x" | len }}
host: {{ getHostByName "example.com" }}
`)},
			{Name: "templates/b.yaml", Data: []byte("seen: {{ .Values.seen }}\nsub: {{ .Subcharts | len }}\n")},
			{Name: "templates/sub/c.yaml", Data: []byte("deep: {{ .Template.Name }}\n")},
			{Name: "templates/NOTES.txt", Data: []byte("notes {{ .Release.Namespace }}")},
		},
	}
	h := newHelmTemplates(ch)
	if h == nil {
		t.Fatal("the parsed set does not take the chart")
	}
	for _, tc := range []struct {
		vals     map[string]any
		wantErr  bool
		fallback bool // the parsed set fails: the render falls back
	}{
		{map[string]any{}, false, false},
		{map[string]any{"n": 7, "greeting": "{{ .Values.n }} {{ .Template.Name }}"}, false, false},
		{map[string]any{"n": ""}, true, false},
		{map[string]any{"greeting": "{{ fail \"no\" }}"}, true, false},
		{map[string]any{"greeting": "{{ toToml .Values }}"}, false, true},
	} {
		helm, fast, he, fe := renderBothWays(t, h, ch, tc.vals, common.DefaultCapabilities)
		if (he != nil) != tc.wantErr {
			t.Errorf("values %v: Helm's engine gives error %v, want an error: %t", tc.vals, he, tc.wantErr)
		}
		if tc.fallback {
			if fe == nil {
				t.Errorf("values %v: the parsed set renders with a function it lacks", tc.vals)
			}
			continue
		}
		sameRender(t, "features", helm, fast, he, fe)
	}

	toml := *ch
	toml.Templates = []*common.File{{Name: "templates/t.yaml", Data: []byte("{{ toToml .Values }}")}}
	if newHelmTemplates(&toml) != nil {
		t.Error("a chart using toToml takes the parsed set, which lacks it")
	}
	d := &Driver{compiled: &compiled{chart: &toml, caps: common.DefaultCapabilities, display: func(s string) string { return s }}}
	files, err := d.executeChart(Context{Deployment: DeploymentContext{Name: "r", Namespace: "ns"}}, map[string]any{})
	if err != nil || files["feat/templates/t.yaml"] == "" {
		t.Errorf("falling back to Helm's engine: %v, %q", err, files)
	}
}
