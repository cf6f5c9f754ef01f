package operation

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// EventBackupKept is the reason of the event that says a deleted
// StyrminBackup's data was kept because Styrmin is being removed.
const EventBackupKept = "BackupKept"

// EventArtifactLeft is the reason of the event that says a deleted
// StyrminBackup's artefact was left where it is: its deleteBackup task
// did not succeed, and the backup went all the same.
const EventArtifactLeft = "ArtifactLeft"

// BackupCRD is the name of the StyrminBackup CRD.
const BackupCRD = "styrminbackups." + v1alpha1.Group

// eventSource is the reporting controller of the events recorded here
// when Options.Recorder is nil (the agent's).
const eventSource = v1alpha1.AgentEventSource

// sayBackupKept records that backup b, deleted with its CRD, keeps its
// data where it is: no deleteBackup hook ran.
func (r *BackupReconciler) sayBackupKept(ctx context.Context, b *v1alpha1.StyrminBackup) {
	var artifacts []string
	for _, d := range b.Status.Deployments {
		if d.Artifact != "" {
			artifacts = append(artifacts, d.Name+": "+d.Artifact)
		}
	}
	where := "where it is"
	if b.Status.Location != "" {
		where += ", in " + b.Status.Location
	}
	if len(artifacts) > 0 {
		where += " (" + strings.Join(artifacts, ", ") + ")"
	}
	log.FromContext(ctx).Info("the StyrminBackup CRD is being deleted: keeping the backup's data, running no deleteBackup hook",
		"backup", b.Name, "location", b.Status.Location, "artifacts", artifacts)
	if r.opts.Recorder != nil {
		r.opts.Recorder.Eventf(b, nil, corev1.EventTypeNormal, EventBackupKept, "DeleteBackup",
			"Styrmin is being removed (CRD %s is being deleted): the data of backup %s is kept %s; no deleteBackup hook ran", BackupCRD, b.Name, where)
	}
}

// artifactsLeft lists, for backup b about to go, the deleteBackup tasks
// that ended other than Succeeded, their artefacts left: finalize deletes
// those tasks with the backup, and they were the only record of data nothing
// deletes any more (sayArtifactsLeft says so once b has gone).
//
// The backup goes all the same, rather than keep its finalizer to retry:
// the driver's step already retried as its retry policy declares, and a
// store unreachable for a night must not hold retention's deletions, nor
// the restores refused while a backup is being deleted.
func (r *BackupReconciler) artifactsLeft(ctx context.Context, b *v1alpha1.StyrminBackup) ([]*v1alpha1.StyrminTask, error) {
	// From the API server: the cache may not show a task's end yet.
	tasks, err := tasksOf(ctx, r.opts.APIReader, r.opts.Namespace, b)
	if err != nil {
		return nil, fmt.Errorf("reading the deleteBackup tasks of backup %s to name the artefacts they left: %w", b.Name, err)
	}
	var left []*v1alpha1.StyrminTask
	for i := range tasks {
		t := &tasks[i]
		if !ownTask(t, v1alpha1.OperationDeleteBackup, b.Name, 1) || !t.Status.Phase.Terminal() || t.Status.Phase == v1alpha1.TaskSucceeded {
			continue
		}
		left = append(left, t)
	}
	return left, nil
}

// sayArtifactsLeft gives each artefact backup b left a Warning event on b
// (listed in the agent's namespace after b has gone, as BackupKept is) and
// a log line, naming the artefact, its deployment and the task's message,
// which the task controller masked as it wrote it. It is said once b's
// finalizer is removed: a finalize that failed is tried again, and would
// say it again.
func (r *BackupReconciler) sayArtifactsLeft(ctx context.Context, b *v1alpha1.StyrminBackup, left []*v1alpha1.StyrminTask) {
	for _, t := range left {
		dep, art, msg := t.Spec.Deployment.Name, t.Spec.Operation.Artifact, t.Status.Message
		log.FromContext(ctx).Info("a deleteBackup task did not succeed: its artefact is left where it is, and the backup went",
			"backup", b.Name, "deployment", dep, "artifact", art, "task", t.Namespace+"/"+t.Name, "phase", t.Status.Phase, "message", msg)
		if r.opts.Recorder != nil {
			r.opts.Recorder.Eventf(b, t, corev1.EventTypeWarning, EventArtifactLeft, "DeleteBackup",
				"the artefact %s of deployment %s is left where it is, and nothing deletes it now: its deleteBackup task %s/%s ended %s (%s)",
				art, dep, t.Namespace, t.Name, t.Status.Phase, msg)
		}
	}
}

// artifactKept is an artefact a backup's deletion leaves where it is, as
// no deleteBackup hook runs for it: its deployment no longer runs here
// (gone: removed from git, being deleted), or its driver has none.
type artifactKept struct {
	deployment, artifact, why string
	gone                      bool
}

// sayArtifactsKept names, once backup b has gone, each artefact its
// deletion left (artifactKept): a log line for each and, for a deployment
// that no longer runs, a Warning event (ArtifactLeft) on b. The backup was
// the only record of them: a deployment removed from git left its
// backups' data in the store, unnamed, as retention deleted its backups
// one by one. A driver without the hook leaves its artefacts by design
// (a store's own expiry, say), so those are only logged.
func (r *BackupReconciler) sayArtifactsKept(ctx context.Context, b *v1alpha1.StyrminBackup, kept []artifactKept) {
	for _, k := range kept {
		log.FromContext(ctx).Info("a deleted backup's artefact is left where it is: no deleteBackup hook ran for it",
			"backup", b.Name, "deployment", k.deployment, "artifact", k.artifact, "why", k.why)
		if k.gone && r.opts.Recorder != nil {
			r.opts.Recorder.Eventf(b, nil, corev1.EventTypeWarning, EventArtifactLeft, "DeleteBackup",
				"the artefact %s of deployment %s is left where it is, and nothing deletes it now: %s, so no deleteBackup hook ran for it",
				k.artifact, k.deployment, k.why)
		}
	}
}
