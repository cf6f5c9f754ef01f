package timeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/resolver"

	"go.yaml.in/yaml/v3"
)

// FuzzSummaryFastPathIsWhatYAMLReads: whatever a lockfile in git holds,
// the scan of its summary (the fast path) either declines it or reads
// what YAML's parser reads of it, and only what that parser accepts; and
// Summary never panics.
func FuzzSummaryFastPathIsWhatYAMLReads(f *testing.F) {
	golden, _ := filepath.Glob("../resolver/testdata/golden/locks/*/*/*.lock.yaml")
	for _, p := range golden {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		"apiVersion: styrmin.io/v1alpha1\nkind: Instance # a comment\nsequence: 3\nchecksum: sha256:y\n",
		"apiVersion: styrmin.io/v1alpha1\nkind: Tombstone\nkind: Instance\nsequence: 3\nchecksum: sha256:y\n",
		"\"kind\": Instance\nsequence: 3\n",
		"driver:\n name: a\n   version: b\n",
		"sequence: +7\nappVersion: 1.0.0\n",
		"digest: ~\nsourceCommit: null\n",
		"deployment:\n  cluster: \"a\\tb\"\n",
		"apiVersion: styrmin.io/v1alpha1\nkind: Instance\ndeployment: {cluster: local, environment: dev, name: hub}\nsequence: 7\nchecksum: sha256:y\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Summary("locks/local/dev/hub.lock.yaml", data)
		summary := summaryLines(data)
		fast, ok := scanHeader(summary)
		if !ok {
			return
		}
		var slow lockHeader
		if err := yaml.Unmarshal(summary, &slow); err != nil {
			t.Fatalf("the fast path read %q, which YAML refuses: %v", summary, err)
		}
		if fast != slow {
			t.Fatalf("%q: the fast path reads %+v, YAML %+v", summary, fast, slow)
		}
	})
}

// TestTheEnginesLockfilesTakeTheFastPath: the lockfiles the engine writes
// are read without YAML's parser (the fast path declines only what it
// does not write).
func TestTheEnginesLockfilesTakeTheFastPath(t *testing.T) {
	golden, _ := filepath.Glob("../resolver/testdata/golden/locks/*/*/*.lock.yaml")
	if len(golden) == 0 {
		t.Fatal("no golden lockfiles")
	}
	for _, p := range golden {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := scanHeader(summaryLines(data)); !ok {
			t.Errorf("%s: the fast path declines a lockfile the engine wrote", p)
		}
		// The same instance from a driver of another repository, in a wave.
		in, err := resolver.DecodeLock(p, data)
		if err != nil {
			t.Fatal(err)
		}
		in.Driver.Source = &resolver.DriverOrigin{URL: "https://git.example.com/drivers.git", Ref: "v1", Path: "drivers/web", Commit: strings.Repeat("0a", 20)}
		in.Rollout = &resolver.Rollout{Group: "prod", Wave: 2, Waves: 3, Pause: "30s"}
		data, err = resolver.EncodeLock(in)
		if err != nil {
			t.Fatal(err)
		}
		h, ok := scanHeader(summaryLines(data))
		if !ok || h.Driver.Name != in.Driver.Name || h.Sequence != in.Sequence {
			t.Errorf("%s with a driver source and a wave: the fast path reads %+v, %v:\n%s", p, h, ok, summaryLines(data))
		}
	}
}

// TestAHandEditedLockfileIsSummarizedAsYAMLReadsIt: a comment after a
// value, a key written twice or a null read by the fast path gave the
// timeline another kind, sequence or driver than the lockfile holds (or
// refused a lockfile YAML reads): it now declines them to YAML's parser.
func TestAHandEditedLockfileIsSummarizedAsYAMLReadsIt(t *testing.T) {
	const file = "locks/local/dev/hub.lock.yaml"
	head := "apiVersion: styrmin.io/v1alpha1\ndeployment:\n  cluster: local\n  environment: dev\n  name: hub\n"
	in, err := Summary(file, []byte(head+"kind: Instance # edited by hand\nsequence: 7\nchecksum: sha256:y\n"))
	if err != nil || in.Kind != resolver.KindInstance || in.Sequence != 7 {
		t.Errorf("a comment after the kind: %+v, %v", in, err)
	}
	if in, err := Summary(file, []byte(head+"kind: Instance\nsequence: 7\nsequence: 9\nchecksum: sha256:y\n")); err == nil {
		t.Errorf("a sequence written twice is read as %d, YAML refuses it", in.Sequence)
	}
	if in, err := Summary(file, []byte(head+"kind: Instance\nsequence: 7\nchecksum: sha256:y\ndigest: ~\n")); err != nil || in.Digest != "" {
		t.Errorf("a null digest: %q, %v", in.Digest, err)
	}
}
