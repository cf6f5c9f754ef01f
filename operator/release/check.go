package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// ErrReleaseGone is returned (wrapped) by Check when the record of the
// revision to check is gone: the release needs installing again.
var ErrReleaseGone = errors.New("the release's record is gone")

// ErrRecordChanged is returned (wrapped) by Check when the record of the
// revision holds another manifest than the one the agent wrote
// (ManifestDigest). A record is a Secret in the deployment's namespace,
// which whoever may write Secrets there can change: a drift check that
// trusted it would apply, as the agent, whatever it was made to hold.
// The release is written again from the lock, as when its record is
// gone.
var ErrRecordChanged = errors.New("the release's record was changed outside the agent")

// ManifestDigest is the digest of a release's manifest as the agent wrote
// it in the revision's record (ReleaseStatus.ManifestDigest).
func ManifestDigest(manifest string) string {
	sum := sha256.Sum256([]byte(manifest))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Desired is what one drift check of a release revision compares with:
// the revision's objects and the field sets Styrmin owns on them, packed
// (see pack). A caller keeps it between checks of the same revision, so
// only the first check reads the record (and dry-runs the applies that
// give the field sets); it is not safe for concurrent use.
type Desired struct {
	revision int
	packed   []byte
}

// Desired is the revision's objects with the field sets the apply's
// answers hold: its first drift check needs no read and no dry-run. Nil
// when the revision keeps none: the first check reads the record.
func (r *Revision) Desired() *Desired {
	if r.desired == nil {
		return nil
	}
	return &Desired{revision: r.number, packed: r.desired}
}

// Drift is one object whose live state lost fields Styrmin owns, or that
// is gone.
type Drift struct {
	object  *desiredObject
	Missing bool
	Fields  []string
	// leaveReplicas: the object's replicas are its autoscaler's and
	// Styrmin holds them no longer, so the correction leaves them out.
	leaveReplicas bool
	// watchReplicas: left out though no autoscaler was found (another
	// manager holds them at the release's value), so the next checks
	// still expect them: a later change of their value is drift.
	watchReplicas bool
	// TakenBy is the release (namespace/name) whose annotations the live
	// object carries now (deleted by hand and made again by it): not put
	// back, which would rewrite that release's object ("": not taken).
	TakenBy string
}

// Ref names the drifted object.
func (d Drift) Ref() v1alpha1.ObjectRef { return d.object.ref }

// Object is the drifted object as the correction would apply it (YAML
// holds its JSON body, sensitive values as placeholders): the agent reads
// what it claims (an Ingress's hosts) before putting it back.
func (d Drift) Object() drivers.Object {
	r := d.object.ref
	return drivers.Object{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, YAML: d.object.data}
}

// Check compares revision rev of release name in namespace with the live
// objects; inventory gives the objects' components. d is the state of the
// last check (nil: none); the state to keep for the next check is
// returned. A revision whose record is gone gives an error wrapping
// ErrReleaseGone; one whose record's manifest is not manifestDigest (""
// for a revision an agent applied before it recorded digests: not
// checked), an error wrapping ErrRecordChanged.
func (h *Releases) Check(ctx context.Context, namespace, name string, rev int, manifestDigest string, inventory []v1alpha1.ObjectRef, d *Desired) (*Desired, []Drift, error) {
	var objs []*desiredObject
	var expected map[string][]byte
	if d != nil && d.revision == rev {
		ok, err := h.records.exists(ctx, namespace, name, rev)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, fmt.Errorf("%w: release %s revision %d not found; installing again", ErrReleaseGone, name, rev)
		}
		if objs, expected, err = unpack(h.objects.dyn, d.packed); err != nil {
			return nil, nil, err
		}
	} else {
		rel, err := h.records.get(ctx, namespace, name, rev)
		if errors.Is(err, errReleaseNotFound) {
			return nil, nil, fmt.Errorf("%w: release %s revision %d not found; installing again", ErrReleaseGone, name, rev)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read release %s revision %d: %w", name, rev, err)
		}
		if manifestDigest != "" && ManifestDigest(rel.Manifest) != manifestDigest {
			return nil, nil, fmt.Errorf("%w: release %s revision %d holds a manifest the agent did not write (its digest is %s, the agent applied %s); writing the release again from the lock",
				ErrRecordChanged, name, rev, ManifestDigest(rel.Manifest), manifestDigest)
		}
		components := make(map[string]string, len(inventory))
		for _, o := range inventory {
			components[objectKey(o)] = o.Component
		}
		// An object of a kind the API server no longer serves (its CRD
		// removed since) is left out: it is gone with its kind, and one
		// such object must not stop the check, and the correction, of
		// all the others (a check after a restart parses afresh).
		if objs, _, err = h.objects.parseObjects(rel.Manifest, rel.Name, namespace, components, true); err != nil {
			return nil, nil, err
		}
		expected = map[string][]byte{}
	}
	drifts, err := h.objects.check(ctx, objs, expected, name)
	// What the check learnt (field sets from dry-runs) is kept for the
	// next one.
	packed, perr := pack(objs, expected)
	if perr != nil {
		return nil, nil, errors.Join(err, perr)
	}
	return &Desired{revision: rev, packed: packed}, drifts, err
}

// Correct applies the drifted objects of d's revision again, without a
// new Helm revision; d keeps the field sets of those put back. Each object
// is applied on its own: one the API server refuses does not keep the
// others as they drifted. It returns the drifts put back and the
// generations of the workloads among them; err is a *CorrectionError
// naming the objects refused (wrapping their errors: ErrSensitiveValuesGone
// among them is found by errors.Is).
func (h *Releases) Correct(ctx context.Context, d *Desired, drifts []Drift) ([]Drift, Generations, error) {
	objs, expected, err := unpack(h.objects.dyn, d.packed)
	if err != nil {
		return nil, nil, err
	}
	corrected, gens, cerr := h.objects.correct(ctx, drifts, expected)
	packed, err := pack(objs, expected)
	if err != nil {
		return corrected, gens, errors.Join(cerr, err)
	}
	d.packed = packed
	return corrected, gens, cerr
}

// CorrectionError is a correction that did not put some drifted objects
// back: the API server refused them (the others were applied).
type CorrectionError struct {
	Refused []RefusedCorrection
}

// RefusedCorrection is one drifted object not put back, and why.
type RefusedCorrection struct {
	Drift Drift
	Err   error
}

func (e *CorrectionError) Error() string {
	parts := make([]string, 0, len(e.Refused))
	for _, r := range e.Refused {
		parts = append(parts, driftSummary(r.Drift)+": "+r.Err.Error())
	}
	return "not put back: " + strings.Join(parts, "; ")
}

func (e *CorrectionError) Unwrap() []error {
	out := make([]error, 0, len(e.Refused))
	for _, r := range e.Refused {
		out = append(out, r.Err)
	}
	return out
}

// Summary is the text of a DriftCorrected event: each object and its
// drifted fields.
func Summary(drifts []Drift) string {
	parts := make([]string, 0, len(drifts))
	for _, d := range drifts {
		parts = append(parts, driftSummary(d))
	}
	return strings.Join(parts, "; ")
}

// driftSummary names one drifted object and its drifted fields.
func driftSummary(d Drift) string {
	name := d.object.ref.Kind + "/" + d.object.ref.Name
	if d.Missing {
		return name + " (deleted)"
	}
	if d.TakenBy != "" {
		return name + " (taken by release " + d.TakenBy + ")"
	}
	return name + " (" + strings.Join(d.Fields, ", ") + ")"
}

// DriftedObjects is the status record of a correction.
func DriftedObjects(drifts []Drift) []v1alpha1.DriftedObject {
	out := make([]v1alpha1.DriftedObject, 0, len(drifts))
	for _, d := range drifts {
		out = append(out, v1alpha1.DriftedObject{ObjectRef: d.object.ref, Missing: d.Missing, Fields: d.Fields})
	}
	slices.SortFunc(out, func(a, b v1alpha1.DriftedObject) int {
		return strings.Compare(objectKey(a.ObjectRef), objectKey(b.ObjectRef))
	})
	return out
}
