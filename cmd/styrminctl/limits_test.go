package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/cachehome"
	"github.com/styrmin/styrmin/internal/hostile"
	"github.com/styrmin/styrmin/resolver"
)

// TestMain lets the test binary serve as the CLI's driver sandbox, as
// the styrminctl binary does, and gives the commands a cache folder of
// their own (the driver checks' default), not the user's.
func TestMain(m *testing.M) {
	if drivers.IsSandboxChild() {
		os.Exit(drivers.ServeSandbox(os.Stdin, os.Stdout, os.Stderr, resolver.SandboxFuncs()))
	}
	os.Exit(cachehome.Run(m))
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

// childPIDs are the processes this test process started that still run.
func childPIDs(t *testing.T) map[string]bool {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	me := strconv.Itoa(os.Getpid())
	out := map[string]bool{}
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid …: comm may hold spaces, so after the ')'.
		rest := string(data[strings.LastIndexByte(string(data), ')')+1:])
		if f := strings.Fields(rest); len(f) > 1 && f[1] == me {
			out[filepath.Base(filepath.Dir(p))] = true
		}
	}
	return out
}

// A command that fails after loading drivers in the sandbox leaves no
// idle child behind (cobra runs no post-run hook after an error): a
// process that runs many commands, a test's, holds none.
func TestFailedCommandEndsItsSandboxChildren(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	dir := exampleRepo(t)
	// One deployment pins a driver version that does not exist (and the one
	// that connects to it fails too): the drivers load, the lock writes the
	// others and exits 1.
	web := filepath.Join(dir, "clusters/local/environments/dev/deployments/web.cue")
	data, err := os.ReadFile(web)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(web, []byte(strings.Replace(string(data), `driver:     "webapp"`, `driver: {name: "webapp", version: "9.9.9"}`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	before := childPIDs(t)
	// Without remembered checks: the drivers load in children.
	out, errOut, code := run(t, "--repo", dir, "--driver-checks=", "lock")
	if code != 1 || !strings.Contains(out, "locked local/staging/") || !strings.Contains(errOut, "9.9.9") {
		t.Fatalf("lock exit %d, want 1, the others locked and the missing driver version named\n%s\n%s", code, out, errOut)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		for pid := range childPIDs(t) {
			if !before[pid] {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox children still running after the failed command: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The drivers the sandbox's children checked are remembered in the folder
// --driver-checks names (by default the user's cache folder's
// styrmin/driver-checks), none with --driver-checks "", and a folder others
// may write to is refused when named.
func TestLockRemembersTheDriverLoadsItsChildrenChecked(t *testing.T) {
	dir := exampleRepo(t)
	versions, err := filepath.Glob(filepath.Join(dir, "drivers", "*", "*"))
	if err != nil || len(versions) == 0 {
		t.Fatalf("driver versions of the example: %v %v", versions, err)
	}
	entries := func(d string) int {
		t.Helper()
		es, err := os.ReadDir(d)
		if os.IsNotExist(err) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range es {
			if e.Name() != "trimmed" {
				n++
			}
		}
		return n
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	byDefault := filepath.Join(os.Getenv("XDG_CACHE_HOME"), "styrmin", "driver-checks")
	if out, errOut, code := run(t, "--repo", dir, "--driver-checks=", "lock"); code != 0 {
		t.Fatalf("lock exit %d\n%s\n%s", code, out, errOut)
	}
	if n := entries(byDefault); n != 0 {
		t.Fatalf(`--driver-checks "" left %d checks in the default folder`, n)
	}
	if out, errOut, code := run(t, "--repo", dir, "lock"); code != 0 {
		t.Fatalf("lock exit %d\n%s\n%s", code, out, errOut)
	}
	if n := entries(byDefault); n != len(versions) {
		t.Errorf("the default folder holds %d checks, want one per driver version (%d)", n, len(versions))
	}
	named := filepath.Join(t.TempDir(), "checks")
	if out, errOut, code := run(t, "--repo", dir, "--driver-checks", named, "lock"); code != 0 {
		t.Fatalf("lock exit %d\n%s\n%s", code, out, errOut)
	}
	if n := entries(named); n != len(versions) {
		t.Errorf("--driver-checks %s holds %d checks, want %d", named, n, len(versions))
	}
	if err := os.Chmod(named, 0o777); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "--repo", dir, "--driver-checks", named, "lock")
	if code != 1 || !strings.Contains(errOut, "--driver-checks: ") || !strings.Contains(errOut, "only its owner may write to") {
		t.Errorf("a checks folder others may write to: exit %d, want 1 and the flag named\n%s\n%s", code, errOut, out)
	}
}
