package operator

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the agent's own Prometheus metrics, served with
// controller-runtime's (reconcile counts, work queues, REST client).
type metrics struct {
	driftCorrections *prometheus.CounterVec
	driftChecks      *prometheus.CounterVec
	applyDuration    *prometheus.HistogramVec
	driftDuration    prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		driftCorrections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "styrmin_drift_corrections_total",
			Help: "Objects put back after drifting from their release's manifest, by deployment namespace and kind.",
		}, []string{"namespace", "kind"}),
		driftChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "styrmin_drift_checks_total",
			Help: "Drift checks of deployments, by result (clean, drifted, error).",
		}, []string{"result"}),
		applyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "styrmin_release_apply_duration_seconds",
			Help:    "Duration of Helm release operations, by operation (install, upgrade, uninstall) and result (success, error).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}, []string{"operation", "result"}),
		driftDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "styrmin_drift_check_duration_seconds",
			Help:    "Duration of one deployment's drift check, correction included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
	}
	var err error
	if m.driftCorrections, err = register(reg, m.driftCorrections); err != nil {
		return nil, err
	}
	if m.driftChecks, err = register(reg, m.driftChecks); err != nil {
		return nil, err
	}
	if m.applyDuration, err = register(reg, m.applyDuration); err != nil {
		return nil, err
	}
	if m.driftDuration, err = register(reg, m.driftDuration); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same name (a second manager in one process, as in tests).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func resultLabel(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}
