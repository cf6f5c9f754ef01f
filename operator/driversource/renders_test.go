package driversource

import (
	"context"
	"fmt"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/examples"
)

func TestRendersRenderAnInputOnceAndStayBounded(t *testing.T) {
	sub, err := fs.Sub(examples.Repo(), "drivers/webapp/1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := drivers.Load(sub, drivers.LoadOptions{Source: "webapp"})
	if err != nil {
		t.Fatal(err)
	}
	input := func(i int) (drivers.Context, map[string]any) {
		c := drivers.Context{
			Cluster:     drivers.ClusterContext{Name: "local", Domain: "local.example", IngressClass: "nginx"},
			Environment: drivers.EnvironmentContext{Name: "dev"},
			Deployment:  drivers.DeploymentContext{Name: fmt.Sprintf("app%d", i), Namespace: fmt.Sprintf("dev-app%d", i), AppVersion: "1.25.0", Driver: "webapp", DriverVersion: "1.1.0"},
			Parameters:  map[string]any{"replicas": 1, "message": "hi", "ingress": false, "size": "small"},
		}
		v, err := d.Values(c)
		if err != nil {
			t.Fatal(err)
		}
		return c, v
	}
	ctx := context.Background()
	r := NewRenders(2)
	c0, v0 := input(0)
	first, err := r.Render(ctx, d, c0, v0)
	if err != nil {
		t.Fatal(err)
	}
	// The same input again, as a new map (the StyrminDeployment
	// controller decodes its own copy): the kept render, not a new one.
	c0b, v0b := input(0)
	again, err := r.Render(ctx, d, c0b, v0b)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Error("the same input was rendered again")
	}
	// The values as JSON decodes them (numbers as floats, as the
	// StyrminDeployment's copy has them): the same input, the same render.
	c0f, v0f := input(0)
	v0f["replicaCount"] = float64(1)
	if asJSON, err := r.Render(ctx, d, c0f, v0f); err != nil || asJSON != first {
		t.Errorf("the values in their JSON form were rendered again (%v)", err)
	}
	// Another input is another render, with its own objects.
	c1, v1 := input(1)
	other, err := r.Render(ctx, d, c1, v1)
	if err != nil {
		t.Fatal(err)
	}
	if other == first || len(other.Objects) == 0 || other.Objects[0].Namespace == first.Objects[0].Namespace {
		t.Errorf("a different input gave the kept render: %+v", other.Objects)
	}
	for i := 2; i < 6; i++ {
		c, v := input(i)
		if _, err := r.Render(ctx, d, c, v); err != nil {
			t.Fatal(err)
		}
		if n := r.Len(); n > 2 {
			t.Fatalf("the cache holds %d renders, more than its size 2", n)
		}
	}
	// No cache: each call renders.
	var none *Renders
	a, err := none.Render(ctx, d, c0, v0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := none.Render(ctx, d, c0, v0)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Error("a nil cache kept a render")
	}
}

// largeDriver renders count ConfigMaps of size bytes each, one set per
// value of its variant parameter: a chart within the default limits
// whose renders weigh megabytes each.
func largeDriver(t *testing.T, count, size int) *drivers.Driver {
	t.Helper()
	spec := `name:        "large"
version:     "1.0.0"
appVersions: ">=1.0.0 <2.0.0"
parameters: variant: *0 | int
components: app: workloads: [{kind: "Deployment", name: context.deployment.name}]
values: variant: context.parameters.variant
`
	tmpl := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  selector: {matchLabels: {app: large}}
  template:
    metadata: {labels: {app: large}}
    spec: {containers: [{name: app, image: nginx}]}
{{- range $i := until %d }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: large-{{ $.Values.variant }}-{{ $i }}
data:
  blob: {{ repeat %d "x" | quote }}
{{- end }}
`, count, size)
	d, err := drivers.Load(fstest.MapFS{
		"driver.cue":                      {Data: []byte(spec)},
		"chart/Chart.yaml":                {Data: []byte("apiVersion: v2\nname: large\nversion: 1.0.0\n")},
		"chart/templates/configmaps.yaml": {Data: []byte(tmpl)},
	}, drivers.LoadOptions{Source: "large"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// webappInput is the example webapp's context and values for deployment
// app<i>.
func webappInput(t *testing.T, d *drivers.Driver, i int) (drivers.Context, map[string]any) {
	t.Helper()
	return inputWith(t, d, i, map[string]any{"replicas": 1, "message": "hi", "ingress": true, "size": "small"})
}

// inputWith is d's context and values for deployment app<i> with params.
func inputWith(t *testing.T, d *drivers.Driver, i int, params map[string]any) (drivers.Context, map[string]any) {
	t.Helper()
	c := drivers.Context{
		Cluster:     drivers.ClusterContext{Name: "local", Domain: "local.example", IngressClass: "nginx"},
		Environment: drivers.EnvironmentContext{Name: "dev"},
		Deployment:  drivers.DeploymentContext{Name: fmt.Sprintf("app%d", i), Namespace: fmt.Sprintf("dev-app%d", i), AppVersion: "1.25.0", Driver: d.Name, DriverVersion: d.Version},
		Parameters:  params,
	}
	v, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	return c, v
}

func exampleWebapp(t *testing.T) *drivers.Driver {
	t.Helper()
	sub, err := fs.Sub(examples.Repo(), "drivers/webapp/1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := drivers.Load(sub, drivers.LoadOptions{Source: "webapp"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRendersKeepLargeRendersWithinTheirByteBudget: renders of megabytes
// each (one deployment locked with one parameter set after another)
// never hold more than the byte budget, the small renders in use among
// them stay kept, and a render larger than the whole budget is returned
// but not kept. A count alone kept all of them.
func TestRendersKeepLargeRendersWithinTheirByteBudget(t *testing.T) {
	const budget = 8 << 20
	ctx := context.Background()
	r := NewRendersWith(RendersOptions{MaxBytes: budget})
	small := exampleWebapp(t)
	large := largeDriver(t, 4, 900_000) // about 3.6 MB a render
	type kept struct {
		c drivers.Context
		v map[string]any
		m *drivers.Manifests
	}
	var smalls []kept
	for i := range 3 {
		c, v := webappInput(t, small, i)
		m, err := r.Render(ctx, small, c, v)
		if err != nil {
			t.Fatal(err)
		}
		smalls = append(smalls, kept{c, v, m})
	}
	for variant := range 12 {
		c, v := inputWith(t, large, 0, map[string]any{"variant": variant})
		m, err := r.Render(ctx, large, c, v)
		if err != nil {
			t.Fatal(err)
		}
		if n := renderBytes(m); n < 3_600_000 {
			t.Fatalf("a large render weighs %d bytes, want at least its 3.6 MB of text", n)
		}
		if b := r.Bytes(); b > budget {
			t.Fatalf("after %d large renders the cache holds %d bytes, over its budget of %d", variant+1, b, budget)
		}
		// The deployments of the small renders are reconciled
		// meanwhile: their renders are used, and stay.
		for i, s := range smalls {
			again, err := r.Render(ctx, small, s.c, s.v)
			if err != nil {
				t.Fatal(err)
			}
			if again != s.m {
				t.Fatalf("after %d large renders, small render %d was rendered again: dropped for the large ones", variant+1, i)
			}
		}
	}
	if n := r.Len(); n > 3+budget/3_600_000 {
		t.Fatalf("the cache holds %d renders", n)
	}

	// A render larger than the whole budget is used, not kept, and
	// drops nothing.
	huge := largeDriver(t, 10, 900_000)
	before, held := r.Len(), r.Bytes()
	c, v := inputWith(t, huge, 0, map[string]any{"variant": 0})
	first, err := r.Render(ctx, huge, c, v)
	if err != nil || len(first.Objects) != 11 {
		t.Fatalf("huge render: %v, %d objects", err, len(first.Objects))
	}
	second, err := r.Render(ctx, huge, c, v)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Error("a render larger than the budget was kept")
	}
	if r.Len() != before || r.Bytes() != held {
		t.Errorf("a render larger than the budget changed the cache: %d renders, %d bytes; was %d, %d", r.Len(), r.Bytes(), before, held)
	}
}

// TestTheByteBudgetKeepsAsManyExampleRendersAsTheCount: the default byte
// budget holds DefaultRenderCacheSize renders of the example webapp (the
// 2,000-deployment benchmark's driver) many times over, so for ordinary
// charts the count still decides how many renders are kept.
func TestTheByteBudgetKeepsAsManyExampleRendersAsTheCount(t *testing.T) {
	d := exampleWebapp(t)
	r := NewRenders(0)
	var most int64
	for i := range DefaultRenderCacheSize + 10 {
		c, v := webappInput(t, d, i)
		m, err := r.Render(context.Background(), d, c, v)
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, renderBytes(m))
	}
	t.Logf("a webapp render weighs at most %d bytes; %d renders %d bytes", most, r.Len(), r.Bytes())
	if r.Len() != DefaultRenderCacheSize {
		t.Fatalf("the cache holds %d webapp renders, want %d", r.Len(), DefaultRenderCacheSize)
	}
	if most*DefaultRenderCacheSize*4 > DefaultRenderCacheBytes {
		t.Fatalf("a webapp render weighs %d bytes: the byte budget holds %d renders, less than 4 × the count %d", most, DefaultRenderCacheBytes/most, DefaultRenderCacheSize)
	}
}
