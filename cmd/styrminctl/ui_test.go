package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// testUI runs `styrminctl ui` against the cluster commands' control plane
// and a locked repository: it prints its address, serves the overview of
// the cluster (named by its StyrminSource) and stops when its context
// ends.
func testUI(t *testing.T, kc string) {
	dir := lockedGitRepo(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newSyncBuffer()
	root := newRootCmd(out, io.Discard)
	root.SetArgs([]string{"--repo", dir, "ui", "--kubeconfig", kc, "--listen", "127.0.0.1:0"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	waitFor(t, out, "). Ctrl-C stops it.\n")
	m := regexp.MustCompile(`Styrmin UI: (http://127\.0\.0\.1:\d+/) \(clusters local; repository `).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no address on localhost naming cluster local:\n%s", out.String())
	}
	for path, want := range map[string]string{
		"":                      `href="/d/local/dev/web"`,
		"d/local/dev/hub":       "graphhub@1.0.0",
		"t/local/dev-web/web-1": "Succeeded",
	} {
		resp, err := http.Get(m[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET /%s: %d, want 200 and %q:\n%s", path, resp.StatusCode, want, body)
		}
	}
	resp, err := http.Post(m[1], "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ui after its context ended: %v", err)
	}
}

// TestHistoryFromGitListsEveryLockCommitWithoutACluster locks two changes
// of one deployment and reads its timeline from git: every lock commit,
// oldest first, with its workflow; -o json holds each entry; no cluster
// flag is needed.
func TestHistoryFromGitListsEveryLockCommitWithoutACluster(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	planGit(t, dir, "checkout", "-q", "main")
	for i, replicas := range []string{"3", "4"} {
		writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: "+replicas+"\n")
		planGit(t, dir, "commit", "-q", "-am", "web: replicas "+replicas)
		if out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit"); code != 0 {
			t.Fatalf("lock %d: %d %v\n%s", i, code, err, out)
		}
	}
	// A bare name that two environments use is refused, naming both.
	if _, code, err := styrminctl(t, "--repo", dir, "history", "web", "--from-git"); code != 1 || err == nil ||
		!strings.Contains(err.Error(), "web names several deployments (local/dev/web, local/staging/web)") {
		t.Errorf("a bare name of two deployments: %d %v", code, err)
	}
	out, code, err := styrminctl(t, "--repo", dir, "history", "local/dev/web", "--from-git")
	if code != 0 {
		t.Fatalf("history --from-git: %d %v\n%s", code, err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.Contains(lines[0], "3 lock commits") || !strings.HasPrefix(lines[2], "SEQUENCE") {
		t.Fatalf("want a title and three entries:\n%s", out)
	}
	for i, want := range []string{"1 ", "2 ", "3 "} {
		if !strings.HasPrefix(lines[3+i], want) {
			t.Errorf("entry %d: %q, want sequence %s", i, lines[3+i], want)
		}
	}
	if !strings.Contains(lines[3], "create") || !strings.Contains(lines[4], "update") || !strings.Contains(lines[5], "update") {
		t.Errorf("workflows: create, then update twice:\n%s", out)
	}
	js, code, _ := styrminctl(t, "--repo", dir, "history", "local/dev/web", "--from-git", "-o", "json")
	var h struct {
		Deployment string `json:"deployment"`
		Entries    []struct {
			Sequence int64  `json:"sequence"`
			Commit   string `json:"commit"`
			Author   string `json:"author"`
		} `json:"entries"`
	}
	if code != 0 || json.Unmarshal([]byte(js), &h) != nil || h.Deployment != "local/dev/web" || len(h.Entries) != 3 || h.Entries[2].Sequence != 3 || len(h.Entries[2].Commit) != 40 {
		t.Errorf("-o json: %d\n%s", code, js)
	}
}
