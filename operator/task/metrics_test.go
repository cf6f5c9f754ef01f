package task

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestTheTasksGaugeFollowsEachTasksPhase pins styrmin_tasks as tasks move
// from phase to phase and go: every phase reported from the start, a task
// counted once in its latest phase, a phase set again not counted twice,
// a forgotten task no longer counted.
func TestTheTasksGaugeFollowsEachTasksPhase(t *testing.T) {
	t.Parallel()
	m, err := newTaskMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a, b := types.NamespacedName{Namespace: "dev-web", Name: "web-1"}, types.NamespacedName{Namespace: "dev-web", Name: "web-2"}
	want := func(step string, counts map[v1alpha1.TaskPhase]float64) {
		t.Helper()
		for _, p := range taskPhases {
			if got := testutil.ToFloat64(m.byPhase.WithLabelValues(string(p))); got != counts[p] {
				t.Errorf("%s: styrmin_tasks{phase=%q} = %v, want %v", step, p, got, counts[p])
			}
		}
	}
	want("no task", nil)
	m.setPhase(a, "")
	m.setPhase(b, v1alpha1.TaskPending)
	want("two new tasks", map[v1alpha1.TaskPhase]float64{v1alpha1.TaskPending: 2})
	m.setPhase(a, v1alpha1.TaskRunning)
	m.setPhase(a, v1alpha1.TaskRunning)
	want("one running", map[v1alpha1.TaskPhase]float64{v1alpha1.TaskPending: 1, v1alpha1.TaskRunning: 1})
	m.setPhase(a, v1alpha1.TaskSucceeded)
	m.setPhase(b, v1alpha1.TaskSuperseded)
	want("both ended", map[v1alpha1.TaskPhase]float64{v1alpha1.TaskSucceeded: 1, v1alpha1.TaskSuperseded: 1})
	m.forget(b)
	m.forget(b)
	want("one forgotten", map[v1alpha1.TaskPhase]float64{v1alpha1.TaskSucceeded: 1})
}
