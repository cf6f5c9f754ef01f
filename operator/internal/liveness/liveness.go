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
	"sync"
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
// is older than bound, unless waits (nil: none) holds a wait of that
// controller that is not past its end. The bound must exceed the longest
// reconcile that is normal (a driver render up to its time limit); a
// wait whose length the driver sets (a step's exec, up to the step's
// timeout) is recorded in waits instead.
func Stuck(g prometheus.Gatherer, bound time.Duration, waits *Waits) healthz.Checker {
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
				// Inside a known wait, the reconcile may be as old as the
				// wait plus the bound (what it did before the wait); one
				// older still started long before the wait: wedged. (The
				// gauge is the controller's oldest reconcile: one wedged
				// after the wait began shows once the wait ends.)
				if waited := waits.waited(name, time.Now()); waited > 0 && secs <= (waited+bound).Seconds() {
					continue
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

// waitGrace is how long past its end a wait still covers its controller:
// a wait ends by its context's deadline, and the reconcile around it
// records its outcome after.
const waitGrace = time.Minute

// Waits records the waits a controller knows to be long inside one
// reconcile: a task step's exec in a pod runs up to the step's timeout,
// which the driver sets (an hour for a migration), and a reconcile
// waiting for it is not wedged. Safe for concurrent use; a nil *Waits
// records nothing.
type Waits struct {
	mu    sync.Mutex
	next  uint64
	waits map[uint64]wait
}

type wait struct {
	controller   string
	began, until time.Time
}

// NewWaits returns an empty record of waits.
func NewWaits() *Waits { return &Waits{waits: map[uint64]wait{}} }

// Begin records that a reconcile of controller waits until until (the
// deadline of what it waits for); the returned function ends the wait.
func (w *Waits) Begin(controller string, until time.Time) (end func()) {
	if w == nil {
		return func() {}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	id := w.next
	w.waits[id] = wait{controller: controller, began: time.Now(), until: until}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.waits, id)
	}
}

// waited is how long the oldest wait of controller not past its end (with
// waitGrace) at now has lasted; 0 when it has none.
func (w *Waits) waited(controller string, now time.Time) time.Duration {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	for _, x := range w.waits {
		if x.controller == controller && now.Before(x.until.Add(waitGrace)) {
			longest = max(longest, now.Sub(x.began))
		}
	}
	return longest
}
