package release

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// unchangeableFields are, by group and kind, the fields of built-in kinds
// the API server refuses to change in place (or changes only in some
// ways): a workload's selector, a StatefulSet's claim templates and
// service name, a Service's clusterIP, a claim's storage class and size, a
// StorageClass's parameters, a binding's roleRef. An upgrade that changes
// one of them is tried first (see tryUnchangeable); one that changes none,
// as most do (an image, a template), costs no request. Jobs are not here:
// a Job whose template changed is replaced (applyAll). A ConfigMap or
// Secret the revision before made immutable is tried on any change.
var unchangeableFields = map[string][][]string{
	"apps/Deployment":  {{"spec", "selector"}},
	"apps/ReplicaSet":  {{"spec", "selector"}},
	"apps/DaemonSet":   {{"spec", "selector"}},
	"apps/StatefulSet": {{"spec", "selector"}, {"spec", "serviceName"}, {"spec", "volumeClaimTemplates"}, {"spec", "podManagementPolicy"}},
	"/Service":         {{"spec", "clusterIP"}, {"spec", "clusterIPs"}, {"spec", "type"}, {"spec", "ipFamilies"}},
	"/PersistentVolumeClaim": {{"spec", "storageClassName"}, {"spec", "accessModes"}, {"spec", "resources"}, {"spec", "selector"},
		{"spec", "volumeName"}, {"spec", "volumeMode"}, {"spec", "dataSource"}, {"spec", "dataSourceRef"}},
	"/PersistentVolume":                            {{"spec"}},
	"storage.k8s.io/StorageClass":                  {{"provisioner"}, {"parameters"}, {"reclaimPolicy"}, {"volumeBindingMode"}},
	"rbac.authorization.k8s.io/RoleBinding":        {{"roleRef"}},
	"rbac.authorization.k8s.io/ClusterRoleBinding": {{"roleRef"}},
	"/ConfigMap": nil,
	"/Secret":    nil,
}

// tryUnchangeable tries, with a dry-run apply each, the objects of objs
// the release created (created) whose change from the revisions before
// (before: their objects, an object once per revision listing it) touches a field of unchangeableFields: the API server refusing
// one refuses the upgrade before anything of it is applied (an
// UnchangeableError). Applied in order, the objects before it ran the new
// revision beside the old workload (a ConfigMap it mounts changed under
// its old pods), a failed revision recorded, until git changed. Any other
// error of a try is left to the apply.
func (d *releaseObjects) tryUnchangeable(ctx context.Context, objs, before []*desiredObject, created map[string]bool) error {
	was := make(map[string][][]byte, len(before))
	for _, o := range before {
		was[objectKey(o.ref)] = append(was[objectKey(o.ref)], o.data)
	}
	for _, o := range objs {
		key := objectKey(o.ref)
		if !created[key] || !slices.ContainsFunc(was[key], func(old []byte) bool {
			return !bytes.Equal(old, o.data) && changesUnchangeable(o.ref, old, o.data)
		}) {
			continue
		}
		if _, err := d.applyObject(ctx, o, true, true); err != nil && unchangeable(err) {
			return &UnchangeableError{Object: o.ref, Err: err}
		}
	}
	return nil
}

// changesUnchangeable reports whether the object ref, as JSON old and
// then now, changes a field of unchangeableFields (an immutable ConfigMap
// or Secret: any field). One that does not decode is tried.
func changesUnchangeable(ref v1alpha1.ObjectRef, old, now []byte) bool {
	paths, ok := unchangeableFields[ref.Group()+"/"+ref.Kind]
	if !ok {
		return false
	}
	var a, b map[string]any
	if json.Unmarshal(old, &a) != nil || json.Unmarshal(now, &b) != nil {
		return true
	}
	if immutable, _, _ := unstructured.NestedBool(a, "immutable"); immutable {
		return true
	}
	for _, p := range paths {
		x, _, _ := unstructured.NestedFieldNoCopy(a, p...)
		y, _, _ := unstructured.NestedFieldNoCopy(b, p...)
		if !reflect.DeepEqual(x, y) {
			return true
		}
	}
	return false
}

// unchangeable reports whether the API server refused an update because
// it changes a field that cannot change in place: a cause saying
// immutable (a selector, a claim's spec), "cannot change" (a binding's
// roleRef) or forbidden (a StatefulSet's fields but its template,
// replicas and a few). Other refusals of a try (an invalid value the
// release may have applied before anyway) are left to the apply.
func unchangeable(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Type == metav1.CauseTypeForbidden || strings.Contains(c.Message, "immutable") || strings.Contains(c.Message, "cannot change") {
			return true
		}
	}
	return false
}

// UnchangeableError is an upgrade the API server refuses because it
// changes a field of an object that cannot change in place (a
// Deployment's selector): found by a dry run, before anything of the
// revision was applied.
type UnchangeableError struct {
	Object v1alpha1.ObjectRef
	// Err is the API server's refusal, naming the field.
	Err error
}

func (e *UnchangeableError) Error() string {
	resource := strings.ToLower(e.Object.Kind)
	if g := e.Object.Group(); g != "" {
		resource += "." + g
	}
	if e.Object.Namespace != "" {
		resource += " -n " + e.Object.Namespace
	}
	return fmt.Sprintf("apply %s: %v; nothing of the revision was applied: the API server cannot change that field in place: "+
		"give the object another name in the chart, or delete it (kubectl delete %s %s) for the release to make it anew",
		e.Object, e.Err, resource, e.Object.Name)
}

func (e *UnchangeableError) Unwrap() error { return e.Err }
