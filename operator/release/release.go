package release

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// Helm's labels and annotations on the objects of a release (exported:
// the agent caches and watches the workloads that carry them). Helm adds
// them when it applies; drift correction applies them too, so that the
// field set Styrmin owns is the same whichever of the two applied last.
const (
	ManagedByLabel             = "app.kubernetes.io/managed-by"
	ManagedByValue             = "Helm"
	ReleaseNameAnnotation      = "meta.helm.sh/release-name"
	ReleaseNamespaceAnnotation = "meta.helm.sh/release-namespace"
	// helmResourcePolicyAnnotation set to helmKeepPolicy keeps an object
	// when its release drops it or is uninstalled.
	helmResourcePolicyAnnotation = "helm.sh/resource-policy"
	helmKeepPolicy               = "keep"
	// driverDigestAnnotation on the release's chart records the driver's
	// digest.
	driverDigestAnnotation = v1alpha1.Group + "/driver-digest"
)

// Releases installs, upgrades and uninstalls the Helm releases of all
// deployments, as Helm's actions would, without them: objects are applied
// with server-side apply (releaseObjects) and revisions are written in
// Helm's storage format (releaseRecords), so the helm CLI reads them as
// its own. Not linking Helm's actions (and with them its registry, plugin,
// kubectl and SQL storage code) keeps the agent's binary, all of which is
// resident, smaller.
type Releases struct {
	logger     slog.Handler
	maxHistory int

	// objects parses, applies and deletes a release's objects.
	objects *releaseObjects
	// records reads and writes revisions in Helm's format.
	records *releaseRecords

	// identities builds and keeps the engines that act as a service
	// account (As); nil on those engines themselves.
	identities *identities
}

// identities are the release engines of impersonated users, by user
// name, built once each from the agent's own configuration.
type identities struct {
	cfg    *rest.Config
	mu     sync.Mutex
	byUser map[string]*Releases
}

// Options configure Releases.
type Options struct {
	// MaxHistory bounds the revisions kept per release (0: Helm's default
	// of unlimited); failed revisions count, and while they fail a bound
	// below 3 keeps 3, and a failed revision whose objects no other lists
	// is kept (see trimHistory).
	MaxHistory int
	// Logger receives warnings that change nothing (a trim that failed).
	Logger slog.Handler
	// Config is the agent's client configuration, from which As builds
	// clients that impersonate a user (nil: As refuses).
	Config *rest.Config
}

// New returns the release engine over the API server's clients: cs for
// the release records, dyn and mapper for the release's objects.
func New(cs kubernetes.Interface, dyn dynamic.Interface, mapper meta.RESTMapper, opts Options) (*Releases, error) {
	if cs == nil || dyn == nil || mapper == nil {
		return nil, errors.New("release: a clientset, a dynamic client and a REST mapper are required")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.DiscardHandler
	}
	h := &Releases{
		logger:     logger,
		maxHistory: opts.MaxHistory,
		objects:    &releaseObjects{dyn: dyn, mapper: mapper, sensitive: &sensitiveSecrets{cs: cs}, logger: logger, discovery: cs.Discovery().RESTClient()},
		records:    newReleaseRecords(cs),
	}
	if opts.Config != nil {
		h.identities = &identities{cfg: rest.CopyConfig(opts.Config), byUser: map[string]*Releases{}}
	}
	return h, nil
}

// As returns the release engine that acts as user (Kubernetes
// impersonation): every request of its Apply, Check, Correct and
// Uninstall, release records included, is the user's, so the cluster's
// RBAC for that user bounds what a release can change. "" is the agent's
// own identity. Engines are built once per user and kept.
func (h *Releases) As(user string) (*Releases, error) {
	if user == "" {
		return h, nil
	}
	ids := h.identities
	if ids == nil {
		return nil, fmt.Errorf("release: cannot act as %s: the release engine has no client configuration to impersonate with", user)
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if r, ok := ids.byUser[user]; ok {
		return r, nil
	}
	cfg := rest.CopyConfig(ids.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("release: client acting as %s: %w", user, err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("release: client acting as %s: %w", user, err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("release: client acting as %s: %w", user, err)
	}
	r := &Releases{
		logger:     h.logger,
		maxHistory: h.maxHistory,
		objects:    &releaseObjects{dyn: dyn, mapper: h.objects.mapper, sensitive: &sensitiveSecrets{cs: cs}, logger: h.logger, discovery: cs.Discovery().RESTClient()},
		records:    newReleaseRecords(cs),
	}
	ids.byUser[user] = r
	return r, nil
}

// Request is one install or upgrade.
type Request struct {
	Namespace string
	Name      string
	Driver    v1alpha1.DriverRef
	// AppVersion is recorded on the release's chart.
	AppVersion string
	// Values are recorded as the release's values.
	Values map[string]any
	// Objects are what drivers.Render produced: exactly what is applied.
	Objects []drivers.Object
	// Description is recorded on the revision.
	Description string
	// Sensitive are the values of the placeholders Values and Objects
	// hold (nil: none). They are written to the namespace's Secret
	// v1alpha1.SensitiveSecretName and put in place as each object is
	// applied; the record keeps the placeholders.
	Sensitive resolver.Sensitive
	// Rerun are Jobs of the release that failed: deleted (when the
	// release created them) before they are applied, so that the
	// revision runs them again. A Job's template cannot be changed, and
	// a failed Job applied unchanged stays failed: without this neither a
	// retry nor a fix that leaves the Job alone could get past it.
	Rerun []v1alpha1.ObjectRef
	// Finished are Jobs of the release that finished and are gone (their
	// ttlSecondsAfterFinished, or deleted by hand): not made again by a
	// revision that leaves them as they were, which would run their work
	// a second time (Revision.FinishedKept).
	Finished []v1alpha1.ObjectRef
	// PreviousDigest is ManifestDigest of the revision the apply follows,
	// as the agent wrote it ("": not known). A record of that revision
	// whose manifest differs was changed outside the agent: none of its
	// objects is taken as the release's own (forced back), whatever it
	// lists.
	PreviousDigest string
	// Inventory are the objects the agent recorded the release's last
	// apply with (the StyrminDeployment's status, which only the agent
	// writes). One that conflicts and whose live annotations name this
	// release is the release's own, forced as a deployed revision's are,
	// when the record cannot say so: gone (deleted by hand) or rewritten.
	// Without it, a field another manager held (an autoscaler's
	// replicas, a kubectl scale) failed every retry of the new install
	// with a conflict.
	Inventory []v1alpha1.ObjectRef
	// Stopped are the components whose workloads the deployment's
	// running task stopped and has not started again (its upgrade's
	// stopComponents before a migration). Their scalable workloads whose
	// chart sets spec.replicas are applied at zero: forced back to the
	// chart's count, the workers ran on the new image during the steps
	// before the task's startComponents, which then scales them to the
	// new chart's count. Nil (the common apply) changes nothing.
	Stopped []string
}

// Revision is a release revision this agent wrote, with the
// objects it applied and the field sets Styrmin owns on them after the
// apply: the first drift check of the revision needs neither a read of
// the record nor a dry-run apply.
//
// The agent keeps the last revision of every release (the next upgrade
// supersedes it without reading it back), so a Revision holds the record
// gzipped, as stored but for the base64 (a third more), rather than the
// decoded release: its manifest, chart and values took about 12 KiB per
// deployment, the most of the agent's heap at 2,000 deployments after its
// caches.
type Revision struct {
	name   string
	number int
	chart  string
	status string
	// manifestDigest is ManifestDigest of the manifest recorded.
	manifestDigest string
	// record is the revision's record (the Secret's "release" value)
	// without its base64, and namespace the release's, to name it when
	// it is decoded.
	record    []byte
	namespace string
	// desired is the objects applied and their field sets, packed (nil
	// when they could not be: the first drift check reads the record).
	desired []byte
	// generations are the workloads' generations the applies were
	// answered with.
	generations Generations
	// finishedKept are the finished Jobs gone that this revision did not
	// make again (Request.Finished).
	finishedKept []v1alpha1.ObjectRef
}

// FinishedKept are the Jobs of Request.Finished the revision did not make
// again: finished before, and still so.
func (r *Revision) FinishedKept() []v1alpha1.ObjectRef { return r.finishedKept }

// Generations are the generations the revision's workloads were applied
// at (see Generations).
func (r *Revision) Generations() Generations { return r.generations }

// newRevision keeps rel, recorded as record (gzipped, releaseRecords.create),
// with the objects applied and their field sets.
func newRevision(rel *release.Release, record []byte, objs []*desiredObject, fields map[string][]byte, gens Generations) *Revision {
	// Not packed: the drift check reads the record, as after a restart.
	desired, _ := pack(objs, fields)
	return &Revision{
		name: rel.Name, number: rel.Version, chart: rel.Chart.Metadata.Name + "-" + rel.Chart.Metadata.Version,
		status: string(rel.Info.Status), manifestDigest: ManifestDigest(rel.Manifest), record: record, namespace: rel.Namespace,
		desired: desired, generations: gens,
	}
}

// decode returns the release the revision recorded.
func (r *Revision) decode() (*release.Release, error) {
	return decodeRecord(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: releaseKey(r.name, r.number)},
		Data:       map[string][]byte{"release": base64.StdEncoding.AppendEncode(nil, r.record)},
	})
}

// Apply applies the request's objects with server-side apply and records
// them as a new revision of the Helm release, in Helm's own storage
// format, so `helm list`, `helm history` and `helm get manifest` show the
// truth and `helm uninstall` works.
//
// It does what Helm's install and upgrade actions do here, with fewer
// requests, which is what bounds the agent at scale (issue: API-server
// CPU per deployment):
//
//   - Helm reads the release history (one or two LISTs) and reads every
//     object before applying it; here the previous revision comes from
//     memory (known), by its key (one GET) or, when the status names
//     none, from one LIST (see previousRevision), and only the objects
//     outside the release's namespace are read (their release
//     annotations, see refuseOtherReleases): none in a release that
//     renders none.
//   - Helm writes a revision three times (pending, then deployed, then
//     the previous one superseded); here it is written once, when the
//     apply has succeeded or failed, and the previous one once.
//
// An object is applied forcing conflicts only when the last revision of
// the release that deployed lists it, or a failed revision since then
// created it (see adopter): then the release created it and its fields
// are Styrmin's (forcing takes back fields another manager changed,
// drift). Any other object, in the first revision or new in an upgrade,
// is applied without force: one that exists and whose fields another
// manager owns is not taken over (Helm refuses to adopt it too), and the
// error names the object and the other manager; nor is one whose release
// annotations name another release, or outside the release's namespace
// one with no release's annotations (refused before anything is applied,
// the error naming that release, or how to adopt it). Objects of the previous
// revision that the new one lacks are deleted, but for those annotated
// helm.sh/resource-policy: keep; after a failed revision, so are those of
// every revision since the last that deployed (what they created before
// they failed), the release's only.
//
// known is the last revision this agent wrote (nil: none in memory) and
// revision the one the StyrminDeployment's status records (0: none). A
// failure after some objects were applied is recorded as a failed
// revision, as Helm does. An upgrade changing a field the API server
// cannot change in place (a Deployment's selector, see unchangeableFields)
// is found by a dry run of that object first, and refused before
// anything is applied (UnchangeableError): Helm applies up to it.
func (h *Releases) Apply(ctx context.Context, req Request, known *Revision, revision int) (*Revision, bool, error) {
	var knownRel *release.Release
	if known != nil {
		// Kept by this agent; one that does not decode is read again.
		knownRel, _ = known.decode()
	}
	// hist is the release's history (oldest first) when this apply read
	// it, nil while it did not: the common upgrade reads none.
	prev, hist, err := h.previousRevision(ctx, req.Namespace, req.Name, knownRel, revision)
	if err != nil {
		return nil, false, fmt.Errorf("release %s/%s: reading revision %d: %w", req.Namespace, req.Name, revision, err)
	}
	manifest := releaseManifest(req.Objects)
	objs, err := h.objects.desiredObjects(manifest, req.Name, req.Namespace, componentsOf(req.Objects, req.Namespace))
	if err != nil {
		return nil, false, err
	}
	// After a failed revision the history says which revision deployed
	// last (one LIST, only then): it decides forcing.
	var deployed []*release.Release
	if prev != nil && prev.Info != nil && prev.Info.Status == rcommon.StatusFailed {
		if hist == nil {
			if hist, err = h.records.history(ctx, req.Namespace, req.Name); err != nil {
				return nil, false, fmt.Errorf("release %s/%s: %w", req.Namespace, req.Name, err)
			}
		}
		deployed = deployedOf(hist)
	}
	// Forcing takes fields back from managers that changed them (drift)
	// on the objects the release created: those of the revision that
	// deployed last. A failed revision's list may name an object another
	// manager owns, which a retry must not take over (see adopter for
	// those it did create).
	created, err := h.createdObjects(prev, deployed, req)
	if err != nil {
		return nil, false, fmt.Errorf("release %s/%s: %w", req.Namespace, req.Name, err)
	}
	if prev != nil && prev.Version == revision && req.PreviousDigest != "" && ManifestDigest(prev.Manifest) != req.PreviousDigest {
		// A rewritten record: what it says the release created may be
		// anyone's objects. Each is checked for another owner instead.
		clear(created)
	}
	// The record as it will be written if the apply succeeds, gzipped
	// now: one that cannot be written (too large for its Secret) is
	// refused before any object is applied. Written as it is below unless
	// the apply fails or the revision moves on (record).
	now := time.Now()
	rel := &release.Release{
		Name:        req.Name,
		Namespace:   req.Namespace,
		Chart:       releaseChart(req),
		Config:      req.Values,
		Manifest:    manifest,
		ApplyMethod: string(release.ApplyMethodServerSideApply),
		Info:        &release.Info{FirstDeployed: now, LastDeployed: now, Status: rcommon.StatusDeployed, Description: req.Description},
	}
	numberAfter(rel, prev)
	gz, err := h.records.gzipped(rel)
	if err != nil {
		return nil, prev == nil, err
	}
	if err := checkSize(rel, gz); err != nil {
		return nil, prev == nil, err
	}
	if err := h.objects.sensitive.write(ctx, req.Namespace, req.Sensitive); err != nil {
		return nil, prev == nil, fmt.Errorf("release %s/%s: %w", req.Namespace, req.Name, err)
	}
	jobs := jobPlan{rerun: jobKeys(req.Rerun)}
	if finished := jobKeys(req.Finished); finished != nil && prev != nil {
		if jobs.keepGone, err = h.unchangedJobs(prev, objs, finished, req); err != nil {
			return nil, false, fmt.Errorf("release %s/%s: %w", req.Namespace, req.Name, err)
		}
	}
	// An object the API server cannot change in place is found before
	// anything is applied: a refusal halfway left the objects before it at
	// the new revision beside workloads at the old one. Compared with the
	// previous revision and, after a failed one (which may not have
	// reached the object), the last that deployed.
	var before []*desiredObject
	for _, rel := range slices.Compact([]*release.Release{prev, last(deployed)}) {
		if rel == nil {
			continue
		}
		had, _, err := h.objects.parseObjects(rel.Manifest, req.Name, req.Namespace, nil, true)
		if err != nil {
			return nil, false, fmt.Errorf("release %s/%s: revision %d: %w", req.Namespace, req.Name, rel.Version, err)
		}
		before = append(before, had...)
	}
	if err := h.objects.tryUnchangeable(ctx, objs, before, created); err != nil {
		return nil, false, fmt.Errorf("upgrade release %s/%s: %w", req.Namespace, req.Name, err)
	}
	if err := h.objects.handOverReplicas(ctx, objs, before, created); err != nil {
		return nil, false, fmt.Errorf("upgrade release %s/%s: %w", req.Namespace, req.Name, err)
	}
	toApply, err := stoppedAtZero(objs, req.Stopped)
	if err != nil {
		return nil, false, fmt.Errorf("release %s/%s: %w", req.Namespace, req.Name, err)
	}
	fields, gens, kept, applied, applyErr := h.objects.applyAll(ctx, toApply, created, jobs, req.Name, h.adopter(hist, req))
	if applyErr != nil && applied == 0 {
		// Nothing changed in the cluster: no revision to record (Helm's
		// install refusing an object it would take over records none
		// either), and a retry does not fill the history with failures.
		return nil, prev == nil, fmt.Errorf("release %s/%s: %w", req.Namespace, req.Name, applyErr)
	}
	// The revisions whose objects were pruned against, by version.
	pruned := map[int]bool{}
	if applyErr == nil && prev != nil {
		applyErr = h.prune(ctx, replaced(prev, hist), objs, req, pruned)
	}
	if applyErr != nil {
		rel.Info.Status = rcommon.StatusFailed
		rel.Info.Description = truncate(req.Description+": "+applyErr.Error(), 1024)
		gz = nil
	}
	// Not on ctx: a reconcile cancelled while it applied (SIGTERM, a lost
	// lease) would leave the objects applied in no record, never pruned
	// nor uninstalled. Bounded all the same.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	record, read, err := h.record(rctx, rel, &prev, gz)
	cancel()
	if err != nil {
		return nil, prev == nil, errors.Join(applyErr, err)
	}
	if read != nil {
		// Records the caller did not know of (a failed revision it was
		// not told of, a lost status): their objects may need pruning too.
		hist = read
		if applyErr == nil && prev != nil {
			applyErr = h.prune(ctx, replaced(prev, hist), objs, req, pruned)
		}
	}
	op := "install"
	if prev != nil {
		op = "upgrade"
	}
	if applyErr != nil {
		// A failed revision is trimmed too, or retries would pile up.
		h.trimHistory(ctx, rel, prev, hist, revision)
		return nil, prev == nil, fmt.Errorf("%s release %s/%s: %w", op, req.Namespace, req.Name, applyErr)
	}
	if err := h.supersede(ctx, rel, prev, hist); err != nil {
		return nil, false, err
	}
	h.trimHistory(ctx, rel, prev, hist, 0)
	if len(req.Sensitive) == 0 && heldSensitive(prev, hist) {
		// The instance has no sensitive values any more: an earlier
		// one's go once a revision without them deployed, not before (the
		// deployed revision's drift correction reveals with them). Only
		// when a revision known here had some: an apply of an instance
		// that never had any (most of them) makes no request for it. A
		// failure is tried again by the next apply or the uninstall.
		if err := h.objects.sensitive.remove(ctx, req.Namespace); err != nil {
			h.warn(ctx, "release %s/%s: %v", req.Namespace, req.Name, err)
		}
	}
	rev := newRevision(rel, record, objs, fields, gens)
	rev.finishedKept = kept
	return rev, prev == nil, nil
}

// recordTimeout bounds the write of a revision's record once its objects
// were applied, which the apply's context no longer bounds.
const recordTimeout = 30 * time.Second

// unchangedJobs returns the Jobs of finished (by key) that objs holds as
// prev did: a revision that leaves a Job as it was does not mean it to run
// again.
func (h *Releases) unchangedJobs(prev *release.Release, objs []*desiredObject, finished map[string]bool, req Request) (map[string]bool, error) {
	before, _, err := h.objects.parseObjects(prev.Manifest, req.Name, req.Namespace, nil, true)
	if err != nil {
		return nil, fmt.Errorf("previous revision %d: %w", prev.Version, err)
	}
	was := map[string][]byte{}
	for _, o := range before {
		if key := objectKey(o.ref); finished[key] {
			was[key] = jobSpec(o.data)
		}
	}
	out := map[string]bool{}
	for _, o := range objs {
		key := objectKey(o.ref)
		if b, ok := was[key]; ok && b != nil && bytes.Equal(b, jobSpec(o.data)) {
			out[key] = true
		}
	}
	return out, nil
}

// jobSpec is a Job's spec as JSON (nil when it has none): what it runs.
// Its labels change with every chart version (helm.sh/chart), which is no
// reason to run it again.
func jobSpec(data []byte) []byte {
	var o struct {
		Spec json.RawMessage `json:"spec"`
	}
	if json.Unmarshal(data, &o) != nil || len(o.Spec) == 0 {
		return nil
	}
	return o.Spec
}

// jobKeys is the set of the Jobs of refs, by object key (nil: none).
func jobKeys(refs []v1alpha1.ObjectRef) map[string]bool {
	var out map[string]bool
	for _, r := range refs {
		if IsJob(r) {
			if out == nil {
				out = map[string]bool{}
			}
			out[objectKey(r)] = true
		}
	}
	return out
}

// adopter returns applyAll's adopt: whether an object that conflicts was
// created by a failed revision since the last that deployed, or is in
// the inventory the agent recorded (req.Inventory), and its live
// annotations name this release. Its fields are then the
// release's as much as a deployed revision's: without forcing, an edit by
// another manager (kubectl scale) after a failed install or upgrade would
// fail every retry with a conflict saying the release did not create it.
// An object another manager owns that a failed revision was refused
// carries no annotations of the release, and is not forced. The history
// (hist, or one LIST) is read on the first conflict only.
func (h *Releases) adopter(hist []*release.Release, req Request) func(context.Context, *desiredObject) (bool, error) {
	var listed map[string]bool
	return func(ctx context.Context, o *desiredObject) (bool, error) {
		if listed == nil {
			if hist == nil {
				read, err := h.records.history(ctx, req.Namespace, req.Name)
				if err != nil {
					return false, err
				}
				hist = read
			}
			listed = map[string]bool{}
			for _, rel := range slices.Backward(hist) {
				if deployedStatus(rel) {
					break
				}
				objs, _, err := h.objects.parseObjects(rel.Manifest, req.Name, req.Namespace, nil, true)
				if err != nil {
					return false, fmt.Errorf("revision %d: %w", rel.Version, err)
				}
				for _, lo := range objs {
					listed[objectKey(lo.ref)] = true
				}
			}
		}
		if !listed[objectKey(o.ref)] && !slices.ContainsFunc(req.Inventory, func(r v1alpha1.ObjectRef) bool { return objectKey(r) == objectKey(o.ref) }) {
			return false, nil
		}
		live, err := o.resource.Get(ctx, o.ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		ann := live.GetAnnotations()
		return ann[ReleaseNameAnnotation] == req.Name && ann[ReleaseNamespaceAnnotation] == req.Namespace, nil
	}
}

// heldSensitive reports whether prev or a revision of hist placed
// sensitive values: its manifest holds a placeholder.
func heldSensitive(prev *release.Release, hist []*release.Release) bool {
	if prev != nil && strings.Contains(prev.Manifest, resolver.PlaceholderPrefix) {
		return true
	}
	return slices.ContainsFunc(hist, func(r *release.Release) bool { return strings.Contains(r.Manifest, resolver.PlaceholderPrefix) })
}

// createdObjects returns the keys of the objects the release created: the
// objects of prev when it deployed, else of the last revision that did
// (of deployed, oldest first). Only the last, as replaced goes back to it
// only: an object an older revision had was pruned when a later one
// dropped it, and may since be another release's, which forcing would
// take over (refuseOtherReleases reads only those outside the namespace).
// Objects of kinds no longer served are left out: they cannot be applied
// either.
func (h *Releases) createdObjects(prev *release.Release, deployed []*release.Release, req Request) (map[string]bool, error) {
	out := map[string]bool{}
	var revs []*release.Release
	if len(deployed) > 0 {
		revs = deployed[len(deployed)-1:]
	}
	if prev != nil && (prev.Info == nil || prev.Info.Status != rcommon.StatusFailed) {
		revs = []*release.Release{prev}
	}
	for _, rel := range revs {
		objs, _, err := h.objects.parseObjects(rel.Manifest, req.Name, req.Namespace, nil, true)
		if err != nil {
			return nil, fmt.Errorf("revision %d: %w", rel.Version, err)
		}
		for _, o := range objs {
			out[objectKey(o.ref)] = true
		}
	}
	return out, nil
}

// previousRevision returns the release's latest revision, nil when it has
// none: the one in memory, else the one the status names (read by key),
// else whatever the history holds (one LIST: a status can be lost, and a
// revision 1 written over a longer, trimmed history would go unseen).
// The history is returned when it was read, nil when not.
func (h *Releases) previousRevision(ctx context.Context, namespace, name string, known *release.Release, revision int) (*release.Release, []*release.Release, error) {
	if known != nil && known.Version >= revision {
		return known, nil, nil
	}
	if revision != 0 {
		rel, err := h.records.get(ctx, namespace, name, revision)
		if !errors.Is(err, errReleaseNotFound) {
			return rel, nil, err
		}
		// The records were removed, or revision is stale: ask for all.
	}
	hist, err := h.records.history(ctx, namespace, name)
	if err != nil {
		return nil, nil, err
	}
	return last(hist), hist, nil
}

// last is the newest revision of a history (oldest first), nil when empty.
func last(hist []*release.Release) *release.Release {
	if len(hist) == 0 {
		return nil
	}
	return hist[len(hist)-1]
}

// replaced returns the revisions whose objects a new revision after prev
// replaces, newest first: prev when the history was not read (prev is then
// the latest and deployed: a failed one has the history read), else every
// revision since the last one that deployed, that one included (every
// revision when none did). A failed revision may have created objects
// before it failed, and only the fix that follows it can prune them.
func replaced(prev *release.Release, hist []*release.Release) []*release.Release {
	if hist == nil {
		return []*release.Release{prev}
	}
	var out []*release.Release
	for _, rel := range slices.Backward(hist) {
		out = append(out, rel)
		if deployedStatus(rel) {
			break
		}
	}
	return out
}

// deployedStatus reports whether rel deployed: it is deployed, or was
// superseded since.
func deployedStatus(rel *release.Release) bool {
	return rel.Info != nil && (rel.Info.Status == rcommon.StatusDeployed || rel.Info.Status == rcommon.StatusSuperseded)
}

// supersede marks superseded the revisions before rel still marked
// deployed, as Helm's upgrade does: prev when this apply read no history
// (prev is then the latest revision), else every one the history holds:
// an agent stopped between writing a revision and superseding the one
// before left two deployed, and the history (read when the write found
// the newer record) shows both. A failed one stays failed.
func (h *Releases) supersede(ctx context.Context, rel, prev *release.Release, hist []*release.Release) error {
	revs := hist
	if hist == nil && prev != nil {
		revs = []*release.Release{prev}
	}
	for _, o := range revs {
		if o.Version >= rel.Version || o.Info == nil || o.Info.Status != rcommon.StatusDeployed {
			continue
		}
		o.SetStatus(rcommon.StatusSuperseded, "Superseded by revision "+fmt.Sprint(rel.Version))
		if err := h.records.update(ctx, o); err != nil {
			return fmt.Errorf("release %s/%s: marking revision %d superseded: %w", rel.Namespace, rel.Name, o.Version, err)
		}
	}
	return nil
}

// deployedOf returns the revisions of history that deployed (deployed,
// or superseded since), oldest first; empty, not nil, when none did.
func deployedOf(history []*release.Release) []*release.Release {
	out := []*release.Release{}
	for _, rel := range history {
		if deployedStatus(rel) {
			out = append(out, rel)
		}
	}
	return out
}

// record writes rel as the revision after *prev and returns its record
// gzipped (releaseRecords.create). A newer record than the caller knew (written by an agent that
// stopped before recording it in the status, or a failed revision) moves
// the revision on; *prev becomes that record, and the history read to
// find it is returned (nil when none was read).
func (h *Releases) record(ctx context.Context, rel *release.Release, prev **release.Release, gz []byte) ([]byte, []*release.Release, error) {
	var hist []*release.Release
	// taken is the highest revision whose record name a Secret holds that
	// is no record the history reads (someone's Secret, a chart's, one
	// that does not decode): it is numbered past, or every later revision
	// would meet it.
	taken := 0
	gzVersion, gzFirst := rel.Version, rel.Info.FirstDeployed
	for attempt := 0; ; attempt++ {
		numberAfter(rel, *prev)
		rel.Version = max(rel.Version, taken+1)
		if rel.Version != gzVersion || !rel.Info.FirstDeployed.Equal(gzFirst) {
			gz = nil // gzipped for another revision
		}
		record, err := h.records.create(ctx, rel, gz)
		if !errors.Is(err, errReleaseExists) || attempt == 2 {
			if errors.Is(err, errReleaseExists) {
				err = fmt.Errorf("%w: Secret %s holds that name", err, releaseKey(rel.Name, rel.Version))
			}
			if err != nil {
				return nil, hist, fmt.Errorf("release %s/%s: recording revision %d: %w", rel.Namespace, rel.Name, rel.Version, err)
			}
			return record, hist, nil
		}
		read, lerr := h.records.history(ctx, rel.Namespace, rel.Name)
		if lerr != nil {
			return nil, hist, fmt.Errorf("release %s/%s: reading its history: %w", rel.Namespace, rel.Name, lerr)
		}
		hist = read
		*prev = last(hist)
		if l := *prev; l == nil || l.Version < rel.Version {
			// The name is held, but by no record the history reads.
			h.warn(ctx, "release %s/%s: Secret %s holds the name of revision %d but is no release record: numbering past it", rel.Namespace, rel.Name, releaseKey(rel.Name, rel.Version), rel.Version)
			taken = rel.Version
		}
	}
}

// numberAfter makes rel the revision after prev (nil: the first), first
// deployed when prev was.
func numberAfter(rel, prev *release.Release) {
	rel.Version = 1
	if prev != nil {
		rel.Version = prev.Version + 1
		if prev.Info != nil && !prev.Info.FirstDeployed.IsZero() {
			rel.Info.FirstDeployed = prev.Info.FirstDeployed
		}
	}
}

// trimHistory deletes, once rel is recorded, the records beyond the kept
// history (MaxHistory), oldest first. Failing costs nothing but a record
// kept too long: it is logged only.
//
// While the apply fails (status is then the revision the status names,
// 0 when the apply succeeded) the deployed revision D the status names is
// kept, and so is a lost or stale status's (prev, or the newest revision
// that deployed): the drift check reads it. So is D+1: a retry starts
// from D (the caller keeps no failed revision) and learns of the failed
// revisions only when the write of D+1 finds that record; were it gone,
// the retry would write D+1 again, behind newer records. A bound below 3
// is thus exceeded by one while revisions fail.
//
// When this apply read the history (hist: after a failed revision, or on
// a record the caller did not know of), a failed revision trims all
// records beyond the bound, so retries do not pile up (but for a revision
// since the last that deployed listing an object no record left lists:
// it may have created it, and only its record has the fix prune it and
// the uninstall delete it), and a deployed one every record that falls
// out of the window of the last MaxHistory revisions: after a success the
// records lie in that window, and each later apply that reads no history
// deletes the one revision falling out of it, without a LIST.
func (h *Releases) trimHistory(ctx context.Context, rel, prev *release.Release, hist []*release.Release, status int) {
	if h.maxHistory <= 0 {
		return
	}
	kept := map[int]bool{rel.Version: true}
	failed := status != 0 || rel.Info.Status != rcommon.StatusDeployed
	if failed {
		var named []int
		if status != 0 {
			named = append(named, status)
		}
		if prev != nil && prev.Info != nil && prev.Info.Status == rcommon.StatusDeployed {
			named = append(named, prev.Version)
		}
		for _, r := range slices.Backward(hist) {
			if r.Info != nil && r.Info.Status == rcommon.StatusDeployed {
				named = append(named, r.Version)
				break
			}
		}
		for _, v := range named {
			kept[v], kept[v+1] = true, true
		}
	}
	remove := func(version int) {
		if err := h.records.remove(ctx, rel.Namespace, rel.Name, version); err != nil {
			h.warn(ctx, "release %s/%s: deleting revision %d: %v", rel.Namespace, rel.Name, version, err)
		}
	}
	oldest := rel.Version - h.maxHistory // the newest revision out of the window
	switch {
	case hist == nil:
		if oldest >= 1 && !kept[oldest] {
			// Not read: the name may be held by a Secret numbered past.
			if err := h.records.removeIfRecord(ctx, rel.Namespace, rel.Name, oldest); err != nil {
				h.warn(ctx, "release %s/%s: deleting revision %d: %v", rel.Namespace, rel.Name, oldest, err)
			}
		}
	case failed:
		excess := len(hist) + 1 - h.maxHistory
		since := lastDeployed(hist)
		gone := map[int]bool{}
		for _, r := range hist {
			if excess <= 0 {
				break
			}
			if r.Version >= rel.Version || kept[r.Version] {
				continue
			}
			if r.Version >= since && !h.listedElsewhere(r, rel, hist, since, gone) {
				// The revisions since the last that deployed are what
				// the fix prunes and an uninstall deletes (replaced): one
				// that created an object no other lists is kept, or that
				// object would outlive the release. Kept rather than its
				// objects folded into another record, whose manifest
				// would then say what its revision never applied.
				continue
			}
			remove(r.Version)
			gone[r.Version] = true
			excess--
		}
	default:
		for _, r := range hist {
			if r.Version <= oldest {
				remove(r.Version)
			}
		}
	}
}

// lastDeployed is the version of the newest revision of hist that
// deployed, 0 when none did.
func lastDeployed(hist []*release.Release) int {
	for _, r := range slices.Backward(hist) {
		if deployedStatus(r) {
			return r.Version
		}
	}
	return 0
}

// listedElsewhere reports whether every object r lists is also listed by
// rel or by a revision of hist since version since that is not r nor
// trimmed (gone). A manifest that does not parse counts as not listed:
// its record is kept.
func (h *Releases) listedElsewhere(r, rel *release.Release, hist []*release.Release, since int, gone map[int]bool) bool {
	keys := func(x *release.Release) (map[string]bool, error) {
		objs, _, err := h.objects.parseObjects(x.Manifest, rel.Name, rel.Namespace, nil, true)
		out := make(map[string]bool, len(objs))
		for _, o := range objs {
			out[objectKey(o.ref)] = true
		}
		return out, err
	}
	want, err := keys(r)
	if err != nil {
		return false
	}
	for _, x := range append([]*release.Release{rel}, hist...) {
		if len(want) == 0 {
			break
		}
		if x == r || gone[x.Version] || (x != rel && x.Version < since) {
			continue
		}
		have, err := keys(x)
		if err != nil {
			continue
		}
		for k := range want {
			if have[k] {
				delete(want, k)
			}
		}
	}
	return len(want) == 0
}

// warn logs what changes nothing but is worth knowing.
func (h *Releases) warn(ctx context.Context, format string, args ...any) {
	h.logger.Handle(ctx, slog.NewRecord(time.Now(), slog.LevelWarn, fmt.Sprintf(format, args...), 0)) //nolint:errcheck // logging only
}

// prune deletes the objects of revs (the revisions the new one replaces,
// newest first: see replaced) that the new revision no longer has, each
// as the newest revision listing it says (its keep policy), and adds the
// versions pruned against to done; revisions in done are skipped. Only
// the release's objects are deleted (releaseObjects.remove): a failed
// revision lists objects it was refused. Objects of kinds the API server
// no longer serves are skipped, as Uninstall skips them: their kind is
// gone, and with it the objects, and failing on them would fail every
// later upgrade.
func (h *Releases) prune(ctx context.Context, revs []*release.Release, objs []*desiredObject, req Request, done map[int]bool) error {
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		seen[objectKey(o.ref)] = true
	}
	for _, prev := range revs {
		if done[prev.Version] {
			continue
		}
		old, unmapped, err := h.objects.parseObjects(prev.Manifest, req.Name, req.Namespace, nil, true)
		if err != nil {
			return fmt.Errorf("previous revision %d: %w", prev.Version, err)
		}
		if len(unmapped) > 0 {
			h.warn(ctx, "release %s/%s: revision %d holds kinds no longer served, nothing to delete: %s", req.Namespace, req.Name, prev.Version, strings.Join(unmapped, ", "))
		}
		for _, o := range old {
			key := objectKey(o.ref)
			if seen[key] {
				continue
			}
			seen[key] = true
			if o.keep {
				continue
			}
			kept, err := h.objects.remove(ctx, o, req.Name, req.Namespace)
			if err != nil {
				return fmt.Errorf("%w (the new revision no longer has it)", err)
			}
			if kept {
				h.warn(ctx, "release %s/%s: %s, which revision %d had, is not the release's: left alone", req.Namespace, req.Name, o.ref, prev.Version)
			}
		}
		done[prev.Version] = true
	}
	return nil
}

// componentsOf maps each rendered object's key to its component.
func componentsOf(objects []drivers.Object, namespace string) map[string]string {
	out := make(map[string]string, len(objects))
	for _, ref := range Inventory(objects, namespace) {
		out[objectKey(ref)] = ref.Component
	}
	return out
}

// releaseManifest is the release's manifest as Helm writes it: the
// objects in Helm's install order, each under a "# Source:" line naming
// its component, so `helm get manifest` shows where an object comes from.
func releaseManifest(objects []drivers.Object) string {
	sorted := slices.Clone(objects)
	slices.SortStableFunc(sorted, func(a, b drivers.Object) int { return compareInstallOrder(a.Kind, b.Kind) })
	var b strings.Builder
	for _, o := range sorted {
		b.WriteString("---\n# Source: ")
		b.WriteString(sourceName(o))
		b.WriteString("\n")
		b.WriteString(strings.TrimSpace(string(o.YAML)))
		b.WriteString("\n")
	}
	return b.String()
}

// Uninstall removes the release and its objects, as `helm uninstall`
// does: the objects of its latest revision (and of every revision since
// the last that deployed) are deleted in the reverse of
// their install order (but those annotated helm.sh/resource-policy: keep),
// then every revision's record, then the namespace's Secret of sensitive
// values. A release without records is not an error, and its values
// Secret goes all the same. Its revisions carry no hooks: the driver's
// actions do that work.
//
// known (the last revision this agent applied, nil: none in memory) and
// inventory (the StyrminDeployment's status.inventory) are what the agent
// knows of the release's objects besides its records. Those of them
// outside the namespace (cluster-scoped, or in a namespace a policy adds)
// that no record lists are deleted too, unless the live object is
// annotated keep: a namespace deleted by hand takes the records with
// everything else in it, often before the StyrminDeployment's finalizer
// runs, and nothing else would delete them. Those in the namespace are
// not: the namespace controller deletes them with it.
func (h *Releases) Uninstall(ctx context.Context, namespace, name string, known *Revision, inventory []v1alpha1.ObjectRef) error {
	history, err := h.records.history(ctx, namespace, name)
	if err != nil {
		return fmt.Errorf("uninstall release %s/%s: %w", namespace, name, err)
	}
	outside, err := h.objectsOutside(namespace, name, known, inventory)
	if err != nil {
		return fmt.Errorf("uninstall release %s/%s: %w", namespace, name, err)
	}
	// No decodable record (an install that failed on its first object, or
	// a retry after the records went) still removes the values Secret
	// below: Apply writes it before anything is recorded.
	if err := h.removeObjects(ctx, namespace, name, history, outside); err != nil {
		return err
	}
	if err := h.records.removeAll(ctx, namespace, name); err != nil {
		return fmt.Errorf("uninstall release %s/%s: %w", namespace, name, err)
	}
	// The values outlive no release: a deleted deployment leaves none.
	if err := h.objects.sensitive.remove(ctx, namespace); err != nil {
		return fmt.Errorf("uninstall release %s/%s: %w", namespace, name, err)
	}
	return nil
}

// objectsOutside returns the objects of known and inventory (see
// Uninstall) that are outside namespace, each scoped as the cluster
// serves its kind (an inventory lists a custom cluster-scoped kind in the
// release's namespace: drivers.IsClusterScoped does not know it), their
// keep policy to be read from the live object. A known revision that does
// not decode is passed over; kinds no longer served are left out (their
// objects went with them).
func (h *Releases) objectsOutside(namespace, name string, known *Revision, inventory []v1alpha1.ObjectRef) ([]*desiredObject, error) {
	var out []*desiredObject
	if known != nil && known.name == name && known.namespace == namespace {
		if rel, err := known.decode(); err == nil {
			objs, _, err := h.objects.parseObjects(rel.Manifest, name, namespace, nil, true)
			if err != nil {
				return nil, fmt.Errorf("revision %d: %w", known.number, err)
			}
			out = append(out, objs...)
		}
	}
	for _, ref := range inventory {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("inventory %s: %w", ref, err)
		}
		mapping, err := h.objects.mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("inventory %s: %w", ref, err)
		}
		namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
		switch {
		case !namespaced:
			ref.Namespace = ""
		case ref.Namespace == "":
			ref.Namespace = namespace
		}
		out = append(out, &desiredObject{ref: ref, gvr: mapping.Resource, namespaced: namespaced, namespace: namespace,
			resource: resourceOf(h.objects.dyn, mapping.Resource, namespaced, ref.Namespace)})
	}
	out = slices.DeleteFunc(out, func(o *desiredObject) bool { return o.namespaced && o.ref.Namespace == namespace })
	for _, o := range out {
		o.keepLive = true
	}
	return out, nil
}

// removeObjects deletes the objects of the latest revision of history
// (oldest first) and of every revision since the last one that deployed
// (see replaced: a failed revision may have created objects, and may have
// dropped objects of the deployed one), and those of outside no revision
// lists (see Uninstall), in the reverse of their install order, but those
// annotated helm.sh/resource-policy: keep by the newest revision listing
// them. Only the release's objects are deleted.
func (h *Releases) removeObjects(ctx context.Context, namespace, name string, history []*release.Release, outside []*desiredObject) error {
	var objs []*desiredObject
	var unmapped []string
	seen := map[string]bool{}
	var revs []*release.Release
	if len(history) > 0 {
		revs = replaced(last(history), history)
	}
	for _, rel := range revs {
		parsed, gone, err := h.objects.parseObjects(rel.Manifest, name, namespace, nil, true)
		if err != nil {
			return fmt.Errorf("uninstall release %s/%s: revision %d: %w", namespace, name, rel.Version, err)
		}
		for _, o := range parsed {
			if key := objectKey(o.ref); !seen[key] {
				seen[key] = true
				objs = append(objs, o)
			}
		}
		unmapped = append(unmapped, gone...)
	}
	for _, o := range outside {
		if key := objectKey(o.ref); !seen[key] {
			seen[key] = true
			objs = append(objs, o)
		}
	}
	slices.SortStableFunc(objs, func(a, b *desiredObject) int { return compareInstallOrder(a.ref.Kind, b.ref.Kind) })
	slices.Sort(unmapped)
	unmapped = slices.Compact(unmapped)
	if len(unmapped) > 0 {
		// Their kind is gone, and with it the objects.
		h.warn(ctx, "uninstall release %s/%s: kinds no longer served, nothing to delete: %s", namespace, name, strings.Join(unmapped, ", "))
	}
	for _, o := range slices.Backward(objs) {
		if o.keep {
			continue
		}
		kept, err := h.objects.remove(ctx, o, name, namespace)
		if err != nil {
			return fmt.Errorf("uninstall release %s/%s: %w", namespace, name, err)
		}
		if kept {
			h.warn(ctx, "uninstall release %s/%s: %s is not the release's: left alone", namespace, name, o.ref)
		}
	}
	return nil
}

// installRank is each kind's place in Helm's install order.
var installRank = func() map[string]int {
	order := make(map[string]int, len(releaseutil.InstallOrder))
	for i, k := range releaseutil.InstallOrder {
		order[k] = i
	}
	return order
}()

// compareInstallOrder orders two kinds as Helm installs them: by
// releaseutil.InstallOrder, kinds it does not list after those it does,
// by name.
func compareInstallOrder(a, b string) int {
	rank := func(kind string) int {
		if i, ok := installRank[kind]; ok {
			return i
		}
		return len(installRank)
	}
	if c := rank(a) - rank(b); c != 0 {
		return c
	}
	if rank(a) == len(installRank) {
		return strings.Compare(a, b)
	}
	return 0
}

// releaseChart is the chart recorded on the release: the driver as name
// and version, the application version, and no templates: the objects
// are what drivers.Render produced, recorded as the release's manifest.
func releaseChart(req Request) *chartv2.Chart {
	return &chartv2.Chart{
		Metadata: &chartv2.Metadata{
			APIVersion:  chartv2.APIVersionV2,
			Name:        req.Driver.Name,
			Version:     req.Driver.Version,
			AppVersion:  req.AppVersion,
			Description: "Styrmin driver " + req.Driver.String(),
			Type:        "application",
			Annotations: map[string]string{driverDigestAnnotation: req.Driver.Digest},
		},
	}
}

// sourceName is the "# Source:" of an object in the release manifest.
func sourceName(o drivers.Object) string {
	comp := o.Component
	if comp == "" {
		comp = "shared"
	}
	return path.Join(comp, strings.ToLower(o.Kind)+"-"+o.Name+".yaml")
}
