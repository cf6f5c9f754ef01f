// Package liveness tells a wedged agent from a busy one: the /healthz
// check fails when one of its controllers has been inside a single
// reconcile for longer than a bound, so the kubelet restarts an agent
// whose workers are stuck (a driver evaluation that never returns, a
// deadlock) rather than leaving every deployment waiting behind it.
package liveness

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// metricName is controller-runtime's workqueue gauge of the longest
// reconcile in progress, per controller; client-go updates it twice a
// second while work is in flight. Reading it needs no hook in the
// controllers: every controller of the manager reports it.
const metricName = "workqueue_longest_running_processor_seconds"

// Stuck returns a healthz check that fails while a controller's longest
// running reconcile, as g reports it (the manager's metrics registry),
// is older than bound. The bound must exceed the longest reconcile that
// is normal (a driver render up to its time limit); nothing whose length
// a driver sets waits inside a reconcile (a step's exec runs in the
// background: see the task controller).
func Stuck(g prometheus.Gatherer, bound time.Duration) healthz.Checker {
	return func(*http.Request) error {
		families, err := g.Gather()
		if err != nil {
			// A metrics problem is not a wedged controller.
			return nil
		}
		var stuck []string
		for _, f := range families {
			if f.GetName() != metricName {
				continue
			}
			for _, m := range f.GetMetric() {
				secs := m.GetGauge().GetValue()
				if secs <= bound.Seconds() {
					continue
				}
				name := "?"
				for _, l := range m.GetLabel() {
					if l.GetName() == "controller" || (l.GetName() == "name" && name == "?") {
						name = l.GetValue()
					}
				}
				stuck = append(stuck, fmt.Sprintf("%s for %s", name, (time.Duration(secs)*time.Second).String()))
			}
		}
		if len(stuck) == 0 {
			return nil
		}
		sort.Strings(stuck)
		return fmt.Errorf("a reconcile has been running longer than %s: %s", bound, strings.Join(stuck, ", "))
	}
}
