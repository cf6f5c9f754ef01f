package deployment

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestDeploymentSeriesFollowTheStatusAndGoWithTheDeployment pins the
// per-deployment series: what a status says, one set per deployment, and
// none left once the deployment is gone; a second controller in the same
// process (tests build several managers) shares them.
func TestDeploymentSeriesFollowTheStatusAndGoWithTheDeployment(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	sd := func(ns, name string, seq, applied, active int64, ready metav1.ConditionStatus) *v1alpha1.StyrminDeployment {
		return &v1alpha1.StyrminDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns},
			Spec: v1alpha1.StyrminDeploymentSpec{Sequence: seq,
				Deployment: v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: name}},
			Status: v1alpha1.StyrminDeploymentStatus{AppliedSequence: applied, ActiveSequence: active,
				Conditions: []metav1.Condition{
					{Type: v1alpha1.ConditionReady, Status: ready},
					{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse},
				}},
		}
	}
	m.observe(sd("dev-web", "web", 3, 3, 2, metav1.ConditionFalse))
	m.observe(sd("dev-hub", "hub", 1, 1, 1, metav1.ConditionTrue))
	m.observe(sd("dev-web", "web", 3, 3, 3, metav1.ConditionTrue)) // replaces the first
	m.drop("dev-hub")

	again, err := newMetrics(reg)
	if err != nil {
		t.Fatalf("a second controller's metrics: %v", err)
	}
	if again.deployments != m.deployments {
		t.Error("a second controller's metrics do not share the registered series")
	}
	want := `
# HELP styrmin_deployment_ready 1 when the deployment's Ready condition is True, else 0.
# TYPE styrmin_deployment_ready gauge
styrmin_deployment_ready{cluster="local",deployment="web",environment="dev",namespace="dev-web"} 1
# HELP styrmin_deployment_sequence The deployment's instance sequences: locked (in its spec, from git), applied (its release), active (its last task that succeeded).
# TYPE styrmin_deployment_sequence gauge
styrmin_deployment_sequence{cluster="local",deployment="web",environment="dev",namespace="dev-web",state="active"} 3
styrmin_deployment_sequence{cluster="local",deployment="web",environment="dev",namespace="dev-web",state="applied"} 3
styrmin_deployment_sequence{cluster="local",deployment="web",environment="dev",namespace="dev-web",state="locked"} 3
# HELP styrmin_deployment_stalled 1 when the deployment is Stalled (it needs a change in git), else 0.
# TYPE styrmin_deployment_stalled gauge
styrmin_deployment_stalled{cluster="local",deployment="web",environment="dev",namespace="dev-web"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"styrmin_deployment_ready", "styrmin_deployment_stalled", "styrmin_deployment_sequence"); err != nil {
		t.Error(err)
	}
}
