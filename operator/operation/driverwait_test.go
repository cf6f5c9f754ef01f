package operation_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/operation"
)

// unloadableDriver is deletingDriver, but version gone cannot be loaded
// until loads is set, as a driver whose commit left the remote.
type unloadableDriver struct {
	gone  string
	loads *atomic.Bool
}

func (u unloadableDriver) Driver(ctx context.Context, req driversource.Request) (*drivers.Driver, error) {
	if req.Ref.Version == u.gone && !u.loads.Load() {
		return nil, errors.New("fetch the driver's commit: object not found")
	}
	return deletingDriver{}.Driver(ctx, req)
}

// TestADeletedBackupWaitsNamingTheDriverThatCannotBeLoadedAndDeletesTheOthersArtefacts
// pins a backup's deletion when the driver a part's deployment runs
// cannot be loaded: its deleteBackup hook cannot be made into a task.
// The deletion failed with an error at every look, so the backup stayed
// Terminating saying nothing of why, and no other part's artefact was
// deleted after it. The others' artefacts are deleted; the backup waits
// (DeletionWaitsForDriver), naming the deployment, its driver and why;
// once the driver loads again, its hook runs.
func TestADeletedBackupWaitsNamingTheDriverThatCannotBeLoadedAndDeletesTheOthersArtefacts(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "data-web"}}); err != nil {
		t.Fatal(err)
	}
	newRunningAt(ctx, t, cl, "data-web", "web", "2.0.0")
	loads := &atomic.Bool{}
	opts.Drivers = unloadableDriver{gone: "2.0.0", loads: loads}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	part := func(name, version string) v1alpha1.OperationDeployment {
		return v1alpha1.OperationDeployment{Name: name, Namespace: "data-" + name, Task: name + "-backup-tuesday-1", Phase: v1alpha1.OperationSucceeded,
			Artifact: "s3://backups/local/data/tuesday/" + name, Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: version}}
	}
	b, _ := newBackup(ctx, t, cl, "tuesday", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "s3://backups/local/data",
		Deployments: []v1alpha1.OperationDeployment{part("hub", "1.4.0"), part("web", "2.0.0")}})
	if err := cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	deleteTask := func(ns string) *v1alpha1.StyrminTask {
		t.Helper()
		var tasks v1alpha1.StyrminTaskList
		if err := cl.List(ctx, &tasks, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelOperation: "tuesday"}); err != nil {
			t.Fatal(err)
		}
		for i := range tasks.Items {
			if tasks.Items[i].Spec.Operation.Kind == v1alpha1.OperationDeleteBackup {
				return &tasks.Items[i]
			}
		}
		return nil
	}

	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletingArtifacts, "hub")
	hubs := deleteTask("data-hub")
	if hubs == nil {
		t.Fatal("no deleteBackup task for hub, whose driver loads")
	}
	endTask(ctx, t, cl, hubs.Name, v1alpha1.TaskSucceeded)
	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletionWaitsForDriver, "deployment web", "graphhub@2.0.0", "object not found", operation.Finalizer)
	if d := deleteTask("data-web"); d != nil {
		t.Fatalf("a deleteBackup task %s for web, whose driver cannot be loaded", d.Name)
	}

	loads.Store(true)
	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletingArtifacts, "web")
	if deleteTask("data-web") == nil {
		t.Fatal("no deleteBackup task for web once its driver loads again")
	}
}
