package testcluster_test

import (
	"context"
	"testing"

	"github.com/styrmin/styrmin/testcluster"
)

// BenchmarkStartStop measures starting a cluster until it is usable (with
// workloads: until the fake nodes are Ready) and stopping it.
func BenchmarkStartStop(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts testcluster.Options
	}{
		{"api-server-only", testcluster.Options{}},
		{"workloads-2-nodes", testcluster.Options{Workloads: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				c, err := testcluster.Start(context.Background(), bc.opts)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Stop(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
