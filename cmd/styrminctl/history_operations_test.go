package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestHistoryListsEachChangeOnceAndItsBackupsApart pins that history is a
// deployment's instances: one change task at sequence 1 and two backup
// tasks ordered after it (operation tasks carry the sequence of the
// change before them) give one instance row, one active mark, and the
// backups listed apart in the order they ran. A later change follows
// them in the task list, whatever order the API server lists them in.
func TestHistoryListsEachChangeOnceAndItsBackupsApart(t *testing.T) {
	t.Parallel()
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "hub"}
	const ns = "dev-hub"
	lock := v1alpha1.LockRef{Commit: strings.Repeat("1", 40), Path: "locks/local/dev/hub.lock.yaml"}
	change := func(seq int64, minute int, phase v1alpha1.TaskPhase) *v1alpha1.StyrminTask {
		return &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName("hub", seq), Namespace: ns, Labels: id.Labels(), CreationTimestamp: *at(minute)},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: seq, Lock: lock,
				Target: &v1alpha1.TaskTarget{Kind: v1alpha1.KindInstance, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.0.0"}, AppVersion: "1.4.0"}},
			Status: v1alpha1.StyrminTaskStatus{Phase: phase, FinishedAt: at(minute + 1)},
		}
	}
	// Named so that their names sort against the order they were made.
	backup := func(name, backupID string, minute int) *v1alpha1.StyrminTask {
		return &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: id.Labels(), CreationTimestamp: *at(minute)},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowBackup, FromSequence: 1, ToSequence: 1, Lock: lock,
				Operation: &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: backupID, BackupID: backupID, Artifact: "s3://backups/local/dev/" + backupID + "/hub"}},
			Status: v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, FinishedAt: at(minute + 1)},
		}
	}
	sd := &v1alpha1.StyrminDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: ns, Namespace: ns, Labels: id.Labels()},
		Spec:       *fixtureInstance("dev", "hub", 1, v1alpha1.KindInstance, "graphhub@1.0.0", "1.4.0"),
		Status:     v1alpha1.StyrminDeploymentStatus{ActiveSequence: 1, AppliedSequence: 1},
	}
	objs := []client.Object{sd, change(1, 1, v1alpha1.TaskSucceeded), backup("hub-backup-z", "monday", 10), backup("hub-backup-a", "tuesday", 20)}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	ctx := context.Background()

	var text bytes.Buffer
	if err := runHistory(ctx, cl, &text, outText, "", "local/dev/hub"); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	if n := strings.Count(out, "← active"); n != 1 {
		t.Errorf("%d active marks, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "\n1         111111111111  create"); n != 1 {
		t.Errorf("%d rows of sequence 1, want the change's alone:\n%s", n, out)
	}
	instances, operations, ok := strings.Cut(out, "Backups and restores")
	if !ok || strings.Contains(instances, "backup") || !strings.Contains(operations, "monday") || strings.Index(operations, "monday") > strings.Index(operations, "tuesday") {
		t.Errorf("the backups are not listed apart, in the order they ran:\n%s", out)
	}

	var js bytes.Buffer
	if err := runHistory(ctx, cl, &js, outJSON, "", "local/dev/hub"); err != nil {
		t.Fatal(err)
	}
	var h history
	if err := json.Unmarshal(js.Bytes(), &h); err != nil {
		t.Fatal(err)
	}
	if len(h.Entries) != 1 || !h.Entries[0].Active || h.Entries[0].Task != "hub-1" ||
		len(h.Operations) != 2 || h.Operations[0].BackupID != "monday" || h.Operations[1].BackupID != "tuesday" || h.Operations[0].After != 1 {
		t.Errorf("-o json: entries %+v, operations %+v; want hub-1 alone, active, then backups monday and tuesday after 1", h.Entries, h.Operations)
	}
	var names bytes.Buffer
	if err := runHistory(ctx, cl, &names, outName, "", "local/dev/hub"); err != nil {
		t.Fatal(err)
	}
	if names.String() != "dev-hub/hub-1\n" {
		t.Errorf("-o name printed %q, want the instance's task alone", names.String())
	}

	// The task list: by sequence, the change before the backups ordered
	// after it, those as they were made.
	if err := cl.Create(ctx, change(2, 30, v1alpha1.TaskRunning)); err != nil {
		t.Fatal(err)
	}
	tasks, err := listTasks(ctx, cl, "", &id)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, task := range tasks {
		order = append(order, task.Name)
	}
	if got, want := strings.Join(order, " "), "hub-1 hub-backup-z hub-backup-a hub-2"; got != want {
		t.Errorf("tasks in the order %s, want %s", got, want)
	}
}
