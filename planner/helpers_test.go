package planner

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

var update = flag.Bool("update", false, "rewrite golden files")

// exampleDir is the example desired-state repository of this module.
const exampleDir = "../examples"

// copyTree copies a repository folder (configuration, drivers and locks;
// not the ci folder, which holds Go code) into a temporary folder.
func copyTree(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && (rel == "ci") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(rel, ".go") {
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
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

func removeFile(t testing.TB, dir, rel string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
		t.Fatal(err)
	}
}

// workspace is a loaded repository folder.
type workspace struct {
	dir     string
	fsys    fs.FS
	repo    *resolver.Repository
	catalog *drivers.Catalog
	locks   map[resolver.ID]*resolver.Instance
}

func loadWorkspace(t testing.TB, dir string) *workspace {
	t.Helper()
	fsys := os.DirFS(dir)
	repo, err := resolver.NewLoader(0).Load(fsys)
	if err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	cat, err := drivers.LoadCatalog(fsys, "drivers", drivers.LoadOptions{})
	if err != nil {
		t.Fatalf("drivers of %s: %v", dir, err)
	}
	locks, err := resolver.LoadLocks(fsys)
	if err != nil {
		t.Fatalf("locks of %s: %v", dir, err)
	}
	return &workspace{dir: dir, fsys: fsys, repo: repo, catalog: cat, locks: locks}
}

// lockInto resolves dir against its own locks and writes the lock
// changes, like `styrminctl lock`.
func lockInto(t testing.TB, dir string) {
	t.Helper()
	w := loadWorkspace(t, dir)
	res := resolver.Resolve(w.repo, resolver.Options{Catalog: w.catalog, Locks: w.locks, SourceCommit: strings.Repeat("0", 40)})
	if err := res.Err(); err != nil {
		t.Fatalf("resolve %s: %v", dir, err)
	}
	changes, err := resolver.PlanLocks(res, w.locks)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		writeFile(t, dir, c.Path(), string(c.Data))
	}
}

// lockedExample returns a copy of the example repository with every
// deployment locked: the base of a scenario.
func lockedExample(t testing.TB) string {
	t.Helper()
	dir := copyTree(t, exampleDir)
	lockInto(t, dir)
	return dir
}

// computePlan plans head against base's lockfiles, as `styrminctl plan`
// does: the head resolved with the base locks, drivers of both sides.
func computePlan(t testing.TB, baseDir, headDir string, opts Options) *Plan {
	t.Helper()
	base := loadWorkspace(t, baseDir)
	head := loadWorkspace(t, headDir)
	res := resolver.Resolve(head.repo, resolver.Options{Catalog: head.catalog, Locks: base.locks})
	p, err := Compute(Input{
		Base:     base.locks,
		Head:     res,
		Repo:     head.repo,
		BaseFS:   base.fsys,
		HeadFS:   head.fsys,
		Drivers:  Catalogs{head.catalog, base.catalog},
		BaseName: "base",
		HeadName: "working tree",
	}, opts)
	if err != nil {
		t.Fatalf("compute: %v", err)
	}
	return p
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./planner -update)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs from the golden file (run go test ./planner -update and review the diff):\n%s",
			path, unifiedDiff("golden", "got", string(want), string(got)))
	}
}
