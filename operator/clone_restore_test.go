package operator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// TestACloneIsNotCreatedFromABackupItsDriverCannotRestore: a StyrminRestore
// refuses a backup its deployment's driver cannot read (another driver, a
// new major version, a newer version than the running one); a clone's
// restore is a step of its deployments' creates, so the same check runs
// as a create is planned. hub's create in an environment cloned from a
// backup that graphhub@2.0.0 took fails before any step, naming the
// backup and both versions, instead of running the 1.x restore hook on
// 2.x data.
func TestACloneIsNotCreatedFromABackupItsDriverCannotRestore(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: config.AgentNamespace},
		Spec: v1alpha1.StyrminBackupSpec{Environment: "staging"}}
	if err := e.client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status.Phase = v1alpha1.OperationSucceeded
	b.Status.Deployments = []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "staging-hub", Phase: v1alpha1.OperationSucceeded,
		Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "2.0.0"}}}
	if err := e.client.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}

	in := e.instance(t, "local", "dev", "hub", 1)
	cx := *in.Context
	cx.Environment.ClonedFrom = &resolver.CloneSource{Cluster: "local", Environment: "staging", Commit: "abcdef1", Backup: "n1", Location: "s3://backups/local/staging"}
	in.Context = &cx
	var err error
	if in.Digest, err = in.ComputeDigest(); err != nil {
		t.Fatal(err)
	}
	r, err := task.NewReconciler(task.Options{Client: e.client, Drivers: &driversource.CatalogSource{Catalog: e.workspace.Catalog},
		AgentNamespace: config.AgentNamespace, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	got := runHandMadeTask(t, e, r, in, "dev-hub", nil)
	if got.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(got.Status.Message, v1alpha1.ReasonInvalidTask) ||
		!strings.Contains(got.Status.Message, "a clone of local/staging from backup n1") || !strings.Contains(got.Status.Message, "graphhub@2.0.0") {
		t.Fatalf("hub's create in a clone of a backup graphhub@2.0.0 took: %s %q; want Failed, InvalidTask naming the backup and the versions", got.Status.Phase, got.Status.Message)
	}
	for _, st := range got.Status.Steps {
		if st.State != v1alpha1.StepPending && st.State != "" {
			t.Errorf("step %s ran (%s)", st.Name, st.State)
		}
	}
}
