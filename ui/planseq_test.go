package ui_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/ui"
)

// A plan page numbers as the lock of its head would: after a revert of a
// change and its lock, the head's lockfile is behind the sequences its
// history used, and the page shows the relock (as `styrminctl plan --head`
// and `lock --check` do), not "no changes".
func TestAPlanPageOfARevertedLockShowsItsRelock(t *testing.T) {
	d := newDesired(t)
	d.lock(t)
	d.change(t, "web: 3 replicas", map[string]string{devWeb: "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 3, message: \"" + secretValue + "\"}\n"})
	git(t, d.dir, "revert", "--no-edit", "HEAD", "HEAD~1")
	head := git(t, d.dir, "rev-parse", "HEAD")
	h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: emptyCluster(t)}}, Repo: d.repo})
	if err != nil {
		t.Fatal(err)
	}
	rec := getHost(h, "localhost:8090", "/plan?base="+head+"&head="+head)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /plan: %d\n%s", rec.Code, rec.Body)
	}
	body := rec.Body.String()
	if !strings.Contains(body, "local/dev/web") || !strings.Contains(body, "1 to update") {
		t.Errorf("the plan of the reverted head against itself does not relock dev/web:\n%s", body)
	}
}
