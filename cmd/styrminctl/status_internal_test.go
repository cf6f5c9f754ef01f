package main

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestStatusMarksInternalDeployments pins that status shows which
// deployments Styrmin added itself (an ingress controller), in the table
// and in the data of -o json, and leaves applications unmarked.
func TestStatusMarksInternalDeployments(t *testing.T) {
	t.Parallel()
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

// TestStatusShowsTheLastChangesWhateverTheBackupsAfterThem: status showed
// a deployment's last five tasks, so after a week of nightly backups it
// showed backups only, and not the change that failed. The last five
// changes and the last three operations are counted apart, in run order.
func TestStatusShowsTheLastChangesWhateverTheBackupsAfterThem(t *testing.T) {
	t.Parallel()
	var tasks []v1alpha1.StyrminTask
	change := func(seq int64) {
		tasks = append(tasks, v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName("web", seq)},
			Spec: v1alpha1.StyrminTaskSpec{ToSequence: seq}})
	}
	backup := func(seq int64, name string) {
		tasks = append(tasks, v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.StyrminTaskSpec{ToSequence: seq, Operation: &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: name}}})
	}
	for seq := int64(1); seq <= 7; seq++ {
		change(seq)
	}
	for night := range 7 {
		backup(7, "nightly-"+string(rune('a'+night)))
	}
	var got []string
	for _, tk := range latestOf(tasks) {
		got = append(got, tk.Name)
	}
	want := []string{"web-3", "web-4", "web-5", "web-6", "web-7", "nightly-e", "nightly-f", "nightly-g"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("status shows %v, want %v", got, want)
	}
}
