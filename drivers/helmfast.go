package drivers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	yamlv2 "go.yaml.in/yaml/v2"
	ci "helm.sh/helm/v4/pkg/chart"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"
	goyaml "sigs.k8s.io/yaml/goyaml.v3"

	"github.com/styrmin/styrmin/internal/blockyaml"
)

// helmTemplates is a chart's templates parsed once, for a driver's every
// render: Helm's engine parses every template and builds its ~200-entry
// function map on each render, half of what a render costs. Executing the
// parsed set mirrors engine.Engine{}.RenderWithContext (helm v4
// pkg/engine: render, recAllTpls, initFunMap, includeFun, tplFun) for a
// chart without subcharts, rendered offline, not strict and not linting.
// It succeeds only where Helm's engine gives the same files; on any
// failure the render goes through Helm's engine, which then gives Helm's
// own error (renders are deterministic).
type helmTemplates struct {
	// set holds every template of the chart, parsed in Helm's order, with
	// placeholders for the functions bound per render (include, tpl).
	set *template.Template
	// names are the templates rendered (not partials), in Helm's order.
	names    []string
	basePath string
	// files is Helm's .Files object of the chart, read-only.
	files any
	chart *chartv2.Chart
	// bound are copies of set with include and tpl bound to them, for a
	// render at a time: copying the function maps per render costs more
	// than executing. Executing changes no template set (tpl parses into
	// a copy of its own), and include's counts are back to zero after a
	// render that succeeds; a failed one's copy is dropped.
	bound sync.Pool
}

// boundSet is a copy of a chart's template set for one render at a time.
type boundSet struct {
	t        *template.Template
	included map[string]int
}

func (h *helmTemplates) getBound() (*boundSet, error) {
	if b, ok := h.bound.Get().(*boundSet); ok {
		return b, nil
	}
	t, err := h.set.Clone()
	if err != nil {
		return nil, err
	}
	b := &boundSet{t: t, included: map[string]int{}}
	t.Funcs(template.FuncMap{"include": helmInclude(t, b.included), "tpl": helmTpl(t, b.included)})
	return b, nil
}

// newHelmTemplates parses the chart's templates, or returns nil when the
// chart is outside what the parsed set mirrors: subcharts, a library
// chart, or a template that does not parse with the functions provided
// here (Helm's TOML and duration functions are not: such a chart renders
// through Helm's engine).
func newHelmTemplates(ch *chartv2.Chart) *helmTemplates {
	if ch == nil || ch.Metadata == nil || len(ch.Dependencies()) > 0 || strings.EqualFold(ch.Metadata.Type, "library") {
		return nil
	}
	files, ok := captureFiles(ch)
	if !ok {
		return nil
	}
	h := &helmTemplates{files: files, chart: ch, basePath: path.Join(ch.ChartFullPath(), "templates")}
	tpls := map[string]string{}
	var keys []string
	for _, t := range ch.Templates {
		if t == nil {
			continue
		}
		k := path.Join(ch.ChartFullPath(), t.Name)
		if _, dup := tpls[k]; !dup {
			keys = append(keys, k)
		}
		tpls[k] = string(t.Data)
	}
	// Helm's sortTemplates: deeper paths first, then reverse lexical.
	slices.SortFunc(keys, func(a, b string) int {
		ca, cb := strings.Count(a, "/"), strings.Count(b, "/")
		if ca != cb {
			return cb - ca
		}
		return strings.Compare(b, a)
	})
	t := template.New("gotpl")
	t.Option("missingkey=zero")
	t.Funcs(helmFuncMap())
	for _, k := range keys {
		if _, err := t.New(k).Parse(tpls[k]); err != nil {
			return nil
		}
		if !strings.HasPrefix(path.Base(k), "_") {
			h.names = append(h.names, k)
		}
	}
	h.set = t
	return h
}

// captureFiles gets Helm's .Files object of the chart (a type Helm does
// not export) by rendering a template that hands it over.
func captureFiles(ch *chartv2.Chart) (any, bool) {
	probe := *ch
	probe.Templates = []*common.File{{Name: "templates/files", Data: []byte("{{ styrminFiles .Files }}")}}
	var files any
	e := engine.Engine{CustomTemplateFuncs: template.FuncMap{"styrminFiles": func(f any) string { files = f; return "" }}}
	top := common.Values{"Values": common.Values{}, "Release": map[string]any{}, "Capabilities": common.DefaultCapabilities}
	if _, err := e.Render(&probe, top); err != nil || files == nil {
		return nil, false
	}
	return files, true
}

// render executes the templates on top (what chartutil.ToRenderValues
// returns) and returns what Helm's engine returns on success: the
// rendered files by name, partials left out.
func (h *helmTemplates) render(top common.Values) (out map[string]string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rendering template failed: %v", r)
		}
	}()
	b, err := h.getBound()
	if err != nil {
		return nil, err
	}
	t := b.t
	acc, err := ci.NewAccessor(h.chart)
	if err != nil {
		return nil, err
	}
	meta := acc.MetadataAsMap()
	if meta == nil {
		return nil, errors.New("chart metadata")
	}
	meta["IsRoot"] = true
	vals := common.Values{
		"Chart":        meta,
		"Files":        h.files,
		"Release":      top["Release"],
		"Capabilities": top["Capabilities"],
		"Values":       top["Values"],
		"Subcharts":    make(map[string]any),
	}
	out = make(map[string]string, len(h.names))
	for _, name := range h.names {
		vals["Template"] = common.Values{"Name": name, "BasePath": h.basePath}
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, name, vals); err != nil {
			return nil, err
		}
		out[name] = strings.ReplaceAll(buf.String(), "<no value>", "")
	}
	h.bound.Put(b)
	return out, nil
}

// helmRecursionMax is Helm's bound on nested includes of one template.
const helmRecursionMax = 1000

// helmInclude is Helm's include, bound to one render's template set.
func helmInclude(t *template.Template, included map[string]int) func(string, any) (string, error) {
	return func(name string, data any) (string, error) {
		var buf strings.Builder
		if v, ok := included[name]; ok {
			if v > helmRecursionMax {
				return "", fmt.Errorf("rendering template has a nested reference name: %s: %w", name, errors.New("unable to execute template"))
			}
			included[name]++
		} else {
			included[name] = 1
		}
		err := t.ExecuteTemplate(&buf, name, data)
		included[name]--
		return buf.String(), err
	}
}

// helmTpl is Helm's tpl (not strict), bound to one render's template set.
func helmTpl(parent *template.Template, included map[string]int) func(string, any) (string, error) {
	return func(tpl string, vals any) (string, error) {
		t, err := parent.Clone()
		if err != nil {
			return "", fmt.Errorf("cannot clone template: %w", err)
		}
		t.Option("missingkey=zero")
		t.Funcs(template.FuncMap{"include": helmInclude(t, included), "tpl": helmTpl(t, included)})
		t, err = t.New(parent.Name()).Parse(tpl)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", tpl, err)
		}
		var buf strings.Builder
		if err := t.Execute(&buf, vals); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", tpl, err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
}

// helmFuncMap is the function map of Helm's engine rendering offline
// (funcMap and initFunMap: no cluster, no DNS, not linting), but for the
// TOML and duration functions. The errors of required and fail only need
// to fail the render: Helm's engine then renders again and words them.
func helmFuncMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	extra := template.FuncMap{
		"toYaml":        helmToYAML,
		"mustToYaml":    helmMustToYAML,
		"toYamlPretty":  helmToYAMLPretty,
		"fromYaml":      helmFromYAML,
		"fromYamlArray": helmFromYAMLArray,
		"toJson":        helmToJSON,
		"mustToJson":    helmMustToJSON,
		"fromJson":      helmFromJSON,
		"fromJsonArray": helmFromJSONArray,
		// Bound per render.
		"include": func(string, any) string { return "not implemented" },
		"tpl":     func(string, any) any { return "not implemented" },
		"required": func(warn string, val any) (any, error) {
			if val == nil {
				return val, errors.New(warn)
			} else if _, ok := val.(string); ok && val == "" {
				return val, errors.New(warn)
			}
			return val, nil
		},
		"fail": func(msg string) (string, error) { return "", errors.New(msg) },
		"lookup": func(string, string, string, string) (map[string]any, error) {
			return map[string]any{}, nil
		},
		"getHostByName": func(string) string { return "" },
	}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

// marshalYAML is sigs.k8s.io/yaml's Marshal, which toYaml calls, byte
// for byte: an object within what blockyaml writes as go-yaml does (most
// of a chart's values: labels, resources, environment) is written without
// go-yaml's reader and emitter, which took a fifth of the templates'
// execution in a large lock; anything else goes through Marshal.
func marshalYAML(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return yaml.Marshal(v) // Marshal's own error
	}
	if t, err := blockyaml.FromJSON(j); err == nil {
		if m, ok := t.(yamlv2.MapSlice); ok {
			if b, ok := blockyaml.Encode(m); ok {
				return b, nil
			}
		}
	}
	return yaml.JSONToYAML(j)
}

// The functions below are Helm's (pkg/engine/funcs.go), as they are.

func helmToYAML(v any) string {
	data, err := marshalYAML(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func helmMustToYAML(v any) string {
	data, err := marshalYAML(v)
	if err != nil {
		panic(err)
	}
	return strings.TrimSuffix(string(data), "\n")
}

func helmToYAMLPretty(v any) string {
	var data bytes.Buffer
	encoder := goyaml.NewEncoder(&data)
	encoder.SetIndent(2)
	if err := encoder.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(data.String(), "\n")
}

func helmFromYAML(str string) map[string]any {
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func helmFromYAMLArray(str string) []any {
	a := []any{}
	if err := yaml.Unmarshal([]byte(str), &a); err != nil {
		a = []any{err.Error()}
	}
	return a
}

func helmToJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func helmMustToJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func helmFromJSON(str string) map[string]any {
	m := make(map[string]any)
	if err := json.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func helmFromJSONArray(str string) []any {
	a := []any{}
	if err := json.Unmarshal([]byte(str), &a); err != nil {
		a = []any{err.Error()}
	}
	return a
}
