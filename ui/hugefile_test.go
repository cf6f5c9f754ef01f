package ui_test

import (
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/ui"
)

// A file of gigabytes is a few kilobytes in git's compressed form: a
// repository author can commit one where the overview reads every file,
// as a lockfile or a deployment file. The overview refuses it by its
// size, before reading it (the lockfile named as invalid), instead of
// reading it into memory at every new head. The files here are 48 MiB
// each; the overview of the whole head allocates far less than one.
func TestTheOverviewDoesNotReadAHugeFileAtGitsHeadIntoMemory(t *testing.T) {
	_, cl := controlPlane(t)
	d := newDesired(t)
	d.lock(t)
	const size = 48 << 20
	huge := "# " + strings.Repeat("hold ", size/5) + "\n"
	write(t, d.dir, "locks/local/dev/huge.lock.yaml", huge)
	write(t, d.dir, "clusters/local/environments/dev/deployments/huge.yaml", huge)
	git(t, d.dir, "add", "-A")
	git(t, d.dir, "commit", "--quiet", "-m", "Two files of 48 MiB")
	h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: cl}}, Repo: d.repo})
	if err != nil {
		t.Fatal(err)
	}
	huge = ""
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rec := getHost(h, "localhost", "/")
	runtime.ReadMemStats(&after)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", rec.Code, rec.Body)
	}
	if body := rec.Body.String(); !strings.Contains(body, "locks/local/dev/huge.lock.yaml: file is") || !strings.Contains(body, "more than the 4194304 allowed") {
		t.Errorf("the overview does not name the huge lockfile as too large:\n%s", body)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > size/2 {
		t.Errorf("the overview allocated %d MiB reading a head with two files of %d MiB, want less than %d MiB: it read them", n>>20, size>>20, size>>21)
	}
}
