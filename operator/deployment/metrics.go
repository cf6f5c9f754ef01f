package deployment

import (
	"maps"
	"slices"

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
	// ready, stalled and sequence describe each deployment, as its
	// status says after each reconcile, by namespace (one deployment
	// each) and id; a deployment's series go with it.
	ready    *prometheus.GaugeVec
	stalled  *prometheus.GaugeVec
	sequence *prometheus.GaugeVec
}

// deploymentLabels name a deployment's series.
var deploymentLabels = []string{"namespace", "cluster", "environment", "deployment"}

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
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "styrmin_deployment_ready",
			Help: "1 when the deployment's Ready condition is True, else 0.",
		}, deploymentLabels),
		stalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "styrmin_deployment_stalled",
			Help: "1 when the deployment is Stalled (it needs a change in git), else 0.",
		}, deploymentLabels),
		sequence: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "styrmin_deployment_sequence",
			Help: "The deployment's instance sequences: locked (in its spec, from git), applied (its release), active (its last task that succeeded).",
		}, append(slices.Clone(deploymentLabels), "state")),
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
	for _, g := range []**prometheus.GaugeVec{&m.ready, &m.stalled, &m.sequence} {
		if *g, err = metricsreg.Register(reg, *g); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe sets a deployment's series from its status.
func (m *metrics) observe(sd *v1alpha1.StyrminDeployment) {
	id := sd.Spec.Deployment
	labels := prometheus.Labels{"namespace": sd.Namespace, "cluster": id.Cluster, "environment": id.Environment, "deployment": id.Name}
	m.ready.With(labels).Set(conditionValue(sd, v1alpha1.ConditionReady))
	m.stalled.With(labels).Set(conditionValue(sd, v1alpha1.ConditionStalled))
	for state, seq := range map[string]int64{"locked": sd.Spec.Sequence, "applied": sd.Status.AppliedSequence, "active": sd.Status.ActiveSequence} {
		l := maps.Clone(labels)
		l["state"] = state
		m.sequence.With(l).Set(float64(seq))
	}
}

// drop removes the series of the deployment in namespace.
func (m *metrics) drop(namespace string) {
	for _, g := range []*prometheus.GaugeVec{m.ready, m.stalled, m.sequence} {
		g.DeletePartialMatch(prometheus.Labels{"namespace": namespace})
	}
}

func conditionValue(sd *v1alpha1.StyrminDeployment, typ string) float64 {
	if apimeta.IsStatusConditionTrue(sd.Status.Conditions, typ) {
		return 1
	}
	return 0
}
