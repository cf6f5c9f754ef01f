package source

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/styrmin/styrmin/operator/internal/metricsreg"
)

// syncMetrics are the syncer's Prometheus metrics: what a team alerts on
// when the cluster stops following git (no successful sync for a while,
// fetches failing or slow).
type syncMetrics struct {
	syncs         *prometheus.CounterVec
	fetchDuration *prometheus.HistogramVec
	lastSuccess   prometheus.Gauge
}

// Results of a sync (the result label of styrmin_source_syncs_total).
const (
	syncResultSynced    = "synced"
	syncResultUnchanged = "unchanged"
	syncResultError     = "error"
)

func newSyncMetrics(reg prometheus.Registerer) (*syncMetrics, error) {
	m := &syncMetrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "styrmin_source_syncs_total",
			Help: "Syncs of the desired-state repository, by result (synced: a new head; unchanged; error).",
		}, []string{"result"}),
		fetchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "styrmin_source_fetch_duration_seconds",
			Help:    "Duration of a fetch of the desired-state repository, by result (success, error).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "styrmin_source_last_sync_success_timestamp_seconds",
			Help: "When the last sync succeeded (Unix time; 0: none yet).",
		}),
	}
	var err error
	if m.syncs, err = metricsreg.Register(reg, m.syncs); err != nil {
		return nil, err
	}
	if m.fetchDuration, err = metricsreg.Register(reg, m.fetchDuration); err != nil {
		return nil, err
	}
	if m.lastSuccess, err = metricsreg.Register(reg, m.lastSuccess); err != nil {
		return nil, err
	}
	// Every result from the start: a zero, not a missing series.
	for _, r := range []string{syncResultSynced, syncResultUnchanged, syncResultError} {
		m.syncs.WithLabelValues(r)
	}
	for _, r := range []string{"success", "error"} {
		m.fetchDuration.WithLabelValues(r)
	}
	return m, nil
}

// observe counts one sync's outcome.
func (m *syncMetrics) observe(res SyncResult, err error, now time.Time) {
	switch {
	case err != nil:
		m.syncs.WithLabelValues(syncResultError).Inc()
		return
	case res.Skipped:
		m.syncs.WithLabelValues(syncResultUnchanged).Inc()
	default:
		m.syncs.WithLabelValues(syncResultSynced).Inc()
	}
	m.lastSuccess.Set(float64(now.Unix()))
}
