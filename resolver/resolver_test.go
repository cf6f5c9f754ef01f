package resolver

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/examples"
)

var update = flag.Bool("update", false, "rewrite golden files")

// exampleCopy copies the example repository (config and drivers, no
// locks) into a temporary folder the test may change.
func exampleCopy(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := examples.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeFile(t testing.TB, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// resolveDir loads and resolves a repository folder with its own drivers
// and locks.
func resolveDir(t testing.TB, dir string) (*Result, map[ID]*Instance, error) {
	t.Helper()
	fsys := os.DirFS(dir)
	repo, err := NewLoader(0).Load(fsys)
	if err != nil {
		return nil, nil, err
	}
	cat, err := drivers.LoadCatalog(fsys, "drivers", drivers.LoadOptions{})
	if err != nil {
		return nil, nil, err
	}
	locks, err := LoadLocks(fsys)
	if err != nil {
		return nil, nil, err
	}
	res := Resolve(repo, Options{Catalog: cat, Locks: locks, SourceCommit: "0000000000000000000000000000000000000000"})
	return res, locks, res.Err()
}

// lockDirInto resolves dir and writes the lock changes into it, like
// `styrminctl lock` does.
func lockDirInto(t testing.TB, dir string) []LockChange {
	t.Helper()
	res, locks, err := resolveDir(t, dir)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	changes, err := PlanLocks(res, locks)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		writeFile(t, dir, c.Path(), string(c.Data))
	}
	return changes
}

func TestExampleRepositoryLocksToGoldenFiles(t *testing.T) {
	dir := exampleCopy(t)
	changes := lockDirInto(t, dir)
	if len(changes) == 0 {
		t.Fatal("the example repository produced no lockfiles")
	}
	for _, c := range changes {
		if c.Next.Sequence != 1 {
			t.Errorf("%s: first lock has sequence %d, want 1", c.ID, c.Next.Sequence)
		}
		golden := filepath.Join("testdata", "golden", filepath.FromSlash(c.Path()))
		if *update {
			writeFile(t, ".", filepath.ToSlash(golden), string(c.Data))
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./resolver -update)", err)
		}
		if !bytes.Equal(want, c.Data) {
			t.Errorf("%s differs from %s:\n%s", c.Path(), golden, c.Data)
		}
	}
}

func TestResolvingTwiceGivesByteIdenticalLocks(t *testing.T) {
	a := lockDirInto(t, exampleCopy(t))
	b := lockDirInto(t, exampleCopy(t))
	if len(a) != len(b) {
		t.Fatalf("%d vs %d changes", len(a), len(b))
	}
	for i := range a {
		if !bytes.Equal(a[i].Data, b[i].Data) {
			t.Errorf("%s: lockfiles differ between two runs", a[i].ID)
		}
	}
}

func TestLockingAgainWithoutChangesWritesNothing(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	if again := lockDirInto(t, dir); len(again) != 0 {
		t.Fatalf("second lock changed %d deployments, want 0: %v", len(again), again[0].ID)
	}
}

func TestEnvironmentValueChangeRelocksExactlyItsInheritors(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	// dev's logLevel reaches dev/hub; dev/web's driver has no logLevel
	// parameter, so its resolved instance does not change.
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", `
namespacePrefix: "dev"
backupLocation:  "s3://backups/local/dev"
parameters: logLevel: "error"
`)
	changes := lockDirInto(t, dir)
	if len(changes) != 1 || changes[0].ID != (ID{"local", "dev", "hub"}) || changes[0].Next.Sequence != 2 {
		t.Fatalf("relocked %v, want only local/dev/hub at sequence 2", describe(changes))
	}
	if got := changes[0].Next.Values["config"].(map[string]any)["GRAPHHUB_LOG_LEVEL"]; got != "error" {
		t.Fatalf("dev/hub log level %v, want error", got)
	}
}

func describe(changes []LockChange) []string {
	var out []string
	for _, c := range changes {
		out = append(out, c.Trailer())
	}
	return out
}

func TestClusterValueChangeSkipsDeploymentsThatOverrideIt(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	// The cluster's logLevel reaches nobody: dev sets its own, staging/hub
	// sets its own and the webapp driver has no such parameter.
	writeFile(t, dir, "clusters/local/cluster.cue", `
domain:       "local.styrmin.dev"
ingressClass: "nginx"
storageClasses: default: "standard"
config: logFormat: "json"
parameters: logLevel: "error"
`)
	if changes := lockDirInto(t, dir); len(changes) != 0 {
		t.Fatalf("a value every deployment overrides relocked %v", describe(changes))
	}
	// A cluster value nobody overrides fans out across both environments.
	writeFile(t, dir, "clusters/local/cluster.cue", `
domain:       "local.styrmin.dev"
ingressClass: "nginx"
storageClasses: default: "standard"
config: logFormat: "text"
parameters: logLevel: "error"
`)
	changes := lockDirInto(t, dir)
	if len(changes) != 4 {
		t.Fatalf("cluster fan-out relocked %v, want all 4", describe(changes))
	}
}

func TestRemovedDeploymentGetsTombstoneAndRecreationNeverReusesNumbers(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	web := "clusters/local/environments/dev/deployments/web.cue"
	content, err := os.ReadFile(filepath.Join(dir, web))
	if err != nil {
		t.Fatal(err)
	}
	// hub connects to web, so remove the connection first.
	writeFile(t, dir, "clusters/local/environments/dev/deployments/hub.cue", hubWith(""))
	lockDirInto(t, dir)
	if err := os.Remove(filepath.Join(dir, web)); err != nil {
		t.Fatal(err)
	}
	changes := lockDirInto(t, dir)
	if len(changes) != 1 || !changes[0].Next.Tombstone() || changes[0].Next.Sequence != 2 {
		t.Fatalf("removing web: got %+v, want one tombstone with sequence 2", changes)
	}
	writeFile(t, dir, web, string(content))
	changes = lockDirInto(t, dir)
	if len(changes) != 1 || changes[0].Next.Tombstone() || changes[0].Next.Sequence != 3 {
		t.Fatalf("re-creating web: got %+v, want an instance with sequence 3", changes)
	}
}

func TestProvenanceNamesTheLayerThatSetEachValue(t *testing.T) {
	res, _, err := resolveDir(t, exampleCopy(t))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := res.Get(ID{"local", "staging", "hub"})
	if !ok {
		t.Fatal("local/staging/hub not resolved")
	}
	cases := map[string]Origin{
		"parameters.logLevel": {Layer: LayerDeployment, File: "clusters/local/environments/staging/deployments/hub.cue"},
		"parameters.workers":  {Layer: "driver", File: "drivers/graphhub/1.0.0"},
		"config.logFormat":    {Layer: LayerCluster, File: "clusters/local/cluster.cue"},
		"backupLocation":      {Layer: LayerEnvironment, File: "clusters/local/environments/staging/environment.yaml"},
	}
	for p, want := range cases {
		if got := r.Provenance[p]; got != want {
			t.Errorf("%s: origin %+v, want %+v", p, got, want)
		}
	}
}

func TestConnectsGivesSiblingEndpointsOfTheSameEnvironmentOnly(t *testing.T) {
	res, _, err := resolveDir(t, exampleCopy(t))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := res.Get(ID{"local", "dev", "hub"})
	eps := r.Instance.Context.Services["web"]
	if len(eps) == 0 {
		t.Fatalf("dev/hub connects to web but has no endpoints: %+v", r.Instance.Context.Services)
	}
	for name, ep := range eps {
		if !strings.Contains(ep.Host, "dev-web") {
			t.Errorf("service %s host %q is not dev's web", name, ep.Host)
		}
	}
}

func TestHandEditedLockfileIsReported(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	p := filepath.Join(dir, "locks/local/dev/web.lock.yaml")
	data, _ := os.ReadFile(p)
	edited := bytes.Replace(data, []byte("sequence: 1"), []byte("sequence: 7"), 1)
	if bytes.Equal(edited, data) {
		t.Fatal("test setup: sequence line not found")
	}
	writeFile(t, dir, "locks/local/dev/web.lock.yaml", string(edited))
	_, err := LoadLocks(os.DirFS(dir))
	var he *HandEditError
	if !errors.As(err, &he) || he.Path != "locks/local/dev/web.lock.yaml" {
		t.Fatalf("got %v, want a HandEditError naming the lockfile", err)
	}
}

// TestLockLoaderDecodesSharedLockfilesOnceAndStillChecksEach loads two
// trees that share all but one lockfile: the shared ones are decoded
// once (the same instances), the hand-edited one is still refused.
func TestLockLoaderDecodesSharedLockfilesOnceAndStillChecksEach(t *testing.T) {
	base := exampleCopy(t)
	lockDirInto(t, base)
	head := exampleCopy(t)
	lockDirInto(t, head)
	l := NewLockLoader()
	bl, err := l.Load(os.DirFS(base))
	if err != nil {
		t.Fatal(err)
	}
	hl, err := l.Load(os.DirFS(head))
	if err != nil || len(hl) != len(bl) || len(bl) == 0 {
		t.Fatalf("%d and %d lockfiles, %v", len(bl), len(hl), err)
	}
	for id, in := range bl {
		if hl[id] != in {
			t.Errorf("%s decoded twice", id)
		}
	}
	p := filepath.Join(head, "locks/local/dev/web.lock.yaml")
	data, _ := os.ReadFile(p)
	writeFile(t, head, "locks/local/dev/web.lock.yaml", string(bytes.Replace(data, []byte("sequence: 1"), []byte("sequence: 7"), 1)))
	_, err = l.Load(os.DirFS(head))
	var he *HandEditError
	if !errors.As(err, &he) || he.Path != "locks/local/dev/web.lock.yaml" {
		t.Fatalf("got %v, want a HandEditError naming the lockfile", err)
	}
}

func TestDeploymentOnHoldKeepsItsLockThroughAFanOut(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	writeFile(t, dir, "clusters/local/environments/dev/deployments/hub.cue", hubWith(`hold: "restore in progress"`))
	writeFile(t, dir, "clusters/local/cluster.cue", `
domain:       "local.styrmin.dev"
ingressClass: "nginx"
storageClasses: default: "standard"
config: logFormat: "text"
parameters: logLevel: "info"
`)
	changes := lockDirInto(t, dir)
	for _, c := range changes {
		if c.ID == (ID{"local", "dev", "hub"}) {
			t.Fatalf("a deployment on hold was relocked: %s", c.Trailer())
		}
	}
	if len(changes) != 3 {
		t.Fatalf("fan-out relocked %v, want the 3 deployments not on hold", describe(changes))
	}
	// Lifting the hold lets the deployment catch up.
	writeFile(t, dir, "clusters/local/environments/dev/deployments/hub.cue", hubWith(""))
	changes = lockDirInto(t, dir)
	if len(changes) != 1 || changes[0].ID != (ID{"local", "dev", "hub"}) {
		t.Fatalf("after the hold: %v, want local/dev/hub only", describe(changes))
	}
}

// TestReadLockNamesAMissingFileAndRefusesALink pins ReadLock's answers:
// a lockfile decodes, a missing one wraps fs.ErrNotExist, a symbolic link
// and a folder are refused with the file named.
func TestReadLockNamesAMissingFileAndRefusesALink(t *testing.T) {
	in := &Instance{APIVersion: APIVersion, Kind: KindInstance, ID: ID{Cluster: "c", Environment: "e", Name: "n"}, Sequence: 3}
	data, err := EncodeLock(in)
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{
		"locks/c/e/n.lock.yaml":    {Data: data},
		"locks/c/e/link.lock.yaml": {Data: []byte("n.lock.yaml"), Mode: fs.ModeSymlink},
	}
	got, err := ReadLock(fsys, "locks/c/e/n.lock.yaml")
	if err != nil || got.Sequence != 3 || got.ID != in.ID {
		t.Fatalf("ReadLock of a lockfile: %+v, %v", got, err)
	}
	if _, err := ReadLock(fsys, "locks/c/e/gone.lock.yaml"); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "gone.lock.yaml") {
		t.Errorf("ReadLock of a missing file: %v, want fs.ErrNotExist naming it", err)
	}
	for _, bad := range []string{"locks/c/e/link.lock.yaml", "locks/c/e"} {
		if _, err := ReadLock(fsys, bad); err == nil || errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), bad) {
			t.Errorf("ReadLock(%s): %v, want a refusal naming it", bad, err)
		}
	}
}

// TestLockForRetriesOnlyWhatStillNeedsIt pins the one decision every lock
// path takes: a deployment asked to be retried whose lock is still at the
// failed sequence is locked again with the same instance; one whose lock
// moved on is reported, not retried; one the configuration changes anyway
// is locked once, by the change.
func TestLockForRetriesOnlyWhatStillNeedsIt(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	hub, web := ID{"local", "dev", "hub"}, ID{"local", "dev", "web"}
	stagingWeb := ID{"local", "staging", "web"}
	writeFile(t, dir, "clusters/local/environments/staging/deployments/web.yaml", "driver: webapp\nappVersion: 1.26.0\n")
	ws, err := LoadWorkspace(os.DirFS(dir), WorkspaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lo, err := ws.LockFor(LockRequest{Retry: map[ID]int64{hub: 1, web: 7, stagingWeb: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(lo.Retries) != 1 || lo.Retries[0].ID != hub || lo.Retries[0].Next.Sequence != 2 || lo.Retries[0].Next.Digest != ws.Locks[hub].Digest {
		t.Errorf("retries %v, want dev/hub again at 2 with its digest", describe(lo.Retries))
	}
	if len(lo.NotRetried) != 1 || lo.NotRetried[0] != web {
		t.Errorf("not retried %v, want dev/web (its lock is at 1, not 7)", lo.NotRetried)
	}
	if len(lo.Changes) != 1 || lo.Changes[0].ID != stagingWeb || len(lo.All()) != 2 {
		t.Errorf("changes %v, want staging/web once, by its change", describe(lo.Changes))
	}
}
