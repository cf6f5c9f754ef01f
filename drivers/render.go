package drivers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	yamlv2 "go.yaml.in/yaml/v2"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"

	"github.com/styrmin/styrmin/internal/blockyaml"
)

// Manifests are the rendered objects of one deployment, sorted by kind
// order, group, namespace and name.
type Manifests struct {
	Objects []Object
}

// Object is one rendered Kubernetes object.
type Object struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	// Component is the driver component the object belongs to ("" for
	// objects shared by the deployment).
	Component string
	// YAML is the object in canonical form (sorted keys, two-space indent).
	YAML []byte
	// Hosts are what an Ingress claims (IngressHosts), read from the
	// object the render parsed: the lock's render keeps no Ingress text.
	Hosts []HostClaim `json:",omitempty"`
}

// YAML returns all objects as one multi-document stream, byte-identical
// for the same input.
func (m *Manifests) YAML() []byte {
	var n int
	for _, o := range m.Objects {
		n += len(o.YAML) + 4
	}
	out := make([]byte, 0, n)
	for _, o := range m.Objects {
		out = append(out, "---\n"...)
		out = append(out, o.YAML...)
	}
	return out
}

// ComponentLabel on a rendered object names its component explicitly,
// overriding the driver's workload selectors.
const ComponentLabel = "styrmin.io/component"

// rendered is one object while it is being rendered.
type rendered struct {
	obj       map[string]any
	source    string // template file, for messages
	component string
	// shared is set while obj's nested maps and lists are a render
	// cache's: own copies them before a change.
	shared bool
	// doc is the document obj was parsed from, with the namespace the
	// render filled in, while no patch has changed obj (nil: unknown).
	doc *renderedDoc
}

// own makes obj this render's own to change: a copy of what a render
// cache shares.
func (r *rendered) own() {
	if r.shared {
		r.obj = deepCopyJSON(r.obj).(map[string]any)
		r.shared = false
	}
	r.doc = nil
}

// replace gives the object what a patch made of it.
func (r *rendered) replace(obj map[string]any) {
	r.obj, r.shared, r.doc = obj, false, nil
}

func (r *rendered) apiVersion() string { s, _ := r.obj["apiVersion"].(string); return s }
func (r *rendered) kind() string       { s, _ := r.obj["kind"].(string); return s }
func (r *rendered) meta() map[string]any {
	m, _ := r.obj["metadata"].(map[string]any)
	return m
}
func (r *rendered) name() string      { s, _ := r.meta()["name"].(string); return s }
func (r *rendered) namespace() string { s, _ := r.meta()["namespace"].(string); return s }
func (r *rendered) labels() map[string]any {
	m, _ := r.meta()["labels"].(map[string]any)
	return m
}

// Render renders the chart with values through the Helm 4 engine (the
// declared Kubernetes version and API versions, no cluster), then applies
// the driver's patches, tags each object with its component and returns
// the objects sorted. Namespaced objects without a namespace get the
// deployment's. Same input, byte-identical output.
func (d *Driver) Render(c Context, values map[string]any) (*Manifests, error) {
	return d.RenderContext(context.Background(), c, values)
}

// RenderContext is Render bounded by ctx as well as the driver's limits
// (the deadline of the step or the command that renders).
func (d *Driver) RenderContext(ctx context.Context, c Context, values map[string]any) (*Manifests, error) {
	return d.cachedRender(ctx, c, values, d.renderContext)
}

func (d *Driver) renderContext(ctx context.Context, c Context, values map[string]any) (*Manifests, error) {
	cs := d.compiled
	if s := cs.opts.Sandbox; s != nil {
		req := cs.opts.sandboxRequest("render", cs.folder)
		req.Context, req.Values = &c, values
		resp, err := s.run(ctx, req, cs.file)
		if err != nil {
			return nil, err
		}
		return &Manifests{Objects: resp.Objects}, nil
	}
	return d.RenderInProcess(ctx, c, values)
}

// RenderInProcess is RenderContext in this process even when the driver
// loaded through a Sandbox: bounded in time and rendered bytes, not in
// memory. A lock renders every deployment it resolves (the environment
// policy is checked on what the agent will apply), and a child process
// per deployment cost more than the rest of the lock (14× at 200
// deployments; a reused child still costs a round trip and the objects
// encoded twice per render). A driver loaded through a Sandbox is
// rendered in its child the first time it is given an input (the parts
// of c its components and patches read, the release's names, the
// values), within every limit, and here after (evalChecked): its
// sandboxed load rendered only the sample context. The agent renders
// what it applies through RenderContext.
func (d *Driver) RenderInProcess(ctx context.Context, c Context, values map[string]any) (*Manifests, error) {
	return d.cachedRender(ctx, c, values, d.renderInProcess)
}

func (d *Driver) renderInProcess(ctx context.Context, c Context, values map[string]any) (*Manifests, error) {
	return d.renderHere(ctx, c, values, evalRender, allText)
}

// renderHere renders c and values bounded: in the sandbox child the
// first time (kind: evalRender or evalPolicy, as text), else here.
func (d *Driver) renderHere(ctx context.Context, c Context, values map[string]any, kind string, text func(o *rendered) bool) (*Manifests, error) {
	cs := d.compiled
	what := deploymentInput("the chart", c)
	file := cs.display(cs.chartDir)
	if cs.opts.Sandbox != nil {
		w := contextWire(cs.renderProj, c, true)
		w.Values = wireForm(reflect.ValueOf(values))
		return evalChecked(ctx, d, kind, w, what, file,
			func(in *evalInput) (*Manifests, error) { return d.renderObjects(in.Context, in.Values, text) }, decodeManifests)
	}
	m, err := bounded(ctx, cs.opts.Limits, d.Source, file, func() (*Manifests, error) {
		return d.renderObjects(c, values, text)
	})
	return m, withInput(err, what)
}

// RenderForPolicy is what CheckPolicy needs of a render in this process:
// every object with its kind, names and component, and the canonical
// text of CustomResourceDefinitions only (the kinds they define decide
// the scope of the chart's other objects); other objects have no YAML
// (an Ingress has its Hosts).
// A lock checks the policy of every deployment it resolves and keeps
// none of the text: encoding it was 6% of the lock's CPU at 1,000
// deployments. With a render cache (a plan, which shows the text) the
// whole render is made, and kept for the diff. Made in the sandbox's
// child as RenderInProcess is.
func (d *Driver) RenderForPolicy(ctx context.Context, c Context, values map[string]any) (*Manifests, error) {
	if d.compiled.opts.RenderCache != nil {
		return d.RenderInProcess(ctx, c, values)
	}
	return d.renderHere(ctx, c, values, evalPolicy, policyText)
}

// renderLocal renders in this process, unbounded: callers bound it.
func (d *Driver) renderLocal(c Context, values map[string]any) (*Manifests, error) {
	return d.renderObjects(c, values, allText)
}

// renderObjects is renderLocal with the objects whose canonical text is
// encoded chosen by text.
// MaxReleaseObjects bounds the objects of one release. The agent lists
// each (status.inventory, up to some 300 bytes an object) in the
// StyrminDeployment's status, which the API server refuses past about
// 1.5 MiB: a release of many thousand small objects was applied, its
// status never written, and the deployment never Ready, retried for ever.
// Large charts hold a few hundred.
const MaxReleaseObjects = 2048

func (d *Driver) renderObjects(c Context, values map[string]any, text func(o *rendered) bool) (*Manifests, error) {
	d.compiled.opts.notePhase(d.compiled.file)
	comps, patches := d.compiled.staticComponents, d.compiled.staticPatches
	if !d.compiled.isStaticRender {
		s, err := d.renderSpecFor(c)
		if err != nil {
			return nil, err
		}
		comps, patches = s.comps, s.patches
	}
	d.compiled.opts.notePhase(d.compiled.display(d.compiled.chartDir))
	objs, err := d.renderChart(c, values)
	if err != nil {
		return nil, err
	}
	if err := d.applyPatches(patches, objs); err != nil {
		return nil, err
	}
	// Before the components: a test Pod is no workload of the release.
	if objs, err = d.leaveOutHooks(objs); err != nil {
		return nil, err
	}
	if err := d.tagComponents(comps, objs); err != nil {
		return nil, err
	}
	// After the patches: a patch can add the type or the label too.
	if err := refuseReleaseRecords(objs); err != nil {
		return nil, err
	}
	if len(objs) > MaxReleaseObjects {
		return nil, &SpecError{File: d.compiled.display(d.compiled.chartDir),
			Msg: fmt.Sprintf("renders %d objects: expected at most %d in a release (the agent lists each in the deployment's status, which the API server bounds)", len(objs), MaxReleaseObjects)}
	}
	return finish(d.compiled.opts.RenderCache, objs, text)
}

// prepareStatic evaluates components and patches once when they do not
// depend on the context.
func (d *Driver) prepareStatic() error {
	p := d.compiled.renderProj
	if !p.keys.none() {
		return nil
	}
	comps, err := d.resolveComponents(p.value)
	if err != nil {
		return err
	}
	patches, err := d.decodePatches(p.value)
	if err != nil {
		return err
	}
	d.compiled.staticComponents, d.compiled.staticPatches, d.compiled.isStaticRender = comps, patches, true
	return nil
}

func (d *Driver) renderChart(c Context, values map[string]any) ([]*rendered, error) {
	files, err := d.executeChart(c, values)
	if err != nil {
		return nil, err
	}
	if err := d.checkRendered(files); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		if path.Base(n) == "NOTES.txt" || strings.HasPrefix(path.Base(n), "_") {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*rendered
	for _, n := range names {
		src := d.chartPaths(n)
		for _, doc := range splitDocs(files[n]) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			obj, shared, err := d.compiled.opts.RenderCache.parseDoc(doc)
			if err != nil {
				return nil, &SpecError{File: src, Msg: err.Error(), Err: err}
			}
			if obj == nil {
				continue
			}
			r := &rendered{obj: obj, source: src, shared: shared}
			if r.apiVersion() == "" || r.kind() == "" || r.name() == "" {
				return nil, &SpecError{File: src, Msg: "rendered an object without apiVersion, kind or metadata.name"}
			}
			key := renderedDoc{doc: doc}
			// Kinds outside the table, custom ones included, are
			// namespaced.
			if r.namespace() == "" && !IsClusterScoped(r.kind()) {
				if shared {
					// The object and its metadata copied; the rest
					// stays shared.
					r.obj = maps.Clone(r.obj)
					r.obj["metadata"] = maps.Clone(r.meta())
				}
				r.meta()["namespace"] = c.Deployment.Namespace
				key.namespace = c.Deployment.Namespace
			}
			if shared {
				r.doc = &key
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// executeChart renders the chart's templates: through the parsed set
// when the chart allows it, else, or when that fails, through Helm's
// engine.
func (d *Driver) executeChart(c Context, values map[string]any) (map[string]string, error) {
	cs := d.compiled
	cs.helmOnce.Do(func() { cs.helm = newHelmTemplates(cs.chart) })
	if cs.helm != nil {
		top, _, err := d.renderValues(c, values)
		if err != nil {
			return nil, err
		}
		if files, err := cs.helm.render(top); err == nil {
			return files, nil
		}
	}
	// Afresh: a failed execution may have changed the values (sprig's set).
	top, ch, err := d.renderValues(c, values)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{}.RenderWithContext(context.Background(), ch, top)
	if err != nil {
		return nil, d.templateError(err)
	}
	return files, nil
}

// renderValues is what the chart's templates see (Helm's top-level
// values) for one render, and the chart they were made from.
func (d *Driver) renderValues(c Context, values map[string]any) (common.Values, *chartv2.Chart, error) {
	// Helm copies the values given, but merges the chart's own defaults in
	// by reference, and templates may modify values (sprig's set): give
	// each render its own defaults, since renders run concurrently.
	ch := new(chartv2.Chart)
	*ch = *d.compiled.chart
	if ch.Values != nil {
		ch.Values = deepCopyJSON(ch.Values).(map[string]any)
	}
	top, err := chartutil.ToRenderValues(ch, values, common.ReleaseOptions{
		Name:      c.Deployment.Name,
		Namespace: c.Deployment.Namespace,
		Revision:  1,
		IsInstall: true,
	}, d.compiled.caps)
	if err != nil {
		return nil, nil, &SpecError{File: d.compiled.display(d.compiled.chartDir), Field: "values", Msg: err.Error(), Err: err}
	}
	return top, ch, nil
}

// splitDocs splits a rendered template into YAML documents at lines that
// start with "---" (what Helm's own splitter accepts), without a regexp:
// splitting is a hot path of every render.
func splitDocs(s string) []string {
	var docs []string
	start := 0
	for i := 0; i <= len(s); {
		if strings.HasPrefix(s[i:], "---") {
			rest := s[i+3:]
			if rest == "" || rest[0] == '\n' || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\r' {
				docs = append(docs, s[start:i])
				end := strings.IndexByte(rest, '\n')
				if end < 0 {
					start = len(s)
					break
				}
				start = i + 3 + end + 1
				i = start
				continue
			}
		}
		nl := strings.IndexByte(s[i:], '\n')
		if nl < 0 {
			break
		}
		i += nl + 1
	}
	if start < len(s) {
		docs = append(docs, s[start:])
	}
	return docs
}

var templateAtRE = regexp.MustCompile(`\(([^()\s]+):(\d+)(?::(\d+))?\)`)

// templateError locates a Helm template error at the template file (and
// line) inside the driver folder.
func (d *Driver) templateError(err error) error {
	msg := shorten(d.chartPaths(err.Error()), maxTemplateErrorLen)
	e := &SpecError{File: d.compiled.display(d.compiled.chartDir), Msg: "template error: " + msg, Err: err}
	if m := templateAtRE.FindStringSubmatch(msg); m != nil {
		e.File = m[1]
		e.Line, _ = strconv.Atoi(m[2])
		e.Column, _ = strconv.Atoi(m[3])
	}
	return e
}

// chartPaths rewrites Helm's "<chart name>/templates/x.yaml" into the path
// of the file in the driver folder.
func (d *Driver) chartPaths(s string) string {
	name := d.compiled.chart.Metadata.Name
	return strings.ReplaceAll(s, name+"/templates/", d.compiled.display(d.compiled.chartDir)+"/templates/")
}

// parseObject parses one YAML document the way Kubernetes clients do:
// go-yaml v2 (YAML 1.1 scalars: yes/no/on/off are booleans, 0644 is
// octal), map keys made strings, numbers kept exact; the same rules as
// sigs.k8s.io/yaml, without its round trip through JSON text (parsing is
// the largest cost of a render). A document holding only comments gives
// nil.
func parseObject(doc []byte) (map[string]any, error) {
	// Most templates render block YAML inside the subset every reader
	// reads alike: read without the general parser.
	if v, ok := blockyaml.Decode(doc); ok {
		if m, ok := v.(map[string]any); ok {
			return int64Numbers(m).(map[string]any), nil
		}
	}
	return parseObjectYAML(doc)
}

// parseObjectYAML is parseObject through go-yaml v2.
func parseObjectYAML(doc []byte) (map[string]any, error) {
	var x any
	if err := yamlv2.Unmarshal(doc, &x); err != nil {
		return nil, fmt.Errorf("rendered invalid YAML: %w", err)
	}
	if x == nil {
		return nil, nil
	}
	j, err := jsonable(x)
	if err != nil {
		return nil, fmt.Errorf("rendered YAML that is not JSON data: %w", err)
	}
	m, ok := j.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("rendered a document that is not an object")
	}
	return m, nil
}

// int64Numbers turns blockyaml's numbers (integers, as text) into the
// int64s parseObject gives, in place.
func int64Numbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = int64Numbers(x)
		}
	case []any:
		for i, x := range t {
			t[i] = int64Numbers(x)
		}
	case json.Number:
		n, _ := t.Int64() // blockyaml gives only integers within int64
		return n
	}
	return v
}

// jsonable converts go-yaml v2 data to JSON data: string keys, int64 for
// integers (and for integral floats, as a JSON round trip would).
func jsonable(x any) (any, error) {
	switch t := x.(type) {
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, v := range t {
			var key string
			switch tk := k.(type) {
			case string:
				key = tk
			case int:
				key = strconv.Itoa(tk)
			case int64:
				key = strconv.FormatInt(tk, 10)
			case uint64:
				key = strconv.FormatUint(tk, 10)
			case float64:
				key = strconv.FormatFloat(tk, 'g', -1, 32)
			case bool:
				key = strconv.FormatBool(tk)
			default:
				return nil, fmt.Errorf("unsupported map key %v", k)
			}
			cv, err := jsonable(v)
			if err != nil {
				return nil, err
			}
			m[key] = cv
		}
		return m, nil
	case []any:
		for i, v := range t {
			cv, err := jsonable(v)
			if err != nil {
				return nil, err
			}
			t[i] = cv
		}
		return t, nil
	case int:
		return int64(t), nil
	case uint64:
		if t <= math.MaxInt64 {
			return int64(t), nil
		}
		return float64(t), nil
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return nil, fmt.Errorf("unsupported number %v", t)
		}
		if t == math.Trunc(t) && math.Abs(t) < 1<<63 {
			return int64(t), nil
		}
		return t, nil
	case nil, bool, string, int64:
		return t, nil
	default:
		return fmt.Sprint(t), nil
	}
}

func decodeJSONObject(j []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, fmt.Errorf("rendered invalid YAML: %w", err)
	}
	m, ok := normalizeNumbers(x).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("rendered a document that is not an object")
	}
	return m, nil
}

// normalizeNumbers turns json.Number into int64 or float64, so YAML
// output writes numbers as numbers.
func normalizeNumbers(x any) any {
	switch t := x.(type) {
	case map[string]any:
		for k, v := range t {
			t[k] = normalizeNumbers(v)
		}
	case []any:
		for i, v := range t {
			t[i] = normalizeNumbers(v)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		if f, err := t.Float64(); err == nil {
			return f
		}
		return string(t)
	}
	return x
}

// tagComponents sets each object's component: the ComponentLabel when
// present, else the component whose workload selector matches it; a
// Service gets the component of the workloads its selector picks. Every
// component must match at least one workload.
func (d *Driver) tagComponents(comps []Component, objs []*rendered) error {
	file := d.compiled.file
	known := map[string]bool{}
	for _, c := range comps {
		known[c.Name] = true
	}
	matched := map[string]bool{}
	var workloads []*rendered
	for _, o := range objs {
		if l, ok := o.labels()[ComponentLabel].(string); ok {
			if !known[l] {
				return &SpecError{File: o.source, Field: "metadata.labels." + ComponentLabel,
					Msg: fmt.Sprintf("%s %s names unknown component %q (the driver declares: %s)", o.kind(), o.name(), l, knownList(known))}
			}
			o.component = l
		}
		if !IsWorkloadKind(o.apiVersion(), o.kind()) {
			continue
		}
		workloads = append(workloads, o)
		for _, c := range comps {
			for _, w := range c.Workloads {
				if !w.matches(o) {
					continue
				}
				if o.component != "" && o.component != c.Name {
					return &SpecError{File: file, Field: "components." + c.Name,
						Msg: fmt.Sprintf("%s %s is selected by components %q and %q", o.kind(), o.name(), o.component, c.Name)}
				}
				o.component = c.Name
			}
		}
		if o.component != "" {
			matched[o.component] = true
		}
	}
	for _, c := range comps {
		if !matched[c.Name] {
			cv := d.compiled.value.LookupPath(cue.MakePath(cue.Str("components"), cue.Str(c.Name)))
			return d.compiled.locator().errAt(cv, "components."+c.Name, "matches no workload of the rendered chart (selectors: %s)", describeSelectors(c.Workloads))
		}
	}
	for _, o := range objs {
		if o.component != "" || o.kind() != "Service" {
			continue
		}
		spec, _ := o.obj["spec"].(map[string]any)
		sel, _ := spec["selector"].(map[string]any)
		if len(sel) == 0 {
			continue
		}
		for _, w := range workloads {
			if w.component != "" && w.namespace() == o.namespace() && subset(sel, podLabels(w)) {
				o.component = w.component
				break
			}
		}
	}
	return nil
}

func (w WorkloadSelector) matches(o *rendered) bool {
	if w.Kind != o.kind() {
		return false
	}
	if w.Name != "" && w.Name != o.name() {
		return false
	}
	return len(w.MatchLabels) == 0 || subsetStr(w.MatchLabels, o.labels())
}

func describeSelectors(ws []WorkloadSelector) string {
	var parts []string
	for _, w := range ws {
		s := w.Kind
		if w.Name != "" {
			s += " " + w.Name
		}
		if len(w.MatchLabels) > 0 {
			var ls []string
			for _, k := range sortedKeys(w.MatchLabels) {
				ls = append(ls, k+"="+w.MatchLabels[k])
			}
			s += " with labels " + strings.Join(ls, ",")
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func podLabels(o *rendered) map[string]any {
	spec, _ := o.obj["spec"].(map[string]any)
	if o.kind() == "CronJob" {
		jt, _ := spec["jobTemplate"].(map[string]any)
		spec, _ = jt["spec"].(map[string]any)
	}
	if o.kind() == "Pod" {
		return o.labels()
	}
	tpl, _ := spec["template"].(map[string]any)
	meta, _ := tpl["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	return labels
}

func subset(sel, labels map[string]any) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func subsetStr(sel map[string]string, labels map[string]any) bool {
	for k, v := range sel {
		if s, _ := labels[k].(string); s != v {
			return false
		}
	}
	return true
}

// kindOrder ranks kinds in Helm's install order; unknown kinds come after.
var kindOrder = func() map[string]int {
	m := map[string]int{}
	for i, k := range releaseutil.InstallOrder {
		m[k] = i
	}
	return m
}()

func kindRank(k string) int {
	if r, ok := kindOrder[k]; ok {
		return r
	}
	return len(kindOrder)
}

func group(apiVersion string) string {
	if i := strings.IndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}

// allText encodes every object's canonical text.
func allText(*rendered) bool { return true }

// policyText encodes what CheckPolicy reads: the text of
// CustomResourceDefinitions (see renderedCRDScopes).
func policyText(o *rendered) bool {
	return o.kind() == "CustomResourceDefinition" && apiGroup(o.apiVersion()) == "apiextensions.k8s.io"
}

// finish sorts the objects, rejects duplicates and encodes those text
// selects.
func finish(rc *RenderCache, objs []*rendered, text func(o *rendered) bool) (*Manifests, error) {
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		if ra, rb := kindRank(a.kind()), kindRank(b.kind()); ra != rb {
			return ra < rb
		}
		if a.kind() != b.kind() {
			return a.kind() < b.kind()
		}
		if ga, gb := group(a.apiVersion()), group(b.apiVersion()); ga != gb {
			return ga < gb
		}
		if a.namespace() != b.namespace() {
			return a.namespace() < b.namespace()
		}
		return a.name() < b.name()
	})
	m := &Manifests{Objects: make([]Object, 0, len(objs))}
	for i, o := range objs {
		if i > 0 {
			p := objs[i-1]
			if p.kind() == o.kind() && group(p.apiVersion()) == group(o.apiVersion()) && p.namespace() == o.namespace() && p.name() == o.name() {
				return nil, &SpecError{File: o.source, Msg: fmt.Sprintf("%s %s/%s is rendered twice (also by %s)", o.kind(), o.namespace(), o.name(), p.source)}
			}
		}
		var y []byte
		if text(o) {
			var err error
			if y, err = rc.encode(o); err != nil {
				return nil, &SpecError{File: o.source, Msg: err.Error(), Err: err}
			}
		}
		obj := Object{
			APIVersion: o.apiVersion(), Kind: o.kind(), Namespace: o.namespace(), Name: o.name(),
			Component: o.component, YAML: y,
		}
		if IsIngress(obj) {
			var err error
			if obj.Hosts, err = IngressHostsOf(o.obj); err != nil {
				return nil, &SpecError{File: o.source, Msg: err.Error(), Err: err}
			}
		}
		m.Objects = append(m.Objects, obj)
	}
	return m, nil
}

// checkRendered applies the rendered-bytes limit to what the templates
// produced, naming the largest template. Helm's engine renders each
// template to memory and cannot be stopped midway, so it is the memory
// limit (in a Sandbox) that bounds a render on its way; this bounds what
// the rest of the pipeline (parsing, patches, the release record) holds.
func (d *Driver) checkRendered(files map[string]string) error {
	max := d.compiled.opts.Limits.WithDefaults().RenderedBytes
	var total int64
	largest, size := "", 0
	for n, text := range files {
		total += int64(len(text))
		if len(text) > size || (len(text) == size && n < largest) {
			largest, size = n, len(text)
		}
	}
	if total <= max {
		return nil
	}
	return &LimitError{Driver: d.Source, File: d.chartPaths(largest), Limit: LimitRendered, Max: sizeText(max),
		Detail: fmt.Sprintf("the chart rendered %d bytes, %d of them in this template", total, size)}
}

// maxTemplateErrorLen bounds a template error's message: Helm nests the
// message of every include it unwinds, so a runaway recursion gives one of
// some 100 KB.
const maxTemplateErrorLen = 1000

// shorten keeps the start (where the error is) and the end (why) of s.
func shorten(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max/2] + " … " + s[len(s)-max/2:]
}
