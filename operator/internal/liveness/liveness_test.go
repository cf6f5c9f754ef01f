package liveness

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestStuckFailsOnlyWhileAReconcileIsOlderThanTheBound(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricName}, []string{"name", "controller"})
	reg.MustRegister(g)
	check := Stuck(reg, time.Minute, nil)
	g.WithLabelValues("styrmintask", "styrmintask").Set(5)
	g.WithLabelValues("styrmindeployment", "styrmindeployment").Set(0)
	if err := check(nil); err != nil {
		t.Fatalf("busy, not stuck: %v", err)
	}
	g.WithLabelValues("styrmindeployment", "styrmindeployment").Set(90)
	err := check(nil)
	if err == nil || !strings.Contains(err.Error(), "styrmindeployment for 1m30s") {
		t.Fatalf("stuck: err = %v", err)
	}
	g.WithLabelValues("styrmindeployment", "styrmindeployment").Set(0)
	if err := check(nil); err != nil {
		t.Fatalf("recovered: %v", err)
	}
}

// TestAReconcileInsideARecordedWaitIsNotStuckUntilTheWaitsEnd pins that a
// task step's exec, which runs up to the timeout its driver sets (past
// the bound), does not make /healthz fail (the kubelet would restart the
// agent in the middle of a migration), while another controller's long
// reconcile, or the same controller's past its wait's end, still does.
func TestAReconcileInsideARecordedWaitIsNotStuckUntilTheWaitsEnd(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricName}, []string{"name", "controller"})
	reg.MustRegister(g)
	waits := NewWaits()
	check := Stuck(reg, time.Minute, waits)
	g.WithLabelValues("styrmintask", "styrmintask").Set(3600)
	if err := check(nil); err == nil {
		t.Fatal("an hour-long reconcile with no wait recorded is not stuck")
	}
	end := waits.Begin("styrmintask", time.Now().Add(30*time.Minute))
	if err := check(nil); err == nil {
		t.Fatal("a reconcile that started an hour before the wait began is not covered by it")
	}
	g.WithLabelValues("styrmintask", "styrmintask").Set(30)
	waits.waits[1] = wait{controller: "styrmintask", began: time.Now().Add(-50 * time.Minute), until: time.Now().Add(30 * time.Minute)}
	g.WithLabelValues("styrmintask", "styrmintask").Set(3000) // 50 minutes: inside the wait, plus the minute's bound
	if err := check(nil); err != nil {
		t.Fatalf("a reconcile inside a step's exec of 30 more minutes: %v", err)
	}
	g.WithLabelValues("styrmindeployment", "styrmindeployment").Set(3600)
	if err := check(nil); err == nil || !strings.Contains(err.Error(), "styrmindeployment") || strings.Contains(err.Error(), "styrmintask") {
		t.Fatalf("another controller's long reconcile: %v, want it alone stuck", err)
	}
	g.WithLabelValues("styrmindeployment", "styrmindeployment").Set(0)
	end()
	if err := check(nil); err == nil {
		t.Fatal("stuck no more once its wait ended")
	}
	defer waits.Begin("styrmintask", time.Now().Add(-2*waitGrace))()
	if err := check(nil); err == nil {
		t.Fatal("a wait past its end (and grace) still covers its controller")
	}
	var none *Waits
	none.Begin("styrmintask", time.Now().Add(time.Hour))()
}
