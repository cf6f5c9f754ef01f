package drivers

import (
	"os"
	"testing"
)

// benchDriver loads an example driver version and a context for it.
func benchDriver(b *testing.B, dir string) (*Driver, Context, map[string]any) {
	b.Helper()
	d, err := Load(os.DirFS("../examples/drivers/"+dir), LoadOptions{Source: "examples/drivers/" + dir})
	if err != nil {
		b.Fatal(err)
	}
	c := exampleContext(d)
	vals, err := d.Values(c)
	if err != nil {
		b.Fatal(err)
	}
	return d, c, vals
}

// BenchmarkRender measures one deployment's render (chart engine, patches,
// component tagging, canonical YAML), values already computed.
func BenchmarkRender(b *testing.B) {
	for _, tc := range []struct{ name, dir string }{
		{"webapp", "webapp/1.1.0"},
		{"graphhub", "graphhub/2.0.0"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d, c, vals := benchDriver(b, tc.dir)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Render(c, vals); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkValues measures parameters, values and endpoints of one
// deployment: what the resolver computes per deployment.
func BenchmarkValues(b *testing.B) {
	for _, tc := range []struct{ name, dir string }{
		{"webapp", "webapp/1.1.0"},
		{"graphhub", "graphhub/2.0.0"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d, c, _ := benchDriver(b, tc.dir)
			raw := c.Parameters
			b.ReportAllocs()
			for b.Loop() {
				p, err := d.ApplyParameters(raw)
				if err != nil {
					b.Fatal(err)
				}
				c.Parameters = p
				if _, err := d.Values(c); err != nil {
					b.Fatal(err)
				}
				if _, err := d.Endpoints(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoad measures loading a driver version folder (read, digest,
// CUE compile, chart load, sample render).
func BenchmarkLoad(b *testing.B) {
	fsys := os.DirFS("../examples/drivers/graphhub/2.0.0")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(fsys, LoadOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderParallel measures render throughput with every core busy,
// as the planner renders many deployments at once.
func BenchmarkRenderParallel(b *testing.B) {
	for _, tc := range []struct{ name, dir string }{
		{"webapp", "webapp/1.1.0"},
		{"graphhub", "graphhub/2.0.0"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d, c, vals := benchDriver(b, tc.dir)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := d.Render(c, vals); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
