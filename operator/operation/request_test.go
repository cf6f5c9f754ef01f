package operation_test

import (
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
)

// TestARestoreOfAPartThatSucceededIsMadeFromABackupThatFailedForAnother
// pins the command line's check of a restore's backup: each part asked
// for, as the agent judges it. It refused every backup whose phase was
// not Succeeded, so a backup that failed for one deployment could not be
// restored for another, whose part had succeeded, though the agent and
// the docs restore it. A part that failed is refused, naming it; with no
// deployment named, the refusal names the parts that succeeded.
func TestARestoreOfAPartThatSucceededIsMadeFromABackupThatFailedForAnother(t *testing.T) {
	t.Parallel()
	ctx, cl, r, _ := restoring(t)
	newBackup(ctx, t, cl, "tuesday", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationFailed, Message: "failed for web: the dump failed",
		Location: "s3://backups/local/data", Deployments: []v1alpha1.OperationDeployment{
			{Name: "hub", Namespace: "data-hub", Task: "hub-backup-tuesday-1", Phase: v1alpha1.OperationSucceeded,
				Artifact: "s3://backups/local/data/tuesday/hub", Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}},
			{Name: "web", Namespace: "data-web", Task: "web-backup-tuesday-1", Phase: v1alpha1.OperationFailed, Message: "the dump failed",
				Artifact: "s3://backups/local/data/tuesday/web", Sequence: 2}}})
	request := func(deployments ...string) operation.RestoreRequest {
		return operation.RestoreRequest{Namespace: "styrmin-system", Cluster: "local", Environment: "data", Backup: "tuesday",
			Deployments: deployments, Now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	}

	rs, err := operation.NewRestore(ctx, cl, request("hub"))
	if err != nil {
		t.Fatalf("a restore of hub, whose part of tuesday succeeded: %v, want it made", err)
	}
	if err := cl.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, rs)
	if rs.Status.Phase != v1alpha1.OperationRunning || len(rs.Status.Deployments) != 1 || rs.Status.Deployments[0].Name != "hub" {
		t.Fatalf("the agent on the restore of hub: %s %q, deployments %+v; want it restoring hub", rs.Status.Phase, rs.Status.Message, rs.Status.Deployments)
	}

	for _, tc := range []struct {
		name        string
		deployments []string
		want        []string
	}{
		{"a restore of web, whose part failed", []string{"web"}, []string{"--from tuesday", "deployment web", "did not succeed (Failed)"}},
		{"a restore of hub and web", []string{"hub", "web"}, []string{"deployment web", "did not succeed"}},
		{"a restore of every part", nil, []string{"deployment web", "did not succeed", "whose parts succeeded to restore those: hub"}},
	} {
		_, err := operation.NewRestore(ctx, cl, request(tc.deployments...))
		if err == nil {
			t.Errorf("%s: made, want it refused", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it saying %q", tc.name, err, w)
			}
		}
	}
}
