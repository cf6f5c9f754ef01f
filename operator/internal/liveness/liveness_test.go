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
	check := Stuck(reg, time.Minute)
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
