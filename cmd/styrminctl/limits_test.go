package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/checksfolder"
	"github.com/styrmin/styrmin/internal/hostile"
	"github.com/styrmin/styrmin/resolver"
)

// childLogEnv names a file a sandbox child of the test binary adds a line
// to when it starts.
const childLogEnv = "STYRMINCTL_TEST_CHILD_LOG"

// TestMain lets the test binary serve as the CLI's driver sandbox, as
// the styrminctl binary does, and gives the commands a cache folder of
// their own (the driver checks' default), not the user's.
func TestMain(m *testing.M) {
	if drivers.IsSandboxChild() {
		if p := os.Getenv(childLogEnv); p != "" {
			// A test counting the children its commands started.
			if f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				_, _ = f.WriteString("child\n")
				_ = f.Close()
			}
		}
		os.Exit(drivers.ServeSandbox(os.Stdin, os.Stdout, os.Stderr, resolver.SandboxFuncs()))
	}
	os.Exit(checksfolder.Run(m))
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

// lockedRepoWithTestLimits is lockedGitRepo with the hostile drivers'
// test-sized limits in its styrmin.cue.
func lockedRepoWithTestLimits(t *testing.T) (string, hostile.TestLimits) {
	t.Helper()
	dir := lockedGitRepo(t)
	l := hostile.Test()
	settings, err := os.ReadFile(filepath.Join(dir, "styrmin.cue"))
	if err != nil {
		t.Fatal(err)
	}
	writeRepoFile(t, dir, "styrmin.cue", string(settings)+l.CUE())
	return dir, l
}

// Each hostile driver, added to the example repository with test-sized
// limits in styrmin.cue, fails lint, lock and plan within its limit, with
// an error naming the driver folder and the limit.
func TestHostileDriversFailLintLockAndPlanWithinTheirLimits(t *testing.T) {
	// Not in parallel: its limits are of time and memory, and the
	// hostile drivers' children take both.
	dir, l := lockedRepoWithTestLimits(t)
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
				// That the command ends is what this pins; the slack is for a
				// loaded two-core machine (as drivers' checkLimitError).
				if took > l.Timeout+15*time.Second {
					t.Errorf("%s: failed after %s, limit %s (and 15 s for a loaded machine)", cmd, took, l.Timeout)
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
	// Not in parallel: it counts the test process's children, which
	// other tests' commands start too.
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

// The drivers the sandbox's children checked for a command that reads the
// repository are remembered in the folder --driver-checks names (by default $STYRMIN_DRIVER_CHECKS, else the user's
// cache folder's styrmin/driver-checks), so the next command starts no
// child for them; none with --driver-checks "". A folder others may write
// to is refused when named and noted when it is the default.
func TestLockRemembersTheDriverLoadsItsChildrenChecked(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("load checks are kept on Linux only")
	}
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
			if strings.HasSuffix(e.Name(), ".inputs") {
				// A driver version's inputs: a check per line.
				data, err := os.ReadFile(filepath.Join(d, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				n += strings.Count(string(data), "\n")
				continue
			}
			if e.Name() != "trimmed" && !strings.HasSuffix(e.Name(), ".results") {
				n++
			}
		}
		return n
	}
	childLog := filepath.Join(t.TempDir(), "children")
	t.Setenv(childLogEnv, childLog)
	children := func() int {
		data, err := os.ReadFile(childLog)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return strings.Count(string(data), "\n")
	}
	lock := func(args ...string) (stderr string, started int) {
		t.Helper()
		before := children()
		out, errOut, code := run(t, append(append([]string{"--repo", dir}, args...), "lock")...)
		if code != 0 {
			t.Fatalf("lock %v: exit %d\n%s\n%s", args, code, out, errOut)
		}
		return errOut, children() - before
	}

	// The default: the user's cache folder.
	t.Setenv(driverChecksEnv, "")
	os.Unsetenv(driverChecksEnv)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	byDefault := filepath.Join(os.Getenv("XDG_CACHE_HOME"), "styrmin", "driver-checks")
	if _, started := lock("--driver-checks="); started == 0 || entries(byDefault) != 0 {
		t.Fatalf(`--driver-checks "": %d children, %d checks in the default folder; want children and no checks`, started, entries(byDefault))
	}
	// A check per driver version, and per deployment input its children
	// evaluated first (the lock's parameters, values, services and policy
	// renders).
	_, started := lock()
	checked := entries(byDefault)
	if started == 0 || checked <= len(versions) {
		t.Errorf("the first lock: %d children, %d checks; want children, one check per driver version (%d) and per input", started, checked, len(versions))
	}
	if _, started := lock(); started != 0 || entries(byDefault) != checked {
		t.Errorf("the next lock started %d children and left %d checks, want none and %d: every driver and input was checked", started, entries(byDefault), checked)
	}
	// A lint is the check: it keeps none (a driver folder changed by a
	// comment is linted, and no check is added).
	linted := filepath.Join(t.TempDir(), filepath.Base(filepath.Dir(versions[0])), filepath.Base(versions[0]))
	if err := os.CopyFS(linted, os.DirFS(versions[0])); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(linted, "driver.cue")
	data, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, append([]byte("// linted\n"), data...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run(t, "--repo", dir, "drivers", "lint", linted); code != 0 {
		t.Fatalf("drivers lint %s: exit %d\n%s\n%s", linted, code, out, errOut)
	}
	if n := entries(byDefault); n != checked {
		t.Errorf("drivers lint left a check: %d, want %d", n, checked)
	}

	// $STYRMIN_DRIVER_CHECKS, then the flag, name another folder.
	fromEnv := filepath.Join(t.TempDir(), "env-checks")
	t.Setenv(driverChecksEnv, fromEnv)
	if _, started := lock(); started == 0 || entries(fromEnv) != checked {
		t.Errorf("with %s: %d children, %d checks there", driverChecksEnv, started, entries(fromEnv))
	}
	named := filepath.Join(t.TempDir(), "checks")
	if _, started := lock("--driver-checks", named); started == 0 || entries(named) != checked {
		t.Errorf("--driver-checks %s: %d children, %d checks there", named, started, entries(named))
	}

	// A folder others may write to: refused when named, noted when the
	// default, and the drivers checked in children.
	if err := os.Chmod(named, 0o777); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "--repo", dir, "--driver-checks", named, "lock")
	if code != 1 || !strings.Contains(errOut, "--driver-checks: ") || !strings.Contains(errOut, "may be written to by other users") || strings.Contains(errOut, "--help") {
		t.Errorf("a named checks folder others may write to: exit %d, want 1 and the flag named\n%s\n%s", code, errOut, out)
	}
	t.Setenv(driverChecksEnv, named)
	errOut, started = lock()
	if !strings.Contains(errOut, "note: every driver load is checked in a child process: ") || started == 0 {
		t.Errorf("a default checks folder others may write to: %d children, stderr %q; want children and a note", started, errOut)
	}
}

// TestADriverWithoutASampleIsCheckedInItsSandboxBeforeTheLockEvaluatesIt:
// the sandboxed load renders a sample of each driver, and the lock then
// evaluates it in-process (bounded in time only). A driver with a
// parameter without a default has no sample: its load evaluated nothing
// of its parameters, values or chart, and the lock then evaluated a
// memory bomb in the CLI's own process. Each set of parameters such a
// driver is given is evaluated in the child first now: one that makes it
// explode (in its chart, or in a default of its parameter schema) fails
// there within the memory limit, naming the driver, whichever deployment
// the lock reached first; the others are locked.
func TestADriverWithoutASampleIsCheckedInItsSandboxBeforeTheLockEvaluatesIt(t *testing.T) {
	// Not in parallel: its limits are of time and memory, and the
	// hostile drivers' children take both.
	dir, l := lockedRepoWithTestLimits(t)
	// A longer deadline than the other hostile tests': these bombs grow a
	// step at a time, and near the memory limit the child's collector
	// works hard; on a busy machine (the test run's other packages) 4 s
	// ran out before the memory limit was reached. The memory limit is
	// what this test pins.
	settings, err := os.ReadFile(filepath.Join(dir, "styrmin.cue"))
	if err != nil {
		t.Fatal(err)
	}
	longer := strings.Replace(string(settings), "timeout: \""+l.Timeout.String()+"\"", `timeout: "30s"`, 1)
	if longer == string(settings) {
		t.Fatalf("styrmin.cue sets no timeout of %s:\n%s", l.Timeout, settings)
	}
	writeRepoFile(t, dir, "styrmin.cue", longer)
	l.Timeout = 30 * time.Second
	// A chart whose cost grows with a parameter without a default.
	files := hostile.OverAgentMemory().Files("bad", "1.0.0")
	files["driver.cue"] = []byte(strings.Replace(string(files["driver.cue"]), "values: {}\n", "parameters: size: int & >=1\nvalues: size: context.parameters.size\n", 1))
	files["chart/templates/big.yaml"] = []byte("{{- $l := until (int .Values.size) }}# {{ len $l }}\n")
	writeDriver(t, filepath.Join(dir, "drivers", "bad", "1.0.0"), files)
	// A parameter schema whose default explodes once the parameter
	// without a default is given.
	schema := hostile.OverAgentMemory().Files("badschema", "1.0.0")
	delete(schema, "chart/templates/big.yaml")
	schema["driver.cue"] = []byte("import \"list\"\n\n" + strings.Replace(string(schema["driver.cue"]), "values: {}\n",
		"parameters: {\n\tsize: int & >=1\n\tpad: *list.Range(0, 2e8*size, 1) | [...int]\n}\nvalues: {}\n", 1))
	writeDriver(t, filepath.Join(dir, "drivers", "badschema", "1.0.0"), schema)
	deployments := "clusters/local/environments/dev/deployments/"
	writeRepoFile(t, dir, deployments+"small.cue", "driver:     \"bad\"\nappVersion: \"1.0.0\"\nparameters: size: 1\n")
	// 40 million: one list of 320 MB, past the 256 MiB limit at once (20
	// million, 160 MB, sat near it, and a busy child's collector could
	// run it into its deadline first).
	writeRepoFile(t, dir, deployments+"huge.cue", "driver:     \"bad\"\nappVersion: \"1.0.0\"\nparameters: size: 40000000\n")
	writeRepoFile(t, dir, deployments+"padded.cue", "driver:     \"badschema\"\nappVersion: \"1.0.0\"\nparameters: size: 1\n")
	for run := range 2 {
		start := time.Now()
		out, code, err := styrminctl(t, "--repo", dir, "lock", "--check")
		took := time.Since(start)
		if code != 1 || err == nil {
			t.Fatalf("lock --check (run %d): exit %d, %v; want 1, two deployments failing\n%s", run, code, err, out)
		}
		msg := err.Error()
		for _, want := range []string{"huge.cue", "padded.cue", "drivers/bad/1.0.0", "drivers/badschema/1.0.0", "exceeded the memory limit"} {
			if !strings.Contains(msg, want) {
				t.Errorf("lock --check (run %d): the error does not say %q: %.600s", run, want, msg)
			}
		}
		// The chart's bomb ends at the child's memory limit. The schema's
		// (a CUE list growing a step at a time) may meet its deadline
		// first on a busy machine, as the hostile cases of CUE lists do:
		// either is its sandbox's limit.
		for _, line := range strings.Split(msg, "\n") {
			switch {
			case strings.Contains(line, "huge.cue") && !strings.Contains(line, "exceeded the memory limit"):
				t.Errorf("lock --check (run %d): huge.cue did not fail at its sandbox's memory limit: %q", run, line)
			case strings.Contains(line, "padded.cue") && !strings.Contains(line, "exceeded the memory limit") && !strings.Contains(line, "exceeded the time limit"):
				t.Errorf("lock --check (run %d): padded.cue failed at no limit of its sandbox: %q", run, line)
			}
		}
		if strings.Contains(msg, "small.cue") {
			t.Errorf("lock --check (run %d): the deployment whose parameters pass failed: %.600s", run, msg)
		}
		if took > 2*l.Timeout+5*time.Second {
			t.Errorf("lock --check (run %d) took %s, limit %s", run, took, l.Timeout)
		}
	}
}

// What a command's evaluations kept (the results beside the input
// checks) is read back by the next command, which prints and writes, byte
// for byte, what a command with nothing kept does: a plan, then a lock
// reading back the plan's values and services, then a lock reading back
// everything.
func TestACommandReadingBackKeptResultsPrintsAndLocksWhatOneWithNothingKeptDoes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("load checks are kept on Linux only")
	}
	t.Setenv(driverChecksEnv, "")
	kept := filepath.Join(t.TempDir(), "checks")
	lockfiles := func(dir string) map[string]string {
		t.Helper()
		out := map[string]string{}
		err := filepath.WalkDir(filepath.Join(dir, "locks"), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			out[strings.TrimPrefix(p, dir)] = string(data)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	command := func(dir, checks, cmd string) string {
		t.Helper()
		out, errOut, code := run(t, "--repo", dir, "--driver-checks="+checks, cmd)
		if code != 0 {
			t.Fatalf("%s --driver-checks=%q: exit %d\n%s\n%s", cmd, checks, code, out, errOut)
		}
		// Each repository's commit is its own.
		return regexp.MustCompile(`HEAD \([0-9a-f]+\)`).ReplaceAllString(out, "HEAD (…)")
	}
	// A fan-out: the cluster's domain changed, every deployment renders
	// anew.
	repo := func() string {
		dir := upgradeGitRepo(t)
		cluster := filepath.Join(dir, "clusters", "local", "cluster.cue")
		data, err := os.ReadFile(cluster)
		if err != nil {
			t.Fatal(err)
		}
		writeRepoFile(t, dir, "clusters/local/cluster.cue", strings.Replace(string(data), "local.styrmin.dev", "apps.styrmin.dev", 1))
		return dir
	}
	plain := repo()
	wantPlan := command(plain, "", "plan")
	command(plain, "", "lock")
	want := lockfiles(plain)
	if len(want) == 0 {
		t.Fatal("the lock wrote no lockfile")
	}

	dir := repo()
	if got := command(dir, kept, "plan"); got != wantPlan {
		t.Errorf("the first plan keeping results printed:\n%s\nwant:\n%s", got, wantPlan)
	}
	if got := command(dir, kept, "plan"); got != wantPlan {
		t.Errorf("a plan reading back kept results printed:\n%s\nwant:\n%s", got, wantPlan)
	}
	command(dir, kept, "lock")
	if got := lockfiles(dir); !reflect.DeepEqual(got, want) {
		t.Errorf("a lock after a plan wrote:\n%v\nwant, as with nothing kept:\n%v", got, want)
	}
	results, err := filepath.Glob(filepath.Join(kept, "*.results"))
	if err != nil || len(results) == 0 {
		t.Fatalf("no results kept in the checks folder: %v %v", results, err)
	}
	childLog := filepath.Join(t.TempDir(), "children")
	t.Setenv(childLogEnv, childLog)
	// The same checkout (a check's key holds the driver folder's path),
	// its lockfiles put back.
	planGit(t, dir, "checkout", "-q", "--", "locks")
	command(dir, kept, "lock")
	if got := lockfiles(dir); !reflect.DeepEqual(got, want) {
		t.Errorf("a lock reading back every result wrote:\n%v\nwant, as with nothing kept:\n%v", got, want)
	}
	if data, err := os.ReadFile(childLog); err == nil && len(data) > 0 {
		t.Errorf("a lock whose every input was kept started children:\n%s", data)
	}
}
