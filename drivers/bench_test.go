package drivers

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
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

// BenchmarkSandboxRender measures one render through a Sandbox against the
// same render in this process (no render cache: every iteration renders).
// child-cpu-ms/op is the sandbox processes' CPU (user and system) per
// render, which ns/op does not count.
func BenchmarkSandboxRender(b *testing.B) {
	const dir = "webapp/1.1.0"
	d, c, vals := benchDriver(b, dir)
	b.Run("in-process", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := d.Render(c, vals); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sandbox", func(b *testing.B) {
		boxed, sb := boxedDriver(b, dir)
		before := childrenCPU()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := boxed.Render(c, vals); err != nil {
				b.Fatal(err)
			}
		}
		sb.Close() // the children's CPU is counted once they have ended
		b.ReportMetric(float64((childrenCPU()-before).Microseconds())/1000/float64(b.N), "child-cpu-ms/op")
	})
}

// boxedDriver loads an example driver version through a Sandbox of this
// test binary, its children ended with the benchmark.
func boxedDriver(b *testing.B, dir string) (*Driver, *Sandbox) {
	b.Helper()
	sb, err := SelfSandbox(2)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sb.Close)
	boxed, err := Load(os.DirFS("../examples/drivers/"+dir), LoadOptions{Source: "examples/drivers/" + dir, Sandbox: sb})
	if err != nil {
		b.Fatal(err)
	}
	return boxed, sb
}

// childrenCPU is the CPU time of this process's ended and waited-for
// children.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSandboxFirstEvaluation measures what a lock evaluates per
// deployment (values, services, the policy render) for an input no child
// evaluated yet (each iteration's deployment has a name of its own),
// through a Sandbox, against the same in this process.
// child-cpu-ms/op is the children's CPU per deployment, which ns/op does
// not count.
func BenchmarkSandboxFirstEvaluation(b *testing.B) {
	const dir = "webapp/1.1.0"
	d, c, _ := benchDriver(b, dir)
	each := func(b *testing.B, d *Driver) {
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			i++
			c := c
			c.Deployment.Name = fmt.Sprintf("app-%d", i)
			vals, err := d.Values(c)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := d.Endpoints(c); err != nil {
				b.Fatal(err)
			}
			if _, err := d.RenderForPolicy(context.Background(), c, vals); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("in-process", func(b *testing.B) { each(b, d) })
	b.Run("sandbox", func(b *testing.B) {
		boxed, sb := boxedDriver(b, dir)
		before := childrenCPU()
		each(b, boxed)
		sb.Close()
		b.ReportMetric(float64((childrenCPU()-before).Microseconds())/1000/float64(b.N), "child-cpu-ms/op")
	})
}
