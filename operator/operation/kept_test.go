package operation_test

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
)

// TestADeletedBackupNamesTheArtefactOfADeploymentThatNoLongerRuns pins
// what a backup's deletion says of a part whose deployment was removed
// from git since (its tombstone ran): no deleteBackup hook can run for it,
// and the artefact stays in the store, as documented; but the backup went
// without a word, and it was the only record of that data, so retention
// deleting a removed deployment's backups one by one left its data in the
// store, unnamed, for ever. A Warning event on the backup and a log line
// name each such artefact once the backup has gone; a part whose driver
// has no deleteBackup hook (its store's own expiry, say) is logged only.
func TestADeletedBackupNamesTheArtefactOfADeploymentThatNoLongerRuns(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	var logged []string
	ctx = logr.NewContext(ctx, funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))
	rec := &eventRecorder{}
	opts.Recorder = rec
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	const gone, hub = "s3://backups/local/data/tuesday/web", "s3://backups/local/data/tuesday/hub"
	part := func(name, ns, art string) v1alpha1.OperationDeployment {
		return v1alpha1.OperationDeployment{Name: name, Namespace: ns, Task: name + "-backup-tuesday-1", Phase: v1alpha1.OperationSucceeded,
			Artifact: art, Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}
	}
	b, _ := newBackup(ctx, t, cl, "tuesday", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "s3://backups/local/data",
		Deployments: []v1alpha1.OperationDeployment{part("hub", "data-hub", hub), part("web", "data-web", gone)}})
	if err := cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, backups, b) {
		t.Fatalf("backup tuesday stays: %+v; want it gone, no deleteBackup hook to run", b.Status.Conditions)
	}
	var left []recordedEvent
	for _, ev := range rec.events {
		if ev.reason == operation.EventArtifactLeft {
			left = append(left, ev)
		}
	}
	if len(left) != 1 {
		t.Fatalf("%s events: %+v; want one, naming %s (web no longer runs), none for hub (its driver has no deleteBackup hook)", operation.EventArtifactLeft, rec.events, gone)
	}
	ev := left[0]
	if on, ok := ev.regarding.(*v1alpha1.StyrminBackup); !ok || on.Name != "tuesday" || ev.evType != corev1.EventTypeWarning {
		t.Fatalf("the %s event is a %s one regarding %v; want a Warning regarding StyrminBackup tuesday", ev.reason, ev.evType, ev.regarding)
	}
	for _, w := range []string{gone, "web", "no such deployment runs"} {
		if !strings.Contains(ev.note, w) {
			t.Fatalf("the %s event says %q; want it to say %q", ev.reason, ev.note, w)
		}
	}
	if strings.Contains(ev.note, "expected one of") {
		t.Errorf("the %s event lists the deployments that run: %q", ev.reason, ev.note)
	}
	for _, art := range []string{gone, hub} {
		said := false
		for _, l := range logged {
			said = said || strings.Contains(l, art)
		}
		if !said {
			t.Errorf("the agent's log: %q; want a line naming %s", logged, art)
		}
	}
}
