package release

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// gzipBomb is a record's "release" value: base64 of n zero bytes gzipped
// (about 1 KiB per MiB).
func gzipBomb(t testing.TB, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	chunk := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := w.Write(chunk[:k]); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
}

// TestGzipBombRecordIsRefusedQuickly: a record that expands to 512 MiB is
// refused with ErrRecordTooLarge after reading at most MaxRecordSize, in
// well under a second, naming the record.
func TestGzipBombRecordIsRefusedQuickly(t *testing.T) {
	t.Parallel()
	data := gzipBomb(t, 512<<20)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sh.helm.release.v1.app.v1"}, Data: map[string][]byte{"release": data}}
	start := time.Now()
	_, err := decodeRecord(s)
	took := time.Since(start)
	if !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("decoding a %d KiB record of 512 MiB: %v, want ErrRecordTooLarge", len(data)>>10, err)
	}
	t.Logf("a %d KiB record expanding to 512 MiB refused in %v: %v", len(data)>>10, took.Round(time.Millisecond), err)
	if took > 5*time.Second {
		t.Errorf("refusing took %v; the limit was not applied while reading", took)
	}
	// The limit is exact: a record just at it decodes (as far as JSON).
	s.Data["release"] = gzipBomb(t, 64)
	if _, err := decodeRecordLimit(s, 64); errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("a record at the limit was refused as too large: %v", err)
	}
	if _, err := decodeRecordLimit(s, 63); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("a record one byte over the limit: %v, want ErrRecordTooLarge", err)
	}
}

// TestChartSecretWithRecordLabelsIsNoRecord: a chart's own Secret labelled
// owner=helm,name=app (not of type helm.sh/release.v1) is neither listed,
// read nor deleted as a revision of release app.
func TestChartSecretWithRecordLabelsIsNoRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := fake.NewClientset()
	records := newReleaseRecords(cs)
	rel := &release.Release{Name: "app", Namespace: "ns", Version: 1, Info: &release.Info{Status: "deployed"}}
	if _, err := records.create(ctx, rel, nil); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"owner": "helm", "name": "app", "status": "deployed", "version": "2"}
	for _, s := range []*corev1.Secret{
		// The labels of revision 2, any name, an ordinary type.
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-config", Labels: labels}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"release": gzipBomb(t, 1<<10)}},
		// Revision 2's very name and labels, an ordinary type.
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: releaseKey("app", 2), Labels: labels}, Type: corev1.SecretTypeOpaque},
	} {
		if _, err := cs.CoreV1().Secrets("ns").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	history, err := records.history(ctx, "ns", "app")
	if err != nil || len(history) != 1 || history[0].Version != 1 {
		t.Fatalf("history = %v, %v; want revision 1 only", history, err)
	}
	if _, err := records.get(ctx, "ns", "app", 2); err == nil {
		t.Fatal("a Secret named like revision 2 but of another type was read as a revision")
	}
	if err := records.removeAll(ctx, "ns", "app"); err != nil {
		t.Fatal(err)
	}
	left, err := cs.CoreV1().Secrets("ns").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 2 {
		t.Fatalf("after removing the release's records %d Secrets are left, want the chart's 2", len(left.Items))
	}
	for _, s := range left.Items {
		if s.Type == RecordType {
			t.Fatalf("record %s was not removed", s.Name)
		}
	}
}
