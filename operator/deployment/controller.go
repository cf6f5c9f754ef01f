package deployment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/health"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/internal/metricsreg"
	"github.com/styrmin/styrmin/operator/internal/outcome"
	"github.com/styrmin/styrmin/operator/release"
	"github.com/styrmin/styrmin/resolver"
)

// Reconciler is the StyrminDeployment controller: it makes the cluster run the instance a
// StyrminDeployment holds: it installs or upgrades the instance as a Helm
// release, reports the components' state, and on an interval compares the
// release's objects with the live ones and puts drifted fields back.
//
// A reconcile is a chain of phases; each owns one condition:
//
//	resolve  (Stalled)  spec → instance → driver → rendered objects
//	release  (—)        install or upgrade when the active digest differs
//	health   (Ready)    component status from the live workloads
//	drift    (Drifted)  compare and correct on the interval
//
// Reconciling is derived from the others in resultFor, which also maps
// errors to results, in one place.
type Reconciler struct {
	client client.Client
	// apiReader reads what the cache does not hold (pods).
	apiReader client.Reader
	// podStatusAfter is how long a deployment stays not ready before its
	// pods are read into the status.
	podStatusAfter time.Duration
	drivers        driversource.Source
	renders        *driversource.Renders
	releases       *release.Releases
	recorder       events.EventRecorder
	// claims arbitrates the record of a change active with its task's
	// failure (nil: none, the controller alone).
	claims   *instance.ActiveClaims
	metrics  *metrics
	interval time.Duration
	now      func() time.Time
	// scopes tells the policy check each rendered kind's scope as the
	// cluster serves it (the manager's cached RESTMapper).
	scopes *release.Scopes

	// hosts are the hosts the applies under way take (takeHosts).
	hosts hostTable
	// beforeApply, when set, is called between an apply's checks and the
	// apply itself (tests hold an apply there).
	beforeApply func(ctx context.Context, namespace string)

	mu     sync.Mutex
	states map[string]*deploymentState // by namespace
}

// deploymentState is what the reconciler keeps in memory per deployment:
// the objects of the release revision it checks for drift, their expected
// field sets, and when to check next.
type deploymentState struct {
	// applied records the last release this agent applied, so a
	// reconcile that reads the StyrminDeployment from a cache not yet
	// showing the status written after it does not apply it again.
	applied *appliedRelease
	// desired is what the drift check compares with (nil: read it from
	// the release's record on the next check).
	desired *release.Desired
	// generations are the workloads' generations this agent's last apply
	// or correction of them was answered with: the health check reads a
	// workload the cache shows older from the API server.
	generations release.Generations
	// wrote is the resourceVersion the API server answered this
	// controller's last write of the StyrminDeployment with: a cached copy
	// older than it is read again from the API server.
	wrote string
	// fresh is set when a status write conflicted: the next reconcile
	// reads the StyrminDeployment from the API server.
	fresh bool
	// writing is set while a status write is under way; seenWriting is
	// the newest resourceVersion of a status change seen meanwhile
	// (statusWrittenElsewhere).
	writing     bool
	seenWriting string
	nextCheck   time.Time
	// pods are the pods not ready of each workload ("Kind/name") as last
	// read, at podsRead.
	pods     map[string][]v1alpha1.PodStatus
	podsRead time.Time
	// zeroes are the health check's verdicts of the workloads at 0
	// replicas, read again from the API server only once they change.
	zeroes health.Zeroes
}

// appliedRelease is what a successful install or upgrade wrote to the
// status.
type appliedRelease struct {
	digest    string
	release   v1alpha1.ReleaseStatus
	inventory []v1alpha1.ObjectRef
	// revision is the record written and the objects applied.
	revision *release.Revision
}

// reconcileState flows through the phases of one reconcile.
type reconcileState struct {
	sd       *v1alpha1.StyrminDeployment
	instance *resolver.Instance
	// upToDate is true when the release already runs spec.digest.
	upToDate bool
	driver   *drivers.Driver
	objects  []drivers.Object
	// releases is the release engine acting as the identity the
	// environment's policy names (the agent's own when it names none).
	releases *release.Releases
	// sensitive are the values of the instance's placeholders, read from
	// git when it is applied (nil: none).
	sensitive resolver.Sensitive
	ready     bool
	// hold is what the deployment's tasks in the cache hold the drift
	// check for, read once a reconcile (holdRead); held is its why when
	// failed tasks left components stopped.
	hold     taskHold
	holdRead bool
	held     string
	// applied is true when this reconcile applied a revision: the
	// components the status holds are then the revision's before, but
	// for the finished Jobs it did not make again (finishedKept).
	applied      bool
	applyStarted time.Time
	finishedKept []v1alpha1.ObjectRef
	// requeueAfter, when set, is the next reconcile.
	requeueAfter time.Duration
}

// requeueWithin asks for the next reconcile within d: the earliest wish of
// the phases wins.
func (rs *reconcileState) requeueWithin(d time.Duration) {
	if rs.requeueAfter == 0 || d < rs.requeueAfter {
		rs.requeueAfter = d
	}
}

// readyPollInterval bounds how long a not-ready deployment waits to be
// looked at again when no workload event comes (the cache holds only
// labelled workloads, so a workload whose label was taken away sends
// none), and a task may wait on it. It is a safety net, not the way
// readiness is seen: at 5 s, 500 rolling deployments cost 100 reconciles
// a second, CPU taken from the API server on a small machine (the
// benchmark's fan-out was 20% slower).
const readyPollInterval = 30 * time.Second

// phase is one step of a reconcile.
type phase func(ctx context.Context, rs *reconcileState) error

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	var sd v1alpha1.StyrminDeployment
	if err := r.read(ctx, req.NamespacedName, &sd); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Namespace)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	orig := sd.DeepCopy()
	rs := &reconcileState{sd: &sd}
	if !sd.DeletionTimestamp.IsZero() || sd.Spec.Tombstone() {
		return r.finalize(ctx, rs, orig)
	}
	err := r.run(ctx, rs, r.ensureFinalizer, r.resolve, r.release, r.health, r.correctDrift)
	return r.resultFor(ctx, rs, orig, err)
}

func (r *Reconciler) run(ctx context.Context, rs *reconcileState, phases ...phase) error {
	for _, p := range phases {
		if err := p(ctx, rs); err != nil {
			return err
		}
	}
	return nil
}

// ensureFinalizer makes sure a deletion uninstalls the release first.
func (r *Reconciler) ensureFinalizer(ctx context.Context, rs *reconcileState) error {
	if controllerutil.ContainsFinalizer(rs.sd, v1alpha1.FinalizerRelease) {
		return nil
	}
	before := rs.sd.DeepCopy()
	controllerutil.AddFinalizer(rs.sd, v1alpha1.FinalizerRelease)
	// The list is replaced whole: only over the copy read, so that a
	// finalizer another writer added since is not dropped.
	if err := r.client.Patch(ctx, rs.sd, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return outcome.Retryable(v1alpha1.ReasonProgressing, fmt.Errorf("add finalizer: %w", err))
	}
	r.noteWritten(rs.sd.Namespace, rs.sd.ResourceVersion)
	return nil
}

// removeFinalizer removes the release's finalizer from sd, over the copy
// read, as ensureFinalizer adds it: the list is replaced whole, and a
// finalizer another writer added since (a legal hold's) was dropped with
// it. On a conflict the next reconcile reads sd afresh and uninstalls
// again, which is safe to run again.
func (r *Reconciler) removeFinalizer(ctx context.Context, sd *v1alpha1.StyrminDeployment) error {
	if !controllerutil.ContainsFinalizer(sd, v1alpha1.FinalizerRelease) {
		return nil
	}
	before := sd.DeepCopy()
	controllerutil.RemoveFinalizer(sd, v1alpha1.FinalizerRelease)
	if err := r.client.Patch(ctx, sd, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			r.readFresh(sd.Namespace)
		}
		return fmt.Errorf("remove finalizer: %w", err)
	}
	return nil
}

// resolve turns the spec into the objects to apply. It owns Stalled: what
// fails here needs a change in git.
func (r *Reconciler) resolve(ctx context.Context, rs *reconcileState) error {
	sd := rs.sd
	if err := validateIdentity(sd); err != nil {
		return outcome.Stalled(v1alpha1.ReasonInvalidSpec, err)
	}
	if err := sequenceAhead(sd); err != nil {
		return err
	}
	in, err := instance.InstanceFromSpec(&sd.Spec)
	if err != nil {
		return outcome.Stalled(v1alpha1.ReasonInvalidSpec, err)
	}
	if ns := in.Context.Deployment.Namespace; ns != "" && ns != sd.Namespace {
		return outcome.Stalled(v1alpha1.ReasonInvalidSpec, fmt.Errorf("spec.context.deployment.namespace is %q but the StyrminDeployment is in %q", ns, sd.Namespace))
	}
	if n := in.Context.Deployment.Name; n != "" && n != sd.Spec.Deployment.Name {
		return outcome.Stalled(v1alpha1.ReasonInvalidSpec, fmt.Errorf("spec.context.deployment.name is %q but spec.deployment.name is %q", n, sd.Spec.Deployment.Name))
	}
	rs.instance = in
	if a := r.state(sd.Namespace).applied; a != nil && a.digest == sd.Spec.Digest && sd.Status.AppliedDigest != a.digest {
		// The cache lags behind the status this agent wrote.
		rel := a.release
		sd.Status.Release, sd.Status.AppliedDigest, sd.Status.Inventory = &rel, a.digest, slices.Clone(a.inventory)
	}
	if sd.Status.AppliedDigest == "" && sd.Status.LegacyActiveDigest != "" {
		// Written by an agent before the applied and active sequences
		// were told apart: that digest is the applied one.
		sd.Status.AppliedDigest, sd.Status.LegacyActiveDigest = sd.Status.LegacyActiveDigest, ""
		if sd.Status.AppliedSequence == 0 {
			sd.Status.AppliedSequence = sd.Status.ActiveSequence
		}
	}
	rs.upToDate = sd.Status.Release != nil && sd.Status.AppliedDigest == sd.Spec.Digest
	if rs.upToDate && sd.Spec.Sequence != sd.Status.AppliedSequence && len(jobsOf(sd.Status.Components, sd.Status.Inventory, unfinished)) > 0 {
		// The same content locked again (a retry) while a Job of the
		// release failed or is gone unfinished: applied again, as a new
		// revision, so that the Job runs again; nothing else changes.
		rs.upToDate = false
	}
	if !rs.upToDate {
		// Classified by the source: missing or not loading is stalled. An
		// in-repository driver is read where the instance was resolved.
		d, err := driversource.Get(ctx, r.drivers, driversource.Request{Ref: in.Driver, Commit: in.SourceCommit})
		if err != nil {
			return err
		}
		m, err := r.renders.Render(ctx, d, *in.Context, in.Values)
		if err != nil {
			return driversource.ClassifyRender(fmt.Errorf("render %s with driver %s@%s: %w", in.ID, d.Name, d.Version, err))
		}
		// What git says the environment may do, enforced on what is
		// applied (the lock checked it too, but whatever wrote the spec),
		// at the scope the cluster will create each object with.
		if err := drivers.CheckPolicyWith(*in.Context, m, in.ID.String(), r.scopes.ClusterScoped); err != nil {
			if _, ok := errors.AsType[*drivers.PolicyError](err); ok {
				return outcome.Stalled(v1alpha1.ReasonPolicyViolation, err)
			}
			return err // the cluster could not be asked: retried
		}
		values, err := r.sensitiveValues(ctx, in, d, m.Objects)
		if err != nil {
			return err
		}
		rs.driver, rs.objects, rs.sensitive = d, m.Objects, values
	}
	if rs.releases, err = r.releasesFor(sd, in); err != nil {
		return outcome.Stalled(v1alpha1.ReasonInvalidSpec, err)
	}
	setCondition(sd, v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonSucceeded, "the instance resolves and renders")
	return nil
}

// releasesFor returns the release engine that acts as the identity the
// instance's environment policy names: its service account, impersonated,
// so the cluster's RBAC bounds the release; the agent itself when it
// names none (or the instance has no context: a tombstone).
func (r *Reconciler) releasesFor(sd *v1alpha1.StyrminDeployment, in *resolver.Instance) (*release.Releases, error) {
	return r.releases.As(userFor(sd, in))
}

// userFor is the user an instance's release is applied as ("": the
// agent's own identity).
func userFor(sd *v1alpha1.StyrminDeployment, in *resolver.Instance) string {
	if in == nil || in.Context == nil {
		return ""
	}
	ns, name, ok := in.Context.Environment.Policy.ServiceAccount(sd.Namespace)
	if !ok {
		return ""
	}
	return drivers.ServiceAccountUser(ns, name)
}

// identityOf is the identity that uninstalls a StyrminDeployment's
// release, from its spec alone (the finalizer runs without resolving
// it): the spec's policy, or for a tombstone, which names none, the
// user the release was last applied as (status.appliedAs), so a
// deletion needs no more rights than the install had.
func (r *Reconciler) identityOf(sd *v1alpha1.StyrminDeployment) (*release.Releases, error) {
	if sd.Spec.Tombstone() || sd.Spec.Context == nil {
		return r.releases.As(sd.Status.AppliedAs)
	}
	in, err := instance.InstanceFromSpec(&sd.Spec)
	if err != nil {
		return r.releases.As(sd.Status.AppliedAs) // an invalid spec never applied: who applied the last one uninstalls
	}
	return r.releasesFor(sd, in)
}

// applyError classifies a failed apply: refused objects (by the API
// server's validation or an admission policy) need a change in git; a
// forbidden request (the identity's RBAC) may be fixed in the cluster, so
// it is retried, with a reason of its own. An object not the release's to
// take is conflictError's.
func applyError(rs *reconcileState, err error) error {
	switch {
	case errors.Is(err, release.ErrRevisionTooLarge):
		// Refused before anything was applied: the render must shrink.
		return outcome.Stalled(v1alpha1.ReasonApplyFailed, err)
	// The API server answers 403 for more than RBAC: saying "RBAC" then
	// sends whoever reads it to the wrong place.
	case outcome.AdmissionDenied(err):
		// A policy refuses what the instance renders: retrying the same
		// objects meets it again, and a task waiting on it should fail now.
		return outcome.Stalled(v1alpha1.ReasonAdmissionDenied, fmt.Errorf("an admission policy of the cluster refuses the release's objects (change them in git, or the policy): %w", err))
	case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return outcome.Retryable(v1alpha1.ReasonNamespaceTerminating, fmt.Errorf("namespace %s is being deleted: %w", rs.sd.Namespace, err))
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		return outcome.Retryable(v1alpha1.ReasonQuotaExceeded, fmt.Errorf("a ResourceQuota of namespace %s refuses the release's objects: %w", rs.sd.Namespace, err))
	case apierrors.IsForbidden(err):
		who := "the agent's own identity"
		if ns, name, ok := rs.instance.Context.Environment.Policy.ServiceAccount(rs.sd.Namespace); ok {
			who = "service account " + ns + "/" + name + " (the environment's policy.serviceAccountName)"
		}
		return outcome.Retryable(v1alpha1.ReasonForbidden, fmt.Errorf("applied as %s, which the cluster's RBAC does not allow: %w", who, err))
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && (apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)) {
		// The API server refuses the rendered objects: retrying the
		// same instance cannot help.
		return outcome.Stalled(v1alpha1.ReasonApplyFailed, err)
	}
	return outcome.Retryable(v1alpha1.ReasonApplyFailed, err)
}

// conflictError classifies an apply refused because an object is not the
// release's to take (release.ConflictError, err wrapping it). Stalled,
// naming the object, the fields and the other manager or release: no
// other writer lets go of an object by itself (a field kubectl or another
// controller owns stays owned, an object another release's annotations
// name stays its), so a retry met the same conflict until the task's
// timeout, which then said little. A change in git (the object left out
// or renamed) or in the cluster (the other's fields or object removed) is
// needed; the stalled deployment is looked at again on the drift interval
// all the same, which applies it once the cluster was fixed. Retried only
// while the other release's deployment is being deleted (its uninstall
// removes the object: a deployment moved to another environment, the new
// one made before the old one's uninstall ended).
func (r *Reconciler) conflictError(ctx context.Context, conflict *release.ConflictError, err error) error {
	if conflict.Release != "" {
		going, gerr := r.releaseGoing(ctx, conflict.Release)
		if gerr != nil {
			return outcome.Retryable(v1alpha1.ReasonApplyConflict, fmt.Errorf("%w (whether that release is being uninstalled could not be read: %w)", err, gerr))
		}
		if going {
			return outcome.Retryable(v1alpha1.ReasonApplyConflict, fmt.Errorf("%w; its deployment is being deleted: retried until its uninstall removed the object", err))
		}
	}
	return outcome.Stalled(v1alpha1.ReasonApplyConflict, err)
}

// releaseGoing reports whether the release named namespace/name is being
// uninstalled: its namespace's StyrminDeployment is being deleted or is a
// tombstone, or the namespace is being deleted. A release no
// StyrminDeployment holds is going nowhere (left behind, or Helm's own).
// Read from the API server: asked only on such a conflict.
func (r *Reconciler) releaseGoing(ctx context.Context, rel string) (bool, error) {
	ns, _, _ := strings.Cut(rel, "/")
	var sd v1alpha1.StyrminDeployment
	err := r.apiReader.Get(ctx, instance.Key(ns), &sd)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, err
	case !sd.DeletionTimestamp.IsZero() || sd.Spec.Tombstone():
		return true, nil
	}
	var namespace corev1.Namespace
	err = r.apiReader.Get(ctx, client.ObjectKey{Name: ns}, &namespace)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil && !namespace.DeletionTimestamp.IsZero(), err
}

// sensitiveValues reads the values behind the placeholders of an instance
// that has some, from git (the driver source), and checks that each
// rendered object can take them: a chart that transformed a placeholder
// (upper-cased it, say) stalls the deployment here instead of applying a
// placeholder in its place. Errors name parameters and objects, never
// values.
func (r *Reconciler) sensitiveValues(ctx context.Context, in *resolver.Instance, d *drivers.Driver, objects []drivers.Object) (resolver.Sensitive, error) {
	if !resolver.HasPlaceholders(in) {
		return nil, nil
	}
	src, ok := r.drivers.(driversource.SensitiveSource)
	if !ok {
		return nil, outcome.Stalled(v1alpha1.ReasonRenderFailed, fmt.Errorf("%s has sensitive parameters, and this agent's driver source cannot read their values from git", in.ID))
	}
	values, err := src.Sensitive(ctx, in, d)
	if errors.Is(err, gitsource.ErrNotFetched) {
		// The commit they are read at is not in the clone yet and the
		// remote could not be asked: not a change git needs, retried.
		return nil, outcome.Retryable(v1alpha1.ReasonRenderFailed, err)
	}
	if err != nil {
		return nil, outcome.Stalled(v1alpha1.ReasonRenderFailed, err)
	}
	byDigest := make(map[string][]byte, len(values))
	for ph, v := range values {
		dg, _ := resolver.PlaceholderDigest(ph)
		byDigest[dg] = []byte(v)
	}
	for _, o := range objects {
		body, err := yaml.YAMLToJSON(o.YAML)
		if err != nil || !release.NeedsReveal(body) {
			continue
		}
		if _, err := release.Reveal(body, byDigest); err != nil {
			return nil, outcome.Stalled(v1alpha1.ReasonRenderFailed, fmt.Errorf("driver %s@%s, %s/%s: %w", d.Name, d.Version, o.Kind, o.Name, err))
		}
	}
	return values, nil
}

// sequenceAhead stalls a StyrminDeployment whose sequence annotation is
// above the instance it holds: tasks write the spec and the annotation
// together, so a higher number is a hand edit, no instance of the
// deployment, and every task of it waits until the annotation goes.
func sequenceAhead(sd *v1alpha1.StyrminDeployment) error {
	held, ok, err := instance.HeldSequence(sd)
	if err != nil {
		return outcome.Stalled(v1alpha1.ReasonSequenceAhead, err)
	}
	if !ok || held <= sd.Spec.Sequence {
		return nil
	}
	return outcome.Stalled(v1alpha1.ReasonSequenceAhead, fmt.Errorf(
		"annotation %s is %d, above the instance this StyrminDeployment holds (sequence %d), and no task wrote it: the deployment's tasks wait; remove it (kubectl annotate styrmindeployment -n %s %s %s-) to let the newest task write the whole configuration",
		v1alpha1.AnnotationInstanceSequence, held, sd.Spec.Sequence, sd.Namespace, sd.Name, v1alpha1.AnnotationInstanceSequence))
}

// validateIdentity checks what the CRD schema cannot: the name and the
// release name.
func validateIdentity(sd *v1alpha1.StyrminDeployment) error {
	if sd.Name != sd.Namespace {
		return fmt.Errorf("metadata.name is %q: a StyrminDeployment is named after its namespace %q", sd.Name, sd.Namespace)
	}
	if err := chartutil.ValidateReleaseName(sd.Spec.Deployment.Name); err != nil {
		return fmt.Errorf("spec.deployment.name %q is not a valid release name: %w", sd.Spec.Deployment.Name, err)
	}
	return nil
}

// release installs or upgrades the Helm release when it does not run the
// spec's digest yet.
func (r *Reconciler) release(ctx context.Context, rs *reconcileState) error {
	sd := rs.sd
	if rs.upToDate {
		// Same digest, maybe a new sequence (the same content locked
		// again): nothing to apply.
		sd.Status.AppliedSequence = sd.Spec.Sequence
		return nil
	}
	req := release.Request{
		Namespace:   sd.Namespace,
		Name:        sd.Spec.Deployment.Name,
		Driver:      sd.Spec.Driver,
		AppVersion:  sd.Spec.AppVersion,
		Values:      rs.instance.Values,
		Objects:     rs.objects,
		Description: releaseDescription(&sd.Spec),
		Sensitive:   rs.sensitive,
		Rerun:       jobsOf(sd.Status.Components, sd.Status.Inventory, func(w v1alpha1.WorkloadStatus) bool { return w.Failed }),
		Finished:    jobsOf(sd.Status.Components, sd.Status.Inventory, health.FinishedGone),
		Inventory:   sd.Status.Inventory,
	}
	// Workers the running task stopped stay stopped through its apply
	// until its startComponents step.
	stopped, err := stoppedByRunningTask(ctx, r.client, sd.Namespace)
	if err != nil {
		return outcome.Retryable(v1alpha1.ReasonApplyFailed, err)
	}
	req.Stopped = stopped
	revision := 0
	if sd.Status.Release != nil {
		revision, req.PreviousDigest = sd.Status.Release.Revision, sd.Status.Release.ManifestDigest
	}
	var known *release.Revision
	if a := r.state(sd.Namespace).applied; a != nil {
		known = a.revision
	}
	// A host another deployment's Ingress holds, or another apply is
	// taking, is not taken (checked on the agent's table and the cache's
	// Ingresses: no request on the way).
	hosts, err := r.takeHosts(ctx, sd, rs.objects)
	if err != nil {
		return err
	}
	// Even a failed apply may have made its Ingress: its hosts stay taken
	// until the cache shows it, or for a while.
	defer func() { r.hosts.end(sd.Namespace, hosts, true, r.now()) }()
	if r.beforeApply != nil {
		r.beforeApply(ctx, sd.Namespace)
	}
	// Recorded before the apply: objects a failed apply created are the
	// identity's too, and its uninstall acts as that identity.
	sd.Status.AppliedAs = userFor(sd, rs.instance)
	start := time.Now()
	applied, installed, err := rs.releases.Apply(ctx, req, known, revision)
	op := "upgrade"
	if installed {
		op = "install"
	}
	r.metrics.applyDuration.WithLabelValues(op, metricsreg.ResultLabel(err)).Observe(time.Since(start).Seconds())
	if err != nil {
		// Objects applied before the failure are the failed instance's
		// now: the cluster is no longer known to run AppliedDigest, so
		// that digest locked again (a revert) is applied again, as a new
		// revision, rather than taken as running.
		sd.Status.AppliedDigest = ""
		r.forgetApplied(sd.Namespace)
		if conflict, ok := errors.AsType[*release.ConflictError](err); ok {
			return r.conflictError(ctx, conflict, err)
		}
		return applyError(rs, err)
	}
	rs.applied, rs.applyStarted, rs.finishedKept = true, start, applied.FinishedKept()
	status := applied.Status(metav1.NewTime(r.now()))
	sd.Status.Release = &status
	sd.Status.AppliedSequence = sd.Spec.Sequence
	sd.Status.AppliedDigest = sd.Spec.Digest
	sd.Status.Inventory = release.Inventory(rs.objects, sd.Namespace)
	// The drift check starts over with the new revision's objects.
	r.resetState(sd.Namespace, &appliedRelease{digest: sd.Spec.Digest, release: *sd.Status.Release, inventory: slices.Clone(sd.Status.Inventory), revision: applied})
	reason, verb := v1alpha1.EventUpgraded, "Upgraded"
	if installed {
		reason, verb = v1alpha1.EventInstalled, "Installed"
	}
	r.recorder.Eventf(sd, nil, corev1.EventTypeNormal, reason, verb,
		"%s release %s revision %d: sequence %d, driver %s, app %s", verb, applied.Name(), applied.Number(), sd.Spec.Sequence, sd.Spec.Driver, sd.Spec.AppVersion)
	return nil
}

func releaseDescription(spec *v1alpha1.StyrminDeploymentSpec) string {
	s := fmt.Sprintf("styrmin sequence %d", spec.Sequence)
	if spec.SourceCommit != "" {
		c := spec.SourceCommit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " (commit " + c + ")"
	}
	return s
}

// health reports the components' state. It owns Ready.
func (r *Reconciler) health(ctx context.Context, rs *reconcileState) error {
	sd := rs.sd
	var appliedAt time.Time
	if rel := sd.Status.Release; rel != nil && rel.LastAppliedTime != nil {
		appliedAt = rel.LastAppliedTime.Time
	}
	previous := sd.Status.Components
	if rs.applied {
		// Another revision's, but for the finished Jobs it left as they
		// were: their verdict stands.
		previous = onlyJobs(previous, rs.finishedKept)
	}
	// A Job may end, and its TTL delete it, while the apply that made it
	// still ran: its end is looked for from the apply's start.
	endsSince := appliedAt
	if rs.applied {
		endsSince = rs.applyStarted
	}
	// What another program wrote (a custom resource's condition, a
	// container's termination message) is masked with the namespace's
	// sensitive values: read once a check, and only when such a message
	// is shown.
	sensitive := health.NamespaceSensitive(ctx, r.apiReader, sd.Namespace)
	comps, err := health.ComponentStatuses(ctx, r.client, r.apiReader, sd.Status.Inventory, appliedAt, r.written(sd.Namespace), previous, endsSince,
		&r.state(sd.Namespace).zeroes, sensitive)
	if err != nil {
		return outcome.Retryable(v1alpha1.ReasonHealthCheckFailed, err)
	}
	sd.Status.Components = comps
	notReady := health.NotReadySummary(comps)
	hold, err := r.cachedHold(ctx, rs)
	if err != nil {
		return outcome.Retryable(v1alpha1.ReasonHealthCheckFailed, err)
	}
	if hold.stopped {
		// Workloads held at zero replicas read as ready (0 of 0): a
		// deployment that needs a retry or a fix would show green.
		msg := hold.why
		if notReady != "" {
			msg += "; " + notReady
		}
		setCondition(sd, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonComponentsHeldStopped, msg)
		rs.held = hold.why
		// The tasks' changes do not requeue this object.
		rs.requeueWithin(taskPollInterval)
		return nil
	}
	if notReady != "" {
		reason := v1alpha1.ReasonComponentsNotReady
		failed := anyFailed(comps)
		if failed {
			reason = v1alpha1.ReasonWorkloadFailed
		}
		if since := r.notReadyFor(sd); !failed && since < r.podStatusAfter {
			// Look again when the pods are due to be read.
			rs.requeueWithin(r.podStatusAfter - since)
		} else {
			// Why a workload does not become ready is in its pods
			// (CrashLoopBackOff, ImagePullBackOff): read them, but only
			// for a workload failed or not ready for a while, as pods
			// are not cached and a rollout is not worth a read.
			if err := r.notReadyPods(ctx, sd.Namespace, comps, r.state(sd.Namespace), sensitive); err != nil {
				return outcome.Retryable(v1alpha1.ReasonHealthCheckFailed, err)
			}
			notReady = health.NotReadySummary(comps)
		}
		setCondition(sd, v1alpha1.ConditionReady, metav1.ConditionFalse, reason, notReady)
		rs.requeueWithin(readyPollInterval)
		if judgedPending(sd.Status.Inventory, comps, r.notReadyFor(sd)) {
			// Jobs, claims and custom resources are not watched: look
			// again soon.
			rs.requeueWithin(judgedPollInterval)
		}
		return nil
	}
	rs.ready = true
	rev := 0
	if sd.Status.Release != nil {
		rev = sd.Status.Release.Revision
	}
	setCondition(sd, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSucceeded,
		fmt.Sprintf("sequence %d runs as release revision %d; %d components ready", sd.Status.AppliedSequence, rev, len(comps)))
	return nil
}

// judgedPollInterval is how soon a deployment waiting for a Job, a claim
// or a custom resource of its chart looks again: the agent does not watch
// them.
const judgedPollInterval = 5 * time.Second

// customFastFor is how long a deployment waiting for a custom resource of
// its chart looks again at the judged poll's pace: one that stays not
// ready longer (a certificate that cannot be issued) is read at the
// not-ready poll's, a GET per resource each time, not every few seconds
// for as long as it lasts.
const customFastFor = 10 * time.Minute

// judgedPending reports whether a judged object (a Job, a claim, a
// custom resource) of the inventory is not ready yet, and worth looking at
// again soon; notReadyFor is how long the deployment has not been ready. A
// custom resource whose kind is no longer served will not change.
func judgedPending(inventory []v1alpha1.ObjectRef, comps []v1alpha1.ComponentStatus, notReadyFor time.Duration) bool {
	judged := map[string]bool{}
	for _, r := range inventory {
		switch {
		case drivers.IsJudged(r.APIVersion, r.Kind):
			judged[r.Kind+"/"+r.Name] = true
		case health.IsCustomResource(r.APIVersion) && notReadyFor < customFastFor:
			judged[r.Kind+"/"+r.Name] = true
		}
	}
	for _, c := range comps {
		for _, w := range c.Workloads {
			if judged[w.Kind+"/"+w.Name] && !w.Ready && !w.Failed && !health.NotServed(w) {
				return true
			}
		}
	}
	return false
}

// unfinished reports whether a Job's status says it failed or is gone
// without having finished.
func unfinished(w v1alpha1.WorkloadStatus) bool { return w.Failed || health.Gone(w) }

// jobsOf returns the Jobs of the inventory whose status, as the last
// health check saw it, is which.
func jobsOf(comps []v1alpha1.ComponentStatus, inventory []v1alpha1.ObjectRef, which func(v1alpha1.WorkloadStatus) bool) []v1alpha1.ObjectRef {
	names := map[string]bool{}
	for _, c := range comps {
		for _, w := range c.Workloads {
			if w.Kind == "Job" && which(w) {
				names[w.Name] = true
			}
		}
	}
	var out []v1alpha1.ObjectRef
	for _, r := range inventory {
		if names[r.Name] && release.IsJob(r) {
			out = append(out, r)
		}
	}
	return out
}

// onlyJobs returns the statuses comps holds of the Jobs refs names.
func onlyJobs(comps []v1alpha1.ComponentStatus, refs []v1alpha1.ObjectRef) []v1alpha1.ComponentStatus {
	if len(refs) == 0 {
		return nil
	}
	names := map[string]bool{}
	for _, r := range refs {
		names[r.Name] = true
	}
	var out []v1alpha1.ComponentStatus
	for _, c := range comps {
		kept := v1alpha1.ComponentStatus{Name: c.Name}
		for _, w := range c.Workloads {
			if w.Kind == "Job" && names[w.Name] {
				kept.Workloads = append(kept.Workloads, w)
			}
		}
		if len(kept.Workloads) > 0 {
			out = append(out, kept)
		}
	}
	return out
}

// anyFailed reports whether a workload of the components failed.
func anyFailed(comps []v1alpha1.ComponentStatus) bool {
	for _, c := range comps {
		for _, w := range c.Workloads {
			if w.Failed {
				return true
			}
		}
	}
	return false
}

// notReadyFor is how long sd has not been Ready, by its condition before
// this reconcile (0 when it was Ready or has no condition yet), counted
// from its last apply when that came later: a rollout is timed from its
// start, not from when its change began to wait (a large fan-out queues
// changes for minutes, and each would have its pods read at once).
func (r *Reconciler) notReadyFor(sd *v1alpha1.StyrminDeployment) time.Duration {
	c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil || c.Status == metav1.ConditionTrue {
		return 0
	}
	since := c.LastTransitionTime.Time
	if rel := sd.Status.Release; rel != nil && rel.LastAppliedTime != nil && rel.LastAppliedTime.After(since) {
		since = rel.LastAppliedTime.Time
	}
	return r.now().Sub(since)
}

// notReadyPods adds the pods that are not ready to the workloads that are
// not ready: read at most once a podStatusAfter per deployment (pods are
// not cached, and every workload event reconciles), kept in between. A
// message a container's program wrote is masked with sensitive.
func (r *Reconciler) notReadyPods(ctx context.Context, namespace string, comps []v1alpha1.ComponentStatus, st *deploymentState, sensitive health.SensitiveValues) error {
	now := r.now()
	read := now.Sub(st.podsRead) >= r.podStatusAfter
	if read {
		st.pods, st.podsRead = map[string][]v1alpha1.PodStatus{}, now
	}
	for i := range comps {
		for j := range comps[i].Workloads {
			w := &comps[i].Workloads[j]
			if w.Ready {
				continue
			}
			key := w.Kind + "/" + w.Name
			if read {
				pods, err := health.Pods(ctx, r.client, r.apiReader, namespace, *w, sensitive)
				if err != nil {
					return err
				}
				st.pods[key] = pods
			}
			w.Pods = st.pods[key]
		}
	}
	return nil
}

// correctDrift compares the release's objects with the live ones when the
// interval has passed, and puts drifted fields back. It owns Drifted.
func (r *Reconciler) correctDrift(ctx context.Context, rs *reconcileState) error {
	sd := rs.sd
	if apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted) == nil {
		setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionFalse, v1alpha1.ReasonNoDrift, "not checked yet")
	}
	st := r.state(sd.Namespace)
	now := r.now()
	if now.Before(st.nextCheck) {
		rs.requeueWithin(st.nextCheck.Sub(now))
		return nil
	}
	hold, err := r.cachedHold(ctx, rs)
	if err != nil {
		return outcome.Retryable(v1alpha1.ReasonDriftCheckPaused, err)
	}
	if hold.why != "" {
		// Checked again soon: the task's end does not requeue this object.
		setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionFalse, v1alpha1.ReasonDriftCheckPaused, hold.why)
		rs.requeueWithin(min(r.interval, taskPollInterval))
		return nil
	}
	start := time.Now()
	drifts, err := r.checkDrift(ctx, rs.releases, sd, st)
	st.nextCheck = now.Add(r.interval)
	rs.requeueWithin(r.interval)
	defer func() { r.metrics.driftDuration.Observe(time.Since(start).Seconds()) }()
	if errors.Is(err, release.ErrReleaseGone) {
		// Someone removed the release's record: install it again now,
		// so `helm list` and `helm history` tell the truth again.
		r.metrics.driftChecks.WithLabelValues("drifted").Inc()
		setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionTrue, v1alpha1.ReasonDriftDetected, err.Error())
		r.recorder.Eventf(sd, nil, corev1.EventTypeWarning, v1alpha1.EventReleaseRecordMissing, "CorrectDrift",
			"The record of release %s revision %d is gone (helm uninstall or a deleted Secret): writing the release again as a new revision", sd.Status.Release.Name, sd.Status.Release.Revision)
		sd.Status.Release = nil
		sd.Status.AppliedDigest = ""
		st.applied = nil
		rs.requeueAfter = time.Millisecond
		return nil
	}
	if errors.Is(err, release.ErrRecordChanged) {
		// Someone rewrote the record (a Secret of the namespace): nothing
		// of it is applied. The release is written again from the lock as
		// a new revision; the status keeps the revision and its digest,
		// so that the apply does not trust the record either.
		r.metrics.driftChecks.WithLabelValues("drifted").Inc()
		setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionTrue, v1alpha1.ReasonDriftDetected, err.Error())
		r.recorder.Eventf(sd, nil, corev1.EventTypeWarning, v1alpha1.EventReleaseRecordChanged, "CorrectDrift",
			"The record of release %s revision %d was changed outside the agent: nothing of it is applied; writing the release again from the lock as a new revision", sd.Status.Release.Name, sd.Status.Release.Revision)
		sd.Status.AppliedDigest = ""
		st.applied = nil
		rs.requeueAfter = time.Millisecond
		return nil
	}
	if errors.Is(err, release.ErrSensitiveValuesGone) {
		r.metrics.driftChecks.WithLabelValues("drifted").Inc()
		r.sensitiveValuesGone(rs, err)
		return nil
	}
	if err != nil {
		// A look at the live objects that failed (a read the identity may
		// not make, the API server busy) says nothing of the workloads:
		// Ready stays the health phase's verdict, and the check is tried
		// again sooner than the interval.
		r.metrics.driftChecks.WithLabelValues("error").Inc()
		setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionUnknown, v1alpha1.ReasonDriftCheckFailed, err.Error())
		retry := min(r.interval, driftRetryInterval)
		st.nextCheck = now.Add(retry)
		rs.requeueWithin(retry)
		return nil
	}
	if len(drifts) == 0 {
		r.metrics.driftChecks.WithLabelValues("clean").Inc()
		// A previous correction stays in status.lastDriftCorrection.
		setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionFalse, v1alpha1.ReasonNoDrift, "the live objects match the release")
		return nil
	}
	// The task list read through the cache may not show a task that
	// started since: one that scaled its workers down for a migration
	// would have them put back up in its middle. A task writes Running
	// before its step acts, so a drift its step made shows it running
	// in the API server's list (one request, when something drifted).
	// A step's Job is older than the task's Running: the cache's list.
	if hold, err := driftHold(ctx, r.apiReader, r.client, sd.Namespace); err != nil || hold.why != "" {
		if err != nil {
			return outcome.Retryable(v1alpha1.ReasonDriftCheckPaused, err)
		}
		st.nextCheck = now
		setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionFalse, v1alpha1.ReasonDriftCheckPaused, hold.why)
		rs.requeueWithin(min(r.interval, taskPollInterval))
		return nil
	}
	r.metrics.driftChecks.WithLabelValues("drifted").Inc()
	var refusedBefore string // the message of a refusal the last check reported
	if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted); c != nil && c.Reason == v1alpha1.ReasonDriftCorrectionFailed {
		refusedBefore = c.Message
	}
	// An Ingress whose host another deployment took meanwhile is left
	// out, and named: put back, both would claim it.
	drifts, heldHosts, hosts, err := r.leaveHeldHosts(ctx, sd, drifts)
	if err != nil {
		setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionUnknown, v1alpha1.ReasonDriftCheckFailed, err.Error())
		retry := min(r.interval, driftRetryInterval)
		st.nextCheck = now.Add(retry)
		rs.requeueWithin(retry)
		return nil
	}
	corrected, gens, err := rs.releases.Correct(ctx, st.desired, drifts)
	r.hosts.end(sd.Namespace, hosts, true, r.now())
	err = withRefused(err, heldHosts)
	r.noteGenerations(sd.Namespace, gens)
	summary := release.Summary(corrected)
	if len(corrected) > 0 {
		// Recorded whatever happened to the others: they are back.
		for _, d := range corrected {
			r.metrics.driftCorrections.WithLabelValues(sd.Namespace, d.Ref().Kind).Inc()
		}
		sd.Status.LastDriftCorrection = &v1alpha1.DriftCorrection{Time: metav1.NewTime(now), Objects: release.DriftedObjects(corrected)}
		sd.Status.DriftCorrections++
		setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionFalse, v1alpha1.ReasonDriftCorrected, "put back: "+summary)
		r.recorder.Eventf(sd, nil, corev1.EventTypeWarning, v1alpha1.ReasonDriftCorrected, "CorrectDrift", "Put back drifted objects: %s", summary)
	}
	if errors.Is(err, release.ErrSensitiveValuesGone) {
		r.sensitiveValuesGone(rs, err)
		return nil
	}
	if err != nil {
		// An object the API server refuses to have put back (a volume
		// claim expanded by hand cannot shrink, an admission policy)
		// says nothing of the workloads, as a check that failed: Ready
		// stays the health phase's verdict, Drifted names the object and
		// why, and it is tried again sooner than the interval. The
		// Warning is recorded when the refusal starts or changes, not at
		// every retry.
		refusal := err.Error()
		msg := refusal
		if len(corrected) > 0 {
			msg += "; put back: " + summary
		}
		setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionTrue, v1alpha1.ReasonDriftCorrectionFailed, msg)
		if !strings.HasPrefix(refusedBefore, refusal[:min(len(refusal), 1024)]) {
			r.recorder.Eventf(sd, nil, corev1.EventTypeWarning, v1alpha1.ReasonDriftCorrectionFailed, "CorrectDrift", "%s", truncate(refusal, 1024))
		}
		retry := min(r.interval, driftRetryInterval)
		st.nextCheck = now.Add(retry)
		rs.requeueWithin(retry)
	}
	if len(corrected) == 0 {
		return nil
	}
	// Workloads put back may need to become ready again.
	return r.health(ctx, rs)
}

// withRefused is the error of a correction (err, from Correct) with the
// drifts refused before it added to its refusals.
func withRefused(err error, refused []release.RefusedCorrection) error {
	if len(refused) == 0 {
		return err
	}
	if ce, ok := errors.AsType[*release.CorrectionError](err); ok {
		ce.Refused = append(ce.Refused, refused...)
		return err
	}
	return errors.Join(err, &release.CorrectionError{Refused: refused})
}

// eventSensitiveValuesMissing is the reason of the event that says the
// namespace's Secret of sensitive values was found gone and the release
// is applied again to write it.
const eventSensitiveValuesMissing = "SensitiveValuesMissing"

// sensitiveValuesGone handles a drift check or correction that needed the
// namespace's Secret of sensitive values and found it gone (deleted by
// hand). Only an apply writes it, from git: as for a record gone, the
// release is applied again now (a new revision of the same objects, which
// puts drifted fields back too), or every check would fail until git
// changed. The revision stays in the status: its record is there.
func (r *Reconciler) sensitiveValuesGone(rs *reconcileState, err error) {
	sd := rs.sd
	setCondition(sd, v1alpha1.ConditionDrifted, metav1.ConditionTrue, v1alpha1.ReasonDriftDetected, err.Error())
	r.recorder.Eventf(sd, nil, corev1.EventTypeWarning, eventSensitiveValuesMissing, "CorrectDrift",
		"Secret %s of the sensitive values is gone (deleted by hand): applying release %s again to write it from git", v1alpha1.SensitiveSecretName, sd.Status.Release.Name)
	sd.Status.AppliedDigest = ""
	r.forgetApplied(sd.Namespace)
	rs.requeueAfter = time.Millisecond
}

// cachedHold is driftHold from the cache, read once a reconcile: health
// and the drift check both ask.
func (r *Reconciler) cachedHold(ctx context.Context, rs *reconcileState) (taskHold, error) {
	if !rs.holdRead {
		hold, err := driftHold(ctx, r.client, r.client, rs.sd.Namespace)
		if err != nil {
			return taskHold{}, err
		}
		rs.hold, rs.holdRead = hold, true
	}
	return rs.hold, nil
}

// driftRetryInterval is how soon a drift check that failed is tried again.
const driftRetryInterval = 30 * time.Second

// taskPollInterval is how soon a drift check paused by a task, and a
// deployment whose components failed tasks hold stopped, are looked at
// again.
const taskPollInterval = 5 * time.Second

// checkDrift compares the release revision the status records with the
// live objects; the revision's objects stay in st between checks.
func (r *Reconciler) checkDrift(ctx context.Context, releases *release.Releases, sd *v1alpha1.StyrminDeployment, st *deploymentState) ([]release.Drift, error) {
	if sd.Status.Release == nil {
		return nil, nil
	}
	rel := sd.Status.Release
	desired, drifts, err := releases.Check(ctx, sd.Namespace, rel.Name, rel.Revision, rel.ManifestDigest, sd.Status.Inventory, st.desired)
	if desired != nil {
		st.desired = desired
	}
	return drifts, err
}

// finalize uninstalls the release of a tombstone or a deleted
// StyrminDeployment, then lets the StyrminDeployment go; one deleted
// because Styrmin is being removed (styrminRemoved) goes without.
func (r *Reconciler) finalize(ctx context.Context, rs *reconcileState, orig *v1alpha1.StyrminDeployment) (ctrl.Result, error) {
	sd := rs.sd
	removed, err := r.styrminRemoved(ctx, sd)
	if err != nil {
		return r.resultFor(ctx, rs, orig, outcome.Retryable(v1alpha1.ReasonUninstallFailed, err))
	}
	if removed {
		// Deleting the CRD deletes every StyrminDeployment: uninstalling
		// them would make removing Styrmin remove every application.
		ctrl.LoggerFrom(ctx).Info("the StyrminDeployment CRD is being deleted: leaving the application running as a plain Helm release",
			"release", sd.Spec.Deployment.Name, "sequence", sd.Spec.Sequence)
		r.recorder.Eventf(sd, nil, corev1.EventTypeNormal, eventLeftRunning, "Uninstall",
			"Styrmin is being removed (CRD %s is being deleted): release %s is left running as a plain Helm release, its objects and records kept", deploymentCRD, sd.Spec.Deployment.Name)
	}
	if !removed && (controllerutil.ContainsFinalizer(sd, v1alpha1.FinalizerRelease) || sd.Spec.Tombstone()) {
		start := time.Now()
		releases, err := r.identityOf(sd)
		// What the agent knows of the release's objects besides its
		// records, which a namespace deleted by hand takes with it.
		known, inventory := r.lastApplied(sd.Namespace), sd.Status.Inventory
		if err == nil {
			err = releases.Uninstall(ctx, sd.Namespace, sd.Spec.Deployment.Name, known, inventory)
		}
		if err != nil && apierrors.IsForbidden(err) && releases != r.releases && r.namespaceTerminating(ctx, sd.Namespace) {
			// The namespace is going, and with it the service account's
			// Role and the agent's right to act as it: nothing can grant
			// them again there, and the finalizer would hold the
			// namespace for good. The agent uninstalls itself: only the
			// release's objects are deleted (their release annotations
			// are checked), and those in the namespace go with it anyway.
			r.recorder.Eventf(sd, nil, corev1.EventTypeWarning, v1alpha1.EventUninstalledAsAgent, "Uninstall",
				"Namespace %s is being deleted and %s may no longer act: uninstalling release %s as the agent (%v)", sd.Namespace, sd.Status.AppliedAs, sd.Spec.Deployment.Name, err)
			err = r.releases.Uninstall(ctx, sd.Namespace, sd.Spec.Deployment.Name, known, inventory)
		}
		r.metrics.applyDuration.WithLabelValues("uninstall", metricsreg.ResultLabel(err)).Observe(time.Since(start).Seconds())
		if err != nil {
			return r.resultFor(ctx, rs, orig, outcome.Retryable(v1alpha1.ReasonUninstallFailed, err))
		}
		r.recorder.Eventf(sd, nil, corev1.EventTypeNormal, v1alpha1.EventUninstalled, "Uninstall",
			"Uninstalled release %s (sequence %d)", sd.Spec.Deployment.Name, sd.Spec.Sequence)
	}
	r.forget(sd.Namespace)
	if err := r.removeFinalizer(ctx, sd); err != nil {
		return ctrl.Result{}, err
	}
	if sd.DeletionTimestamp.IsZero() {
		// A tombstone: the deployment is gone, and so is its record.
		if err := r.client.Delete(ctx, sd, client.Preconditions{UID: &sd.UID}); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("delete tombstoned StyrminDeployment: %w", err)
		}
	}
	return ctrl.Result{}, nil
}

// eventLeftRunning is the reason of the event that says a deleted
// StyrminDeployment's release was left running because Styrmin is being
// removed.
const eventLeftRunning = "LeftRunning"

// deploymentCRD is the name of the StyrminDeployment CRD.
const deploymentCRD = "styrmindeployments." + v1alpha1.Group

// styrminRemoved reports whether a deleted StyrminDeployment is deleted
// because its CRD is (kubectl delete -k config/, a careless kubectl
// delete crd): being deleted, or gone, as the API server says. Styrmin is
// then being removed, not the application. Forbidden counts as no (an
// install whose RBAC lacks get on the CRD uninstalls as before); another
// error is returned, so that a doubt never uninstalls.
func (r *Reconciler) styrminRemoved(ctx context.Context, sd *v1alpha1.StyrminDeployment) (bool, error) {
	if sd.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(sd, v1alpha1.FinalizerRelease) {
		return false, nil
	}
	return instance.CRDRemoved(ctx, r.apiReader, deploymentCRD)
}

// lastApplied is the last revision this agent applied of a deployment's
// release (nil: none in memory).
func (r *Reconciler) lastApplied(namespace string) *release.Revision {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.states[namespace]; st != nil && st.applied != nil {
		return st.applied.revision
	}
	return nil
}

// namespaceTerminating reports whether namespace is being deleted, as the
// API server says (a read error counts as no).
func (r *Reconciler) namespaceTerminating(ctx context.Context, namespace string) bool {
	var ns corev1.Namespace
	if err := r.apiReader.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		return false
	}
	return !ns.DeletionTimestamp.IsZero()
}

// resultFor maps the outcome of the phases to the conditions and the
// reconcile result, and writes the status when it changed.
func (r *Reconciler) resultFor(ctx context.Context, rs *reconcileState, orig *v1alpha1.StyrminDeployment, err error) (ctrl.Result, error) {
	sd := rs.sd
	sd.Status.ObservedGeneration = sd.Generation
	var result ctrl.Result
	switch {
	case err == nil:
		switch {
		case rs.ready:
			setCondition(sd, v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonSucceeded, "the cluster runs the instance")
		case rs.held != "":
			setCondition(sd, v1alpha1.ConditionReconciling, metav1.ConditionTrue, v1alpha1.ReasonComponentsHeldStopped, "waiting for a task to start what failed tasks left stopped: "+rs.held)
		default:
			setCondition(sd, v1alpha1.ConditionReconciling, metav1.ConditionTrue, v1alpha1.ReasonProgressing, "waiting for the components to become ready")
		}
		result.RequeueAfter = rs.requeueAfter
	default:
		o := outcome.Map(err, v1alpha1.ReasonApplyFailed)
		reason, msg := o.Reason, err.Error()
		if prev := apimeta.FindStatusCondition(orig.Status.Conditions, v1alpha1.ConditionReady); prev == nil || prev.Status == metav1.ConditionTrue || prev.Reason != reason {
			// A condition alone is easy to miss: a failing or stalled
			// deployment records a Warning when it starts failing that
			// way (once, not at every retry).
			r.recorder.Eventf(sd, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", truncate(msg, 1024))
		}
		setCondition(sd, v1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
		if o.Kind == outcome.Stall {
			setCondition(sd, v1alpha1.ConditionStalled, metav1.ConditionTrue, reason, msg)
			setCondition(sd, v1alpha1.ConditionReconciling, metav1.ConditionFalse, reason, "stalled until a new instance is locked in git")
			// A new generation (from git) retriggers at once; a slow retry
			// covers a driver source that was only behind.
			err = nil
			result.RequeueAfter = r.interval
		} else {
			setCondition(sd, v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonSucceeded, "")
			setCondition(sd, v1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, "retrying: "+msg)
			if o.Kind == outcome.Retry && o.After > 0 {
				err, result.RequeueAfter = nil, o.After
			}
		}
	}
	// statusErr is the status write's below (nil: made); a claimed record
	// of the active instance is settled with it, on every way out.
	statusErr := instance.ErrNotWritten
	if err == nil {
		if settle := r.activeWithReady(ctx, rs); settle != nil {
			defer func() { settle(statusErr) }()
		}
	}
	if sd.DeletionTimestamp.IsZero() && !sd.Spec.Tombstone() {
		r.metrics.observe(sd)
	}
	if worthWriting(&orig.Status, &sd.Status) {
		base := sd.DeepCopy()
		base.Status = orig.Status
		if sd.Status.ActiveSequence != orig.Status.ActiveSequence {
			// The whole summary in the patch: a merge patch from a cached
			// copy would leave out the fields it shares with the older one.
			base.Status.Active = nil
		}
		// Only over the copy decided on (writeStatus): a replica that
		// lost its lease would otherwise write what it decided before
		// over the next leader's newer status (an older change recorded
		// active, and the next change's workflow chosen against it).
		otherSince, perr := r.writeStatus(ctx, sd, base, orig)
		statusErr = perr
		switch {
		case apierrors.IsConflict(perr):
			// Decided again on the API server's copy.
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		case perr != nil && !apierrors.IsNotFound(perr):
			return ctrl.Result{}, errors.Join(err, fmt.Errorf("write status: %w", perr))
		case otherSince && err == nil:
			// Another writer's status landed after this one: decided
			// again on it.
			if result.RequeueAfter == 0 || result.RequeueAfter > conflictRetry {
				result.RequeueAfter = conflictRetry
			}
		}
	}
	return result, err
}

// activeWithReady records the instance as the deployment's active one in
// the status write that makes it Ready at its sequence, when the task
// applying it runs nothing after this: its current step, the last, is the
// core step that writes the instance and waits for exactly this. That is
// one status write per change less than the task's own record of it
// (recordActive), which then finds it made. A task with steps after the
// core one (an upgrade's verification, say) records it when they succeed;
// a task not in the cache, or finished, is left to itself.
//
// The record is claimed first (instance.ActiveClaims): a task that has
// claimed its failure (its deadline passed, a workload failed) while
// this cache still shows it running is not recorded, and a task whose
// deadline passes while the write is under way waits for it and counts
// it done. The returned settle, when not nil, must be called with the
// status write's error (nil: made; instance.ErrNotWritten: not sent).
func (r *Reconciler) activeWithReady(ctx context.Context, rs *reconcileState) (settle func(error)) {
	sd, in := rs.sd, rs.instance
	seq := sd.Spec.Sequence
	if in == nil || in.Tombstone() || !sd.DeletionTimestamp.IsZero() || sd.Status.ActiveSequence >= seq {
		return nil
	}
	if ok, err := instance.Applied(sd, seq); err != nil || !ok {
		return nil
	}
	var t v1alpha1.StyrminTask
	key := client.ObjectKey{Namespace: sd.Namespace, Name: v1alpha1.TaskName(sd.Spec.Deployment.Name, seq)}
	if err := r.client.Get(ctx, key, &t); err != nil || !instance.LastStepWritesInstance(&t, sd.Spec.Deployment, seq, sd.Spec.Digest) {
		return nil
	}
	settle, ok := r.claims.Record(t.UID)
	if !ok {
		return nil
	}
	sd.Status.Active = instance.Summary(in, t.Name)
	sd.Status.ActiveSequence = seq
	return settle
}

// worthWriting reports whether the status changed in more than the
// progress of a rollout. While a deployment stays not ready, its replica
// counts change with every pod; writing each would cost a request per pod,
// so they are written with the next change that matters (Ready turning
// True, a new reason, a new sequence).
func worthWriting(old, cur *v1alpha1.StyrminDeploymentStatus) bool {
	if equality.Semantic.DeepEqual(old, cur) {
		return false
	}
	if apimeta.IsStatusConditionTrue(old.Conditions, v1alpha1.ConditionReady) ||
		apimeta.IsStatusConditionTrue(cur.Conditions, v1alpha1.ConditionReady) {
		return true
	}
	a, b := old.DeepCopy(), cur.DeepCopy()
	for _, st := range []*v1alpha1.StyrminDeploymentStatus{a, b} {
		// Readiness and counts move with every pod; a failure and the
		// pods' reasons are worth a write.
		st.Components = failuresOf(st.Components)
		for i := range st.Conditions {
			if st.Conditions[i].Reason == v1alpha1.ReasonComponentsNotReady || st.Conditions[i].Reason == v1alpha1.ReasonProgressing {
				st.Conditions[i].Message = ""
			}
		}
	}
	return !equality.Semantic.DeepEqual(a, b)
}

// failuresOf is what is worth a status write of components that are not
// ready: the failed workloads and the pods with their reasons.
func failuresOf(comps []v1alpha1.ComponentStatus) []v1alpha1.ComponentStatus {
	var out []v1alpha1.ComponentStatus
	for _, c := range comps {
		var ws []v1alpha1.WorkloadStatus
		for _, w := range c.Workloads {
			if !w.Failed && len(w.Pods) == 0 {
				continue
			}
			k := v1alpha1.WorkloadStatus{Kind: w.Kind, Name: w.Name, Failed: w.Failed}
			for _, p := range w.Pods {
				k.Pods = append(k.Pods, v1alpha1.PodStatus{Name: p.Name, Phase: p.Phase, Reason: p.Reason})
			}
			ws = append(ws, k)
		}
		if len(ws) > 0 {
			out = append(out, v1alpha1.ComponentStatus{Name: c.Name, Workloads: ws})
		}
	}
	return out
}

// setCondition sets a condition; its transition time changes only with
// its status.
func setCondition(sd *v1alpha1.StyrminDeployment, typ string, status metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(&sd.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: truncate(msg, 2048), ObservedGeneration: sd.Generation,
	})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// state returns a deployment's in-memory state. A deployment first seen
// (after an agent start) gets its first drift check at a random point of
// the interval, so hundreds of deployments do not all check at once.
func (r *Reconciler) state(namespace string) *deploymentState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.states[namespace]
	if !ok {
		st = &deploymentState{nextCheck: r.now().Add(rand.N(r.interval))}
		r.states[namespace] = st
	}
	return st
}

// forgetApplied drops what the deployment's last successful apply left
// in memory (which stands in for a status the cache does not show yet):
// an apply failed since.
func (r *Reconciler) forgetApplied(namespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.states[namespace]; st != nil {
		st.applied = nil
	}
}

// resetState starts a deployment's state over after an apply: the first
// drift check of the new revision is one interval later.
func (r *Reconciler) resetState(namespace string, applied *appliedRelease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &deploymentState{applied: applied, nextCheck: r.now().Add(r.interval)}
	if old := r.states[namespace]; old != nil {
		st.wrote = old.wrote
	}
	if rev := applied.revision; rev != nil {
		// The apply's answers hold the field sets the drift check
		// expects: its first check needs no dry-run apply.
		st.desired = rev.Desired()
		st.generations = rev.Generations()
	}
	r.states[namespace] = st
}

// noteGenerations records the generations a correction of a deployment's
// workloads was answered with.
func (r *Reconciler) noteGenerations(namespace string, gens release.Generations) {
	if len(gens) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states[namespace]
	if st == nil {
		return
	}
	// A new map: the one before may be the revision's, or handed out.
	merged := release.Generations{}
	maps.Copy(merged, st.generations)
	maps.Copy(merged, gens)
	st.generations = merged
}

// written tells the health check the generations this agent last wrote
// the deployment's workloads at (nil: none known, after a restart).
func (r *Reconciler) written(namespace string) health.Written {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states[namespace]
	if st == nil || len(st.generations) == 0 {
		return nil
	}
	return st.generations.Of
}

// noteWritten records the resourceVersion a write of a deployment's
// StyrminDeployment was answered with.
func (r *Reconciler) noteWritten(namespace, resourceVersion string) {
	st := r.state(namespace)
	r.mu.Lock()
	defer r.mu.Unlock()
	st.wrote = resourceVersion
}

// wroteVersion is the resourceVersion of this controller's last write of
// a deployment's StyrminDeployment ("": none since the agent started, or
// since the deployment was forgotten).
func (r *Reconciler) wroteVersion(namespace string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.states[namespace]; st != nil {
		return st.wrote
	}
	return ""
}

func (r *Reconciler) forget(namespace string) {
	r.mu.Lock()
	delete(r.states, namespace)
	r.mu.Unlock()
	r.metrics.drop(namespace)
}

// activeSequenceChanged passes the write of a new active instance
// (status.activeSequence), the task controller's, so the deployment's
// metrics and conditions follow it at once; of the controller's own
// status writes only the one that records it with Ready passes
// (activeWithReady), once a change, as the task's did.
var activeSequenceChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.StyrminDeployment)
		n, ok2 := e.ObjectNew.(*v1alpha1.StyrminDeployment)
		return ok1 && ok2 && o.Status.ActiveSequence != n.Status.ActiveSequence
	},
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// setupWithManager registers the controller: StyrminDeployments, and the
// workloads of their releases (a workload's change reconciles the
// StyrminDeployment of its namespace, which is named after it).
func (r *Reconciler) setupWithManager(mgr ctrl.Manager, concurrency int, log logr.Logger) error {
	toDeployment := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if o.GetAnnotations()[release.ReleaseNamespaceAnnotation] == "" {
			return nil
		}
		ns := o.GetNamespace()
		return []reconcile.Request{{NamespacedName: instance.Key(ns)}}
	})
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &networkingv1.Ingress{}, HostIndex, IndexHosts); err != nil {
		return fmt.Errorf("index Ingresses by host: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("styrmindeployment").
		For(&v1alpha1.StyrminDeployment{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, activeSequenceChanged,
			r.statusWrittenElsewhere()))).
		Watches(&appsv1.Deployment{}, toDeployment).
		Watches(&appsv1.StatefulSet{}, toDeployment).
		Watches(&appsv1.DaemonSet{}, toDeployment).
		// A process may build several managers (tests do); they share
		// the controller's metrics.
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency, SkipNameValidation: ptr.To(true)}).
		WithLogConstructor(func(req *reconcile.Request) logr.Logger {
			if req == nil {
				return log
			}
			return log.WithValues("namespace", req.Namespace)
		}).
		Complete(r)
}
