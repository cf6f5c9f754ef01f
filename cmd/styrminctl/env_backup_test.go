package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// TestEnvCloneFromABackupRestoresThePartsItsRecordHolds pins that env
// clone --from-backup reads the backup's record from the cluster, for
// "latest" and for an ID alike: backup monday of local/dev holds hub's
// part only, so only hub restores it and web, named, starts empty; a
// backup whose part of hub failed is refused, writing nothing; an ID the
// cluster has no record of leaves every deployment to restore it, saying
// so. The clone's clonedFrom.deployments is read back from its file.
func TestEnvCloneFromABackupRestoresThePartsItsRecordHolds(t *testing.T) {
	t.Parallel()
	dir := upgradeGitRepo(t)
	c := testcluster.StartT(t, testcluster.Options{})
	ctx := context.Background()
	cl, err := styrminClient(ctx, c, "styrmin-system")
	if err != nil {
		t.Fatal(err)
	}
	backup := func(name string, phase v1alpha1.OperationPhase, parts map[string]v1alpha1.OperationPhase) {
		t.Helper()
		b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "styrmin-system"},
			Spec: v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "dev"}}
		if err := cl.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		b.Status = v1alpha1.StyrminBackupStatus{Phase: phase, Location: "s3://backups/local/dev", StartedAt: at(1), FinishedAt: at(2)}
		for _, n := range []string{"hub", "web"} {
			if p, ok := parts[n]; ok {
				b.Status.Deployments = append(b.Status.Deployments, v1alpha1.OperationDeployment{Name: n, Namespace: "dev-" + n, Phase: p})
			}
		}
		if err := cl.Status().Update(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// web's driver took no part (Skipped: no backup hook, say).
	backup("monday", v1alpha1.OperationSucceeded, map[string]v1alpha1.OperationPhase{"hub": v1alpha1.OperationSucceeded})
	backup("tuesday", v1alpha1.OperationFailed, map[string]v1alpha1.OperationPhase{"hub": v1alpha1.OperationFailed, "web": v1alpha1.OperationSucceeded})

	// restoring reads clonedFrom.deployments back from the clone's file.
	restoring := func(target string) []string {
		t.Helper()
		envs, err := resolver.BackupSettings(os.DirFS(dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range envs {
			if e.Environment == target && e.ClonedFrom != nil {
				return e.ClonedFrom.Deployments
			}
		}
		t.Fatalf("environment %s is no clone", target)
		return nil
	}
	for _, tc := range []struct {
		target, backup string
		want           []string
		restore        string
	}{
		{"preview", "monday", []string{"restore backup monday", "not in backup monday, so set up empty: web"}, "hub"},
		{"latest", "latest", []string{"restore backup monday", "not in backup monday, so set up empty: web"}, "hub"},
		{"unknown", "nosuch", []string{`note: --from-backup nosuch: reading StyrminBackup styrmin-system/nosuch`, "every deployment is listed to restore it", "restore backup nosuch"}, "hub,web"},
	} {
		// latest commits itself; the others write the working tree, which
		// the next clone needs committed.
		args := []string{"--repo", dir, "env", "clone", "local/dev", tc.target, "--from-backup", tc.backup, "--kubeconfig", c.KubeconfigPath}
		if tc.backup == "latest" {
			args = append(args, "--commit")
		}
		out := mustRun(t, args...)
		if tc.backup != "latest" {
			planGit(t, dir, "add", ".")
			planGit(t, dir, "commit", "-q", "-m", "clone "+tc.target)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("clone from %s: output lacks %q:\n%s", tc.backup, want, out)
			}
		}
		if got := strings.Join(restoring(tc.target), ","); got != tc.restore {
			t.Errorf("clone from %s: clonedFrom.deployments %s, want %s", tc.backup, got, tc.restore)
		}
	}

	_, code, err := styrminctl(t, "--repo", dir, "env", "clone", "local/dev", "qa", "--from-backup", "tuesday", "--kubeconfig", c.KubeconfigPath)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "backup tuesday's part of hub did not succeed") {
		t.Errorf("clone from a backup whose part of hub failed: exit %d, %v", code, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "clusters/local/environments/qa")); !os.IsNotExist(err) {
		t.Errorf("the refused clone wrote its folder: %v", err)
	}
}
