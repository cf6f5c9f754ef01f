package drivers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	"github.com/Masterminds/semver/v3"

	"github.com/styrmin/styrmin/internal/cuemsg"
)

// ApplyParameters unifies params with the driver's parameter schema:
// defaults are filled in and constraints checked. Errors name the
// parameter and what was expected; an unknown parameter is an error. The
// result holds every parameter that has a value (optional parameters
// without a default and not set are left out).
//
// The schema is CUE the driver's authors wrote, and its defaults may grow
// with what is given (`_big: list.Range(0, n, 1)`): the evaluation is
// bounded by the driver's time limit and, for a driver loaded through a
// Sandbox, made in its child as Values is (evalChecked).
func (d *Driver) ApplyParameters(params map[string]any) (map[string]any, error) {
	known := make(map[string]*Parameter, len(d.Parameters))
	for i := range d.Parameters {
		known[d.Parameters[i].Name] = &d.Parameters[i]
	}
	var errs []error
	for _, name := range sortedKeys(params) {
		if known[name] == nil {
			errs = append(errs, &ParameterError{Driver: d.ref(), Parameter: name,
				Msg: fmt.Sprintf("unknown parameter (the driver declares: %s)", d.parameterNames())})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// JSON and YAML decoders give float64 for every number; an integral
	// one given for an int parameter is that int.
	copied := false
	for _, name := range sortedKeys(params) {
		f, ok := params[name].(float64)
		if !ok || known[name].Type != "int" || f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
			continue
		}
		if !copied {
			params, copied = maps.Clone(params), true
		}
		params[name] = int64(f)
	}
	// Deployments often give the same parameters (the defaults, an
	// environment's usual sizes): each set is evaluated once.
	key, memo := paramsKey(params)
	if memo {
		if out, ok := d.compiled.appliedParams.Load(key); ok {
			return deepCopyJSON(out).(map[string]any), nil
		}
	}
	cs := d.compiled
	what := parametersInput(params)
	var out map[string]any
	var err error
	if cs.opts.Sandbox != nil {
		out, err = evalChecked(context.Background(), d, evalParameters, evalWire{Parameters: wireForm(reflect.ValueOf(params))}, what, cs.file,
			func(in *evalInput) (map[string]any, error) { return d.evalParameters(in.Parameters) }, decodeMap)
	} else {
		out, err = bounded(context.Background(), cs.opts.Limits, d.Source, cs.file, func() (map[string]any, error) {
			return d.evalParameters(params)
		})
		err = withInput(err, what)
	}
	if err != nil {
		return nil, err
	}
	if memo && d.compiled.appliedCount.Add(1) <= maxAppliedParams {
		d.compiled.appliedParams.Store(key, deepCopyJSON(out))
	}
	return out, nil
}

// evalParameters is ApplyParameters' evaluation of the schema with
// params, known, in this process and unbounded: callers bound it. It
// returns what the driver gives the parameters when they pass, and the
// errors of each that does not.
func (d *Driver) evalParameters(params map[string]any) (map[string]any, error) {
	var errs []error
	// The spec's own parameters (not unified with #Driver): the schema was
	// checked at Load, and this runs once per deployment.
	schema := d.compiled.raw.LookupPath(parametersPath)
	v := schema
	if len(params) > 0 {
		v = schema.FillPath(cue.Path{}, params)
	}
	if v.Validate(cue.Concrete(true)) == nil {
		var out map[string]any
		if err := v.Decode(&out); err == nil {
			if out == nil {
				out = map[string]any{}
			}
			// Decode leaves out optional fields, even those with a default.
			for _, p := range d.Parameters {
				if _, ok := out[p.Name]; !ok && p.HasDefault {
					out[p.Name] = deepCopyJSON(p.Default)
				}
			}
			return out, nil
		}
	}
	// Something is wrong: check parameter by parameter for clear messages.
	out := make(map[string]any, len(d.Parameters))
	for _, p := range d.Parameters {
		pv := v.LookupPath(cue.MakePath(cue.Str(p.Name)))
		given, isGiven := params[p.Name]
		if !isGiven && p.Optional {
			continue
		}
		if !isGiven && p.HasDefault {
			// An optional field is not found by a plain lookup: its default
			// is the value, not a missing parameter to report.
			out[p.Name] = deepCopyJSON(p.Default)
			continue
		}
		if err := pv.Validate(cue.Concrete(true)); err != nil {
			// Worded from the parameter's schema: CUE's own message speaks
			// of disjunctions and conflicts, and would quote a secret.
			var msg string
			switch {
			case isGiven && p.Secret:
				msg = fmt.Sprintf("must be %s (value hidden)", p.expectation())
			case isGiven:
				gv := schema.Context().Encode(given)
				msg = cuemsg.Want(parameterSchema(schema, p.Name), d.compiled.raw, gv)
				if p.Sensitive {
					msg += " (value hidden)"
				} else {
					msg += ", got " + cuemsg.Show(gv)
				}
			default:
				msg = fmt.Sprintf("required, not set (expected %s)", p.expectation())
			}
			errs = append(errs, &ParameterError{Driver: d.ref(), Parameter: p.Name, Msg: msg})
			continue
		}
		var x any
		if err := pv.Decode(&x); err != nil {
			errs = append(errs, &ParameterError{Driver: d.ref(), Parameter: p.Name, Msg: err.Error()})
			continue
		}
		out[p.Name] = x
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// maxAppliedParams bounds the parameter sets a driver remembers.
const maxAppliedParams = 4096

// paramsKey is a canonical form of params, types included (an int and a
// float of the same value are different parameters to CUE), or false
// for a value of a type it does not know.
func paramsKey(params map[string]any) (string, bool) {
	var b strings.Builder
	ok := writeParamsKey(&b, params)
	return b.String(), ok
}

func writeParamsKey(b *strings.Builder, v any) bool {
	switch t := v.(type) {
	case nil:
		b.WriteByte('n')
	case bool:
		b.WriteString(strconv.FormatBool(t))
	case string:
		b.WriteString(strconv.Quote(t))
	case int:
		b.WriteString("i" + strconv.Itoa(t))
	case int64:
		b.WriteString("i" + strconv.FormatInt(t, 10))
	case float64:
		b.WriteString("f" + strconv.FormatFloat(t, 'g', -1, 64))
	case []any:
		b.WriteByte('[')
		for _, x := range t {
			if !writeParamsKey(b, x) {
				return false
			}
			b.WriteByte(',')
		}
		b.WriteByte(']')
	case map[string]any:
		b.WriteByte('{')
		for _, k := range sortedKeys(t) {
			b.WriteString(strconv.Quote(k))
			b.WriteByte(':')
			if !writeParamsKey(b, t[k]) {
				return false
			}
			b.WriteByte(',')
		}
		b.WriteByte('}')
	default:
		return false
	}
	return true
}

// parameterSchema is the schema of one parameter, optional or not.
func parameterSchema(schema cue.Value, name string) cue.Value {
	if v := schema.LookupPath(cue.MakePath(cue.Str(name))); v.Exists() {
		return v
	}
	return schema.LookupPath(cue.MakePath(cue.Str(name).Optional()))
}

// ParameterError is a parameter value the driver's schema rejects.
type ParameterError struct {
	Driver    string // name@version
	Parameter string
	// Msg says what the parameter must be and, unless the value is secret
	// or sensitive, what it was ("must be at most 10, got 50").
	Msg string
}

func (e *ParameterError) Error() string {
	return fmt.Sprintf("driver %s: parameter %s: %s", e.Driver, e.Parameter, e.Msg)
}

func (p *Parameter) expectation() string {
	switch {
	case p.Secret:
		return "a secret reference {name, key}"
	case p.Constraint != "":
		return p.Constraint
	default:
		return p.Type
	}
}

func (d *Driver) ref() string { return d.Name + "@" + d.Version }

func (d *Driver) parameterNames() string {
	if len(d.Parameters) == 0 {
		return "none"
	}
	names := make([]string, len(d.Parameters))
	for i, p := range d.Parameters {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// Values computes the chart values in CUE from c (whose Parameters are
// already applied; defaults are applied again, harmlessly).
//
// It is bounded by the driver's time limit. A driver loaded through a
// Sandbox is evaluated in its child the first time it is given an input
// (the parts of c its values read), in this process after (evalChecked):
// its sandboxed load evaluated only the sample context.
func (d *Driver) Values(c Context) (map[string]any, error) {
	cs := d.compiled
	what := deploymentInput("the values", c)
	if cs.opts.Sandbox != nil {
		return evalChecked(context.Background(), d, evalValues, contextWire(cs.valuesProj, c, false), what, cs.file,
			func(in *evalInput) (map[string]any, error) { return d.valuesLocal(in.Context) }, decodeMap)
	}
	out, err := bounded(context.Background(), cs.opts.Limits, d.Source, cs.file, func() (map[string]any, error) {
		return d.valuesLocal(c)
	})
	return out, withInput(err, what)
}

func (d *Driver) valuesLocal(c Context) (map[string]any, error) {
	v := d.compiled.valuesProj.eval(c).LookupPath(valuesPath)
	if err := v.Validate(cue.Concrete(true)); err != nil {
		return nil, cueError(d.compiled.file, err)
	}
	var out map[string]any
	if err := v.Decode(&out); err != nil {
		return nil, cueError(d.compiled.file, err)
	}
	if out == nil {
		out = map[string]any{}
	}
	return out, nil
}

// Endpoints computes this deployment's services. It needs only the
// Cluster, Environment and Deployment parts of c. The host defaults to
// <deployment>.<namespace>.svc; the URL is <protocol>://<host>:<port>.
// Bounded, and evaluated in a Sandbox's child, as Values.
func (d *Driver) Endpoints(c Context) (map[string]Endpoint, error) {
	if len(d.Services) == 0 {
		return map[string]Endpoint{}, nil
	}
	cs := d.compiled
	what := deploymentInput("the services", c)
	if cs.opts.Sandbox != nil {
		return evalChecked(context.Background(), d, evalEndpoints, contextWire(cs.servicesProj, c, true), what, cs.file,
			func(in *evalInput) (map[string]Endpoint, error) { return d.endpointsLocal(in.Context) }, decodeJSON[map[string]Endpoint])
	}
	out, err := bounded(context.Background(), cs.opts.Limits, d.Source, cs.file, func() (map[string]Endpoint, error) {
		return d.endpointsLocal(c)
	})
	return out, withInput(err, what)
}

// endpointsLocal is Endpoints in this process, unbounded: callers bound
// it.
func (d *Driver) endpointsLocal(c Context) (map[string]Endpoint, error) {
	out := make(map[string]Endpoint, len(d.Services))
	if len(d.Services) == 0 {
		return out, nil
	}
	v := d.compiled.servicesProj.eval(c)
	for _, s := range d.Services {
		host := c.Deployment.Name + "." + c.Deployment.Namespace + ".svc"
		hv := v.LookupPath(cue.MakePath(cue.Str("services"), cue.Str(s.Name), cue.Str("host")))
		if hv.Exists() {
			h, err := hv.String()
			if err != nil {
				return nil, cueError(d.compiled.file, hv.Err())
			}
			host = h
		}
		out[s.Name] = Endpoint{
			Host:     host,
			Port:     s.Port,
			Protocol: s.Protocol,
			URL:      fmt.Sprintf("%s://%s:%d", s.Protocol, host, s.Port),
		}
	}
	return out, nil
}

// ResolveComponents returns the components with their workload names
// evaluated for c.
func (d *Driver) ResolveComponents(c Context) ([]Component, error) {
	if d.compiled.isStaticRender {
		return d.compiled.staticComponents, nil
	}
	return d.resolveComponents(d.compiled.renderProj.eval(c))
}

func (d *Driver) resolveComponents(v cue.Value) ([]Component, error) {
	out := make([]Component, len(d.Components))
	for i, comp := range d.Components {
		out[i] = Component{Name: comp.Name, Workloads: make([]WorkloadSelector, len(comp.Workloads))}
		for j, w := range comp.Workloads {
			if w.Name != "" {
				nv := v.LookupPath(cue.MakePath(cue.Str("components"), cue.Str(comp.Name), cue.Str("workloads"), cue.Index(j), cue.Str("name")))
				name, err := nv.String()
				if err != nil {
					if nv.Err() != nil {
						return nil, cueError(d.compiled.file, nv.Err())
					}
					return nil, d.compiled.locator().errAt(nv, fmt.Sprintf("components.%s.workloads[%d].name", comp.Name, j), "does not evaluate to a string: %v", err)
				}
				w.Name = name
			}
			out[i].Workloads[j] = w
		}
	}
	return out, nil
}

// SampleContext is a context to render the driver with when no real one
// exists (Load, lint): a sample cluster and environment, an application
// version inside the driver's range, and the parameters' defaults (secret
// parameters without a default get a sample reference). ok is false when a
// required parameter has no default.
func (d *Driver) SampleContext() (c Context, ok bool) {
	c, err := d.SampleContextWith(nil)
	return c, err == nil
}

// SampleContextWith is SampleContext with some parameters set; it fails
// when a required parameter is neither set nor a secret reference.
func (d *Driver) SampleContextWith(params map[string]any) (Context, error) {
	set := make(map[string]any, len(params))
	for k, v := range params {
		set[k] = v
	}
	var missing []string
	for _, p := range d.Parameters {
		if _, given := set[p.Name]; given || p.HasDefault || p.Optional {
			continue
		}
		if p.Secret {
			set[p.Name] = map[string]any{"name": "sample-secret", "key": p.Name}
			continue
		}
		missing = append(missing, p.Name)
	}
	if len(missing) > 0 {
		return Context{}, fmt.Errorf("driver %s: parameters without a default must be set: %s", d.ref(), strings.Join(missing, ", "))
	}
	applied, err := d.ApplyParameters(set)
	if err != nil {
		return Context{}, err
	}
	return d.sampleContextOf(applied), nil
}

// sampleContextOf is the sample context with parameters as given, applied
// or not.
func (d *Driver) sampleContextOf(params map[string]any) Context {
	ns := "sample-" + d.Name
	return Context{
		Cluster: ClusterContext{
			Name: "sample", Domain: "sample.example", IngressClass: "nginx",
			StorageClasses: map[string]string{"default": "standard"},
		},
		Environment: EnvironmentContext{Name: "sample", Namespace: "sample"},
		Deployment: DeploymentContext{
			Name: d.Name, Namespace: ns, AppVersion: d.sampleAppVersion(),
			Driver: d.Name, DriverVersion: d.Version,
		},
		Parameters: params,
		Services:   map[string]map[string]Endpoint{},
	}
}

var versionInRangeRE = regexp.MustCompile(`v?\d+(\.\d+){0,2}(-[0-9A-Za-z.-]+)?`)

// sampleAppVersion picks an application version the range accepts: the
// versions named in the range (and their next patch) are tried in order;
// "0.0.0" when none fits.
func (d *Driver) sampleAppVersion() string {
	var cands []*semver.Version
	for _, m := range versionInRangeRE.FindAllString(d.AppVersions, -1) {
		v, err := semver.NewVersion(m)
		if err != nil {
			continue
		}
		cands = append(cands, v, ptr(v.IncPatch()))
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].LessThan(cands[j]) })
	for _, v := range cands {
		if d.compiled.appRange != nil && d.compiled.appRange.Check(v) {
			return v.String()
		}
	}
	return "0.0.0"
}

func ptr[T any](v T) *T { return &v }
