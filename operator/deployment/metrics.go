package deployment

import (
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/metricsreg"
)

// metrics are the agent's own Prometheus metrics, served with
// controller-runtime's (reconcile counts, work queues, REST client).
type metrics struct {
	driftCorrections *prometheus.CounterVec
	driftChecks      *prometheus.CounterVec
	applyDuration    *prometheus.HistogramVec
	driftDuration    prometheus.Histogram
	// deployments describes each deployment, as its status says after
	// each reconcile; a deployment's series go with it.
	deployments *deploymentSeries
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
		deployments: newDeploymentSeries(),
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
	// Every result from the start: a zero, not a missing series.
	for _, r := range []string{"clean", "drifted", "error"} {
		m.driftChecks.WithLabelValues(r)
	}
	for _, op := range []string{"install", "upgrade", "uninstall"} {
		for _, r := range []string{"success", "error"} {
			m.applyDuration.WithLabelValues(op, r)
		}
	}
	if m.deployments, err = metricsreg.Register(reg, m.deployments); err != nil {
		return nil, err
	}
	return m, nil
}

// observe sets a deployment's series from its status.
func (m *metrics) observe(sd *v1alpha1.StyrminDeployment) {
	id := sd.Spec.Deployment
	m.deployments.set(sd.Namespace, deploymentValues{
		cluster: id.Cluster, environment: id.Environment, deployment: id.Name,
		ready:   conditionValue(sd, v1alpha1.ConditionReady),
		stalled: conditionValue(sd, v1alpha1.ConditionStalled),
		locked:  sd.Spec.Sequence, applied: sd.Status.AppliedSequence, active: sd.Status.ActiveSequence,
	})
}

// drop removes the series of the deployment in namespace.
func (m *metrics) drop(namespace string) { m.deployments.delete(namespace) }

func conditionValue(sd *v1alpha1.StyrminDeployment, typ string) float64 {
	if apimeta.IsStatusConditionTrue(sd.Status.Conditions, typ) {
		return 1
	}
	return 0
}

// deploymentSeries is the collector of the per-deployment series
// (styrmin_deployment_ready, _stalled and _sequence). It keeps one small
// record per deployment and builds the series when scraped: gauge vectors
// keep label pairs per series, five series per deployment, which came to
// about 5 KiB of the agent's heap per deployment.
type deploymentSeries struct {
	ready, stalled, sequence *prometheus.Desc

	mu sync.Mutex
	// byNamespace holds each deployment's values by its namespace (one
	// deployment each).
	byNamespace map[string]deploymentValues
}

// deploymentValues is what the series say of one deployment.
type deploymentValues struct {
	cluster, environment, deployment string
	ready, stalled                   float64
	locked, applied, active          int64
}

var _ prometheus.Collector = (*deploymentSeries)(nil)

func newDeploymentSeries() *deploymentSeries {
	labels := []string{"namespace", "cluster", "environment", "deployment"}
	return &deploymentSeries{
		ready: prometheus.NewDesc("styrmin_deployment_ready",
			"1 when the deployment's Ready condition is True, else 0.", labels, nil),
		stalled: prometheus.NewDesc("styrmin_deployment_stalled",
			"1 when the deployment is Stalled (it needs a change in git), else 0.", labels, nil),
		sequence: prometheus.NewDesc("styrmin_deployment_sequence",
			"The deployment's instance sequences: locked (in its spec, from git), applied (its release), active (its last task that succeeded).",
			append(slices.Clone(labels), "state"), nil),
		byNamespace: map[string]deploymentValues{},
	}
}

func (s *deploymentSeries) set(namespace string, v deploymentValues) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byNamespace[namespace] = v
}

func (s *deploymentSeries) delete(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byNamespace, namespace)
}

// Describe implements prometheus.Collector.
func (s *deploymentSeries) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.ready
	ch <- s.stalled
	ch <- s.sequence
}

// Collect implements prometheus.Collector.
func (s *deploymentSeries) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	all := maps.Clone(s.byNamespace)
	s.mu.Unlock()
	for ns, v := range all {
		ch <- prometheus.MustNewConstMetric(s.ready, prometheus.GaugeValue, v.ready, ns, v.cluster, v.environment, v.deployment)
		ch <- prometheus.MustNewConstMetric(s.stalled, prometheus.GaugeValue, v.stalled, ns, v.cluster, v.environment, v.deployment)
		for _, q := range []struct {
			state string
			seq   int64
		}{{"locked", v.locked}, {"applied", v.applied}, {"active", v.active}} {
			ch <- prometheus.MustNewConstMetric(s.sequence, prometheus.GaugeValue, float64(q.seq), ns, v.cluster, v.environment, v.deployment, q.state)
		}
	}
}
