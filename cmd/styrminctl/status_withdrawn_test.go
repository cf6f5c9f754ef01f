package main

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

// TestStatusNamesAChangeSupersededByOneWithdrawnSince: change 5 of a
// deployment was superseded before it ran by change 6, whose lock commit
// a force push or a rewind then took away (task 6 ended Superseded,
// reason Withdrawn). Neither was applied: the cluster runs 4, yet status
// showed the deployment Ready and up to date, its newest task
// "Superseded" as if a newer instance ran. Status now names the change
// not applied, under the table, in the deployment's view and in -o json.
func TestStatusNamesAChangeSupersededByOneWithdrawnSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testcluster.StartT(t, testcluster.Options{})
	cl, err := styrminClient(ctx, c, "dev-hub")
	if err != nil {
		t.Fatal(err)
	}
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "hub"}
	sd := &v1alpha1.StyrminDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "dev-hub", Namespace: "dev-hub", Labels: id.Labels(),
			Annotations: map[string]string{v1alpha1.AnnotationInstanceSequence: "4"}},
		Spec: *fixtureInstance("dev", "hub", 4, v1alpha1.KindInstance, "graphhub@1.0.0", "1.4.1"),
	}
	if err := cl.Create(ctx, sd); err != nil {
		t.Fatal(err)
	}
	sd.Status = v1alpha1.StyrminDeploymentStatus{ObservedGeneration: sd.Generation, AppliedSequence: 4, AppliedDigest: fixtureDigest, ActiveSequence: 4,
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "all components ready", LastTransitionTime: *at(5)}}}
	if err := cl.Status().Update(ctx, sd); err != nil {
		t.Fatal(err)
	}
	task := func(seq int64, st v1alpha1.StyrminTaskStatus) {
		t.Helper()
		in := fixtureInstance("dev", "hub", seq, v1alpha1.KindInstance, "graphhub@1.0.0", "1.4.1")
		tk := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName("hub", seq), Namespace: "dev-hub", Labels: id.Labels()},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: "dev-hub", Workflow: v1alpha1.WorkflowUpdate, FromSequence: seq - 1, ToSequence: seq,
				Lock:   v1alpha1.LockRef{Commit: strings.Repeat(string(rune('0'+seq)), 40), Path: "locks/local/dev/hub.lock.yaml"},
				Target: &v1alpha1.TaskTarget{Kind: in.Kind, Driver: in.Driver, AppVersion: in.AppVersion, SourceCommit: in.SourceCommit, Digest: in.Digest}},
		}
		if err := cl.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		tk.Status = st
		if err := cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	task(4, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, StartedAt: at(1), FinishedAt: at(5)})
	task(5, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSuperseded, StartedAt: at(10), FinishedAt: at(10), SupersededBy: 6,
		Message: "superseded by sequence 6 before it ran: the newer task writes the whole configuration"})
	// As the task controller ends a task whose lock commit left the branch.
	task(6, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSuperseded, StartedAt: at(11), FinishedAt: at(11),
		Message: "withdrawn before it ran: the branch no longer holds lock commit 666666666666",
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonTaskWithdrawn,
			Message: "withdrawn before it ran", LastTransitionTime: *at(11)}}})

	why := "task dev-hub/hub-5 (sequence 5) was superseded by sequence 6, which was withdrawn from the branch before it ran: neither was applied"
	out, err := runCluster(t, c.KubeconfigPath, "status")
	if err != nil {
		t.Fatal(err)
	}
	if want := "superseded by one withdrawn from the branch (a lock past the sequence the cluster used applies it):\n  local/dev/hub: " + why; !strings.Contains(out, want) {
		t.Errorf("status does not name the change not applied (%q):\n%s", want, out)
	}
	if out, err = runCluster(t, c.KubeconfigPath, "status", "local/dev/hub"); err != nil {
		t.Fatal(err)
	}
	if want := "Behind git:   " + why; !strings.Contains(out, want) {
		t.Errorf("status of the deployment does not say it is behind git (%q):\n%s", want, out)
	}
	if out, err = runCluster(t, c.KubeconfigPath, "status", "-o", "json"); err != nil {
		t.Fatal(err)
	}
	if want := `"withdrawn": "` + why; !strings.Contains(out, want) || !strings.Contains(out, `"reason": "Withdrawn"`) {
		t.Errorf("status -o json does not name the change not applied (%q):\n%s", want, out)
	}
}
