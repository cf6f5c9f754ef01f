package main

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestStatusMarksInternalDeployments pins that status shows which
// deployments Styrmin added itself (an ingress controller), in the table
// and in the data of -o json, and leaves applications unmarked.
func TestStatusMarksInternalDeployments(t *testing.T) {
	ctl := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Name: "dev-styrmin-ingress", Namespace: "dev-styrmin-ingress"},
		Spec: *fixtureInstance("dev", "styrmin.ingress", 1, v1alpha1.KindInstance, "ingress-nginx@1.0.0", "1.11.3")}
	ctl.Spec.Internal = "ingress"
	app := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Name: "dev-web", Namespace: "dev-web"},
		Spec: *fixtureInstance("dev", "web", 1, v1alpha1.KindInstance, "webapp@1.1.0", "1.25.0")}
	st := clusterStatus{Deployments: []deploymentStatus{summarizeDeployment(ctl), summarizeDeployment(app)}}
	if st.Deployments[0].Internal != "ingress" || st.Deployments[1].Internal != "" {
		t.Errorf("internal: %q, %q; want ingress and none", st.Deployments[0].Internal, st.Deployments[1].Internal)
	}
	tab := statusTable(st)
	if got, want := tab.rows[0].cells[0], "local/dev/styrmin.ingress (internal: ingress)"; got != want {
		t.Errorf("table shows %q, want %q", got, want)
	}
	if got := tab.rows[1].cells[0]; got != "local/dev/web" {
		t.Errorf("an application is shown as %q", got)
	}
}
