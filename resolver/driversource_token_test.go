package resolver

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/internal/secrettest"
)

// TestAnExternalDriverIsNamedWithoutTheTokenOfItsURL loads webapp 1.1.0
// from a driver source whose URL holds a token: the driver's Source (in
// its errors and in the provenance of its defaults, which explain prints)
// names the URL without it, while the fetcher still gets the URL as
// given.
func TestAnExternalDriverIsNamedWithoutTheTokenOfItsURL(t *testing.T) {
	const (
		token = "s3cretT0kenValue"
		url   = "https://x-access-token:" + token + "@git.example.com/drivers.git"
	)
	dir := exampleCopy(t)
	external := t.TempDir()
	if err := os.Rename(filepath.Join(dir, "drivers/webapp/1.1.0"), filepath.Join(external, "1.1.0")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "styrmin.cue", "drivers: [{name: \"webapp\", version: \"1.1.0\", url: \""+url+"\", ref: \"main\", path: \"webapp/1.1.0\"}]\n")
	var asked []string
	fetch := func(src DriverSource) (fs.FS, string, error) {
		asked = append(asked, src.URL)
		return os.DirFS(filepath.Join(external, "1.1.0")), strings.Repeat("a", 40), nil
	}
	load := func() (*Workspace, error) {
		return LoadWorkspace(os.DirFS(dir), WorkspaceOptions{SourceCommit: strings.Repeat("0", 40), FetchDriver: fetch})
	}
	ws, err := load()
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != url {
		t.Fatalf("the fetcher was asked for %q, want the URL as given", asked)
	}
	const want = "https://git.example.com/drivers.git//webapp/1.1.0@main"
	d, ok := ws.Catalog.Get("webapp", "1.1.0")
	if !ok || d.Source != want {
		t.Fatalf("webapp 1.1.0's source = %q, want %q", d.Source, want)
	}
	res := ws.Resolve()
	for _, r := range res.Resolved {
		for p, o := range r.Provenance {
			if found := secrettest.Find([]byte(o.File), token); len(found) > 0 {
				t.Errorf("%s: %s comes from %q", r.Instance.ID, p, o.File)
			}
		}
	}

	// A driver that does not load is named by the same Source.
	writeFile(t, external, "1.1.0/driver.cue", "name: \"webapp\"\nversion: \"1.1.0\"\nparameters: {\n")
	_, err = load()
	if err == nil {
		t.Fatal("a broken external driver loaded")
	}
	if found := secrettest.Find([]byte(err.Error()), token); len(found) > 0 || !strings.Contains(err.Error(), "git.example.com") {
		t.Errorf("error %q: holds %v or does not name the source", err, found)
	}
}
