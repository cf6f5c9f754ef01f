package release

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/health"
	"github.com/styrmin/styrmin/resolver"
)

// Drift is found through server-side apply's field ownership, so only the
// fields Styrmin owns count and defaulted fields or fields set by other
// managers cause no noise:
//
//   - The expected field set of an object is what Styrmin's manager owns
//     after applying the release's version of it. A server-side dry-run
//     apply (forced) gives it without changing anything; it is computed
//     once per release revision and kept in memory.
//   - Whoever changes a field Styrmin owns (kubectl edit, scale, another
//     controller's forced apply) takes its ownership, so the field leaves
//     Styrmin's set: the fields in the expected set and not in the live one
//     are the drifted fields. A deleted object is drifted as a whole.
//   - A field another manager adds (an annotation, a label) is not in
//     Styrmin's set and never counts.
//
// A check costs one GET per object; a correction one apply per drifted
// object, with the same field manager, labels and annotations as Helm's,
// so the release is unchanged and no Helm revision is added.

// releaseObjects handles the objects of a release: it parses a release
// manifest into them, applies and deletes them (helm.go, for an install or
// upgrade) and compares them with the live ones (the drift check).
type releaseObjects struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
	// sensitive holds the values put in place of placeholders on apply.
	sensitive *sensitiveSecrets
	// logger receives what the checks cannot tell and leave as it is.
	logger slog.Handler
	// discovery asks the API server which resources it serves (nil: all
	// are taken as served).
	discovery rest.Interface
}

// desiredObject is one object of a release as Helm applied it.
type desiredObject struct {
	ref v1alpha1.ObjectRef
	// data is the object as JSON, the apply's body. The agent keeps the
	// objects of every release for the drift check: as JSON they take a
	// fifth of the memory they take as maps.
	data []byte
	// keep is true when the object is annotated to outlive its release
	// (helm.sh/resource-policy: keep).
	keep bool
	// keepLive is true for an object no record listed (known from the
	// agent's memory or the status's inventory, see Uninstall): its keep
	// policy is the live object's.
	keepLive bool
	// resource is the object's REST resource, namespaced or not; gvr and
	// namespaced say which, to make it again (see pack).
	resource   dynamic.ResourceInterface
	gvr        schema.GroupVersionResource
	namespaced bool
	// namespace is the release's: its Secret holds the sensitive values.
	namespace string
	// autoscaled is true for a workload a HorizontalPodAutoscaler scales:
	// its replicas are the autoscaler's to change. Set from the release's
	// own autoscalers when the manifest is parsed, and by the drift check
	// when it finds another's once the replicas are taken (see
	// scaledByAnother); kept with the revision's objects until the
	// release changes.
	autoscaled bool
	// driftIgnored is true for an object its chart annotates
	// DriftDetectionAnnotation: DriftDetectionDisabled: another
	// controller changes its fields by design (cert-manager's CA injector
	// filling a webhook's caBundle), and putting them back every drift
	// interval would fight that controller. A change of the release
	// applies it; one deleted is made again.
	driftIgnored bool
}

// DriftDetectionAnnotation on an object of a chart, set to
// DriftDetectionDisabled, leaves the object's fields out of drift checks
// and corrections: a release applies them, nothing puts them back between
// two. The object deleted is drift as any other.
const (
	DriftDetectionAnnotation = "styrmin.io/drift-detection"
	DriftDetectionDisabled   = "disabled"
)

// desiredObjects parses a release manifest into the objects Helm applied:
// each object of the manifest, in the release namespace when namespaced
// and unset, with Helm's ownership label and annotations.
func (d *releaseObjects) desiredObjects(manifest, releaseName, namespace string, components map[string]string) ([]*desiredObject, error) {
	objs, _, err := d.parseObjects(manifest, releaseName, namespace, components, false)
	return objs, err
}

// parseObjects is desiredObjects; with skipUnmapped, objects of kinds the
// API server does not serve (a CRD removed since) are left out and
// listed, where otherwise they are an error.
func (d *releaseObjects) parseObjects(manifest, releaseName, namespace string, components map[string]string, skipUnmapped bool) ([]*desiredObject, []string, error) {
	var unmapped []string
	docs := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	var out []*desiredObject
	scaled := map[string]bool{} // the autoscalers' targets, by scaleTarget
	for _, k := range keys {
		doc := strings.TrimSpace(docs[k])
		if doc == "" {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, nil, fmt.Errorf("release %s/%s manifest: %w", namespace, releaseName, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		gvk := u.GroupVersionKind()
		if gvk.Group == "autoscaling" && gvk.Kind == "HorizontalPodAutoscaler" {
			ns := u.GetNamespace()
			if ns == "" {
				ns = namespace
			}
			scaled[autoscalerTarget(m, ns)] = true
		}
		mapping, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if skipUnmapped && meta.IsNoMatchError(err) {
			unmapped = append(unmapped, gvk.Kind+" "+u.GetName())
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("release %s/%s manifest: %s %q: %w", namespace, releaseName, gvk.Kind, u.GetName(), err)
		}
		namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
		if namespaced && u.GetNamespace() == "" {
			u.SetNamespace(namespace)
		}
		res := resourceOf(d.dyn, mapping.Resource, namespaced, u.GetNamespace())
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[ManagedByLabel] = ManagedByValue
		u.SetLabels(labels)
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[ReleaseNameAnnotation] = releaseName
		ann[ReleaseNamespaceAnnotation] = namespace
		u.SetAnnotations(ann)
		ref := v1alpha1.ObjectRef{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
		ref.Component = components[objectKey(ref)]
		data, err := u.MarshalJSON()
		if err != nil {
			return nil, nil, fmt.Errorf("release %s/%s manifest: %s: %w", namespace, releaseName, ref, err)
		}
		out = append(out, &desiredObject{ref: ref, data: data, keep: ann[helmResourcePolicyAnnotation] == helmKeepPolicy,
			driftIgnored: ann[DriftDetectionAnnotation] == DriftDetectionDisabled,
			resource:     res, gvr: mapping.Resource, namespaced: namespaced, namespace: namespace})
	}
	for _, o := range out {
		o.autoscaled = scaled[scaleTarget(o.ref.APIVersion, o.ref.Kind, o.ref.Namespace, o.ref.Name)]
	}
	return out, unmapped, nil
}

// scaleTarget keys a workload as an autoscaler's scaleTargetRef names it:
// by API group (not version), kind, namespace and name.
func scaleTarget(apiVersion, kind, namespace, name string) string {
	group, _, _ := strings.Cut(apiVersion, "/")
	if !strings.Contains(apiVersion, "/") {
		group = ""
	}
	return group + "/" + kind + "/" + namespace + "/" + name
}

// scaledByAnother reports whether a HorizontalPodAutoscaler the release
// does not render scales o: one made by hand, by KEDA for a ScaledObject,
// or another release's. Its replicas are then that autoscaler's as much
// as those of the release's own. It is asked only when o's replicas were
// taken from Styrmin, so checking a workload nobody scales costs no
// request, and once per takeover (check then notes o as autoscaled
// until the release changes). A cluster that serves no autoscalers has
// none, and the replicas are put back as before.
//
// An account that may not list autoscalers cannot tell: the replicas are
// then taken as an autoscaler's, and a warning says so. Put back every
// drift interval, an autoscaler's would be fought (a workload KEDA scaled
// out under load cut to the chart's count), where a workload scaled by
// hand and left so costs little.
func (d *releaseObjects) scaledByAnother(ctx context.Context, o *desiredObject) (bool, error) {
	if !o.namespaced {
		return false, nil
	}
	hpas := schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}
	list, err := d.dyn.Resource(hpas).Namespace(o.ref.Namespace).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if apierrors.IsForbidden(err) {
		d.warn(ctx, "drift check: %s: its replicas were changed outside Styrmin and whether an autoscaler sets them cannot be told (%v): "+
			"they are left as they are until the release changes; let the account get, list and watch horizontalpodautoscalers (autoscaling) in namespace %s (docs/tenancy.md)",
			o.ref, err, o.ref.Namespace)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("list autoscalers: %w", err)
	}
	want := scaleTarget(o.ref.APIVersion, o.ref.Kind, o.ref.Namespace, o.ref.Name)
	for _, h := range list.Items {
		if autoscalerTarget(h.Object, h.GetNamespace()) == want {
			return true, nil
		}
	}
	return false, nil
}

// warn logs what a check cannot tell and leaves as it is.
func (d *releaseObjects) warn(ctx context.Context, format string, args ...any) {
	if d.logger == nil || !d.logger.Enabled(ctx, slog.LevelWarn) {
		return
	}
	d.logger.Handle(ctx, slog.NewRecord(time.Now(), slog.LevelWarn, fmt.Sprintf(format, args...), 0)) //nolint:errcheck // logging only
}

// autoscalerTarget is the scaleTarget key of the workload the
// HorizontalPodAutoscaler hpa (in namespace) scales.
func autoscalerTarget(hpa map[string]any, namespace string) string {
	apiVersion, _, _ := unstructured.NestedString(hpa, "spec", "scaleTargetRef", "apiVersion")
	kind, _, _ := unstructured.NestedString(hpa, "spec", "scaleTargetRef", "kind")
	name, _, _ := unstructured.NestedString(hpa, "spec", "scaleTargetRef", "name")
	return scaleTarget(apiVersion, kind, namespace, name)
}

// withoutReplicas is o with no spec.replicas in its apply body.
func withoutReplicas(o *desiredObject) (*desiredObject, error) {
	var m map[string]any
	if err := json.Unmarshal(o.data, &m); err != nil {
		return nil, err
	}
	unstructured.RemoveNestedField(m, "spec", "replicas")
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	c := *o
	c.data = data
	return &c, nil
}

// sameReplicas reports whether the live object runs the replicas the
// desired one (JSON) gives.
func sameReplicas(desired []byte, live *unstructured.Unstructured) bool {
	var d struct {
		Spec struct {
			Replicas *int64 `json:"replicas"`
		} `json:"spec"`
	}
	if json.Unmarshal(desired, &d) != nil || d.Spec.Replicas == nil {
		return false
	}
	n, found, err := unstructured.NestedInt64(live.Object, "spec", "replicas")
	return err == nil && found && n == *d.Spec.Replicas
}

// replicasField is the field path of a workload's replicas.
const replicasField = ".spec.replicas"

// check compares each desired object of release releaseName with the
// live one. expected holds the expected field sets by object key; missing
// entries are computed with a dry-run apply and added.
//
// An object outside the release's namespace whose release annotations
// now name another release (deleted by hand, then made again by the other
// release's apply) is no drift to put back: it is reported taken
// (Drift.TakenBy), and the correction leaves it. Every release applies
// with the same field manager, so its field set would match and the check
// said nothing, while the object ran the other release's content; and a
// correction, forced, rewrote that release's object as this one's.
func (d *releaseObjects) check(ctx context.Context, objects []*desiredObject, expected map[string][]byte, releaseName string) ([]Drift, error) {
	var drifts []Drift
	for _, o := range objects {
		key := objectKey(o.ref)
		live, err := o.resource.Get(ctx, o.ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if IsJob(o.ref) {
				// A Job runs once: one gone (its ttlSecondsAfterFinished,
				// or cleaned up by hand) is not made again, which would
				// run its work again (a migration, a seed). The health
				// check tells whether it had finished.
				continue
			}
			served, err := d.served(ctx, o.gvr)
			if err != nil {
				return nil, fmt.Errorf("drift check: %s: %w", o.ref, err)
			}
			if !served {
				// Its CRD removed while the revision is kept in memory:
				// gone with its kind, as parseObjects leaves it out after
				// a restart. Taken as deleted, its correction would fail
				// every interval.
				continue
			}
			drifts = append(drifts, Drift{object: o, Missing: true})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("drift check: get %s: %w", o.ref, err)
		}
		if owner, ok := takenBy(o, live, releaseName); ok {
			drifts = append(drifts, Drift{object: o, TakenBy: owner})
			continue
		}
		if o.driftIgnored {
			// Its fields are another controller's to change; a deleted
			// one is made again above all the same.
			continue
		}
		want, ok := expected[key]
		if !ok {
			applied, err := d.apply(ctx, o, true)
			if err != nil {
				return nil, fmt.Errorf("drift check: dry-run apply %s: %w", o.ref, err)
			}
			want = ownedFields(applied)
			expected[key] = want
		}
		have := ownedFields(live)
		fields, err := lostFields(want, have)
		if err != nil {
			return nil, fmt.Errorf("drift check: %s: %w", o.ref, err)
		}
		// Replicas taken at the value the release gives them: the agent's
		// own stopComponents and startComponents scale with a patch of
		// their own field manager, and after a start the workload runs the
		// chart's replicas again. Put back, forced, they would be reported
		// as drift after every upgrade that stops its workers; a later
		// change of their value is drift again. A correction of the
		// object's other fields leaves them to whoever holds them (an
		// autoscaler at that value now may scale out before it).
		takenAtOurs := slices.Contains(fields, replicasField) && sameReplicas(o.data, live)
		if takenAtOurs {
			fields = slices.DeleteFunc(fields, func(f string) bool { return f == replicasField })
		}
		if !o.autoscaled && slices.Contains(fields, replicasField) {
			// Noted on the object, which the kept Desired packs: until
			// the release changes its replicas are the autoscaler's at
			// every check and correction, and the autoscalers are asked
			// once per takeover, not per check.
			if o.autoscaled, err = d.scaledByAnother(ctx, o); err != nil {
				return nil, fmt.Errorf("drift check: %s: %w", o.ref, err)
			}
		}
		leaveReplicas := takenAtOurs
		if o.autoscaled {
			// An autoscaler sets them (through the scale subresource,
			// taking them from Styrmin): putting the chart's back every
			// drift interval would fight it. A change of the release
			// applies them, as Helm does; a chart meant for an autoscaler
			// leaves them out.
			fields = slices.DeleteFunc(fields, func(f string) bool { return f == replicasField })
			// Whether Styrmin still holds them on the live object, not
			// whether this check lost them: after a correction without
			// them they are in no expected set, and a correction with
			// them would put the chart's back, forced. While Styrmin
			// holds them they are the chart's, and leaving them out of
			// the apply would drop them (reset to the default).
			held, err := holdsReplicas(have)
			if err != nil {
				return nil, fmt.Errorf("drift check: %s: %w", o.ref, err)
			}
			leaveReplicas = !held
		}
		if len(fields) > 0 {
			drifts = append(drifts, Drift{object: o, Fields: fields, leaveReplicas: leaveReplicas, watchReplicas: takenAtOurs && !o.autoscaled})
		}
	}
	return drifts, nil
}

// takenBy returns the other release (namespace/name) whose annotations
// the live object o carries, when o lies outside its release's namespace
// (the one the release does not hold alone: see refuseOtherReleases).
func takenBy(o *desiredObject, live *unstructured.Unstructured, releaseName string) (string, bool) {
	if o.namespaced && o.ref.Namespace == o.namespace {
		return "", false
	}
	return otherRelease(live.GetAnnotations(), releaseName, o.namespace)
}

// served reports whether the API server still serves gvr (asked when an
// object of it is not found: its CRD may be gone). The core group is
// always served.
func (d *releaseObjects) served(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
	if gvr.Group == "" || d.discovery == nil {
		return true, nil
	}
	raw, err := d.discovery.Get().AbsPath("/apis", gvr.Group, gvr.Version).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("whether %s is still served: %w", gvr.GroupVersion(), err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(raw, &list); err != nil {
		return false, fmt.Errorf("whether %s is still served: %w", gvr.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// correct applies the drifted objects again, each on its own, and records
// the field sets of those put back. An object the API server refuses (a
// PersistentVolumeClaim expanded by hand cannot shrink back, an admission
// policy) does not keep the others as they drifted: its error is
// returned, in a *CorrectionError, after the others were applied. It
// returns the drifts put back and the generations the workloads among
// them were applied at.
func (d *releaseObjects) correct(ctx context.Context, drifts []Drift, expected map[string][]byte) ([]Drift, Generations, error) {
	gens := Generations{}
	var corrected []Drift
	var refused []RefusedCorrection
	for _, dr := range drifts {
		o := dr.object
		if dr.TakenBy != "" {
			// Another release's now: forcing would rewrite its object.
			refused = append(refused, RefusedCorrection{Drift: dr, Err: &ConflictError{Object: o.ref, Release: dr.TakenBy}})
			continue
		}
		if dr.leaveReplicas {
			// Without the replicas its autoscaler holds: Styrmin no longer
			// owns them, so leaving them out leaves them as they are.
			var err error
			if o, err = withoutReplicas(o); err != nil {
				refused = append(refused, RefusedCorrection{Drift: dr, Err: err})
				continue
			}
		}
		applied, err := d.apply(ctx, o, false)
		if err != nil {
			refused = append(refused, RefusedCorrection{Drift: dr, Err: err})
			continue
		}
		if !dr.watchReplicas {
			// With the replicas left out, the field set applied lacks them;
			// the one expected before, with them, is kept instead.
			expected[objectKey(dr.object.ref)] = ownedFields(applied)
		}
		gens.note(dr.object.ref, applied)
		corrected = append(corrected, dr)
	}
	if len(refused) > 0 {
		return corrected, gens, &CorrectionError{Refused: refused}
	}
	return corrected, gens, nil
}

// apply applies one object with Styrmin's field manager, forcing
// conflicts.
func (d *releaseObjects) apply(ctx context.Context, o *desiredObject, dryRun bool) (*unstructured.Unstructured, error) {
	return d.applyObject(ctx, o, dryRun, true)
}

// applyObject applies one object with Styrmin's field manager and strict
// field validation (an unknown field is an error, not a warning).
func (d *releaseObjects) applyObject(ctx context.Context, o *desiredObject, dryRun, force bool) (*unstructured.Unstructured, error) {
	opts := metav1.PatchOptions{FieldManager: v1alpha1.FieldManager, Force: &force, FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	body := o.data
	var values map[string][]byte
	if NeedsReveal(body) {
		// Revealed for this request only: the desired objects kept for the
		// drift check, like the record, hold the placeholders.
		var err error
		if values, err = d.sensitive.read(ctx, o.namespace); err != nil {
			return nil, err
		}
		if body, err = Reveal(body, values); err != nil {
			return nil, fmt.Errorf("%s: %w", o.ref, err)
		}
	}
	applied, err := o.resource.Patch(ctx, o.ref.Name, types.ApplyPatchType, body, opts)
	if err != nil && values != nil {
		// The API server's refusal may quote what it was sent (Invalid
		// value: "…"), and it goes to conditions, events, logs and the
		// record's description.
		return nil, maskRefusal(err, resolver.SensitiveByDigest(values))
	}
	return applied, err
}

// maskRefusal is err, an API server's answer, with the values masked in
// its message and causes, keeping its status (reason, code) for whoever
// classifies it.
func maskRefusal(err error, values resolver.Sensitive) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		if msg := values.Mask(err.Error()); msg != err.Error() {
			return errors.New(msg)
		}
		return err // nothing to hide: kept whole (a context error stays one)
	}
	orig := status.Status()
	st := *orig.DeepCopy()
	st.Message = values.Mask(st.Message)
	if st.Details != nil {
		for i := range st.Details.Causes {
			st.Details.Causes[i].Message = values.Mask(st.Details.Causes[i].Message)
		}
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// applyAll applies a release's objects in order, one request each, and
// returns the field sets Styrmin owns on them afterwards (the expected
// sets of the drift check). Only the objects in created (by key: the
// release created them) are applied forcing conflicts; any other object
// whose fields another manager owns is not taken over: the apply fails
// with a ConflictError.
//
// Nor is an object another release's (see refuseOtherReleases): that is
// checked before anything is applied, so a refusal changes nothing.
//
// It also returns the generations the workloads were applied at, and how
// many objects were applied before an error.
//
// Jobs run once per object, so they are applied by jobs' rules (see
// jobPlan): a Job the release created that failed is made anew; one whose
// template the revision changes (the API server refuses to change it in
// place) is replaced once it has finished, and the apply waits for one
// still doing its work (JobRunningError), not for one whose pods cannot
// start; one that finished and is gone (its
// ttlSecondsAfterFinished), unchanged since the revision before, is not
// made again. The objects not applied so are returned.
//
// adopt (nil: none) is asked about an object applied without force that
// conflicts: when it says the release created it after all (a failed
// revision did), the object is applied again, forcing.
func (d *releaseObjects) applyAll(ctx context.Context, objects []*desiredObject, created map[string]bool, jobs jobPlan, releaseName string, adopt func(context.Context, *desiredObject) (bool, error)) (map[string][]byte, Generations, []v1alpha1.ObjectRef, int, error) {
	if err := d.refuseOtherReleases(ctx, objects, created, releaseName); err != nil {
		return nil, nil, nil, 0, err
	}
	fields := make(map[string][]byte, len(objects))
	gens := Generations{}
	var skipped []v1alpha1.ObjectRef
	for i, o := range objects {
		key := objectKey(o.ref)
		force := created[key]
		if jobs.keepGone[key] {
			skipped = append(skipped, o.ref)
			continue
		}
		if force && jobs.rerun[key] {
			if err := d.replaceJob(ctx, o, releaseName, true); err != nil {
				return nil, nil, nil, i, fmt.Errorf("run %s again: %w", o.ref, err)
			}
		}
		applied, err := d.applyObject(ctx, o, false, force)
		if err != nil && !force && adopt != nil && apierrors.IsConflict(err) {
			// Asked only on a conflict: an apply without one is what a
			// forced apply would have been, and needs no read.
			adopted, aerr := adopt(ctx, o)
			if aerr != nil {
				return nil, nil, nil, i, fmt.Errorf("apply %s: reading whether the release created it: %w", o.ref, aerr)
			}
			if adopted {
				force = true
				applied, err = d.applyObject(ctx, o, false, force)
			}
		}
		if err != nil && force && IsJob(o.ref) && immutable(err) {
			if rerr := d.replaceJob(ctx, o, releaseName, false); rerr != nil {
				return nil, nil, nil, i, fmt.Errorf("replace %s, whose template changed: %w", o.ref, rerr)
			}
			applied, err = d.applyObject(ctx, o, false, force)
		}
		if err != nil {
			if apierrors.IsConflict(err) && !force {
				return nil, nil, nil, i, &ConflictError{Object: o.ref, Managers: conflictManagers(err), Err: err}
			}
			return nil, nil, nil, i, fmt.Errorf("apply %s: %w", o.ref, err)
		}
		fields[objectKey(o.ref)] = ownedFields(applied)
		gens.note(o.ref, applied)
	}
	return fields, gens, skipped, len(objects), nil
}

// jobPlan is what an apply does with the release's Jobs, by object key.
type jobPlan struct {
	// rerun are Jobs the last health check saw failed: deleted first
	// when the live one failed (an apply that failed after making it
	// anew left the status saying failed; the new one is not deleted).
	rerun map[string]bool
	// keepGone are Jobs that finished and are gone, unchanged since the
	// revision before: not made again.
	keepGone map[string]bool
}

// JobRunningError is a Job whose template a revision changes while it
// still runs (a pod of it ready or done): it is replaced once it has
// finished (deleting it would kill its work halfway, a migration say);
// retried until then. One whose pods cannot start is replaced at once.
type JobRunningError struct {
	Object v1alpha1.ObjectRef
}

func (e *JobRunningError) Error() string {
	return fmt.Sprintf("%s still runs, and the new revision changes its template (a Job's cannot change in place): it is replaced once it has finished", e.Object)
}

// replaceJob deletes the live Job o, when it is the release's, for the
// apply to make it anew: with onlyFailed, only a Job that failed (one
// running or done is left); else (its template changed) one that has
// finished, and a Job still running is a JobRunningError. A Job gone is
// nothing to delete.
func (d *releaseObjects) replaceJob(ctx context.Context, o *desiredObject, releaseName string, onlyFailed bool) error {
	live, err := o.resource.Get(ctx, o.ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case onlyFailed && !jobFailed(live):
		return nil
	case !onlyFailed && !jobFinished(live) && jobProgressing(live):
		return &JobRunningError{Object: o.ref}
	}
	_, err = d.remove(ctx, o, releaseName, o.namespace)
	return err
}

// jobProgressing reports whether an unfinished Job is doing its work: a
// pod of it ready, or done. One whose pods cannot start (an image that
// does not pull, nowhere to schedule them) never finishes, nor fails
// while they wait: waiting for it would hold back the very fix of it.
func jobProgressing(u *unstructured.Unstructured) bool {
	ready, _, _ := unstructured.NestedInt64(u.Object, "status", "ready")
	succeeded, _, _ := unstructured.NestedInt64(u.Object, "status", "succeeded")
	return ready > 0 || succeeded > 0
}

// jobFailed reports whether a Job has the condition Failed.
func jobFailed(u *unstructured.Unstructured) bool { return health.JobCondition(u, "Failed") }

// jobFinished reports whether a Job has ended: Complete or Failed.
func jobFinished(u *unstructured.Unstructured) bool {
	return health.JobCondition(u, "Complete") || jobFailed(u)
}

// IsJob reports whether r is a batch Job: an object that runs once, which
// the drift check does not make again when it is gone and a new revision
// replaces rather than changes.
func IsJob(r v1alpha1.ObjectRef) bool {
	return r.Kind == "Job" && strings.HasPrefix(r.APIVersion, "batch/")
}

// immutable reports whether the API server refused an update because it
// changes a field that cannot be changed (a Job's template, selector).
func immutable(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if strings.Contains(c.Message, "immutable") {
			return true
		}
	}
	return false
}

// refuseOtherReleases refuses an object that exists and whose Helm
// release annotations name another release (another name, or the same
// name in another namespace): two deployments whose charts render the
// same cluster-scoped object, or the same name in a namespace both may
// write. Server-side apply cannot tell: every release applies with the
// same field manager, so the apply would take the object over without a
// conflict, and the other release's drift check would see nothing while
// this one's prune or uninstall deleted what it uses. Helm refuses to
// adopt such an object too ("invalid ownership metadata"). An object
// with this release's annotations goes on.
//
// Nor is an existing object without any release's annotations (Unowned):
// an administrator's ClusterRoleBinding, a CRD installed by hand. Applied
// with the same content it would conflict with nothing, be annotated as
// the release's, and its uninstall or prune would delete it (a CRD, and
// with it every custom resource of its kind). Helm refuses it too; the
// error says how to let the release adopt it (annotate it) or create it
// (delete it). Objects in the release's own namespace are not read (a
// design call): the agent creates that namespace for the deployment
// alone, so what is in it is the deployment's, and a field another
// manager owns there is still refused by the apply's conflict.
//
// Only objects outside the release's own namespace that it did not
// create are read, one GET each: cluster-scoped ones, and those in a
// namespace an environment's policy adds. A namespace belongs to one
// deployment, whose release takes what it renders there (a release of
// another environment writing into it is the one refused, by this check
// on its side); most deployments render nothing else, so their installs
// and upgrades read nothing. Those it created are read too, and refused
// only when another release's annotations are on them: one deleted by
// hand may have been made again by another release since, and the forced
// apply of created objects would take it over silently (both apply with
// one field manager), the other release running this one's content.
func (d *releaseObjects) refuseOtherReleases(ctx context.Context, objects []*desiredObject, created map[string]bool, releaseName string) error {
	for _, o := range objects {
		if o.namespaced && o.ref.Namespace == o.namespace {
			continue
		}
		live, err := o.resource.Get(ctx, o.ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("apply %s: reading which release it belongs to: %w", o.ref, err)
		}
		ann := live.GetAnnotations()
		if owner, ok := otherRelease(ann, releaseName, o.namespace); ok {
			return &ConflictError{Object: o.ref, Release: owner}
		}
		if !created[objectKey(o.ref)] && ann[ReleaseNameAnnotation] == "" && ann[ReleaseNamespaceAnnotation] == "" {
			return &ConflictError{Object: o.ref, Unowned: true, releaseName: releaseName, releaseNamespace: o.namespace}
		}
	}
	return nil
}

// otherRelease returns the release (namespace/name) an object's Helm
// annotations name, when they name one and it is not releaseName in
// namespace.
func otherRelease(ann map[string]string, releaseName, namespace string) (string, bool) {
	name, ns := ann[ReleaseNameAnnotation], ann[ReleaseNamespaceAnnotation]
	if (name == "" && ns == "") || (name == releaseName && ns == namespace) {
		return "", false
	}
	return ns + "/" + name, true
}

// ConflictError is an object the release did not create that is not
// Styrmin's to take over: another field manager owns fields of it,
// (Release set) another release's annotations are on it, or (Unowned)
// it is outside the release's namespace and no release's annotations are
// on it.
type ConflictError struct {
	Object v1alpha1.ObjectRef
	// Managers are the field managers that own the conflicting fields.
	Managers []string
	// Release is the release (namespace/name) the object's
	// meta.helm.sh/release-name and release-namespace annotations name,
	// when they name another release ("" otherwise).
	Release string
	// Unowned is true for an existing object outside the release's
	// namespace that carries no release's annotations (nothing was
	// applied); releaseName and releaseNamespace name the release
	// refused, for the error to say how it may adopt the object.
	Unowned                       bool
	releaseName, releaseNamespace string
	// Err is the API server's conflict (nil for another release's object
	// or an Unowned one: nothing was applied).
	Err error
}

func (e *ConflictError) Error() string {
	if e.Unowned {
		resource := strings.ToLower(e.Object.Kind)
		if g := e.Object.Group(); g != "" {
			resource += "." + g
		}
		if e.Object.Namespace != "" {
			resource += " -n " + e.Object.Namespace
		}
		return fmt.Sprintf("apply %s: it exists and belongs to no release (it has no %s and %s annotations); a release does not take over an object it did not create, which its uninstall or prune would then delete (to let release %s/%s adopt it, annotate it: kubectl annotate %s %s %s=%s %s=%s; or delete it to let the release create it)",
			e.Object, ReleaseNameAnnotation, ReleaseNamespaceAnnotation, e.releaseNamespace, e.releaseName,
			resource, e.Object.Name, ReleaseNameAnnotation, e.releaseName, ReleaseNamespaceAnnotation, e.releaseNamespace)
	}
	if e.Release != "" {
		return fmt.Sprintf("apply %s: it exists and belongs to release %s (its %s and %s annotations); a release does not take over another release's object (give the object another name in one of the charts, or uninstall release %s)",
			e.Object, e.Release, ReleaseNameAnnotation, ReleaseNamespaceAnnotation, e.Release)
	}
	who := "another field manager"
	if len(e.Managers) > 0 {
		who = "field manager " + strings.Join(e.Managers, ", ")
	}
	return fmt.Sprintf("apply %s: it exists and %s owns fields Styrmin would set; Styrmin does not take over an object its release did not create (remove it, or the other manager's fields, to let Styrmin create it): %v", e.Object, who, e.Err)
}

func (e *ConflictError) Unwrap() error { return e.Err }

// conflictRE finds the managers in the API server's conflict causes
// (`conflict with "kubectl" using v1`).
var conflictRE = regexp.MustCompile(`conflict with "([^"]+)"`)

// conflictManagers lists the field managers an apply conflict names,
// sorted, each once.
func conflictManagers(err error) []string {
	var out []string
	for _, m := range conflictRE.FindAllStringSubmatch(err.Error(), -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return out
}

// remove deletes an object of release releaseName in namespace (one a
// new revision no longer has, or any on uninstall), when it is the
// release's: like Helm, an object whose annotations name another release,
// or none, is left alone (kept is true), and so is one replaced since it
// was read. An object whose keep policy is the live one's (keepLive) and
// says keep is left alone as well, as callers skip o.keep. Its dependents
// go in the background. An object already gone is not an error.
func (d *releaseObjects) remove(ctx context.Context, o *desiredObject, releaseName, namespace string) (kept bool, err error) {
	live, err := o.resource.Get(ctx, o.ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete %s: %w", o.ref, err)
	}
	ann := live.GetAnnotations()
	if ann[ReleaseNameAnnotation] != releaseName || ann[ReleaseNamespaceAnnotation] != namespace {
		return true, nil
	}
	if o.keepLive && ann[helmResourcePolicyAnnotation] == helmKeepPolicy {
		return false, nil // kept by its policy, as callers skip o.keep
	}
	uid := live.GetUID()
	policy := metav1.DeletePropagationBackground
	err = o.resource.Delete(ctx, o.ref.Name, metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsConflict(err):
		return true, nil // replaced by a new object since the read
	case err != nil:
		return false, fmt.Errorf("delete %s: %w", o.ref, err)
	}
	return false, nil
}

// ownedFields returns the field set (FieldsV1 JSON) Styrmin's manager owns
// on an object through apply, nil when it owns nothing.
func ownedFields(u *unstructured.Unstructured) []byte {
	for _, mf := range u.GetManagedFields() {
		if mf.Manager == v1alpha1.FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply &&
			mf.Subresource == "" && mf.FieldsV1 != nil {
			return mf.FieldsV1.Raw
		}
	}
	return nil
}

// lostFields returns the paths in the expected field set that the live set
// lacks, leaves only, sorted.
func lostFields(want, have []byte) ([]string, error) {
	if bytes.Equal(want, have) {
		return nil, nil
	}
	wantSet, err := parseFieldSet(want)
	if err != nil {
		return nil, fmt.Errorf("expected field set: %w", err)
	}
	haveSet, err := parseFieldSet(have)
	if err != nil {
		return nil, fmt.Errorf("live field set: %w", err)
	}
	lost := wantSet.Difference(haveSet).Leaves()
	var out []string
	lost.Iterate(func(p fieldpath.Path) { out = append(out, p.String()) })
	slices.Sort(out)
	return out, nil
}

// holdsReplicas reports whether the field set raw (FieldsV1 JSON) holds a
// workload's replicas.
func holdsReplicas(raw []byte) (bool, error) {
	set, err := parseFieldSet(raw)
	if err != nil {
		return false, fmt.Errorf("live field set: %w", err)
	}
	return set.Has(fieldpath.MakePathOrDie("spec", "replicas")), nil
}

func parseFieldSet(raw []byte) (*fieldpath.Set, error) {
	s := &fieldpath.Set{}
	if len(raw) == 0 {
		return s, nil
	}
	if err := s.FromJSON(bytes.NewReader(raw)); err != nil {
		return nil, err
	}
	return s, nil
}

// objectKey identifies an object within a release.
func objectKey(r v1alpha1.ObjectRef) string {
	return r.Group() + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name
}
