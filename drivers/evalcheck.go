package drivers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// A driver loaded through a Sandbox is evaluated per deployment outside
// a render the agent applies: its parameters applied, its values and
// services computed, its chart rendered for the policy check. The
// sandboxed load evaluated it only with its sample context, and a
// driver's cost may grow with what a deployment gives it (`list.Range(0,
// context.parameters.n, 1)`, `until .Values.n`) or branch on the context
// (`context.environment.name != "sample"`): in this process such a driver
// is stopped at the time limit, but its goroutine keeps allocating and
// the process (`styrminctl lock`, the agent in lock mode) runs out of
// memory. So each such evaluation of an input runs in the child, within
// every limit, and its result is taken from there (evalChecked); an input
// the child evaluated before is known to end within the limits, and is
// evaluated here, saving the round trip (a fleet's deployments that give
// the same input cost one child evaluation). The input is what the
// evaluation reads: the parameters, or the parts of the context its
// projection reads, the release's names and the values. Both processes
// evaluate it as the child decodes it, so they compute the same.

// The evaluations run in the child first (sandboxRequest.Eval).
const (
	evalParameters = "parameters"
	evalValues     = "values"
	evalEndpoints  = "endpoints"
	evalRender     = "render"
	evalPolicy     = "policy" // a render for the policy check (RenderForPolicy)
)

// maxCheckedInputs bounds the inputs kept as evaluated by the child per
// driver (a key each, no value): an agent in lock mode lives long and
// meets many; one no longer kept goes to the child again.
const maxCheckedInputs = 8192

// inputCheck is the child's evaluation of one input.
type inputCheck struct {
	mu     chanMutex
	passed bool
}

// chanMutex is a mutex whose Lock can give up with a context: a caller
// waiting for another's evaluation of the same input keeps its own
// deadline.
type chanMutex chan struct{}

func (m chanMutex) lock(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m chanMutex) unlock() { <-m }

// evalWire is an evaluation's input as sent to the child (and hashed for
// its key): numbers keep their kind (wireForm).
type evalWire struct {
	Parameters any    `json:"parameters"`
	Context    any    `json:"context"`
	Name       string `json:"name,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Values     any    `json:"values"`
}

// evalInput is an evaluation's input as decoded from its wire form: what
// both the child and this process evaluate.
type evalInput struct {
	Parameters map[string]any
	Context    Context
	Values     map[string]any
}

// evalChecked is the evaluation kind of w for a driver loaded through a
// Sandbox. The first time, it runs in the child and its result (decoded
// by decode) is returned; an input the child evaluated before, or one
// whose evaluation failed there within the limits (the error is then
// this process's own words), is evaluated here by local, bounded in time.
// what names the input in a LimitError ("the values of deployment web").
// A limit hit is not kept: each evaluation of the input fails with it.
func evalChecked[T any](ctx context.Context, d *Driver, kind string, w evalWire, what, file string,
	local func(*evalInput) (T, error), decode func(*sandboxResponse) (T, error)) (T, error) {
	var zero T
	cs := d.compiled
	b, err := json.Marshal(w)
	if err != nil {
		return zero, fmt.Errorf("driver %s: %s: encoding %s: %w", d.Source, cs.file, what, err)
	}
	here := func() (T, error) {
		in, err := decodeEvalInput(b)
		if err != nil {
			return zero, fmt.Errorf("driver %s: %s: decoding %s: %w", d.Source, cs.file, what, err)
		}
		out, err := bounded(ctx, cs.opts.Limits, d.Source, file, func() (T, error) { return local(in) })
		return out, withInput(err, what)
	}
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write(b)
	var key [sha256.Size]byte
	h.Sum(key[:0])
	e, ok := cs.checked.Load(key)
	if !ok {
		e, _ = cs.checked.LoadOrStore(key, &inputCheck{mu: make(chanMutex, 1)})
	}
	ic := e.(*inputCheck)
	if err := ic.mu.lock(ctx); err != nil {
		return zero, fmt.Errorf("driver %s: waiting for the evaluation of %s: %w", d.Source, what, err)
	}
	defer ic.mu.unlock()
	cs.inputsOnce.Do(func() {
		cs.inputs = cs.opts.Sandbox.checks.inputs(cs.opts.sandboxRequest("check", cs.folder), cs.folder)
		cs.results = cs.inputs.results()
	})
	// An evaluation kept by an earlier process (or this one) is read
	// back: it is deterministic in what its key holds. The applied
	// parameters are never kept: they hold sensitive values in clear (the
	// resolver puts placeholders in after them), and cost little.
	results := cs.results
	if kind == evalParameters {
		results = nil
	}
	if resp, ok := results.get(key, kind); ok {
		if out, err := decode(resp); err == nil {
			return out, nil
		}
	}
	// here, for an input known to end within the limits, keeps what it
	// evaluates for the next process.
	hereKept := func() (T, error) {
		out, err := here()
		if err == nil && results != nil {
			var resp sandboxResponse
			if encodeResult(out, &resp) == nil {
				results.put(key, kind, &resp)
			}
		}
		return out, err
	}
	if ic.passed {
		return hereKept()
	}
	pass := func() {
		ic.passed = true
		if cs.checkedCount.Add(1) > maxCheckedInputs {
			cs.checked.CompareAndDelete(key, ic)
		}
	}
	// An input a child of an earlier process evaluated within the same
	// limits, of the same driver files, by the same code, is evaluated
	// here at once (Sandbox.KeepChecks): the evaluation is deterministic
	// in what the check's key holds, so it ends within the limits again.
	// A repeated lock pays the child only for the inputs that changed.
	if cs.inputs.has(key) {
		pass()
		return hereKept() // still under the time limit: the machine may be slower
	}
	req := cs.opts.sandboxRequest("check", cs.folder)
	req.Eval, req.Input = kind, b
	resp, err := cs.opts.Sandbox.run(ctx, req, cs.file)
	if err != nil {
		// A limit hit (or a child lost) is never remembered: the input
		// goes to a child every time.
		cs.checked.CompareAndDelete(key, ic)
		return zero, withInput(err, what)
	}
	pass()
	cs.inputs.add(key)
	if !resp.Evaluated {
		return here() // failed within the limits: the error, in this process's words
	}
	out, err := decode(resp)
	if err != nil {
		return zero, fmt.Errorf("driver %s: %s: the result of %s: %w", d.Source, cs.file, what, err)
	}
	results.put(key, kind, resp) // only a result that decodes
	return out, nil
}

// withInput names, in err when it is a LimitError, the input evaluated.
func withInput(err error, what string) error {
	le, ok := err.(*LimitError)
	if !ok || le.Input != "" {
		return err
	}
	c := *le
	c.Input = what
	return &c
}

// checkLocal is a child's "check": the evaluation kind of input that the
// parent would otherwise make in-process, answered in resp. A limit is
// the error; the result is Evaluated, in Output in its wire form, or a
// render's in Objects (encoded once, not again as Output); another
// failure is neither (the parent evaluates the input again, now known to
// end within the limits, for its own error).
func (d *Driver) checkLocal(kind string, input []byte, resp *sandboxResponse) error {
	in, err := decodeEvalInput(input)
	if err != nil {
		return fmt.Errorf("drivers: sandbox: the input to evaluate: %w", err)
	}
	var out any
	d.compiled.opts.notePhase(d.compiled.file) // a render names its chart next
	switch kind {
	case evalParameters:
		out, err = d.evalParameters(in.Parameters)
	case evalValues:
		out, err = d.valuesLocal(in.Context)
	case evalEndpoints:
		out, err = d.endpointsLocal(in.Context)
	case evalRender:
		out, err = d.renderObjects(in.Context, in.Values, allText)
	case evalPolicy:
		out, err = d.renderObjects(in.Context, in.Values, policyText)
	default:
		return fmt.Errorf("drivers: sandbox: unknown evaluation %q", kind)
	}
	if errors.Is(err, ErrLimit) {
		return err
	}
	if err != nil {
		return nil
	}
	return encodeResult(out, resp)
}

// encodeResult puts an evaluation's result into resp as the child answers
// it: a render's objects in Objects, another result in Output in its wire
// form; resp is Evaluated when it encodes.
func encodeResult(out any, resp *sandboxResponse) error {
	var err error
	switch o := out.(type) {
	case *Manifests:
		resp.Objects = o.Objects
	case map[string]any:
		resp.Output, err = json.Marshal(wireForm(reflect.ValueOf(o)))
	default:
		resp.Output, err = json.Marshal(out)
	}
	resp.Evaluated = err == nil
	return err
}

// decodeMap decodes a map result (parameters, values) of the child.
func decodeMap(resp *sandboxResponse) (map[string]any, error) {
	var m map[string]any
	if err := decodeNumbers(resp.Output, &m); err != nil {
		return nil, err
	}
	return numbersFromWire(m), nil
}

// decodeJSON decodes a typed result (endpoints) of the child.
func decodeJSON[T any](resp *sandboxResponse) (T, error) {
	var v T
	err := json.Unmarshal(resp.Output, &v)
	return v, err
}

// decodeManifests is a render's result: the answer's objects.
func decodeManifests(resp *sandboxResponse) (*Manifests, error) {
	return &Manifests{Objects: resp.Objects}, nil
}

// contextWire is the wire form of the parts of c that p reads, and of the
// release's names when withRelease (the chart reads them; the default
// host of a service too).
func contextWire(p projection, c Context, withRelease bool) evalWire {
	w := evalWire{Context: wireForm(reflect.ValueOf(p.keys.evalData(c)))}
	if withRelease {
		w.Name, w.Namespace = c.Deployment.Name, c.Deployment.Namespace
	}
	return w
}

// decodeEvalInput decodes an input's wire form as the child does.
func decodeEvalInput(b []byte) (*evalInput, error) {
	var raw struct {
		Parameters map[string]any  `json:"parameters"`
		Context    json.RawMessage `json:"context"`
		Name       string          `json:"name"`
		Namespace  string          `json:"namespace"`
		Values     map[string]any  `json:"values"`
	}
	if err := decodeNumbers(b, &raw); err != nil {
		return nil, err
	}
	in := &evalInput{Parameters: numbersFromWire(raw.Parameters), Values: numbersFromWire(raw.Values)}
	if len(raw.Context) > 0 && string(raw.Context) != "null" {
		if err := decodeNumbers(raw.Context, &in.Context); err != nil {
			return nil, err
		}
		c := &in.Context
		c.Parameters = numbersFromWire(c.Parameters)
		c.Cluster.Config = numbersFromWire(c.Cluster.Config)
		c.Environment.Config = numbersFromWire(c.Environment.Config)
	}
	if raw.Name != "" {
		in.Context.Deployment.Name = raw.Name
	}
	if raw.Namespace != "" {
		in.Context.Deployment.Namespace = raw.Namespace
	}
	return in, nil
}

func decodeNumbers(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// wireForm is v as JSON should carry it for the child to decode the same
// value: structs as the maps CUE's conversion makes of them (a field
// tagged omitempty left out only when zero, so that an empty list or map
// stays one), and integral floats written with a decimal point (JSON
// writes 3.0 as 3, which decodes as an int: a different value to CUE).
func wireForm(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Invalid:
		return nil
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return wireForm(v.Elem())
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		if m, ok := v.Interface().(json.Marshaler); ok {
			return m // *big.Int: JSON's own form, which decodes back
		}
		return wireForm(v.Elem())
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if f == math.Trunc(f) && math.Abs(f) < 1e21 {
			return json.Number(strconv.FormatFloat(f, 'f', -1, 64) + ".0")
		}
		return f
	case reflect.Struct:
		if m, ok := v.Interface().(json.Marshaler); ok {
			return m
		}
		m := map[string]any{}
		for _, f := range contextFieldsOf(v.Type()) {
			x := v.Field(f.index)
			if f.omitEmpty && x.IsZero() {
				continue
			}
			m[f.name] = wireForm(x)
		}
		return m
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		if v.Type().Key().Kind() != reflect.String {
			return v.Interface()
		}
		m := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			m[it.Key().String()] = wireForm(it.Value())
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Interface() // bytes: JSON's own form
		}
		fallthrough
	case reflect.Array:
		l := make([]any, v.Len())
		for i := range l {
			l[i] = wireForm(v.Index(i))
		}
		return l
	}
	if n, ok := v.Interface().(json.Number); ok {
		return n
	}
	return v.Interface()
}

// numbersFromWire turns the numbers of a decoded wire form into what wireForm
// was given: a number with a decimal point or an exponent is a float64,
// others an int64 or, past its range, a *big.Int (as CUE decodes them).
func numbersFromWire[T any](x T) T {
	out, _ := fromWireAny(x).(T)
	return out
}

func fromWireAny(x any) any {
	switch t := x.(type) {
	case map[string]any:
		for k, v := range t {
			t[k] = fromWireAny(v)
		}
	case []any:
		for i, v := range t {
			t[i] = fromWireAny(v)
		}
	case json.Number:
		s := string(t)
		if strings.ContainsAny(s, ".eE") {
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				return f
			}
			return s
		}
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i
		}
		if n, ok := new(big.Int).SetString(s, 10); ok {
			return n
		}
		return s
	}
	return x
}

// deploymentInput names a deployment's input in a LimitError.
func deploymentInput(part string, c Context) string {
	if c.Deployment.Name == "" {
		return part + " of a deployment"
	}
	return fmt.Sprintf("%s of deployment %s (namespace %s)", part, c.Deployment.Name, c.Deployment.Namespace)
}

// parametersInput names a set of parameters in a LimitError: by the
// names given (never a value: one may be secret).
func parametersInput(params map[string]any) string {
	if len(params) == 0 {
		return "the parameters' defaults"
	}
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	sort.Strings(names)
	return "the parameters given (" + strings.Join(names, ", ") + ")"
}
