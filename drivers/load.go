package drivers

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
	cueyaml "cuelang.org/go/encoding/yaml"
	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v4/pkg/chart/common"
)

//go:embed schema.cue
var schemaSource string

// schemaFile is the file name CUE positions in the schema carry.
const schemaFile = "styrmin:driver-schema.cue"

// Spec file names, in order of preference; a folder holds exactly one.
const (
	specCUE  = "driver.cue"
	specYAML = "driver.yaml"
)

// DefaultKubeVersion is the Kubernetes version declared to charts when
// neither the driver nor LoadOptions set one.
const DefaultKubeVersion = "v1.37.0"

// LoadOptions tune Load.
type LoadOptions struct {
	// Source names where the folder comes from, for messages and
	// Driver.Source (for example "drivers/webapp/1.0.0").
	Source string
	// MaxFileSize is the largest file accepted, in bytes (default 1 MiB).
	MaxFileSize int64
	// MaxTotalSize is the largest folder accepted, in bytes (default 16 MiB).
	MaxTotalSize int64
	// KubeVersion is the Kubernetes version declared to the chart
	// (.Capabilities.KubeVersion) when the driver sets none; default
	// DefaultKubeVersion.
	KubeVersion string
	// APIVersions are the API versions declared to the chart
	// (.Capabilities.APIVersions); default: the built-in Kubernetes API
	// versions known to Helm.
	APIVersions []string
	// Limits bound the load and every later evaluation of the driver;
	// unset ones take their defaults.
	Limits Limits
	// Sandbox, when set, runs the load's evaluation and every Render in a
	// child process (see Sandbox); nil evaluates in-process, where only
	// the time, rendered-bytes and chart limits hold.
	Sandbox *Sandbox
	// Context bounds the load as well as Limits.Timeout (nil: none).
	Context context.Context
	// RenderCache, when set, is shared by every render of the drivers
	// loaded with these options (see RenderCache): for a command's run.
	RenderCache *RenderCache
	// Shared, when set, gives a folder loaded before with these options
	// (the same source and files) the same Driver, without loading it
	// again (see LoadShare): for a command's run.
	Shared *LoadShare

	// phase, set in a sandbox child, is told each file evaluated.
	phase func(file string)
}

var (
	contextPath    = cue.MakePath(cue.Str("context"))
	parametersPath = cue.MakePath(cue.Str("parameters"))
	valuesPath     = cue.MakePath(cue.Str("values"))
	patchesPath    = cue.MakePath(cue.Str("patches"))
	componentsPath = cue.MakePath(cue.Str("components"))
	secretMarker   = cue.MakePath(cue.Def("#styrminSecret"))
	paramNameRE    = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]*$`)
	dnsLabelRE     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// Load loads and validates one driver version from fsys, which is rooted
// at the driver version's folder. It reads the spec (driver.cue or
// driver.yaml) and the chart, checks the spec against the schema and its
// cross-references, and, when every parameter has a default, renders the
// driver once with a sample context so template errors and components
// without workloads show up here rather than at deploy time.
func Load(fsys fs.FS, opts LoadOptions) (*Driver, error) {
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = defaultMaxFileSize
	}
	if opts.MaxTotalSize <= 0 {
		opts.MaxTotalSize = defaultMaxTotalSize
	}
	opts.Limits = opts.Limits.WithDefaults()
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	f, err := readFolder(fsys, opts.Source, opts.MaxFileSize, opts.MaxTotalSize)
	if err != nil {
		return nil, err
	}
	if opts.Shared != nil {
		return opts.Shared.load(opts.shareKey(f), func() (*Driver, error) { return load(ctx, f, opts) })
	}
	return load(ctx, f, opts)
}

// load is Load of the folder f, read.
func load(ctx context.Context, f *folder, opts LoadOptions) (*Driver, error) {
	specFile := f.display(specCUE)
	if _, ok := f.files[specYAML]; ok {
		specFile = f.display(specYAML)
	}
	if opts.Sandbox != nil {
		// Evaluated in a child first: the load below repeats its spec
		// compile and chart load (same files, no render), so it is known
		// to be bounded. A load an earlier process checked so is not sent
		// again (loadChecks).
		req := opts.sandboxRequest("load", f)
		checks := opts.Sandbox.checks
		key := checks.key(req, f)
		if checks.has(key) {
			// Still under the time limit and the caller's context: the
			// machine may be slower than when the child checked it.
			return bounded(ctx, opts.Limits, f.source, specFile, func() (*Driver, error) { return loadFolder(f, opts) })
		}
		if _, err := opts.Sandbox.run(ctx, req, specFile); err != nil {
			return nil, err
		}
		checks.add(key)
		// The child rendered the sample context at most: each input a
		// deployment gives the driver is evaluated in a child the first
		// time, before this process evaluates it (evalChecked).
		return loadFolder(f, opts)
	}
	return bounded(ctx, opts.Limits, f.source, specFile, func() (*Driver, error) {
		d, err := loadFolder(f, opts)
		if err != nil {
			return nil, err
		}
		if sample, ok := d.SampleContext(); ok {
			if _, err := d.renderSample(sample); err != nil {
				return nil, err
			}
		}
		return d, nil
	})
}

// sandboxRequest is the request that evaluates folder f as these options
// would.
func (opts LoadOptions) sandboxRequest(op string, f *folder) *sandboxRequest {
	return &sandboxRequest{Op: op, Source: f.source, Files: f.files, KubeVersion: opts.KubeVersion,
		APIVersions: opts.APIVersions, Limits: opts.Limits, folderSum: f.digest()}
}

// notePhase tells a sandbox child's parent which file is evaluated next.
func (opts LoadOptions) notePhase(file string) {
	if opts.phase != nil {
		opts.phase(file)
	}
}

// loadFolder builds a Driver from the folder's files without rendering.
func loadFolder(f *folder, opts LoadOptions) (*Driver, error) {
	_, hasCUE := f.files[specCUE]
	_, hasYAML := f.files[specYAML]
	var specName string
	switch {
	case hasCUE && hasYAML:
		return nil, &SpecError{File: f.display(specCUE), Msg: "both driver.cue and driver.yaml exist; keep one"}
	case hasCUE:
		specName = specCUE
	case hasYAML:
		specName = specYAML
	default:
		return nil, &SpecError{File: f.display(specCUE), Msg: "no driver spec: expected driver.cue or driver.yaml in the driver folder"}
	}
	file := f.display(specName)
	opts.notePhase(file)
	cs, err := compileSpec(file, specName, f.files[specName])
	if err != nil {
		return nil, err
	}
	v := cs.value
	d := &Driver{
		Digest:   f.digest(),
		Source:   f.source,
		Hooks:    map[Hook]Modes{},
		compiled: cs,
	}
	opts.Limits = opts.Limits.WithDefaults()
	cs.folder, cs.opts = f, opts
	if err := d.decodeSpec(v, file); err != nil {
		return nil, err
	}
	if err := d.loadChart(f, v, opts); err != nil {
		return nil, err
	}
	if err := d.prepareStatic(); err != nil {
		return nil, err
	}
	return d, nil
}

// parseSpec parses the spec file. A CUE spec refers to `context`, which it
// does not declare: it is declared here, open, after the spec's last line
// (so line numbers stay the spec's own); #Driver gives it its type and
// each evaluation fills it.
func parseSpec(file, specName string, src []byte) (*ast.File, error) {
	if strings.HasSuffix(specName, ".yaml") {
		return cueyaml.Extract(file, src)
	}
	text := make([]byte, 0, len(src)+16)
	text = append(append(text, src...), "\ncontext: _\n"...)
	return parser.ParseFile(file, text, parser.ParseComments)
}

// compileSpec compiles the spec against the schema and prepares the
// projections evaluated per call. Each Driver gets its own cue.Context:
// values are safe for concurrent use, and drivers stay independent.
func compileSpec(file, specName string, src []byte) (*compiled, error) {
	syntax, err := parseSpec(file, specName, src)
	if err != nil {
		return nil, cueError(file, err)
	}
	fullKeys := findContextKeys(syntax, syntax)
	ctx := cuecontext.New()
	schema := ctx.CompileString(schemaSource, cue.Filename(schemaFile))
	if err := schema.Err(); err != nil {
		return nil, fmt.Errorf("drivers: internal schema: %w", err)
	}
	spec := ctx.BuildFile(syntax, cue.Scope(schema))
	if err := spec.Err(); err != nil {
		return nil, cueError(file, err)
	}
	// The spec first: positions of unified values are then the spec's.
	v := spec.Unify(schema.LookupPath(cue.MakePath(cue.Def("#Driver"))))
	if err := v.Validate(); err != nil {
		return nil, cueError(file, err)
	}
	cs := &compiled{specFile: specName, file: file, value: v, raw: spec}
	full := projection{value: spec, keys: fullKeys}
	project := func(roots ...string) projection {
		if strings.HasSuffix(specName, ".yaml") {
			return full
		}
		// Parse again: compiling may annotate the syntax tree, and each
		// projection gets its own.
		f, err := parseSpec(file, specName, src)
		if err != nil {
			return full
		}
		pf, ok := newDeclGraph(f).project(roots...)
		if !ok {
			return full
		}
		keys := findContextKeys(pf, f) // before compiling, which re-resolves the tree
		keys.selectsOnly = declaresContextOnce(pf)
		pv := ctx.BuildFile(pf, cue.Scope(schema))
		if pv.Err() != nil {
			return full
		}
		return projection{value: pv, keys: keys}
	}
	cs.valuesProj = project("values")
	cs.servicesProj = project("services")
	cs.renderProj = project("components", "patches")
	return cs, nil
}

// decodeSpec fills the exported fields from the compiled spec and checks
// what the schema cannot: semver, cross-references, actions.
func (d *Driver) decodeSpec(v cue.Value, file string) error {
	loc := d.compiled.locator()
	var errs []error
	add := func(e error) {
		if e != nil {
			errs = append(errs, e)
		}
	}
	str := func(field string, required bool) string {
		fv := v.LookupPath(cue.ParsePath(field))
		if !fv.Exists() {
			if required {
				add(&SpecError{File: file, Field: field, Msg: "missing"})
			}
			return ""
		}
		s, err := fv.String()
		if err != nil {
			add(loc.errAt(fv, field, "must be a concrete string that does not depend on the context"))
		}
		return s
	}
	d.Name = str("name", true)
	d.Version = str("version", true)
	d.Description = str("description", false)
	d.AppVersions = str("appVersions", true)
	kube := str("kubeVersion", false)
	if d.Version != "" {
		if _, err := semver.StrictNewVersion(d.Version); err != nil {
			add(loc.errAt(v.LookupPath(cue.ParsePath("version")), "version",
				"%q is not a semantic version (MAJOR.MINOR.PATCH): %v", d.Version, err))
		}
	}
	if d.AppVersions != "" {
		c, err := semver.NewConstraint(d.AppVersions)
		if err != nil {
			add(loc.errAt(v.LookupPath(cue.ParsePath("appVersions")), "appVersions",
				"%q is not a semver range (for example \">=1.5.0 <1.7.0\"): %v", d.AppVersions, err))
		}
		d.compiled.appRange = c
	}
	if kube != "" {
		if _, err := common.ParseKubeVersion(kube); err != nil {
			add(loc.errAt(v.LookupPath(cue.ParsePath("kubeVersion")), "kubeVersion",
				"%q is not a Kubernetes version: %v", kube, err))
		}
		d.compiled.kubeVersion = kube
	}
	ps, err := decodeParameters(v.LookupPath(parametersPath), d.compiled.raw.LookupPath(parametersPath), loc)
	add(err)
	d.Parameters = ps
	comps, err := decodeComponents(v.LookupPath(componentsPath), d.compiled.raw.LookupPath(componentsPath), loc)
	add(err)
	d.Components = comps
	known := map[string]bool{}
	for _, c := range comps {
		known[c.Name] = true
	}
	svcs, err := decodeServices(v.LookupPath(cue.ParsePath("services")), loc, known)
	add(err)
	d.Services = svcs
	hooks, err := decodeActions(v.LookupPath(cue.ParsePath("actions")), loc, comps)
	add(err)
	d.Hooks = hooks
	provides, err := decodeProvides(v.LookupPath(cue.ParsePath("provides")), loc)
	add(err)
	d.Provides = provides
	return errors.Join(errs...)
}

// decodeProvides reads provides: a concrete list (the schema allows only
// the known services), sorted and without duplicates.
func decodeProvides(v cue.Value, loc *locator) ([]string, error) {
	if !v.Exists() {
		return nil, nil
	}
	var out []string
	if err := v.Decode(&out); err != nil {
		return nil, loc.errAt(v, "provides", "must be a concrete list that does not depend on the context (for example [%q])", ProvidesIngressClass)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func decodeParameters(v, raw cue.Value, loc *locator) ([]Parameter, error) {
	var out []Parameter
	var errs []error
	it, err := v.Fields(cue.Optional(true), cue.Docs(true))
	if err != nil {
		return nil, cueError(loc.file, err)
	}
	for it.Next() {
		sel := it.Selector()
		if sel.IsDefinition() || sel.PkgPath() != "" {
			continue
		}
		name := sel.Unquoted()
		pv := it.Value()
		field := "parameters." + name
		if !paramNameRE.MatchString(name) {
			errs = append(errs, loc.errAt(pv, field, "parameter names must match %s", paramNameRE))
			continue
		}
		p := Parameter{Name: name, Doc: docText(pv)}
		p.Secret = pv.LookupPath(secretMarker).Exists()
		p.Type = kindName(pv, p.Secret)
		p.Constraint = constraintText(raw.LookupPath(cue.MakePath(sel)))
		if a := pv.Attribute("styrmin"); a.Err() == nil {
			if ok, _ := a.Flag(0, "sensitive"); ok {
				p.Sensitive = true
			}
		}
		if p.Sensitive && !p.Secret && p.Type != "string" {
			// Instances hold a placeholder string where a sensitive value
			// was (resolver.Placeholder): the values mapping must accept
			// it where it accepts the value.
			errs = append(errs, loc.errAt(pv, field, "a sensitive parameter must be a string (it is %s): encode the value as a string, or use a #SecretRef", p.Type))
			continue
		}
		if dv, ok := pv.Default(); ok || pv.IsConcrete() {
			if err := dv.Validate(cue.Concrete(true)); err == nil {
				var x any
				if err := dv.Decode(&x); err == nil {
					p.Default, p.HasDefault = x, true
				}
			}
		}
		if p.Secret && !p.HasDefault {
			p.Default = nil
		}
		p.Optional = sel.ConstraintType() == cue.OptionalConstraint && !p.HasDefault
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

// docText joins the doc comments of a field.
func docText(v cue.Value) string {
	var parts []string
	for _, cg := range v.Doc() {
		if t := strings.TrimSpace(cg.Text()); t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, "\n")
}

func kindName(v cue.Value, secret bool) string {
	if secret {
		return "secret"
	}
	switch k := v.IncompleteKind(); k {
	case cue.IntKind:
		return "int"
	case cue.FloatKind:
		return "float"
	case cue.NumberKind:
		return "number"
	case cue.StringKind:
		return "string"
	case cue.BoolKind:
		return "bool"
	case cue.ListKind:
		return "list"
	case cue.StructKind:
		return "struct"
	case cue.BytesKind:
		return "bytes"
	default:
		return k.String()
	}
}

// constraintText is the parameter's declaration without its default
// marker, as written: `*2 | int & >=1 & <=10` gives `int & >=1 & <=10`.
func constraintText(v cue.Value) string {
	src := v.Source()
	if f, ok := src.(*ast.Field); ok {
		src = f.Value
	}
	expr, ok := src.(ast.Expr)
	if !ok || expr == nil {
		return ""
	}
	// A default that is one value of an enumeration stays (as a plain
	// value); a default next to a type or bound is dropped.
	ds := disjuncts(expr)
	enum := true
	for _, d := range ds {
		if u, ok := d.(*ast.UnaryExpr); ok && u.Op == token.MUL {
			d = u.X
		}
		if _, ok := d.(*ast.BasicLit); !ok {
			enum = false
		}
	}
	var keep []ast.Expr
	for _, d := range ds {
		if u, ok := d.(*ast.UnaryExpr); ok && u.Op == token.MUL {
			if !enum || len(ds) == 1 {
				continue
			}
			d = u.X
		}
		keep = append(keep, d)
	}
	var parts []string
	for _, k := range keep {
		b, err := format.Node(k)
		if err != nil {
			return ""
		}
		parts = append(parts, strings.Join(strings.Fields(string(b)), " "))
	}
	return strings.Join(parts, " | ")
}

func disjuncts(e ast.Expr) []ast.Expr {
	if p, ok := e.(*ast.ParenExpr); ok {
		return disjuncts(p.X)
	}
	if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.OR {
		return append(disjuncts(b.X), disjuncts(b.Y)...)
	}
	return []ast.Expr{e}
}

// exprText formats the expression a value was written as, for display.
func exprText(v cue.Value) string {
	src := v.Source()
	if f, ok := src.(*ast.Field); ok {
		src = f.Value
	}
	if src == nil {
		return ""
	}
	b, err := format.Node(src)
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

func decodeComponents(v, raw cue.Value, loc *locator) ([]Component, error) {
	var out []Component
	var errs []error
	it, err := v.Fields()
	if err != nil {
		return nil, cueError(loc.file, err)
	}
	for it.Next() {
		name := it.Selector().Unquoted()
		cv := it.Value()
		field := "components." + name
		c := Component{Name: name}
		wl, err := cv.LookupPath(cue.ParsePath("workloads")).List()
		if err != nil {
			errs = append(errs, cueError(loc.file, err))
			continue
		}
		i := 0
		for ; wl.Next(); i++ {
			wv := wl.Value()
			wf := fmt.Sprintf("%s.workloads[%d]", field, i)
			kind, err := wv.LookupPath(cue.ParsePath("kind")).String()
			// The agent waits for every workload of a component, so a
			// kind it cannot wait for is refused here, not at deploy time.
			if err != nil || !isWorkloadKindName(kind) {
				errs = append(errs, loc.errAt(wv.LookupPath(cue.ParsePath("kind")), wf+".kind",
					"kind %q is not a workload kind the agent can wait for: component %q may select %s", kind, name, joinWords(WorkloadKinds(), "or")))
				continue
			}
			w := WorkloadSelector{Kind: kind}
			nv := wv.LookupPath(cue.ParsePath("name"))
			if nv.Exists() {
				if s, err := nv.String(); err == nil {
					w.Name = s
				} else {
					w.Name = exprText(raw.LookupPath(cue.MakePath(cue.Str(name), cue.Str("workloads"), cue.Index(i), cue.Str("name"))))
				}
			}
			if lv := wv.LookupPath(cue.ParsePath("matchLabels")); lv.Exists() {
				if err := lv.Decode(&w.MatchLabels); err != nil {
					errs = append(errs, loc.errAt(lv, wf+".matchLabels", "must be a map of concrete strings that does not depend on the context"))
				}
			}
			if !nv.Exists() && len(w.MatchLabels) == 0 {
				errs = append(errs, loc.errAt(wv, wf, "a workload needs a name or matchLabels"))
				continue
			}
			c.Workloads = append(c.Workloads, w)
		}
		if i == 0 {
			errs = append(errs, loc.errAt(cv, field+".workloads", "a component needs at least one workload"))
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

func decodeServices(v cue.Value, loc *locator, components map[string]bool) ([]Service, error) {
	var out []Service
	var errs []error
	it, err := v.Fields()
	if err != nil {
		return nil, cueError(loc.file, err)
	}
	for it.Next() {
		name := it.Selector().Unquoted()
		sv := it.Value()
		field := "services." + name
		var s Service
		s.Name = name
		for _, key := range []string{"component", "port", "protocol", "ingress"} {
			fv := sv.LookupPath(cue.ParsePath(key))
			var err error
			switch key {
			case "component":
				s.Component, err = fv.String()
			case "port":
				var n int64
				n, err = fv.Int64()
				s.Port = int(n)
			case "protocol":
				s.Protocol, err = fv.String()
			case "ingress":
				s.Ingress, err = fv.Bool()
			}
			if err != nil {
				errs = append(errs, loc.errAt(fv, field+"."+key, "must be concrete and not depend on the context"))
			}
		}
		if !components[s.Component] {
			errs = append(errs, loc.errAt(sv.LookupPath(cue.ParsePath("component")), field+".component",
				"unknown component %q (the driver declares: %s)", s.Component, knownList(components)))
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

func knownList(m map[string]bool) string {
	if len(m) == 0 {
		return "none"
	}
	return strings.Join(sortedKeys(m), ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var actionKinds = map[ActionKind]bool{
	ActionStopComponents: true, ActionStartComponents: true, ActionExec: true,
	ActionRunJob: true, ActionWaitReady: true, ActionUpgradeDeploymentVersion: true,
	ActionBackup: true, ActionRestoreBackup: true,
}

type stepSpec struct {
	Action     string            `json:"action"`
	Components []string          `json:"components"`
	Component  string            `json:"component"`
	Command    []string          `json:"command"`
	Job        string            `json:"job"`
	Timeout    string            `json:"timeout"`
	Retry      *retrySpec        `json:"retry"`
	Args       map[string]string `json:"args"`
}

type retrySpec struct {
	Attempts int    `json:"attempts"`
	Backoff  string `json:"backoff"`
}

func decodeActions(v cue.Value, loc *locator, comps []Component) (map[Hook]Modes, error) {
	hooks := map[Hook]Modes{}
	var errs []error
	// The backup and restoreBackup steps run the operation hooks, so they
	// need both declared (decodeActions checks the hooks themselves).
	canBackup := v.LookupPath(cue.MakePath(cue.Str(string(HookBackup)))).Exists() &&
		v.LookupPath(cue.MakePath(cue.Str(string(HookRestore)))).Exists()
	for _, h := range []Hook{HookSetup, HookUpgrade} {
		hv := v.LookupPath(cue.MakePath(cue.Str(string(h))))
		var m Modes
		if hv.Exists() {
			for _, mode := range ModeNames() {
				mv := hv.LookupPath(cue.MakePath(cue.Str(mode)))
				if !mv.Exists() {
					continue
				}
				field := fmt.Sprintf("actions.%s.%s", h, mode)
				steps, err := decodeSteps(mv, loc, h, field, mode, comps, canBackup)
				if err != nil {
					errs = append(errs, err)
				}
				m.set(mode, steps)
			}
		}
		if len(m.Core) == 0 {
			m.Core = []Step{{Action: ActionUpgradeDeploymentVersion}}
		}
		if err := restoreOnce(hv, loc, h, m); err != nil {
			errs = append(errs, err)
		}
		if err := jobNamesOnce(hv, loc, h, m); err != nil {
			errs = append(errs, err)
		}
		if err := stepsBounded(hv, loc, h, m); err != nil {
			errs = append(errs, err)
		}
		hooks[h] = m
	}
	declared := map[Hook]bool{}
	for _, h := range OperationHooks() {
		hv := v.LookupPath(cue.MakePath(cue.Str(string(h))))
		if !hv.Exists() {
			continue
		}
		declared[h] = true
		var m Modes
		for _, mode := range ModeNames() {
			mv := hv.LookupPath(cue.MakePath(cue.Str(mode)))
			if !mv.Exists() {
				continue
			}
			steps, err := decodeSteps(mv, loc, h, fmt.Sprintf("actions.%s.%s", h, mode), mode, comps, canBackup)
			if err != nil {
				errs = append(errs, err)
			}
			m.set(mode, steps)
		}
		if err := jobNamesOnce(hv, loc, h, m); err != nil {
			errs = append(errs, err)
		}
		if err := stepsBounded(hv, loc, h, m); err != nil {
			errs = append(errs, err)
		}
		if len(m.Core) == 0 {
			errs = append(errs, loc.errAt(hv, fmt.Sprintf("actions.%s.core", h),
				"a %s needs at least one core step (a runJob that %s the artefact, say)", h, map[Hook]string{HookBackup: "writes", HookRestore: "reads", HookDeleteBackup: "deletes"}[h]))
		}
		hooks[h] = m
	}
	if declared[HookBackup] != declared[HookRestore] {
		missing, has := HookRestore, HookBackup
		if declared[HookRestore] {
			missing, has = HookBackup, HookRestore
		}
		errs = append(errs, loc.errAt(v, "actions."+string(missing),
			"missing: a driver that declares %s declares %s too (a backup that cannot be restored, or the other way round, is no backup)", has, missing))
	}
	if declared[HookDeleteBackup] && !declared[HookBackup] {
		errs = append(errs, loc.errAt(v, "actions."+string(HookDeleteBackup),
			"deleteBackup deletes a backup's artefact: it needs actions.backup and actions.restore"))
	}
	return hooks, errors.Join(errs...)
}

// restoreOnce refuses a second restoreBackup in a hook: a clone's data
// is restored once, where the driver says, and a second restore would
// undo what ran between the two.
func restoreOnce(hv cue.Value, loc *locator, h Hook, m Modes) error {
	var at []string
	for _, ms := range m.Ordered() {
		for i, s := range ms.Steps {
			if s.Action == ActionRestoreBackup {
				at = append(at, fmt.Sprintf("actions.%s.%s[%d]", h, ms.Mode, i))
			}
		}
	}
	if len(at) < 2 {
		return nil
	}
	return loc.errAt(hv, at[1], "a second restoreBackup (the first is %s): the setup hook restores a clone's backup at most once", at[0])
}

// jobNamesOnce refuses two runJob steps of a hook with one job name. The
// agent names a step's Job after the job, the deployment and the sequence,
// and a step finding its Job takes it as its own run: the second step
// would find the first one's Job Complete and succeed without running.
// A hook's steps all run in one task; the backup and restore hooks a
// change's steps run name their Jobs apart from the change's own.
func jobNamesOnce(hv cue.Value, loc *locator, h Hook, m Modes) error {
	first := map[string]string{}
	var errs []error
	for _, ms := range m.Ordered() {
		for i, s := range ms.Steps {
			if s.Action != ActionRunJob || s.Job == "" {
				continue
			}
			at := fmt.Sprintf("actions.%s.%s[%d]", h, ms.Mode, i)
			if prev, ok := first[s.Job]; ok {
				jv := hv.LookupPath(cue.MakePath(cue.Str(ms.Mode), cue.Index(i), cue.Str("job")))
				errs = append(errs, loc.errAt(jv, at+".job", "job %q is the job of %s too: each runJob step of a hook needs a job name of its own (the agent names the Job after it, and the second step would take the first one's Job for its own run)", s.Job, prev))
				continue
			}
			first[s.Job] = at
		}
	}
	return errors.Join(errs...)
}

// maxHookSteps bounds the steps of one hook. A task records each step's
// state, message and output (up to 4 KiB) in its status, and the API
// server refuses an object past about 1.5 MiB: a task of hundreds of steps
// could not record a step's end and stayed Running for ever, every later
// change of its deployment waiting behind it. An upgrade that takes a
// backup first runs two hooks' steps.
const maxHookSteps = 32

// stepsBounded refuses a hook of more than maxHookSteps steps.
func stepsBounded(hv cue.Value, loc *locator, h Hook, m Modes) error {
	n := 0
	for _, ms := range m.Ordered() {
		n += len(ms.Steps)
	}
	if n <= maxHookSteps {
		return nil
	}
	return loc.errAt(hv, "actions."+string(h), "%d steps: expected at most %d in a hook (a task records each step in its status, which the API server bounds)", n, maxHookSteps)
}

func decodeSteps(v cue.Value, loc *locator, hook Hook, field, mode string, comps []Component, canBackup bool) ([]Step, error) {
	components := map[string]bool{}
	for _, c := range comps {
		components[c.Name] = true
	}
	it, err := v.List()
	if err != nil {
		return nil, cueError(loc.file, err)
	}
	var steps []Step
	var errs []error
	upgrades := 0
	for i := 0; it.Next(); i++ {
		sv := it.Value()
		sf := fmt.Sprintf("%s[%d]", field, i)
		at := func(key string) cue.Value {
			if fv := sv.LookupPath(cue.ParsePath(key)); key != "" && fv.Exists() {
				return fv
			}
			return sv
		}
		fail := func(key, format string, args ...any) {
			f := sf
			if key != "" {
				f += "." + key
			}
			errs = append(errs, loc.errAt(at(key), f, format, args...))
		}
		if err := sv.Validate(cue.Concrete(true)); err != nil {
			fail("", "a step must be concrete and not depend on the context")
			continue
		}
		var s stepSpec
		if err := sv.Decode(&s); err != nil {
			errs = append(errs, cueError(loc.file, err))
			continue
		}
		kind := ActionKind(s.Action)
		if !actionKinds[kind] {
			fail("action", "unknown action %q (expected one of %s)", s.Action, strings.Join(actionNames(), ", "))
			continue
		}
		step := Step{Action: kind, Components: s.Components, Component: s.Component, Command: s.Command, Job: s.Job, Args: s.Args}
		if s.Timeout != "" {
			t, err := time.ParseDuration(s.Timeout)
			if err != nil || t <= 0 {
				fail("timeout", "%q is not a positive duration (for example \"5m\")", s.Timeout)
			}
			step.Timeout = t
		}
		if s.Retry != nil {
			step.Retry.Attempts = s.Retry.Attempts
			if s.Retry.Backoff != "" {
				b, err := time.ParseDuration(s.Retry.Backoff)
				if err != nil || b <= 0 {
					fail("retry.backoff", "%q is not a positive duration (for example \"30s\")", s.Retry.Backoff)
				}
				step.Retry.Backoff = b
			}
			if kind == ActionUpgradeDeploymentVersion {
				fail("retry", "the step that writes the instance is not retried: it waits until the instance is applied")
			}
		}
		checkComponents := func() {
			if len(s.Components) == 0 {
				fail("components", "%s needs at least one component", kind)
			}
			for _, c := range s.Components {
				if !components[c] {
					fail("components", "unknown component %q (the driver declares: %s)", c, knownList(components))
				}
			}
		}
		unexpected := func(keys ...string) {
			for _, k := range keys {
				if sv.LookupPath(cue.ParsePath(k)).Exists() {
					fail(k, "not an argument of %s", kind)
				}
			}
		}
		switch kind {
		case ActionStopComponents, ActionStartComponents:
			checkComponents()
			unexpected("component", "command", "job")
			// Selectors name their kind, so a component the agent could
			// not scale is found here rather than half-way through a task.
			for _, c := range comps {
				if !slices.Contains(s.Components, c.Name) {
					continue
				}
				if k, ok := unscalableKind(c); ok {
					fail("components", "component %q selects %s workloads, which %s cannot scale (it scales only %s)", c.Name, k, kind, joinWords(ScalableKinds(), "and"))
				}
			}
		case ActionWaitReady:
			checkComponents()
			unexpected("component", "command", "job")
		case ActionExec, ActionRunJob:
			if !components[s.Component] {
				fail("component", "unknown component %q (the driver declares: %s)", s.Component, knownList(components))
			}
			if len(s.Command) == 0 {
				fail("command", "%s needs a command", kind)
			}
			unexpected("components")
			if kind == ActionRunJob {
				if !dnsLabelRE.MatchString(s.Job) || len(s.Job) > 40 {
					fail("job", "%s needs a job name of lower-case letters, digits and '-' (at most 40), got %q", kind, s.Job)
				}
			} else {
				unexpected("job")
			}
		case ActionUpgradeDeploymentVersion:
			unexpected("components", "component", "command", "job")
			switch {
			case hook == HookBackup || hook == HookRestore || hook == HookDeleteBackup:
				fail("action", "upgradeDeploymentVersion belongs to setup and upgrade: a %s applies no new version", hook)
			case mode != ModeCore:
				fail("action", "upgradeDeploymentVersion belongs in core, not %s", mode)
			}
			upgrades++
		case ActionBackup, ActionRestoreBackup:
			// The step runs the driver's own backup or restore hook: what
			// to dump and where is declared there, once.
			unexpected("components", "component", "command", "job")
			switch {
			case kind == ActionBackup && (hook != HookUpgrade || mode != ModePre):
				fail("action", "backup belongs in the upgrade hook's pre mode (a backup before the upgrade changes anything), not %s.%s", hook, mode)
			case kind == ActionRestoreBackup && hook != HookSetup:
				fail("action", "restoreBackup belongs in the setup hook (a clone's deployments restore their source's backup once, when created), not %s", hook)
			case !canBackup:
				fail("action", "%s runs the driver's backup and restore hooks, which it does not declare: add actions.backup and actions.restore", kind)
			}
		}
		for _, k := range sortedKeys(s.Args) {
			if msg := checkStepArg(kind, k, s.Args[k]); msg != "" {
				av := sv.LookupPath(cue.MakePath(cue.Str("args"), cue.Str(k)))
				if !av.Exists() {
					av = sv
				}
				errs = append(errs, loc.errAt(av, sf+argField(k), "%s", msg))
			}
		}
		steps = append(steps, step)
	}
	if mode == ModeCore && len(steps) > 0 && upgrades != 1 && hook != HookBackup && hook != HookRestore && hook != HookDeleteBackup {
		errs = append(errs, loc.errAt(v, field, "core must contain exactly one upgradeDeploymentVersion step, found %d", upgrades))
	}
	return steps, errors.Join(errs...)
}

// Step arguments a driver may declare. A step's args reach the agent's
// task step as they are (operator/task taskStepOf), next to the keys the
// agent keeps there itself (the step's command, component, job and retry
// policy, and the backup or restore an operation's steps run for), and
// the agent reads them all from one map. So a driver declares only the
// few keys the agent reads as the driver's, each in the form the agent
// expects: any other key would be taken for the agent's own (a backup's
// credentials and artefact, retries past the bound of retry.attempts) or
// fail the step half-way through a task, after earlier steps stopped
// workers.
const (
	// ArgContainer names the container of the component's pod an exec
	// step runs in, or whose image and environment a runJob's Job takes
	// (the first container by default).
	ArgContainer = "container"
	// ArgBackoffLimit is the backoffLimit of a runJob step's Job (0 by
	// default: a failed pod fails the step, and the step's retry policy
	// decides what happens next).
	ArgBackoffLimit = "backoffLimit"
	// maxBackoffLimit bounds the Job's own retries as retry.attempts
	// bounds the step's: each reruns the step's command.
	maxBackoffLimit = 10
)

// stepArgs are the args keys a driver may declare, by action; an action
// not listed takes none.
var stepArgs = map[ActionKind][]string{
	ActionExec:   {ArgContainer},
	ActionRunJob: {ArgContainer, ArgBackoffLimit},
}

// StepArgs returns the args keys a driver may declare on a step of
// action k (none for most actions).
func StepArgs(k ActionKind) []string { return slices.Clone(stepArgs[k]) }

// IsStepArg reports whether a driver may declare args key on a step of
// action k. The agent keeps its own keys in the same map; a step built
// from a driver carries only these.
func IsStepArg(k ActionKind, key string) bool { return slices.Contains(stepArgs[k], key) }

// reservedStepArgs are the keys the agent itself keeps in a task step's
// args (operator/task steps.go and operation.go), with why a driver may
// not set them. Named apart from unknown keys so the error says what the
// driver meant to do instead.
var reservedStepArgs = map[string]string{
	"command":       "the agent records the step's command there: declare it as the step's command",
	"component":     "the agent records the step's component there: declare it as the step's component",
	"job":           "the agent records the runJob step's job name there: declare it as the step's job",
	"retryAttempts": "the agent records the step's retry policy there: declare retry: {attempts, backoff}, at most 10 attempts",
	"retryBackoff":  "the agent records the step's retry policy there: declare retry: {attempts, backoff}, at most 10 attempts",
	"operation":     "the agent sets it on the steps of the backup and restore hooks it runs, whose jobs get the environment's backup credentials: use a backup or restoreBackup step",
	"backupID":      "the agent sets it on the steps of the backup and restore hooks it runs, and records the backup under it: use a backup or restoreBackup step",
	"artifact":      "the agent sets it on the steps of the backup and restore hooks it runs to the environment's backup location: use a backup or restoreBackup step",
}

// checkStepArg says what is wrong with args key k = v on a step of
// action kind, "" when nothing is.
func checkStepArg(kind ActionKind, k, v string) string {
	if why, ok := reservedStepArgs[k]; ok {
		return "reserved for the agent (" + why + ")"
	}
	if !IsStepArg(kind, k) {
		if len(stepArgs[kind]) == 0 {
			return fmt.Sprintf("unknown argument: %s takes no args", kind)
		}
		return fmt.Sprintf("unknown argument of %s (expected %s)", kind, joinWords(stepArgs[kind], "or"))
	}
	switch k {
	case ArgContainer:
		if len(v) > 63 || !dnsLabelRE.MatchString(v) {
			return fmt.Sprintf("expected the name of a container of the component's pod (lower-case letters, digits and '-', at most 63), got %q", v)
		}
	case ArgBackoffLimit:
		// Digits only: the agent parses it with strconv.Atoi, which also
		// takes "+3", and a Job's backoffLimit is an int32.
		n, err := strconv.Atoi(v)
		if err != nil || strings.Trim(v, "0123456789") != "" || (len(v) > 1 && v[0] == '0') || n > maxBackoffLimit {
			return fmt.Sprintf("expected a whole number from 0 to %d (the retries of the Job's pod before the step fails), got %q", maxBackoffLimit, v)
		}
	}
	return ""
}

// argField is the field of args key k in an error: args.k, or args["k"]
// for a key that is no plain name (quoted, so that a key with a newline
// or a dot cannot pass for another field).
func argField(k string) string {
	if argNameRE.MatchString(k) {
		return ".args." + k
	}
	return fmt.Sprintf(".args[%q]", k)
}

var argNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// unscalableKind returns the first kind c selects that cannot be scaled.
func unscalableKind(c Component) (string, bool) {
	for _, w := range c.Workloads {
		if !CanScale(w.Kind) {
			return w.Kind, true
		}
	}
	return "", false
}

// joinWords joins names for a message: "a", "a or b", "a, b or c".
func joinWords(names []string, conj string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " " + conj + " " + names[len(names)-1]
}

func actionNames() []string {
	var names []string
	for k := range actionKinds {
		names = append(names, string(k))
	}
	sort.Strings(names)
	return names
}

// cleanChartPath checks the spec's chart path: relative, inside the
// folder, no "..".
func cleanChartPath(p string) (string, error) {
	if p == "" {
		return "", errors.New("is empty")
	}
	if strings.Contains(p, "://") || strings.HasPrefix(p, "oci:") {
		return "", fmt.Errorf("%q: remote charts are not supported; put the chart inside the driver folder", p)
	}
	if path.IsAbs(p) || strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%q must be a path relative to the driver folder", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("%q escapes the driver folder", p)
		}
	}
	c := path.Clean(p)
	if c == "." || !fs.ValidPath(c) {
		return "", fmt.Errorf("%q is not a folder inside the driver folder", p)
	}
	return c, nil
}

// renderSample evaluates values and renders the driver once for c.
func (d *Driver) renderSample(c Context) (*Manifests, error) {
	vals, err := d.valuesLocal(c)
	if err != nil {
		return nil, err
	}
	if _, err := d.endpointsLocal(c); err != nil {
		return nil, err
	}
	return d.renderLocal(c, vals)
}
