package operation

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// EventBackupKept is the reason of the event that says a deleted
// StyrminBackup's data was kept because Styrmin is being removed.
const EventBackupKept = "BackupKept"

// BackupCRD is the name of the StyrminBackup CRD.
const BackupCRD = "styrminbackups." + v1alpha1.Group

// eventSource is the reporting controller of the events recorded here
// when Options.Recorder is nil (the agent's).
const eventSource = "styrmin-agent"

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
