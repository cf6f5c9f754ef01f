package release

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

var (
	// errReleaseNotFound: no record of the revision asked for.
	errReleaseNotFound = errors.New("release: not found")
	// errReleaseExists: a record of the revision being created exists.
	errReleaseExists = errors.New("release: already exists")
)

// releaseRecords writes release revisions as Helm's secrets storage
// driver does (a Secret of type helm.sh/release.v1 named
// sh.helm.release.v1.NAME.vN, labelled name/owner/status/version, holding
// the release as base64 of gzipped JSON), so Helm reads them as its own.
//
// It exists for memory: Helm's driver builds a new gzip writer at best
// compression for every write, about 1 MB of allocation each, which at
// hundreds of releases a minute dominated the agent's allocations and
// its peak resident memory. Here the writers are pooled. It also keeps
// Helm's storage package, with its SQL driver, out of the agent.
type releaseRecords struct {
	clientset kubernetes.Interface
	gzips     sync.Pool // of *gzip.Writer
}

func newReleaseRecords(cs kubernetes.Interface) *releaseRecords {
	return &releaseRecords{clientset: cs, gzips: sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(nil, gzip.BestCompression) // the level is valid: no error
		return w
	}}}
}

// RecordType is the Secret type of a Helm release record. Records are
// told from other Secrets by it and by the labels together: a chart may
// ship its own Secret labelled owner=helm, but it cannot be of this type
// (drivers refuse to render one), so neither is mistaken for the other.
const RecordType corev1.SecretType = "helm.sh/release.v1"

// MaxRecordSize bounds a release record once decoded (base64, gunzip):
// a Secret holds at most 1 MiB, but gzip can expand that a thousandfold,
// so a planted record would otherwise make the agent allocate hundreds of
// MiB on every read. A real release (chart, values and manifest) is far
// below it; drivers bound their rendered output well under it too.
const MaxRecordSize = 32 << 20

// ErrRecordTooLarge is returned (wrapped, naming the record) for a record
// that decodes to more than MaxRecordSize bytes.
var ErrRecordTooLarge = errors.New("release record decodes to more than the size limit")

// releaseKey is the name of a revision's Secret.
func releaseKey(name string, version int) string {
	return fmt.Sprintf("sh.helm.release.v1.%s.v%d", name, version)
}

// MaxSecretData is what a Secret's data may hold (the API server's
// limit): a revision whose record is larger cannot be written.
const MaxSecretData = 1 << 20

// ErrRevisionTooLarge is returned (wrapped, naming the release and the
// sizes) before anything is applied when a revision's record would not
// fit in its Secret: applied, its objects would be in no record, never
// pruned nor uninstalled. A change in git (a smaller render) is needed.
var ErrRevisionTooLarge = errors.New("the release record would be larger than a Secret holds")

// checkSize refuses a revision whose record, gzipped as gz, does not fit.
func checkSize(rel *release.Release, gz []byte) error {
	if n := base64.StdEncoding.EncodedLen(len(gz)); n > MaxSecretData {
		return fmt.Errorf("release %s/%s revision %d: %w (%d bytes gzipped and base64-encoded, at most %d): render less (fewer or smaller objects)",
			rel.Namespace, rel.Name, rel.Version, ErrRevisionTooLarge, n, MaxSecretData)
	}
	return nil
}

// create writes a new revision and returns its record gzipped, as
// stored but for the base64 (the Secret's "release" value);
// errReleaseExists when its Secret exists. gz is the record gzipped
// already (nil: gzipped here).
func (r *releaseRecords) create(ctx context.Context, rel *release.Release, gz []byte) ([]byte, error) {
	if gz == nil {
		var err error
		if gz, err = r.gzipped(rel); err != nil {
			return nil, err
		}
	}
	if err := checkSize(rel, gz); err != nil {
		return nil, err
	}
	_, err := r.clientset.CoreV1().Secrets(rel.Namespace).Create(ctx, secret(rel, "createdAt", gz), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, errReleaseExists
	}
	if err != nil {
		return nil, err
	}
	return gz, nil
}

// update rewrites an existing revision (its status changed).
func (r *releaseRecords) update(ctx context.Context, rel *release.Release) error {
	gz, err := r.gzipped(rel)
	if err != nil {
		return err
	}
	s := secret(rel, "modifiedAt", gz)
	_, err = r.clientset.CoreV1().Secrets(rel.Namespace).Update(ctx, s, metav1.UpdateOptions{})
	return err
}

// get reads one revision (one GET); errReleaseNotFound when it has no
// record.
func (r *releaseRecords) get(ctx context.Context, namespace, name string, version int) (*release.Release, error) {
	s, err := r.clientset.CoreV1().Secrets(namespace).Get(ctx, releaseKey(name, version), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: release %s/%s revision %d", errReleaseNotFound, namespace, name, version)
	}
	if err != nil {
		return nil, err
	}
	if !isRecord(s, name) {
		// A Secret with the record's name but not its type and labels is
		// someone else's; reading it as a revision would trust its content.
		return nil, fmt.Errorf("Secret %s/%s has a release record's name but is not one (type %q, expected %q with Helm's labels)", namespace, s.Name, s.Type, RecordType)
	}
	return decodeRecord(s)
}

// exists tells whether revision version of a release still has its
// record, reading only the Secret's metadata (a record's data is the
// whole gzipped release): each drift check asks, so a record removed by
// `helm uninstall` or by hand is noticed even while the objects stay.
func (r *releaseRecords) exists(ctx context.Context, namespace, name string, version int) (bool, error) {
	var meta metav1.PartialObjectMetadata
	err := r.clientset.CoreV1().RESTClient().Get().
		Namespace(namespace).Resource("secrets").Name(releaseKey(name, version)).
		SetHeader("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1").
		Do(ctx).Into(&meta)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read release %s/%s revision %d: %w", namespace, name, version, err)
	}
	// A Secret of that name without Helm's labels is no record (its type
	// is not in the metadata; the first read of the revision checked it).
	return meta.Labels["owner"] == "helm" && meta.Labels["name"] == name, nil
}

// list reads the record Secrets of a release (one LIST): those with
// Helm's labels for the release AND of type RecordType. The API server
// selects by type (a field selector Secrets support); the result is
// filtered again here so that a client that ignores field selectors (a
// fake, a proxy) still never hands over a chart's own Secret.
func (r *releaseRecords) list(ctx context.Context, namespace, name string) ([]corev1.Secret, error) {
	sel := labels.SelectorFromSet(labels.Set{"owner": "helm", "name": name}).String()
	list, err := r.clientset.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: sel,
		FieldSelector: "type=" + string(RecordType),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the revisions of release %s/%s: %w", namespace, name, err)
	}
	out := list.Items[:0]
	for _, s := range list.Items {
		if isRecord(&s, name) {
			out = append(out, s)
		}
	}
	return out, nil
}

// isRecord reports whether s is a release record of release name: its
// type, Helm's owner and name labels, and the name Helm gives a revision
// (sh.helm.release.v1.NAME.vN, N its version label).
func isRecord(s *corev1.Secret, name string) bool {
	if s.Type != RecordType || s.Labels["owner"] != "helm" || s.Labels["name"] != name {
		return false
	}
	v, err := strconv.Atoi(s.Labels["version"])
	return err == nil && s.Name == releaseKey(name, v)
}

// history reads every revision of a release (one LIST), oldest first. A
// record that does not decode is left out, as Helm's own listing does.
func (r *releaseRecords) history(ctx context.Context, namespace, name string) ([]*release.Release, error) {
	items, err := r.list(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	out := make([]*release.Release, 0, len(items))
	for i := range items {
		if rel, err := decodeRecord(&items[i]); err == nil {
			out = append(out, rel)
		}
	}
	slices.SortFunc(out, func(a, b *release.Release) int { return a.Version - b.Version })
	return out, nil
}

// latest reads the newest revision of a release, nil when it has none.
func (r *releaseRecords) latest(ctx context.Context, namespace, name string) (*release.Release, error) {
	history, err := r.history(ctx, namespace, name)
	if err != nil || len(history) == 0 {
		return nil, err
	}
	return history[len(history)-1], nil
}

// removeAll deletes every record of a release, decodable or not.
func (r *releaseRecords) removeAll(ctx context.Context, namespace, name string) error {
	items, err := r.list(ctx, namespace, name)
	if err != nil {
		return err
	}
	for _, s := range items {
		err := r.clientset.CoreV1().Secrets(namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting release record %s: %w", s.Name, err)
		}
	}
	return nil
}

// removeIfRecord deletes the Secret at a revision's record name when it
// is one of the release's records: a revision numbered past (record) has
// someone else's Secret at its name, which trimming must not delete. One
// GET more than remove; used where no history was read.
func (r *releaseRecords) removeIfRecord(ctx context.Context, namespace, name string, version int) error {
	s, err := r.clientset.CoreV1().Secrets(namespace).Get(ctx, releaseKey(name, version), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !isRecord(s, name) {
		return nil
	}
	err = r.clientset.CoreV1().Secrets(namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// remove deletes a revision; one already gone is not an error.
func (r *releaseRecords) remove(ctx context.Context, namespace, name string, version int) error {
	err := r.clientset.CoreV1().Secrets(namespace).Delete(ctx, releaseKey(name, version), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// secret is the Secret of a revision gzipped as gz, as Helm's
// newSecretsObject builds it; stamp is the label Helm sets with the time
// ("createdAt" on create, "modifiedAt" on update).
func secret(rel *release.Release, stamp string, gz []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      releaseKey(rel.Name, rel.Version),
			Namespace: rel.Namespace,
			Labels: map[string]string{
				"name":    rel.Name,
				"owner":   "helm",
				"status":  rel.Info.Status.String(),
				"version": strconv.Itoa(rel.Version),
				stamp:     strconv.FormatInt(time.Now().Unix(), 10),
			},
		},
		Type: RecordType,
		Data: map[string][]byte{"release": base64.StdEncoding.AppendEncode(nil, gz)},
	}
}

// gzipped is Helm's encodeRelease with a pooled gzip writer, before
// its base64 (secret adds it).
func (r *releaseRecords) gzipped(rel *release.Release) ([]byte, error) {
	fail := func(err error) ([]byte, error) {
		return nil, fmt.Errorf("release %s/%s revision %d: encoding: %w", rel.Namespace, rel.Name, rel.Version, err)
	}
	raw, err := json.Marshal(rel)
	if err != nil {
		return fail(err)
	}
	var buf bytes.Buffer
	w := r.gzips.Get().(*gzip.Writer)
	defer r.gzips.Put(w)
	w.Reset(&buf)
	if _, err := w.Write(raw); err != nil {
		return fail(err)
	}
	if err := w.Close(); err != nil {
		return fail(err)
	}
	// Kept for as long as the revision is the last: no spare capacity.
	return bytes.Clone(buf.Bytes()), nil
}

// decodeRecord is Helm's decodeRelease: the Secret's "release" key holds
// base64 of the release's JSON, gzipped when it starts with gzip's magic.
// Unlike Helm's it stops at MaxRecordSize (ErrRecordTooLarge): a gzip
// bomb is refused after reading at most that much, not expanded whole.
func decodeRecord(s *corev1.Secret) (*release.Release, error) {
	return decodeRecordLimit(s, MaxRecordSize)
}

// decodeRecordLimit is decodeRecord with the limit given (tests).
func decodeRecordLimit(s *corev1.Secret, limit int64) (*release.Release, error) {
	fail := func(err error) (*release.Release, error) {
		return nil, fmt.Errorf("release record %s/%s: %w", s.Namespace, s.Name, err)
	}
	data, ok := s.Data["release"]
	if !ok {
		return fail(errors.New(`no "release" key`))
	}
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(data)))
	n, err := base64.StdEncoding.Decode(raw, data)
	if err != nil {
		return fail(err)
	}
	raw = raw[:n]
	if bytes.HasPrefix(raw, []byte{0x1f, 0x8b, 0x08}) {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return fail(err)
		}
		// One byte past the limit tells a record at the limit from one
		// above it without reading further.
		if raw, err = io.ReadAll(io.LimitReader(zr, limit+1)); err != nil {
			return fail(err)
		}
	}
	if int64(len(raw)) > limit {
		return fail(fmt.Errorf("%w (%d bytes): not read; delete the Secret if it is no record Styrmin or Helm wrote", ErrRecordTooLarge, limit))
	}
	var rel release.Release
	if err := json.Unmarshal(raw, &rel); err != nil {
		return fail(err)
	}
	return &rel, nil
}
