package instance

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CRDRemoved reports whether CRD name is being deleted, or gone, as the
// API server says: its custom resources are then deleted because Styrmin
// is being removed (kubectl delete -k config/, a careless kubectl delete
// crd), not by someone who wants them gone, and their finalizers must not
// uninstall applications or delete backups. Forbidden counts as no (an
// install whose RBAC lacks get on the CRD behaves as before); another
// error is returned, so that a doubt never decides.
func CRDRemoved(ctx context.Context, api client.Reader, name string) (bool, error) {
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
