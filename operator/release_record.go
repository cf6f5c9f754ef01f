package operator

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// releaseRecords writes release revisions as Helm's secrets storage
// driver does (a Secret of type helm.sh/release.v1 named
// sh.helm.release.v1.NAME.vN, labelled name/owner/status/version, holding
// the release as base64 of gzipped JSON), so Helm reads them as its own.
//
// It exists for memory: Helm's driver builds a new gzip writer at best
// compression for every write, about 1 MB of allocation each, which at
// hundreds of releases a minute dominated the agent's allocations and
// its peak resident memory. Here the writers are pooled. Reads go through
// Helm's driver.
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

// releaseKey is the name of a revision's Secret.
func releaseKey(name string, version int) string {
	return fmt.Sprintf("%s.%s.v%d", storage.HelmStorageType, name, version)
}

// create writes a new revision; driver.ErrReleaseExists when its Secret
// exists.
func (r *releaseRecords) create(ctx context.Context, rel *release.Release) error {
	s, err := r.secret(rel, "createdAt")
	if err != nil {
		return err
	}
	_, err = r.clientset.CoreV1().Secrets(rel.Namespace).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return driver.ErrReleaseExists
	}
	return err
}

// update rewrites an existing revision (its status changed).
func (r *releaseRecords) update(ctx context.Context, rel *release.Release) error {
	s, err := r.secret(rel, "modifiedAt")
	if err != nil {
		return err
	}
	_, err = r.clientset.CoreV1().Secrets(rel.Namespace).Update(ctx, s, metav1.UpdateOptions{})
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

// secret is the Secret of a revision, as Helm's newSecretsObject builds
// it; stamp is the label Helm sets with the time ("createdAt" on create,
// "modifiedAt" on update).
func (r *releaseRecords) secret(rel *release.Release, stamp string) (*corev1.Secret, error) {
	data, err := r.encode(rel)
	if err != nil {
		return nil, fmt.Errorf("release %s/%s revision %d: encoding: %w", rel.Namespace, rel.Name, rel.Version, err)
	}
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
		Type: "helm.sh/release.v1",
		Data: map[string][]byte{"release": data},
	}, nil
}

// encode is Helm's encodeRelease with a pooled gzip writer.
func (r *releaseRecords) encode(rel *release.Release) ([]byte, error) {
	raw, err := json.Marshal(rel)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := r.gzips.Get().(*gzip.Writer)
	defer r.gzips.Put(w)
	w.Reset(&buf)
	if _, err := w.Write(raw); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	out := make([]byte, base64.StdEncoding.EncodedLen(buf.Len()))
	base64.StdEncoding.Encode(out, buf.Bytes())
	return out, nil
}
