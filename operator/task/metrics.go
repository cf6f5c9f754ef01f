package task

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/metricsreg"
)

// taskMetrics are the task controller's Prometheus metrics.
type taskMetrics struct {
	// byPhase counts the tasks the controller knows, by phase.
	byPhase *prometheus.GaugeVec
	// finished counts tasks reaching a terminal phase, by workflow.
	finished *prometheus.CounterVec
	// stepDuration observes each step run, by action and end state.
	stepDuration *prometheus.HistogramVec

	mu     sync.Mutex
	phases map[types.NamespacedName]v1alpha1.TaskPhase
}

func newTaskMetrics(reg prometheus.Registerer) (*taskMetrics, error) {
	m := &taskMetrics{
		byPhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "styrmin_tasks",
			Help: "StyrminTasks known to the agent, by phase (Pending, Running, Succeeded, Failed, Superseded).",
		}, []string{"phase"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "styrmin_tasks_finished_total",
			Help: "Tasks that reached a terminal phase, by workflow and phase.",
		}, []string{"workflow", "phase"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "styrmin_task_step_duration_seconds",
			Help:    "Duration of task steps, from their (last) start to their end, by action and state.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}, []string{"action", "state"}),
		phases: map[types.NamespacedName]v1alpha1.TaskPhase{},
	}
	var err error
	if m.byPhase, err = metricsreg.Register(reg, m.byPhase); err != nil {
		return nil, err
	}
	if m.finished, err = metricsreg.Register(reg, m.finished); err != nil {
		return nil, err
	}
	if m.stepDuration, err = metricsreg.Register(reg, m.stepDuration); err != nil {
		return nil, err
	}
	for _, p := range taskPhases {
		m.byPhase.WithLabelValues(string(p)).Add(0) // every phase reported, 0 included
	}
	return m, nil
}

// taskPhases lists the phases the gauge always reports (0 included). The
// gauge moves by one with each task's change (not counted afresh from
// every task known, thousands in a fan-out): two task controllers on one
// registry (tests of several managers in one process) add up, as the
// agent runs one.
var taskPhases = []v1alpha1.TaskPhase{
	v1alpha1.TaskPending, v1alpha1.TaskRunning, v1alpha1.TaskSucceeded, v1alpha1.TaskFailed, v1alpha1.TaskSuperseded,
}

// setPhase records the phase of a task and refreshes the gauge.
func (m *taskMetrics) setPhase(key types.NamespacedName, phase v1alpha1.TaskPhase) {
	if phase == "" {
		phase = v1alpha1.TaskPending
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, known := m.phases[key]
	if known && old == phase {
		return
	}
	if known {
		m.byPhase.WithLabelValues(string(old)).Dec()
	}
	m.phases[key] = phase
	m.byPhase.WithLabelValues(string(phase)).Inc()
}

// forget drops a deleted task.
func (m *taskMetrics) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.phases[key]
	if !ok {
		return
	}
	delete(m.phases, key)
	m.byPhase.WithLabelValues(string(old)).Dec()
}
