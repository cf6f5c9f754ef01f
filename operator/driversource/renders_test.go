package driversource

import (
	"context"
	"fmt"
	"io/fs"
	"testing"

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
