package resolver

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/blockyaml"
	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// TestLockfileChecksumHoldsOnBothPaths: a lockfile as lock writes it
// passes the quick check (its bytes without the checksum line), one
// reformatted by hand with the same content passes the full check, and
// an edit is caught on either path.
func TestLockfileChecksumHoldsOnBothPaths(t *testing.T) {
	dir := exampleCopy(t)
	changes := lockDirInto(t, dir)
	c := changes[0]
	if !canonicalChecksum(c.Data, checksumLine(t, c.Data)) {
		t.Fatal("a lockfile as lock writes it does not pass the quick check")
	}
	if _, err := DecodeLock(c.Path(), c.Data); err != nil {
		t.Fatal(err)
	}

	// Same content, other formatting (JSON is YAML): the full check.
	var doc map[string]any
	if err := yaml.Unmarshal(c.Data, &doc); err != nil {
		t.Fatal(err)
	}
	reformatted, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	reformatted = append([]byte("# reformatted\n"), bytes.ReplaceAll(reformatted, []byte("\n"), []byte("\n\n"))...)
	if canonicalChecksum(reformatted, checksumLine(t, c.Data)) {
		t.Fatal("a reformatted lockfile passed the quick check")
	}
	if in, err := DecodeLock(c.Path(), reformatted); err != nil || in.Digest != c.Next.Digest {
		t.Fatalf("the reformatted lockfile: %v, %v", in, err)
	}

	// An edit, in the canonical format and reformatted.
	for name, data := range map[string][]byte{
		"canonical":   bytes.Replace(c.Data, []byte("appVersion: "+c.Next.AppVersion), []byte("appVersion: 9.9.9"), 1),
		"reformatted": bytes.Replace(reformatted, []byte("appVersion: "+c.Next.AppVersion), []byte("appVersion: 9.9.9"), 1),
	} {
		var he *HandEditError
		if _, err := DecodeLock(c.Path(), data); !errors.As(err, &he) {
			t.Errorf("%s: an edited lockfile: %v, want a HandEditError", name, err)
		}
	}
}

func checksumLine(t *testing.T, data []byte) string {
	t.Helper()
	var doc struct {
		Checksum string `json:"checksum"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil || doc.Checksum == "" {
		t.Fatalf("no checksum: %v", err)
	}
	return doc.Checksum
}

// TestOnlyWhatChangedIsRenderedForThePolicyCheck: resolving against the
// locks renders (for the policy check) only the deployments whose
// instance differs from their lock; a first lock renders all.
func TestOnlyWhatChangedIsRenderedForThePolicyCheck(t *testing.T) {
	dir := exampleCopy(t)
	renders := func() int {
		t.Helper()
		rc := drivers.NewRenderCache()
		ws, err := LoadWorkspace(os.DirFS(dir), WorkspaceOptions{RenderCache: rc})
		if err != nil {
			t.Fatal(err)
		}
		if err := ws.Resolve().Err(); err != nil {
			t.Fatal(err)
		}
		return rc.Len()
	}
	if n := renders(); n != 4 {
		t.Errorf("a first lock rendered %d deployments, want the 4", n)
	}
	lockDirInto(t, dir)
	if n := renders(); n != 0 {
		t.Errorf("nothing changed, yet %d deployments rendered", n)
	}
	writeFile(t, dir, "clusters/local/environments/dev/deployments/web.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	if n := renders(); n != 1 {
		t.Errorf("one deployment changed, %d rendered", n)
	}
}

// TestEncodeLockIsTheCanonicalDocument: EncodeLock, which inserts the
// checksum line into the instance's encoding, writes exactly the
// canonical encoding of the whole document, for instances with and
// without the optional top-level fields.
func TestEncodeLockIsTheCanonicalDocument(t *testing.T) {
	dir := fanOutRepo(t, 4, "rollout: waves: 2\n")
	changes := clusterFanOut(t, dir, "text")
	var ins []*Instance
	for _, c := range changes {
		ins = append(ins, c.Next)
	}
	withAll := *changes[len(changes)-1].Next
	withAll.Internal = "ingress"
	withAll.After = []string{"local/dev/web@1"}
	ins = append(ins, &withAll, &Instance{APIVersion: APIVersion, Kind: KindTombstone, ID: ID{"local", "dev", "gone"}, Sequence: 3, Digest: "sha256:00"})
	for _, in := range ins {
		got, err := EncodeLock(in)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := checksumOf(in)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := canonical(lockDocument{Instance: *in, Checksum: sum})
		if err != nil {
			t.Fatal(err)
		}
		if want := append([]byte(lockHeader), doc...); !bytes.Equal(got, want) {
			t.Errorf("%s: EncodeLock differs from the canonical document:\n%s\nwant:\n%s", in.ID, got, want)
		}
	}
}

func TestSettingAtFollowsADottedPath(t *testing.T) {
	tree := map[string]any{"domain": "d", "parameters": map[string]any{"replicas": 2}, "config": map[string]any{"log": map[string]any{"level": "info"}}}
	for path, want := range map[string]any{"domain": "d", "parameters.replicas": 2, "config.log.level": "info", "config.log.format": nil, "domain.x": nil, "absent": nil} {
		if got := SettingAt(tree, path); got != want {
			t.Errorf("SettingAt(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestALockfileItsReadersWouldRefuseIsNeverWritten pins that what
// EncodeLock writes, DecodeLock reads: a lockfile over the readers' size
// limit, once committed, would stop every later lock, plan and sync, and
// reverting the configuration would not help (lockfiles are read before
// anything resolves). The lock refuses it instead, naming the lockfile.
func TestALockfileItsReadersWouldRefuseIsNeverWritten(t *testing.T) {
	dir := exampleCopy(t)
	c := lockDirInto(t, dir)[0]
	in := *c.Next
	in.Values = map[string]any{"big": strings.Repeat("x", maxLockSize/2), "bigger": strings.Repeat("y", maxLockSize/2)}
	data, err := EncodeLock(&in)
	if err == nil {
		if _, derr := DecodeLock(c.Path(), data); derr != nil {
			t.Fatalf("EncodeLock wrote a lockfile DecodeLock refuses: %v", derr)
		}
		t.Fatalf("EncodeLock wrote a lockfile of %d bytes", len(data))
	}
	if !strings.Contains(err.Error(), c.Path()) || !strings.Contains(err.Error(), "more than the") {
		t.Fatalf("the refusal %q does not name the lockfile and the limit", err)
	}
}

// TestSequencesStayWithinWhatEveryReaderHoldsExactly pins the bounds of a
// sequence: a lockfile above MaxSequence is refused naming the field, a
// trailer above it (any commit message can carry one) is ignored rather
// than overflowing the next number, and no instance above it is encoded.
func TestSequencesStayWithinWhatEveryReaderHoldsExactly(t *testing.T) {
	dir := exampleCopy(t)
	c := lockDirInto(t, dir)[0]
	in := *c.Next
	in.Sequence = MaxSequence
	data, err := EncodeLock(&in)
	if err != nil {
		t.Fatalf("the highest sequence: %v", err)
	}
	if _, err := DecodeLock(c.Path(), data); err != nil {
		t.Fatalf("the highest sequence does not read back: %v", err)
	}
	in.Sequence = MaxSequence + 1
	if _, err := EncodeLock(&in); err == nil || !strings.Contains(err.Error(), "sequence") {
		t.Fatalf("a sequence above the highest was encoded (%v)", err)
	}
	edited := bytes.Replace(data, []byte(fmt.Sprintf("sequence: %d", int64(MaxSequence))), []byte("sequence: 9223372036854775807"), 1)
	if _, err := DecodeLock(c.Path(), edited); err == nil || !strings.Contains(err.Error(), c.Path()+": field sequence") {
		t.Fatalf("a lockfile at the largest int64: %v, want a refusal naming the file and field", err)
	}

	used := UsedFromTrailers(map[string]int{c.ID.String(): math.MaxInt64, "local/dev/other": 7, "local/dev/top": MaxSequence})
	if got := used.next(c.ID, nil); got != 1 {
		t.Errorf("after a hostile trailer at the largest int64, the next sequence is %d, want 1", got)
	}
	// A trailer at the highest sequence would leave no next one: every
	// lock of that deployment (and of the commit with it) would fail.
	if got := used.next(ID{"local", "dev", "top"}, nil); got != 1 {
		t.Errorf("after a trailer at the highest sequence, the next sequence is %d, want 1", got)
	}
	if got := used.next(ID{"local", "dev", "other"}, nil); got != 8 {
		t.Errorf("after a trailer at 7, the next sequence is %d, want 8", got)
	}
}

// TestLockfileWithANamespaceTheAPIServerRefusesIsRefused: a lockfile whose
// namespace is no DNS label, is longer than one, or is reserved for the
// cluster or the agent, is refused by name of
// the field even with a matching checksum (the agent would fail every
// sync creating it); a good one reads.
func TestLockfileWithANamespaceTheAPIServerRefusesIsRefused(t *testing.T) {
	dir := exampleCopy(t)
	changes := lockDirInto(t, dir)
	good := *changes[0].Next
	if good.Context == nil || good.Context.Deployment.Namespace == "" {
		t.Fatalf("%s has no namespace", good.ID)
	}
	data, err := EncodeLock(&good)
	must(t, err)
	if _, err := DecodeLock(good.ID.LockPath(), data); err != nil {
		t.Fatalf("the resolver's own lockfile: %v", err)
	}
	// A reserved namespace too: the resolver never writes one, so such a
	// lockfile was written by hand (its checksum recomputed), and the agent
	// would put the deployment's objects beside the cluster's own.
	for _, ns := range []string{"Not_A_Namespace", "dev.hub", "-dev", strings.Repeat("n", 64), "kube-system", "kube-anything", "default", "styrmin-system"} {
		bad := good
		ctx := *good.Context
		ctx.Deployment.Namespace = ns
		bad.Context = &ctx
		data, err := EncodeLock(&bad)
		must(t, err)
		if _, err := DecodeLock(bad.ID.LockPath(), data); err == nil || !strings.Contains(err.Error(), "field context.deployment.namespace: "+strconv.Quote(ns)) {
			t.Errorf("namespace %q: %v, want an error naming the field", ns, err)
		}
	}
}

// sameOnBothDecodingPaths fails t when the fast decoding of a lockfile
// (blockyaml) and sigs.k8s.io/yaml's UnmarshalStrict read data
// differently: the fast path may only decline, never disagree.
func sameOnBothDecodingPaths(t *testing.T, data []byte) {
	t.Helper()
	var fast, slow lockDocument
	ferr := decodeLockDocument(data, &fast, true)
	serr := decodeLockDocument(data, &slow, false)
	if (ferr == nil) != (serr == nil) || (ferr != nil && ferr.Error() != serr.Error()) {
		t.Fatalf("the decoding paths disagree on %q:\nfast: %v\nstrict: %v", data, ferr, serr)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("the decoding paths read %q differently:\nfast:   %#v\nstrict: %#v", data, fast, slow)
	}
}

// TestLockfilesTakeTheFastDecodingAndReadTheSame: the lockfiles lock
// writes, values of every kind included, are read without the general
// YAML parser and to the same instance; one outside the block subset (a
// float, a long string written on several lines) is read by the general
// parser.
func TestLockfilesTakeTheFastDecodingAndReadTheSame(t *testing.T) {
	golden, err := filepath.Glob("testdata/golden/locks/*/*/*.lock.yaml")
	if err != nil || len(golden) == 0 {
		t.Fatalf("no golden lockfiles: %v", err)
	}
	var docs [][]byte
	for _, p := range golden {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, data)
	}
	in := &Instance{APIVersion: APIVersion, Kind: KindInstance, ID: ID{"c", "e", "n"}, Sequence: 7,
		Values: map[string]any{
			"words":     []any{"yes", "on", "y", "null", "~", "1.5", "0755", "-1", "1e3", "2001-12-14", "--port", "128Mi", "1.25.0"},
			"multiline": "line one\nline two\n",
			"quoted":    "a: b # c",
			"unicode":   "grüße ✓",
			"empty":     map[string]any{},
			"none":      []any{},
			"nested":    []any{map[string]any{"name": "x", "value": int64(3)}, []any{true, nil}},
		}}
	data, err := EncodeLock(in)
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, data)
	for i, data := range docs {
		sameOnBothDecodingPaths(t, data)
		if !lockSchema.Unmarshal(data, &lockDocument{}) {
			t.Errorf("lockfile %d is read by the general YAML parser, not the fast path:\n%s", i, data)
		}
	}
	// A float, and a string go-yaml folds onto several lines.
	for _, outside := range []map[string]any{{"ratio": 1.5}, {"long": strings.Repeat("word ", 40)}} {
		in.Values = outside
		data, err := EncodeLock(in)
		if err != nil {
			t.Fatal(err)
		}
		sameOnBothDecodingPaths(t, data)
		if _, ok := blockyaml.Decode(data); ok {
			t.Errorf("values %v are read by the fast path", outside)
		}
		got, err := DecodeLock("locks/c/e/n.lock.yaml", data)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got.Values) != fmt.Sprint(outside) {
			t.Fatalf("values %v read back as %v", outside, got.Values)
		}
	}
}

// BenchmarkDecodeLock decodes a golden lockfile through the fast path and
// through UnmarshalStrict alone, the reference (go test ./resolver -run
// '^$' -bench DecodeLock -benchmem).
func BenchmarkDecodeLock(b *testing.B) {
	data, err := os.ReadFile("testdata/golden/locks/local/dev/hub.lock.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, fast := range []bool{true, false} {
		name := map[bool]string{true: "fast", false: "strict"}[fast]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var doc lockDocument
				if err := decodeLockDocument(data, &doc, fast); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLockfilesTakeTheFastEncodingAndWriteTheSame: the golden lockfiles'
// instances are written by blockyaml, as go-yaml writes them.
func TestLockfilesTakeTheFastEncodingAndWriteTheSame(t *testing.T) {
	for p, j := range goldenInstancesJSON(t) {
		typed, err := blockyaml.FromJSON(j)
		if err != nil {
			t.Fatal(err)
		}
		fast, ok := blockyaml.Encode(typed.(yamlv2.MapSlice))
		if !ok {
			t.Errorf("%s is written by go-yaml, not the fast path", p)
			continue
		}
		slow, err := yamlv2.Marshal(typed)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fast, slow) {
			t.Errorf("%s: the fast path writes\n%s\ngo-yaml writes\n%s", p, fast, slow)
		}
	}
}

// A lockfile over the readers' limit in a commit (a plan's base, a sync)
// is refused as in the working tree, naming it and its size, and the
// lockfiles within the limit are read the same from either.
func TestALockfileOverTheLimitIsRefusedFromACommitAsFromTheWorkingTree(t *testing.T) {
	dir := exampleCopy(t)
	changes := lockDirInto(t, dir)
	big := changes[0].Path()
	writeFile(t, dir, big, "# "+strings.Repeat("x", maxLockSize)+"\n")
	files := map[string][]byte{}
	for _, c := range changes {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(c.Path())))
		if err != nil {
			t.Fatal(err)
		}
		files[c.Path()] = data
	}
	gdir := t.TempDir()
	if _, err := git.PlainInit(gdir, true); err != nil {
		t.Fatal(err)
	}
	repo, err := gitsource.Open(gdir, gitsource.OpenOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	head := commitFiles(t, repo, "locks", files)
	tree, err := repo.FS(head)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("file is %d bytes, more than the %d allowed", len(files[big]), maxLockSize)
	for name, fsys := range map[string]fs.FS{"working tree": os.DirFS(dir), "commit": tree} {
		_, err := LoadLocks(fsys)
		if err == nil || !strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error naming %s: %s", name, err, big, want)
		}
	}
	delete(files, big)
	for _, c := range changes[1:] {
		fromTree, err := NewLockLoader().read(tree, c.Path())
		if err != nil {
			t.Fatal(err)
		}
		fromDir, err := NewLockLoader().read(os.DirFS(dir), c.Path())
		if err != nil {
			t.Fatal(err)
		}
		if fromTree.Digest != fromDir.Digest || fromTree.Sequence != fromDir.Sequence {
			t.Errorf("%s: from the commit %s/%d, from the working tree %s/%d", c.Path(), fromTree.Digest, fromTree.Sequence, fromDir.Digest, fromDir.Sequence)
		}
	}
}

// TestLockfileNamingADeploymentTheResolverNeverWritesIsRefused: a
// lockfile whose cluster, environment or deployment name is no lowercase
// DNS label of at most 40 characters (what the resolver's folders and
// files must be) is refused naming the field, even with a matching
// checksum: its task's name or labels would be refused by the API server
// at every sync, and the sync's position held for good. The internal
// ingress controllers' names read.
func TestLockfileNamingADeploymentTheResolverNeverWritesIsRefused(t *testing.T) {
	good := Instance{APIVersion: APIVersion, Kind: KindTombstone, ID: ID{Cluster: "local", Environment: "dev", Name: "web"}, Sequence: 2, Digest: "sha256:aa"}
	for _, c := range []struct {
		id    ID
		field string // "": reads
	}{
		{ID{"local", "dev", "web"}, ""},
		{ID{"local", ClusterEnvironment, IngressName}, ""},
		{ID{"local", "dev", IngressName}, ""},
		{ID{"local", "dev", "Web"}, "deployment.name"},
		{ID{"local", "dev", "web_1"}, "deployment.name"},
		{ID{"local", strings.Repeat("e", 41), "web"}, "deployment.environment"},
		{ID{"Local", "dev", "web"}, "deployment.cluster"},
		{ID{"local", "dev.x", "web"}, "deployment.environment"},
	} {
		in := good
		in.ID = c.id
		data, err := EncodeLock(&in)
		must(t, err)
		_, err = DecodeLock(c.id.LockPath(), data)
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v; want it read", c.id, err)
		case c.field != "" && (err == nil || !strings.Contains(err.Error(), "field "+c.field+": ")):
			t.Errorf("%s: %v; want a refusal naming field %s", c.id, err, c.field)
		}
	}
}
