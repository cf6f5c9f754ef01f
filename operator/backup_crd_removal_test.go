package operator_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
)

// TestDeletingTheStyrminBackupCRDKeepsTheBackupsData: deleting Styrmin's
// CRDs while the agent runs (kubectl delete -k config/, a careless
// kubectl delete crd) deletes every StyrminBackup, and their finalizer
// ran each deployment's deleteBackup hook: removing Styrmin deleted the
// backups' data. The finalizer lets go without running the hook, saying
// in an event where the data is kept. The agent acts as its service
// account with the install's RBAC, which reads the CRD by name.
func TestDeletingTheStyrminBackupCRDKeepsTheBackupsData(t *testing.T) {
	t.Parallel()
	e := startDataEnv(t)
	ctx := context.Background()
	ns := config.AgentNamespace
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "monday", Namespace: ns}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}})
	b := e.waitBackup(t, "monday")
	if b.Status.Phase != v1alpha1.OperationSucceeded || len(b.Status.Deployments) != 2 {
		t.Fatalf("backup monday: %s %q deployments %+v, want Succeeded for a and b", b.Status.Phase, b.Status.Message, b.Status.Deployments)
	}
	for _, d := range b.Status.Deployments {
		e.requireBackupJob(t, d.Namespace, "monday", d.Artifact)
	}

	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName(operation.BackupCRD)
	if err := e.c.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	// Watched while the CRD goes: a deleteBackup task the finalizer made
	// is deleted with the backup, its job stays.
	deleteTasks := map[string]bool{}
	agenttest.WaitUntil(t, 90*time.Second, "CRD "+crd.GetName()+" to be gone", func(ctx context.Context) (bool, string, error) {
		var tasks v1alpha1.StyrminTaskList
		if err := e.c.List(ctx, &tasks, client.MatchingLabels{v1alpha1.LabelOperation: "monday"}); err != nil {
			return false, "", err
		}
		for _, tk := range tasks.Items {
			if tk.Spec.Operation != nil && tk.Spec.Operation.Kind == v1alpha1.OperationDeleteBackup {
				deleteTasks[tk.Namespace+"/"+tk.Name] = true
			}
		}
		err := e.c.Get(ctx, client.ObjectKeyFromObject(crd), crd.DeepCopy())
		return apierrors.IsNotFound(err), fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	if len(deleteTasks) > 0 {
		t.Errorf("deleteBackup tasks made as the CRD went: %v, want none", slices.Sorted(maps.Keys(deleteTasks)))
	}
	for _, d := range b.Status.Deployments {
		var jobs batchv1.JobList
		if err := e.c.List(ctx, &jobs, client.InNamespace(d.Namespace)); err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs.Items {
			if strings.Contains(j.Name, "delete-backup") {
				t.Errorf("job %s/%s ran the deleteBackup hook as the CRD went: removing Styrmin deleted %s", d.Namespace, j.Name, d.Artifact)
			}
		}
	}
	agenttest.WaitUntil(t, 30*time.Second, "an event saying monday's data was kept", func(ctx context.Context) (bool, string, error) {
		var list eventsv1.EventList
		if err := e.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var notes []string
		for _, ev := range list.Items {
			if ev.Reason != operation.EventBackupKept || ev.Regarding.Kind != "StyrminBackup" || ev.Regarding.Name != "monday" {
				continue
			}
			notes = append(notes, ev.Note)
			if ev.Type == "Normal" && strings.Contains(ev.Note, "s3://backups/local/data/monday/a") && strings.Contains(ev.Note, "s3://backups/local/data/monday/b") {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%s events: %q", operation.EventBackupKept, notes), nil
	})
}
