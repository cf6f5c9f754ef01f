package resolver

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExternalDriverRecordsItsSourceAndAMovedRefIsNoChange loads the
// example with webapp 1.1.0 taken out of drivers/ and listed as a driver
// source: the instance records the source and the commit the fetcher
// resolved (the URL without credentials); a ref that resolves to another
// commit with the same content locks nothing new; another URL does.
func TestExternalDriverRecordsItsSourceAndAMovedRefIsNoChange(t *testing.T) {
	dir := exampleCopy(t)
	external := t.TempDir()
	if err := os.Rename(filepath.Join(dir, "drivers/webapp/1.1.0"), filepath.Join(external, "1.1.0")); err != nil {
		t.Fatal(err)
	}
	settings := func(url string) string {
		return "deletionThreshold: 1\ndrivers: [{name: \"webapp\", version: \"1.1.0\", url: \"" + url + "\", ref: \"main\", path: \"webapp/1.1.0\"}]\n"
	}
	writeFile(t, dir, "styrmin.cue", settings("https://x-access-token:s3cret@git.example.com/drivers.git"))
	commit := strings.Repeat("a", 40)
	var asked []DriverSource
	fetch := func(src DriverSource) (fs.FS, string, error) {
		asked = append(asked, src)
		return os.DirFS(filepath.Join(external, "1.1.0")), commit, nil
	}
	lock := func() []LockChange {
		t.Helper()
		ws, err := LoadWorkspace(os.DirFS(dir), WorkspaceOptions{SourceCommit: strings.Repeat("0", 40), FetchDriver: fetch})
		if err != nil {
			t.Fatal(err)
		}
		changes, _, err := ws.Lock(LockAllOrNothing)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range changes {
			writeFile(t, dir, c.Path(), string(c.Data))
		}
		return changes
	}

	first := lock()
	if len(asked) != 1 || asked[0].Path != "webapp/1.1.0" {
		t.Fatalf("fetcher asked for %+v", asked)
	}
	var web *Instance
	for _, c := range first {
		if c.ID.Name == "web" && c.ID.Environment == "dev" {
			web = c.Next
		}
		if strings.Contains(string(c.Data), "s3cret") {
			t.Fatalf("%s holds the URL's credentials:\n%s", c.Path(), c.Data)
		}
	}
	if web == nil {
		t.Fatalf("web was not locked: %v", describe(first))
	}
	want := DriverOrigin{URL: "https://git.example.com/drivers.git", Ref: "main", Path: "webapp/1.1.0", Commit: commit}
	if web.Driver.Source == nil || *web.Driver.Source != want {
		t.Fatalf("web's driver source = %+v, want %+v", web.Driver.Source, want)
	}

	// The ref moved on; the driver's content did not.
	commit = strings.Repeat("b", 40)
	if again := lock(); len(again) != 0 {
		t.Fatalf("a moved ref with the same content locked %v", describe(again))
	}

	// The driver moved to another repository: the agent must fetch from
	// there, so the instances change.
	writeFile(t, dir, "styrmin.cue", settings("https://git.example.com/other.git"))
	moved := lock()
	if len(moved) == 0 {
		t.Fatal("a driver source with another URL locked nothing")
	}
	for _, c := range moved {
		if s := c.Next.Driver.Source; c.Next.Driver.Name == "webapp" && (s == nil || s.URL != "https://git.example.com/other.git" || s.Commit != commit) {
			t.Fatalf("%s: driver source %+v", c.ID, s)
		}
	}
}
