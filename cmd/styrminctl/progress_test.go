package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// runWith runs styrminctl in-process with stderr taken for a terminal or
// not, and returns stdout, stderr and the exit code.
func runWith(t *testing.T, terminal bool, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmdWith(&out, &errb, terminal)
	root.SetArgs(args)
	code := execute(t.Context(), root, &errb)
	return out.String(), errb.String(), code
}

func TestProgressIsQuietWhenStderrIsNoTerminal(t *testing.T) {
	t.Parallel()
	dir := exampleRepo(t)
	out, stderr, code := runWith(t, false, "--repo", dir, "lock")
	if code != 0 || stderr != "" || !strings.Contains(out, "locked local/dev/hub=1") {
		t.Fatalf("lock: exit %d, stderr %q\n%s", code, stderr, out)
	}
	git := lockedGitRepo(t)
	writeRepoFile(t, git, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	if _, stderr, code := runWith(t, false, "--repo", git, "plan"); code != 0 || stderr != "" {
		t.Fatalf("plan: exit %d, stderr %q", code, stderr)
	}
}

func TestProgressOnATerminalIsRewrittenInPlaceWithATotal(t *testing.T) {
	t.Parallel()
	dir := exampleRepo(t)
	out, stderr, code := runWith(t, true, "--repo", dir, "lock")
	if code != 0 || strings.Contains(out, "\x1b") || !strings.Contains(out, "locked local/dev/hub=1") {
		t.Fatalf("lock: exit %d, stdout:\n%q", code, out)
	}
	if !strings.Contains(stderr, "\r\x1b[Kresolved 4/4  ") || !regexp.MustCompile(`\r\x1b\[Kresolved 4/4 in [0-9.]+(ms|s)\n$`).MatchString(stderr) {
		t.Errorf("lock's progress: %q", stderr)
	}
	git := lockedGitRepo(t)
	writeRepoFile(t, git, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	_, stderr, code = runWith(t, true, "--repo", git, "plan")
	if code != 0 || !regexp.MustCompile(`\r\x1b\[Kresolved 4/4, rendered 1/1 in [0-9.]+(ms|s)\n$`).MatchString(stderr) {
		t.Errorf("plan: exit %d, progress %q", code, stderr)
	}
}
