package release

import (
	"bytes"
	"strings"
	"testing"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
)

// FuzzDecodeRecord feeds release record Secrets of any content to the
// decoder the agent reads the cluster's records with: it returns a release
// or an error naming the record, and never panics. The seeds are a record
// the agent encodes, which must decode to the same revision.
func FuzzDecodeRecord(f *testing.F) {
	records := newReleaseRecords(nil)
	rel := &release.Release{Name: "app", Namespace: "ns", Version: 3, Manifest: "---\n# Source: x/configmap-a.yaml\nkind: ConfigMap\n",
		Info: &release.Info{Status: "deployed", Description: "styrmin sequence 3"}}
	gz, err := records.gzipped(rel)
	if err != nil {
		f.Fatal(err)
	}
	data := secret(rel, "createdAt", gz).Data["release"]
	got, err := decodeRecord(&corev1.Secret{Data: map[string][]byte{"release": data}})
	if err != nil || got.Version != 3 || got.Manifest != rel.Manifest || got.Info.Status != "deployed" {
		f.Fatalf("an encoded record decodes to %+v, %v", got, err)
	}
	f.Add(data)
	f.Add([]byte("eyJuYW1lIjoiYXBwIn0=")) // base64 of plain JSON, as old Helm wrote
	f.Add([]byte("not base64"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &corev1.Secret{Data: map[string][]byte{"release": data}}
		s.Name = "sh.helm.release.v1.app.v1"
		if rel, err := decodeRecord(s); err == nil && rel == nil {
			t.Fatal("no release and no error")
		} else if err != nil && !strings.Contains(err.Error(), s.Name) {
			t.Fatalf("error %q does not name the record", err)
		}
	})
}

// TestAKeptRevisionHoldsItsRecordGzippedAndReadsItBack pins the form the
// agent keeps the last revision of every release in: the record gzipped,
// without the base64 the Secret stores it with (a quarter less), and it
// reads back as the release the Secret holds.
func TestAKeptRevisionHoldsItsRecordGzippedAndReadsItBack(t *testing.T) {
	t.Parallel()
	records := newReleaseRecords(nil)
	rel := &release.Release{Name: "app", Namespace: "ns", Version: 3,
		Manifest: "---\n# Source: x/configmap-a.yaml\nkind: ConfigMap\nmetadata:\n  name: a\n",
		Chart:    &chartv2.Chart{Metadata: &chartv2.Metadata{Name: "webapp", Version: "1.1.0"}},
		Info:     &release.Info{Status: "deployed", Description: "styrmin sequence 3"}}
	gz, err := records.gzipped(rel)
	if err != nil {
		t.Fatal(err)
	}
	stored := secret(rel, "createdAt", gz)
	fromSecret, err := decodeRecord(stored)
	if err != nil {
		t.Fatal(err)
	}
	kept := newRevision(rel, gz, nil, nil, nil)
	if !bytes.HasPrefix(kept.record, []byte{0x1f, 0x8b}) || len(kept.record) != len(gz) || len(kept.record) >= len(stored.Data["release"]) {
		t.Fatalf("kept record: %d bytes starting %x; want the gzip of %d bytes, under the stored record's %d", len(kept.record), kept.record[:2], len(gz), len(stored.Data["release"]))
	}
	fromKept, err := kept.decode()
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range []*release.Release{fromSecret, fromKept} {
		if got.Name != rel.Name || got.Version != rel.Version || got.Manifest != rel.Manifest || got.Info.Status != rel.Info.Status {
			t.Errorf("read back %+v, want %+v", got, rel)
		}
	}
}
