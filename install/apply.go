package install

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// What Apply did to an object, in kubectl's words.
const (
	Created    = "created"
	Configured = "configured"
	Unchanged  = "unchanged"
)

// Applied is what Apply did to one object.
type Applied struct {
	// Object is the object as Describe names it.
	Object string
	// Action is Created, Configured or Unchanged.
	Action string
}

// StoredVersionError refuses a CRD that would stop serving a version the
// cluster still stores objects at (status.storedVersions): the API server
// would refuse it too, or the objects would become unreadable.
type StoredVersionError struct {
	CRD, Version string
}

func (e *StoredVersionError) Error() string {
	return fmt.Sprintf("CRD %s: the new definition drops version %s, which the cluster still lists in status.storedVersions: "+
		"migrate the stored objects to a version the new definition serves and remove %s from storedVersions first; nothing was applied",
		e.CRD, e.Version, e.Version)
}

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// EstablishTimeout bounds the wait for the CRDs to be established
	// (default 1 minute).
	EstablishTimeout time.Duration
}

// newClient is a client of cfg that reads CRDs, core, apps and Styrmin's
// objects typed.
func newClient(cfg *rest.Config) (client.Client, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}

// Apply applies objs with server-side apply as FieldManager, taking over
// fields another manager set (an upgrade wins): first the CRDs, waiting
// until they are established, then the rest in order. Before anything is
// applied it refuses, with a *StoredVersionError, a CRD that drops a
// version the cluster still stores. It returns one Applied per object, in
// the order applied; on an error, those applied before it.
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, o ApplyOptions) ([]Applied, error) {
	if o.EstablishTimeout == 0 {
		o.EstablishTimeout = time.Minute
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	var crds, others []*unstructured.Unstructured
	for _, u := range objs {
		if isCRD(u) {
			crds = append(crds, u)
		} else {
			others = append(others, u)
		}
	}
	for _, u := range crds {
		if err := checkStoredVersions(ctx, c, u); err != nil {
			return nil, err
		}
	}
	var done []Applied
	for _, u := range crds {
		a, err := applyOne(ctx, c, u)
		if err != nil {
			return done, err
		}
		done = append(done, a)
	}
	for _, u := range crds {
		if err := waitEstablished(ctx, c, u.GetName(), o.EstablishTimeout); err != nil {
			return done, err
		}
	}
	for _, u := range others {
		a, err := applyOne(ctx, c, u)
		if err != nil {
			return done, err
		}
		done = append(done, a)
	}
	return done, nil
}

func isCRD(u *unstructured.Unstructured) bool {
	gvk := u.GroupVersionKind()
	return gvk.Group == apiextensionsv1.GroupName && gvk.Kind == "CustomResourceDefinition"
}

// checkStoredVersions refuses u when the CRD in the cluster stores a
// version u does not list.
func checkStoredVersions(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	var live apiextensionsv1.CustomResourceDefinition
	err := c.Get(ctx, client.ObjectKey{Name: u.GetName()}, &live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading CRD %s: %w", u.GetName(), err)
	}
	versions, _, err := unstructured.NestedSlice(u.Object, "spec", "versions")
	if err != nil {
		return fmt.Errorf("CRD %s: spec.versions: %w", u.GetName(), err)
	}
	var names []string
	for _, v := range versions {
		if m, ok := v.(map[string]any); ok {
			if n, ok := m["name"].(string); ok {
				names = append(names, n)
			}
		}
	}
	for _, stored := range live.Status.StoredVersions {
		if !slices.Contains(names, stored) {
			return &StoredVersionError{CRD: u.GetName(), Version: stored}
		}
	}
	return nil
}

// applyOne applies u and tells whether it was created, configured or
// left unchanged: the same object but for its status and bookkeeping
// (resourceVersion, managedFields), which others may write meanwhile.
func applyOne(ctx context.Context, c client.Client, u *unstructured.Unstructured) (Applied, error) {
	a := Applied{Object: Describe(u)}
	before, err := live(ctx, c, u)
	if err != nil {
		return a, err
	}
	obj := u.DeepCopy()
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return a, fmt.Errorf("applying %s: %w", a.Object, err)
	}
	after, err := live(ctx, c, u)
	if err != nil {
		return a, err
	}
	switch {
	case before == nil:
		a.Action = Created
	case equality.Semantic.DeepEqual(content(before), content(after)):
		a.Action = Unchanged
	default:
		a.Action = Configured
	}
	return a, nil
}

// live reads u's object from the cluster (nil when absent).
func live(ctx context.Context, c client.Client, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	l := &unstructured.Unstructured{}
	l.SetGroupVersionKind(u.GroupVersionKind())
	err := c.Get(ctx, client.ObjectKeyFromObject(u), l)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", Describe(u), err)
	}
	return l, nil
}

// content is u without its status and bookkeeping.
func content(u *unstructured.Unstructured) map[string]any {
	m := u.DeepCopy().Object
	delete(m, "status")
	unstructured.RemoveNestedField(m, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(m, "metadata", "managedFields")
	return m
}

// waitEstablished waits until the CRD name is established.
func waitEstablished(ctx context.Context, c client.Client, name string, timeout time.Duration) error {
	var why string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, err
		}
		ok, msg := established(&crd)
		why = msg
		return ok, nil
	})
	if err != nil {
		if why != "" {
			err = errors.Join(err, errors.New(why))
		}
		return fmt.Errorf("CRD %s is not established: %w", name, err)
	}
	return nil
}

// established tells whether crd's Established condition is true, and its
// message when not.
func established(crd *apiextensionsv1.CustomResourceDefinition) (bool, string) {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established {
			return cond.Status == apiextensionsv1.ConditionTrue, cond.Message
		}
	}
	return false, "no Established condition yet"
}
