package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/hostile"
)

// TestMain lets the test binary serve as the CLI's driver sandbox, as
// the styrminctl binary does.
func TestMain(m *testing.M) {
	if drivers.IsSandboxChild() {
		os.Exit(drivers.ServeSandbox(os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// writeDriver replaces the folder dir with files.
func writeDriver(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for p, b := range files {
		path := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Each hostile driver, added to the example repository with test-sized
// limits in styrmin.cue, fails lint, lock and plan within its limit, with
// an error naming the driver folder and the limit.
func TestHostileDriversFailLintLockAndPlanWithinTheirLimits(t *testing.T) {
	dir := lockedGitRepo(t)
	l := hostile.Test()
	settings, err := os.ReadFile(filepath.Join(dir, "styrmin.cue"))
	if err != nil {
		t.Fatal(err)
	}
	writeRepoFile(t, dir, "styrmin.cue", string(settings)+l.CUE())
	bad := filepath.Join(dir, "drivers", "bad", "1.0.0")
	for _, c := range hostile.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			writeDriver(t, bad, c.Files("bad", "1.0.0"))
			for _, args := range [][]string{
				{"--repo", dir, "drivers", "lint", bad},
				{"--repo", dir, "lock"},
				{"--repo", dir, "plan"},
			} {
				start := time.Now()
				_, code, err := styrminctl(t, args...)
				took := time.Since(start)
				cmd := args[2]
				if code == 0 || err == nil {
					t.Fatalf("%s: exit %d, want a failure", cmd, code)
				}
				if took > l.Timeout+3*time.Second {
					t.Errorf("%s: failed after %s, limit %s", cmd, took, l.Timeout)
				}
				msg := err.Error()
				if !strings.Contains(msg, "drivers/bad/1.0.0") {
					t.Errorf("%s: error does not name the driver folder: %.300s", cmd, msg)
				}
				if len(c.Limits) > 0 && !slices.Contains(c.Limits, "") &&
					!slices.ContainsFunc(c.Limits, func(lim string) bool { return strings.Contains(msg, "exceeded the "+lim+" limit") }) {
					t.Errorf("%s: error names none of the limits %v: %.300s", cmd, c.Limits, msg)
				}
				t.Logf("%s: %s: %.200s", cmd, took.Round(time.Millisecond), msg)
			}
		})
	}
	os.RemoveAll(bad)
	if _, code, err := styrminctl(t, "--repo", dir, "drivers", "lint", filepath.Join(dir, "drivers", "webapp", "1.0.0")); code != 0 {
		t.Fatalf("a good driver under the same limits: %v", err)
	}
}
