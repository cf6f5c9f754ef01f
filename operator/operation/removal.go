package operation

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// crdRemoved reports whether CRD name is being deleted, or gone, as the
// API server says: its custom resources are then deleted because Styrmin
// is being removed (kubectl delete -k config/, a careless kubectl delete
// crd), not by someone who wants them gone. Forbidden counts as no (an
// install whose RBAC lacks get on the CRD behaves as before); another
// error is returned, so that a doubt never decides.
func crdRemoved(ctx context.Context, api client.Reader, name string) (bool, error) {
	// Its metadata alone: the agent's scheme has no apiextensions kinds.
	var crd metav1.PartialObjectMetadata
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	err := api.Get(ctx, client.ObjectKey{Name: name}, &crd)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsForbidden(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading CRD %s (whether Styrmin is being removed): %w", name, err)
	}
	return !crd.DeletionTimestamp.IsZero(), nil
}

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
