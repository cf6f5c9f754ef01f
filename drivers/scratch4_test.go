package drivers

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestScratchCPU(t *testing.T) {
	for _, dir := range []string{"webapp/1.0.0", "webapp/1.1.0", "graphhub/1.0.0", "graphhub/2.0.0"} {
		d, c, vals := benchDriver(&testing.B{}, dir)
		n := 300
		measure := func(name string, f func()) {
			f()
			start := cpuNow()
			for i := 0; i < n; i++ {
				f()
			}
			fmt.Printf("%-16s %-10s %8.0f µs CPU/op\n", dir, name, float64(cpuNow()-start)/float64(n)/1e3)
		}
		measure("render", func() { d.Render(c, vals) })
		measure("values", func() { d.Values(c) })
		measure("params", func() { d.ApplyParameters(c.Parameters) })
		measure("endpoints", func() { d.Endpoints(c) })
		measure("chart", func() { d.renderChart(c, vals) })
	}
}
