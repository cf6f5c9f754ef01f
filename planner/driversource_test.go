package planner

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/resolver"
)

// TestATokenInADriverSourceURLReachesNoPlanAndNoProvenance locks the
// example with webapp 1.1.0 taken from a driver source whose URL holds a
// token, then changes a default of that driver: the plan (its driver
// cause, its changes, every format) and the provenance explain prints
// ("from driver (…)") name the source without the token.
func TestATokenInADriverSourceURLReachesNoPlanAndNoProvenance(t *testing.T) {
	const token = "s3cretT0kenValue"
	dir := copyTree(t, exampleDir)
	external := t.TempDir()
	if err := os.Rename(filepath.Join(dir, "drivers/webapp/1.1.0"), filepath.Join(external, "1.1.0")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "styrmin.cue", "deletionThreshold: 1\ndrivers: [{name: \"webapp\", version: \"1.1.0\", url: \"https://x-access-token:"+token+
		"@git.example.com/drivers.git\", ref: \"main\", path: \"webapp/1.1.0\"}]\n")
	fetch := func(resolver.DriverSource) (fs.FS, string, error) {
		return os.DirFS(filepath.Join(external, "1.1.0")), strings.Repeat("a", 40), nil
	}
	load := func() *resolver.Workspace {
		t.Helper()
		ws, err := resolver.LoadWorkspace(os.DirFS(dir), resolver.WorkspaceOptions{SourceCommit: strings.Repeat("0", 40), FetchDriver: fetch})
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	changes, _, err := load().Lock(resolver.LockAllOrNothing)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		writeFile(t, dir, c.Path(), string(c.Data))
	}

	base := load()
	driverCUE := filepath.Join(external, "1.1.0", "driver.cue")
	spec, err := os.ReadFile(driverCUE)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(spec), `*"Hello from Styrmin"`, `*"Hello again from Styrmin"`, 1)
	if changed == string(spec) {
		t.Fatal("the webapp driver has no default message to change")
	}
	if err := os.WriteFile(driverCUE, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	head := load()
	res := head.Resolve()
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	p, err := Compute(Input{
		Base: base.Locks, Head: res, Repo: head.Repo, BaseFS: os.DirFS(dir), HeadFS: os.DirFS(dir),
		Drivers: Catalogs{head.Catalog, base.Catalog}, BaseName: "base", HeadName: "working tree",
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	causes := 0
	for _, d := range p.Deployments {
		for _, c := range d.Causes {
			if c.Kind == CauseDriver {
				causes++
			}
		}
	}
	if causes == 0 {
		t.Fatalf("a changed driver default gave no driver cause: %+v", p.Summary)
	}
	for _, f := range append(Formats(), FormatHTML) {
		for _, full := range []bool{false, true} {
			var buf bytes.Buffer
			if err := Render(&buf, p, f, RenderOptions{Full: full}); err != nil {
				t.Fatal(err)
			}
			if found := secrettest.Find(buf.Bytes(), token); len(found) > 0 {
				t.Errorf("%s plan (full=%v) holds %s:\n%s", f, full, strings.Join(found, ", "), buf.Bytes())
			}
			if !bytes.Contains(buf.Bytes(), []byte("git.example.com/drivers.git")) {
				t.Errorf("%s plan (full=%v) does not name the driver's source", f, full)
			}
		}
	}
	// What explain prints: each value, the layer and file it came from.
	for _, r := range res.Resolved {
		for path, o := range r.Provenance {
			if found := secrettest.Find([]byte(o.File), token); len(found) > 0 {
				t.Errorf("%s: %s comes from %q, which holds %s", r.Instance.ID, path, o.File, strings.Join(found, ", "))
			}
		}
	}
}
