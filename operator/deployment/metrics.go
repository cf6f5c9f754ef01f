package deployment

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/styrmin/styrmin/operator/internal/metricsreg"
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
	if m.driftCorrections, err = metricsreg.Register(reg, m.driftCorrections); err != nil {
		return nil, err
	}
	if m.driftChecks, err = metricsreg.Register(reg, m.driftChecks); err != nil {
		return nil, err
	}
	if m.applyDuration, err = metricsreg.Register(reg, m.applyDuration); err != nil {
		return nil, err
	}
	if m.driftDuration, err = metricsreg.Register(reg, m.driftDuration); err != nil {
		return nil, err
	}
	return m, nil
}
