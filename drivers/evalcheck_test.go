package drivers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/internal/hostile"
)

// bombDriver is a driver folder whose spec has imports and, instead of
// hostile's empty values, body; templates are added to its chart. Every
// parameter has a default, so its sandboxed load renders a sample.
func bombDriver(imports, body string, templates map[string]string) map[string][]byte {
	files := hostile.OverAgentMemory().Files("bomb", "1.0.0")
	delete(files, "chart/templates/big.yaml")
	files["driver.cue"] = []byte(imports + strings.Replace(string(files["driver.cue"]), "values: {}\n", body, 1))
	for n, t := range templates {
		files["chart/templates/"+n] = []byte(t)
	}
	return files
}

// bombContext is a deployment's context, not the sample's, with params
// applied by d.
func bombContext(t *testing.T, d *Driver, params map[string]any) Context {
	t.Helper()
	applied, err := d.ApplyParameters(params)
	if err != nil {
		t.Fatalf("applying %v: %v", params, err)
	}
	return Context{
		Cluster:     ClusterContext{Name: "eu-1", Domain: "apps.example.com", IngressClass: "nginx"},
		Environment: EnvironmentContext{Name: "prod", Namespace: "prod"},
		Deployment: DeploymentContext{Name: "huge", Namespace: "prod-huge", AppVersion: "1.0.0",
			Driver: d.Name, DriverVersion: d.Version},
		Parameters: applied,
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// requireBoundedFailure runs eval, which must fail at a memory or time
// limit of the driver at source naming the input (want in its message)
// within the time limit and a few seconds, while this process's heap
// grows by less than half the memory limit (it grows by a few MiB when
// the evaluation ran in the child; in-process, it grew past the limit):
// measured two seconds later, as an abandoned in-process evaluation
// keeps allocating.
func requireBoundedFailure(t *testing.T, l Limits, source, want string, eval func() error) {
	t.Helper()
	before := heapInUse()
	start := time.Now()
	err := eval()
	took := time.Since(start)
	time.Sleep(2 * time.Second)
	grew := int64(heapInUse()) - int64(before)
	var le *LimitError
	if !errors.As(err, &le) || (le.Limit != LimitMemory && le.Limit != LimitTime) || le.Driver != source || !strings.HasPrefix(le.File, source+"/") {
		t.Fatalf("%v (after %s), want the memory or time limit of %s at a file of it", err, took, source)
	}
	if !strings.Contains(err.Error(), want) || !strings.Contains(le.Input, want) {
		t.Errorf("%v: does not name the input %q", err, want)
	}
	if took > l.Timeout+4*time.Second {
		t.Errorf("failed after %s, time limit %s", took, l.Timeout)
	}
	if grew > l.Memory/2 {
		t.Errorf("this process's heap grew by %d MiB, memory limit %d MiB: the evaluation ran here", grew>>20, l.Memory>>20)
	}
	t.Logf("%s, heap %+d MiB: %v", took.Round(time.Millisecond), grew>>20, err)
}

// loadBomb loads files through sb under l.
func loadBomb(t *testing.T, sb *Sandbox, files map[string][]byte, l Limits) *Driver {
	t.Helper()
	d, err := Load(mapFS(files), LoadOptions{Source: "drivers/bomb/1.0.0", Limits: l, Sandbox: sb})
	if err != nil {
		t.Fatalf("the sandboxed load (a small sample): %v", err)
	}
	return d
}

// A driver whose sample is small but whose cost grows with what a
// deployment gives it, or with a context other than the sample's, is
// evaluated in-process per deployment (values, the policy render) after
// its sandboxed load: each such input is evaluated in the sandbox child
// first, and fails there at its limit, naming the deployment; this
// process does not grow.
func TestADeploymentsInputIsCheckedInTheSandboxBeforeThisProcessEvaluatesIt(t *testing.T) {
	l := testLimits()
	const source = "drivers/bomb/1.0.0"
	for _, tc := range []struct {
		name      string
		imports   string
		body      string
		templates map[string]string
		params    map[string]any
		eval      func(d *Driver, c Context) error
		want      string
	}{
		{name: "values growing with a parameter", imports: "import \"list\"\n\n",
			body:   "parameters: n: *1 | int\nvalues: big: list.Range(0, context.parameters.n, 1)\n",
			params: map[string]any{"n": 20000000},
			eval:   func(d *Driver, c Context) error { _, err := d.Values(c); return err },
			want:   "the values of deployment huge"},
		{name: "values branching on the environment", imports: "import \"list\"\n\n",
			body: "_n: [if context.environment.name == \"sample\" {1}, 20000000][0]\nvalues: big: list.Range(0, _n, 1)\n",
			eval: func(d *Driver, c Context) error { _, err := d.Values(c); return err },
			want: "the values of deployment huge"},
		{name: "a template growing with a value",
			body:      "parameters: n: *1 | int\nvalues: n: context.parameters.n\n",
			templates: map[string]string{"big.yaml": "{{- $l := until (int .Values.n) }}# {{ len $l }}\n"},
			params:    map[string]any{"n": 40000000},
			eval: func(d *Driver, c Context) error {
				values, err := d.Values(c)
				if err != nil {
					return fmt.Errorf("values: %w", err)
				}
				_, err = d.RenderForPolicy(context.Background(), c, values)
				return err
			},
			want: "the chart of deployment huge"},
		{name: "a template rendered in-process", imports: "",
			body:      "parameters: n: *1 | int\nvalues: n: context.parameters.n\n",
			templates: map[string]string{"big.yaml": "{{- $l := until (int .Values.n) }}# {{ len $l }}\n"},
			params:    map[string]any{"n": 40000000},
			eval: func(d *Driver, c Context) error {
				_, err := d.RenderInProcess(context.Background(), c, map[string]any{"n": int64(40000000)})
				return err
			},
			want: "the chart of deployment huge"},
		{name: "values evaluated ahead, with the services", imports: "import \"list\"\n\n",
			body: "parameters: n: *1 | int\nservices: http: {component: \"app\", port: 80}\n" +
				"values: big: list.Range(0, context.parameters.n, 1)\n",
			params: map[string]any{"n": 20000000},
			eval: func(d *Driver, c Context) error {
				// The services pass: the limit is the values' alone.
				if _, err := d.Endpoints(c); err != nil {
					return fmt.Errorf("services: %w", err)
				}
				_, err := d.Values(c)
				return err
			},
			want: "the values of deployment huge"},
		{name: "services branching on the environment", imports: "import (\n\t\"list\"\n\t\"strings\"\n)\n\n",
			body: "_n: [if context.environment.name == \"sample\" {1}, 20000000][0]\n" +
				"services: http: {component: \"app\", port: 80, host: strings.Join([for x in list.Range(0, _n, 1) {\"x\"}], \"\")}\nvalues: {}\n",
			eval: func(d *Driver, c Context) error { _, err := d.Endpoints(c); return err },
			want: "the services of deployment huge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, 1)
			d := loadBomb(t, sb, bombDriver(tc.imports, tc.body, tc.templates), l)
			c := bombContext(t, d, tc.params)
			requireBoundedFailure(t, l, source, tc.want, func() error { return tc.eval(d, c) })
		})
	}
}

// Applying a deployment's parameters evaluates the driver's parameter
// schema, whose defaults may grow with what is given: bounded, and
// checked in the sandbox child first (the agent applies parameters to
// reveal sensitive ones, resolver.RevealSensitive).
func TestApplyingParametersIsCheckedInTheSandboxAndBounded(t *testing.T) {
	l := testLimits()
	const source = "drivers/bomb/1.0.0"
	files := bombDriver("import \"list\"\n\n", "parameters: cfg: {n: *1 | int, _big: list.Range(0, n, 1), m: len(_big)}\nvalues: {}\n", nil)
	sb := newSandbox(t, 1)
	d := loadBomb(t, sb, files, l)
	if _, err := d.ApplyParameters(map[string]any{"cfg": map[string]any{"n": 5}}); err != nil {
		t.Fatalf("small parameters: %v", err)
	}
	requireBoundedFailure(t, l, source, "the parameters given (cfg)", func() error {
		_, err := d.ApplyParameters(map[string]any{"cfg": map[string]any{"n": 5000000}})
		return err
	})

	// In-process, without a sandbox, the time limit holds.
	local, err := Load(mapFS(files), LoadOptions{Source: source, Limits: Limits{Timeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = local.ApplyParameters(map[string]any{"cfg": map[string]any{"n": 3000000}})
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitTime || time.Since(start) > 4*time.Second {
		t.Fatalf("in-process: %v after %s, want the time limit of 1s", err, time.Since(start))
	}
}

// A well-behaved driver loaded through a Sandbox evaluates many
// deployments as it does in-process; each distinct input is checked in
// the child once, and an input already checked is not sent again.
func TestASandboxedDriverEvaluatesManyDeploymentsAsInProcess(t *testing.T) {
	sb := newSandbox(t, 1)
	for _, dir := range []string{"webapp/1.1.0", "graphhub/2.0.0"} {
		local, err := Load(os.DirFS("../examples/drivers/"+dir), LoadOptions{Source: "examples/drivers/" + dir})
		if err != nil {
			t.Fatal(err)
		}
		boxed, err := Load(os.DirFS("../examples/drivers/"+dir), LoadOptions{Source: "examples/drivers/" + dir, Limits: testLimits(), Sandbox: sb})
		if err != nil {
			t.Fatal(err)
		}
		evaluate := func(d *Driver, i int) string {
			c := exampleContext(local)
			c.Deployment.Name = fmt.Sprintf("app%02d", i)
			c.Deployment.Namespace = "staging-" + c.Deployment.Name
			c.Cluster.Config = map[string]any{"ratio": 2.0, "big": new(big.Int).Lsh(big.NewInt(1), 70), "empty": map[string]any{}}
			given := map[string]any{}
			for _, p := range d.Parameters {
				if p.Secret && !p.HasDefault && !p.Optional {
					given[p.Name] = SecretRef{Name: "s", Key: p.Name}
				}
			}
			applied, err := d.ApplyParameters(given)
			if err != nil {
				t.Fatalf("%s %d: parameters: %v", dir, i, err)
			}
			c.Parameters = applied
			eps, err := d.Endpoints(c)
			if err != nil {
				t.Fatalf("%s %d: endpoints: %v", dir, i, err)
			}
			values, err := d.Values(c)
			if err != nil {
				t.Fatalf("%s %d: values: %v", dir, i, err)
			}
			m, err := d.RenderForPolicy(context.Background(), c, values)
			if err != nil {
				t.Fatalf("%s %d: policy render: %v", dir, i, err)
			}
			full, err := d.RenderInProcess(context.Background(), c, values)
			if err != nil {
				t.Fatalf("%s %d: render: %v", dir, i, err)
			}
			kinds := make([]string, len(m.Objects))
			for j, o := range m.Objects {
				kinds[j] = o.Kind + "/" + o.Name + "/" + o.Component
			}
			out, err := json.Marshal([]any{applied, eps, values, kinds})
			if err != nil {
				t.Fatal(err)
			}
			return string(out) + "\n" + string(full.YAML())
		}
		const deployments = 20
		for i := range deployments {
			if got, want := evaluate(boxed, i), evaluate(local, i); got != want {
				t.Fatalf("%s: deployment %d evaluates differently sandboxed:\n%s\nwant:\n%s", dir, i, got, want)
			}
		}
		// A new deployment: its services, values and renders, one request
		// each (its parameters are those of the others).
		before := sb.Requests()
		evaluate(boxed, deployments)
		if n := sb.Requests() - before; n != 4 {
			t.Errorf("%s: a new deployment took %d requests, want 4", dir, n)
		}
		// Every input was checked: a second pass sends nothing.
		sent := sb.Requests()
		for i := range deployments {
			evaluate(boxed, i)
		}
		if n := sb.Requests() - sent; n != 0 {
			t.Errorf("%s: evaluating the same %d deployments again sent %d checks, want none", dir, deployments, n)
		}
	}
}

// An input's wire form decodes to what the child and this process both
// evaluate, as CUE and the chart would see the original: a float stays a
// float though integral, a large integer an integer, an empty list or map
// one, a struct its JSON fields.
func TestAnInputsWireFormDecodesToTheSameValues(t *testing.T) {
	params := map[string]any{
		"f": 3.0, "g": 2.5, "h": 1e30, "neg": -0.0, "i": 3, "i64": int64(-7), "u": uint8(9),
		"big": new(big.Int).Lsh(big.NewInt(1), 80), "s": "3", "b": true, "null": nil,
		"list": []any{1.0, 2, map[string]any{}}, "empty": []any{}, "strs": []string{"a"},
		"ref": SecretRef{Name: "n", Key: "k"},
	}
	c := Context{
		Cluster:     ClusterContext{Name: "c", Config: map[string]any{}},
		Environment: EnvironmentContext{Name: "e", Policy: &Policy{Namespaces: []string{}}},
		Deployment:  DeploymentContext{Name: "d", Namespace: "ns"},
		Parameters:  params,
	}
	all := projection{keys: contextKeys{all: true}}
	w := contextWire(all, c, true)
	w.Values = wireForm(reflect.ValueOf(params))
	w.Parameters = w.Values
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	in, err := decodeEvalInput(b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"f": 3.0, "g": 2.5, "h": 1e30, "neg": -0.0, "i": int64(3), "i64": int64(-7), "u": int64(9),
		"big": new(big.Int).Lsh(big.NewInt(1), 80), "s": "3", "b": true, "null": nil,
		"list": []any{1.0, int64(2), map[string]any{}}, "empty": []any{}, "strs": []any{"a"},
		"ref": map[string]any{"name": "n", "key": "k"},
	}
	for name, got := range map[string]map[string]any{"parameters": in.Parameters, "values": in.Values, "context parameters": in.Context.Parameters} {
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %#v\nwant %#v", name, got, want)
		}
	}
	if got := in.Context; got.Cluster.Config == nil || got.Environment.Policy == nil || got.Environment.Policy.Namespaces == nil ||
		got.Deployment != c.Deployment || got.Cluster.Name != "c" {
		t.Errorf("context %+v: empty map and list lost, or names changed", got)
	}
	// Two inputs CUE tells apart have two wire forms.
	one, _ := json.Marshal(wireForm(reflect.ValueOf(map[string]any{"n": 3})))
	other, _ := json.Marshal(wireForm(reflect.ValueOf(map[string]any{"n": 3.0})))
	if slices.Equal(one, other) {
		t.Errorf("3 and 3.0 have one wire form %s", one)
	}
}

// A child is given a driver's files once: later requests name the driver,
// and one the child has dropped since (it keeps childDrivers) is sent
// again with them, on the same child.
func TestAChildIsSentADriversFilesOnceAndAgainAfterItDroppedThem(t *testing.T) {
	sb := newSandbox(t, 1)
	first, c, vals := loadBoxed(t, sb, "webapp/1.1.0")
	render := func(d *Driver) uint64 {
		t.Helper()
		before := sb.Requests()
		if _, err := d.Render(c, vals); err != nil {
			t.Fatal(err)
		}
		return sb.Requests() - before
	}
	render(first)
	if n := render(first); n != 1 {
		t.Errorf("a render of a driver the child holds took %d requests, want 1", n)
	}
	f, err := readFolder(os.DirFS("../examples/drivers/webapp/1.1.0"), "examples/drivers/webapp/1.1.0", defaultMaxFileSize, defaultMaxTotalSize)
	if err != nil {
		t.Fatal(err)
	}
	for i := range childDrivers {
		files := maps.Clone(f.files)
		files["driver.cue"] = append(slices.Clone(files["driver.cue"]), fmt.Sprintf("\n// copy %d\n", i)...)
		d, err := Load(mapFS(files), LoadOptions{Source: "examples/drivers/webapp/1.1.0", Limits: testLimits(), Sandbox: sb})
		if err != nil {
			t.Fatal(err)
		}
		render(d)
	}
	if n := render(first); n != 2 {
		t.Errorf("a render of a driver the child dropped took %d requests, want 2: named, then sent with its files", n)
	}
	if n := render(first); n != 1 {
		t.Errorf("the next render took %d requests, want 1", n)
	}
	if n := sandboxStarts(sb); n != 1 {
		t.Errorf("%d children started, want 1", n)
	}
}
