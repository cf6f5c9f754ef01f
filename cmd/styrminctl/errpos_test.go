package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestConfigErrorsReachTheUserWithTheirPosition: in a pull request's git
// repository, plan and lock --check show each bad value at the
// file:line:column the user wrote, with the field and what it must be, and
// none of CUE's phrasing.
func TestConfigErrorsReachTheUserWithTheirPosition(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "// Web front end of dev.\ndriver:     \"webapp\"\nappVersion: \"1.25.0\"\n\n// Scaled up for the load test.\nparameters: {\n\treplicas: 50\n\tsize:     \"huge\"\n}\n")
	planGit(t, dir, "commit", "-q", "-am", "scale web up")
	wantLines := []string{
		devWebFile + `:7:12: field parameters.replicas: must be at most 10, got 50`,
		devWebFile + `:8:12: field parameters.size: must be one of "small", "medium", "large", got "huge"`,
	}

	var stdout, stderr bytes.Buffer
	root := newRootCmd(&stdout, &stderr)
	root.SetArgs([]string{"--repo", dir, "plan"})
	if err := root.Execute(); err == nil {
		t.Fatalf("plan of a bad configuration succeeded:\n%s", stdout.String())
	}
	shown := stdout.String() + stderr.String()
	for _, w := range wantLines {
		if !strings.Contains(shown, w) {
			t.Errorf("plan does not show %q:\n%s", w, shown)
		}
	}

	_, code, err := styrminctl(t, "--repo", dir, "lock", "--check")
	if code != 1 || err == nil {
		t.Fatalf("lock --check: exit %d, %v; want 1", code, err)
	}
	for _, w := range wantLines {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("lock --check error does not show %q:\n%v", w, err)
		}
	}

	// A YAML syntax error stops loading: it is the whole error.
	const stagingWeb = "clusters/local/environments/staging/deployments/web.yaml"
	writeRepoFile(t, dir, stagingWeb, "driver: webapp\nappVersion: [1.25.0\n")
	_, code, err = styrminctl(t, "--repo", dir, "lock", "--check")
	want := stagingWeb + `:2:13: invalid YAML: did not find expected ',' or ']'`
	if code != 1 || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("lock --check: exit %d, %v; want 1 and %q", code, err, want)
	}
	for _, n := range []string{"empty disjunction", "more errors", "conflicting values", "#Deployment"} {
		if strings.Contains(err.Error()+shown, n) {
			t.Errorf("CUE's %q reaches the user:\n%v\n%s", n, err, shown)
		}
	}
}
