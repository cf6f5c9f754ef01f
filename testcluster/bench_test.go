package testcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/styrmin/styrmin/testcluster"
)

// BenchmarkStartStop measures starting a cluster until it is usable (with
// workloads: until the fake nodes are Ready; with the real node: until it
// is Ready too) and stopping it. The real node's own start is reported as
// realnode-s/op.
func BenchmarkStartStop(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts testcluster.Options
	}{
		{"api-server-only", testcluster.Options{}},
		{"workloads-2-nodes", testcluster.Options{Workloads: true}},
		{"workloads-2-nodes-and-real-node", testcluster.Options{Workloads: true, RealNode: &testcluster.RealNodeOptions{}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.opts.RealNode != nil {
				testcluster.RequireRealNode(b)
			}
			var realNode time.Duration
			for b.Loop() {
				c, err := testcluster.Start(context.Background(), bc.opts)
				if err != nil {
					b.Fatal(err)
				}
				realNode += c.RealNodeStartTime
				if err := c.Stop(); err != nil {
					b.Fatal(err)
				}
			}
			if bc.opts.RealNode != nil {
				b.ReportMetric(realNode.Seconds()/float64(b.N), "realnode-s/op")
			}
		})
	}
}
