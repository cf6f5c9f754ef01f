package drivers

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/styrmin/styrmin/internal/hostile"
)

const checkedDriver = "../examples/drivers/webapp/1.1.0"

// checkingSandbox is a sandbox of this test binary remembering its checks
// in dir: one process's, as the next process would open it.
func checkingSandbox(t *testing.T, dir string) *Sandbox {
	t.Helper()
	linuxOnly(t)
	sb, err := SelfSandbox(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.KeepChecks(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	return sb
}

// linuxOnly skips a test of load checks outside Linux, where there are
// none.
func linuxOnly(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("load checks are kept on Linux only")
	}
}

// folderFS is the example driver's folder as a map, to be changed.
func folderFS(t *testing.T) fstest.MapFS {
	t.Helper()
	fsys := fstest.MapFS{}
	err := filepath.WalkDir(checkedDriver, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(checkedDriver, p)
		fsys[filepath.ToSlash(rel)] = &fstest.MapFile{Data: data}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

// checkedSource is the example driver's folder as a catalog names it.
const checkedSource = "drivers/webapp/1.1.0"

// loadExample loads the example driver through sb and returns it with the
// number of requests the load sent to a child.
func loadExample(t *testing.T, sb *Sandbox) (*Driver, uint64) {
	t.Helper()
	before := sb.Requests()
	d, err := Load(folderFS(t), LoadOptions{Source: checkedSource, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	return d, sb.Requests() - before
}

// checks lists the checks remembered in dir.
func checks(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		switch {
		case e.Name() == checksTrimmed, isResultLog(e.Name()):
			// Not checks: the results kept of the inputs checked.
		case isInputLog(e.Name()):
			// A check per line.
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			for line := range strings.Lines(string(data)) {
				out = append(out, e.Name()+":"+strings.TrimSpace(line))
			}
		default:
			out = append(out, e.Name())
		}
	}
	return out
}

func TestALoadAChildCheckedIsNotSentToAChildByTheNextProcess(t *testing.T) {
	dir := t.TempDir()
	checked, sent := loadExample(t, checkingSandbox(t, dir))
	if sent != 1 {
		t.Fatalf("the first load sent %d requests to a child, want 1", sent)
	}
	if got := checks(t, dir); len(got) != 1 {
		t.Fatalf("checks after the first load: %v, want one", got)
	}
	again, sent := loadExample(t, checkingSandbox(t, dir))
	if sent != 0 {
		t.Errorf("the next process's load of the same folder sent %d requests to a child, want 0", sent)
	}
	c := exampleContext(checked)
	v1, err1 := checked.Values(c)
	v2, err2 := again.Values(c)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(v1, v2) || checked.Digest != again.Digest {
		t.Errorf("the driver loaded without a child differs: %v %v, digests %s %s", err1, err2, checked.Digest, again.Digest)
	}

	// The evaluations of c the first process checked in its child are
	// remembered too (TestAnInputAChildEvaluatedIsNotSentToAChildByTheNextProcess).
	kept := len(checks(t, dir))

	// Whatever the check depended on, changed, sends the load to a child
	// again.
	changed := folderFS(t)
	changed["driver.cue"] = &fstest.MapFile{Data: append([]byte("// changed\n"), changed["driver.cue"].Data...)}
	plain := LoadOptions{Source: checkedSource}
	limits := LoadOptions{Source: checkedSource, Limits: Limits{Timeout: 20 * time.Second}}
	for _, tc := range []struct {
		name string
		fsys fstest.MapFS
		opts LoadOptions
	}{
		{"a file of the folder", changed, plain},
		{"the limits", folderFS(t), limits},
		{"the kube version", folderFS(t), LoadOptions{Source: checkedSource, KubeVersion: "v1.30.0"}},
		{"the folder's name", folderFS(t), LoadOptions{Source: "drivers/webapp2/1.1.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := checkingSandbox(t, dir)
			o := tc.opts
			o.Sandbox = sb
			if _, err := Load(tc.fsys, o); err != nil {
				t.Fatal(err)
			}
			if n := sb.Requests(); n != 1 {
				t.Errorf("a load with another %s sent %d requests to a child, want 1", tc.name, n)
			}
		})
	}
	if got := checks(t, dir); len(got) != kept+4 {
		t.Errorf("checks: %d, want %d (one more per load that differs)", len(got), kept+4)
	}
}

func TestALoadOverALimitIsNotRememberedAsChecked(t *testing.T) {
	dir := t.TempDir()
	var bomb hostile.Case
	for _, c := range hostile.Cases() {
		if c.Name == "cue-list-range-oom" {
			bomb = c
		}
	}
	if bomb.Name == "" {
		t.Fatal("no hostile case cue-list-range-oom")
	}
	l := testLimits()
	const source = "drivers/bad/1.0.0"
	for i := range 2 {
		sb := checkingSandbox(t, dir)
		start := time.Now()
		_, err := Load(mapFS(bomb.Files("bad", "1.0.0")), LoadOptions{Source: source, Limits: l, Sandbox: sb})
		checkLimitError(t, bomb, source, err, time.Since(start), l)
		if n := sb.Requests(); n == 0 {
			t.Errorf("load %d of a driver over its limits sent no request to a child", i+1)
		}
		if got := checks(t, dir); len(got) != 0 {
			t.Fatalf("a load over its limits was remembered as checked: %v", got)
		}
	}
}

func TestKeepChecksRefusesAFolderSomeoneElseCouldWriteChecksIn(t *testing.T) {
	linuxOnly(t)
	for _, tc := range []struct {
		name, want string
		make       func(t *testing.T, dir string)
	}{
		{"writable by others", "may be written to by other users", func(t *testing.T, dir string) {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"a symbolic link", "is a symbolic link", func(t *testing.T, dir string) {
			real := dir + ".real"
			if err := os.Rename(dir, real); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, dir); err != nil {
				t.Fatal(err)
			}
		}},
		{"owned by another user", "is not owned by this process's user", func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("only root can give a folder away")
			}
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "checks")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			tc.make(t, dir)
			sb, err := SelfSandbox(1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sb.Close)
			err = sb.KeepChecks(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("KeepChecks of a folder %s: %v, want %q", tc.name, err, tc.want)
			}
			// The sandbox checks every load in a child, as without checks.
			for i := range 2 {
				if _, sent := loadExample(t, sb); sent != 1 {
					t.Errorf("load %d sent %d requests to a child, want 1", i+1, sent)
				}
			}
			if got := checks(t, dir); len(got) != 0 {
				t.Errorf("checks written in a refused folder: %v", got)
			}
		})
	}
}

func TestALoadCheckThatCannotBeWrittenLeavesTheLoadAlone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checks")
	sb := checkingSandbox(t, dir)
	// The folder removed after it was opened, a file in its place: no
	// check can be read or written, whoever runs the test.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, sent := loadExample(t, sb); sent != 1 {
			t.Errorf("load %d sent %d requests to a child, want 1", i+1, sent)
		}
	}
}

func TestGoBuildIDIsTheOneTheGoToolReads(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	got, err := goBuildID(exe)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Skipf("go tool buildid: %v", err)
	}
	if want := strings.TrimSpace(string(out)); got != want {
		t.Errorf("goBuildID = %q, go tool buildid says %q", got, want)
	}
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if id, err := goBuildID(text); err == nil {
		t.Errorf("goBuildID of a shell script = %q, want an error", id)
	}
	sb := NewSandbox(text, nil, 1)
	if err := sb.KeepChecks(t.TempDir()); err == nil {
		t.Error("KeepChecks with a child executable without a build ID: no error")
	}
	// A build ID set by hand at link time stays the same whatever the
	// code: refused.
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module redacted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(src, "redacted")
	build := exec.Command("go", "build", "-ldflags=-buildid=redacted", "-o", bin, ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if id, err := goBuildID(bin); err == nil || !errors.Is(err, errNoBuildID) {
		t.Errorf("goBuildID of a binary linked with -buildid=redacted = %q, %v; want errNoBuildID", id, err)
	}
}

// hexKey is a check's name made of one letter.
func hexKey(c byte) string { return strings.Repeat(string(c), 64) }

func TestLoadChecksUnusedForAMonthAreRemovedAndNothingElse(t *testing.T) {
	dir := t.TempDir()
	root := checksRoot(t, dir)
	c := &loadChecks{root: root, code: "x"}
	now := time.Now()
	old, recent, stale, used := hexKey('a'), hexKey('b'), hexKey('c'), hexKey('d')
	age := func(name string, d time.Duration) {
		t.Helper()
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(p, now.Add(-d), now.Add(-d)); err != nil {
			t.Fatal(err)
		}
	}
	age(old, checksKeep+time.Hour)
	age(recent, checksKeep-48*time.Hour)
	// Not a check: whatever else the folder holds stays.
	age("README.md", checksKeep+time.Hour)
	age(strings.ToUpper(hexKey('e')), checksKeep+time.Hour)
	c.trim(now, false)
	if got := checks(t, dir); !reflect.DeepEqual(got, []string{strings.ToUpper(hexKey('e')), "README.md", recent}) {
		t.Fatalf("after trimming: %v, want the recent check and what is not a check", got)
	}
	// Not again within a day: a check gone stale since is kept.
	age(stale, checksKeep+time.Hour)
	c.trim(now.Add(time.Hour), false)
	if got := checks(t, dir); !slices.Contains(got, stale) {
		t.Errorf("trimmed again within a day: %v", got)
	}
	c.trim(now.Add(checksTrim+time.Hour), false)
	if got := checks(t, dir); slices.Contains(got, stale) || !slices.Contains(got, recent) {
		t.Errorf("a day later: %v, want the stale check gone, the recent one kept", got)
	}
	// A use renews a check's time.
	c.add(used)
	age(used, checksKeep)
	if !c.has(used) {
		t.Fatal("a check written is not found")
	}
	if fi, err := os.Stat(filepath.Join(dir, used)); err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Errorf("a check used keeps its old time: %v", err)
	}
	if c.has(hexKey('f')) || (*loadChecks)(nil).has(used) || c.has("README.md") {
		t.Error("a check never written is found")
	}
}

func TestALoadChecksKeyChangesWithEverythingTheChildsAnswerDependsOn(t *testing.T) {
	linuxOnly(t)
	f := &folder{files: map[string][]byte{"driver.cue": []byte("name: \"x\"\n")}, paths: []string{"driver.cue"}}
	base := LoadOptions{Source: "drivers/x/1.0.0", Limits: Limits{}.WithDefaults()}
	c := &loadChecks{code: "a"}
	key := func(c *loadChecks, o LoadOptions, f *folder) string { return c.key(o.sandboxRequest("load", f), f) }
	want := key(c, base, f)
	if !isKey(want) {
		t.Fatalf("key %q is not a check's name", want)
	}
	if got := key(c, base, f); got != want {
		t.Fatalf("the same load gives another key: %s, %s", got, want)
	}
	changed := map[string]func() string{
		"the code": func() string { return key(&loadChecks{code: "b"}, base, f) },
		"a file": func() string {
			g := &folder{files: map[string][]byte{"driver.cue": []byte("name: \"y\"\n")}, paths: []string{"driver.cue"}}
			return key(c, base, g)
		},
		"the source": func() string {
			g := &folder{source: "drivers/x/1.0.1", files: f.files, paths: f.paths}
			return key(c, base, g)
		},
		"the kube version":   func() string { o := base; o.KubeVersion = "v1.30.0"; return key(c, o, f) },
		"the API versions":   func() string { o := base; o.APIVersions = []string{"example.com/v1"}; return key(c, o, f) },
		"the time limit":     func() string { o := base; o.Limits.Timeout++; return key(c, o, f) },
		"the memory limit":   func() string { o := base; o.Limits.Memory++; return key(c, o, f) },
		"the rendered bytes": func() string { o := base; o.Limits.RenderedBytes++; return key(c, o, f) },
		"the chart bytes":    func() string { o := base; o.Limits.ChartBytes++; return key(c, o, f) },
	}
	for name, k := range changed {
		if got := k(); got == want || !isKey(got) {
			t.Errorf("another %s gives the key %q (the same load's: %q)", name, got, want)
		}
	}
	// The environment a child inherits and evaluates under.
	codeOf := func(t *testing.T) string {
		sb, err := SelfSandbox(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.KeepChecks(t.TempDir()); err != nil {
			t.Fatal(err)
		}
		return sb.checks.code
	}
	plain := codeOf(t)
	for _, name := range evalEnv {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, "sharing=false")
			if codeOf(t) == plain {
				t.Errorf("%s set gives the same checks as unset", name)
			}
		})
	}
}

// Two processes checking the same load at once both load it, and leave
// one check (the second create finds the first's file).
func TestTwoProcessesCheckingTheSameLoadAtOnceLeaveOneCheck(t *testing.T) {
	dir := t.TempDir()
	sbs := []*Sandbox{checkingSandbox(t, dir), checkingSandbox(t, dir)}
	errs := make([]error, len(sbs))
	var wg sync.WaitGroup
	for i, sb := range sbs {
		wg.Go(func() {
			_, errs[i] = Load(folderFS(t), LoadOptions{Source: checkedSource, Sandbox: sb})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("load %d: %v", i+1, err)
		}
	}
	if got := checks(t, dir); len(got) != 1 {
		t.Errorf("checks after two loads at once: %v, want one", got)
	}
	if _, sent := loadExample(t, checkingSandbox(t, dir)); sent != 0 {
		t.Errorf("the next load sent %d requests to a child, want 0", sent)
	}
}

// evaluateExample evaluates a deployment of the example driver d as a
// lock does (its parameters, services, values and the policy render),
// returning the results and the requests sent to a child meanwhile.
// nextProcess is the next process keeping its checks in dir: the example
// loaded and deployment name's inputs evaluated, with the requests sent
// to a child.
func nextProcess(t *testing.T, dir, name string) (string, uint64) {
	t.Helper()
	sb := checkingSandbox(t, dir)
	d, _ := loadExample(t, sb)
	return evaluateExample(t, sb, d, name)
}

func evaluateExample(t *testing.T, sb *Sandbox, d *Driver, name string) (string, uint64) {
	t.Helper()
	before := sb.Requests()
	c := exampleContext(d)
	c.Deployment.Name, c.Deployment.Namespace = name, "staging-"+name
	eps, err := d.Endpoints(c)
	if err != nil {
		t.Fatal(err)
	}
	values, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := d.RenderForPolicy(context.Background(), c, values)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal([]any{c.Parameters, eps, values, objs})
	if err != nil {
		t.Fatal(err)
	}
	return string(out), sb.Requests() - before
}

// An input a child evaluated within the limits is remembered with the
// load: the next process evaluates it in-process at once, and gets the
// same results; a changed input, or other limits, go to a child again.
func TestAnInputAChildEvaluatedIsNotSentToAChildByTheNextProcess(t *testing.T) {
	dir := t.TempDir()
	first, sent := nextProcess(t, dir, "hub")
	if sent == 0 {
		t.Fatal("the first process sent no evaluation to a child")
	}
	if got := checks(t, dir); len(got) != 1+int(sent) {
		t.Errorf("checks after %d evaluations in a child: %d, want one each and the load's", sent, len(got))
	}

	again, sent := nextProcess(t, dir, "hub")
	if sent != 0 {
		t.Errorf("the next process sent %d evaluations of the same inputs to a child, want 0", sent)
	}
	if again != first {
		t.Errorf("evaluated in-process from the checks:\n%.400s\nin the child:\n%.400s", again, first)
	}
	if _, sent := nextProcess(t, dir, "other"); sent == 0 {
		t.Error("another deployment's inputs were not sent to a child")
	}

	// Other limits: neither the load nor the inputs were checked under them.
	sb := checkingSandbox(t, dir)
	d, err := Load(folderFS(t), LoadOptions{Source: checkedSource, Sandbox: sb, Limits: Limits{Memory: 900 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, sent := evaluateExample(t, sb, d, "hub"); sent == 0 {
		t.Error("the inputs checked under other limits were not sent to a child")
	}
}

// An input over a limit in the child is never remembered: the next
// process sends it to a child again, and fails at the limit there.
func TestAnInputOverALimitIsSentToAChildByEveryProcess(t *testing.T) {
	dir := t.TempDir()
	l := testLimits()
	files := bombDriver("import \"list\"\n\n", "parameters: n: *1 | int\nvalues: big: list.Range(0, context.parameters.n, 1)\n", nil)
	for i := range 2 {
		sb := checkingSandbox(t, dir)
		d := loadBomb(t, sb, files, l)
		c := bombContext(t, d, map[string]any{"n": 20000000})
		before := sb.Requests()
		_, err := d.Values(c)
		var le *LimitError
		if !errors.As(err, &le) {
			t.Fatalf("process %d: %v, want a limit", i+1, err)
		}
		if sb.Requests() == before {
			t.Fatalf("process %d: the values over the limit were not sent to a child", i+1)
		}
	}
}

// Checks are bounded: a trim keeps the most recently used checksMax, and
// a process that writes many trims the folder as it goes.
func TestChecksBeyondTheirBoundAreRemovedLeastRecentlyUsedFirst(t *testing.T) {
	dir := t.TempDir()
	root := checksRoot(t, dir)
	c := &loadChecks{root: root, code: "x", max: 100}
	now := time.Now()
	keys := []string{hexKey('a'), hexKey('b'), hexKey('c'), hexKey('d'), hexKey('e')}
	for i, k := range keys {
		c.add(k)
		at := now.Add(-time.Duration(i) * time.Hour) // a the most recent
		if err := os.Chtimes(filepath.Join(dir, k), at, at); err != nil {
			t.Fatal(err)
		}
	}
	c.max = 3
	c.trim(now, true)
	if got := checks(t, dir); !reflect.DeepEqual(got, keys[:3]) {
		t.Fatalf("after trimming to 3: %v, want the 3 most recently used", got)
	}
	for _, k := range []string{hexKey('1'), hexKey('2'), hexKey('3'), hexKey('4')} {
		c.add(k)
	}
	if got := checks(t, dir); len(got) > 3 {
		t.Errorf("after adding past the bound: %d checks, want at most 3", len(got))
	}
}

// inputLogs are the input logs in dir.
func inputLogs(t *testing.T, dir string) []string { return logsIn(t, dir, isInputLog) }

// resultLogs are the result logs in dir.
func resultLogs(t *testing.T, dir string) []string { return logsIn(t, dir, isResultLog) }

// logsIn are the files of dir whose names is accepts.
func logsIn(t *testing.T, dir string, is func(string) bool) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if is(e.Name()) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// checksRoot is dir opened as a load checks' folder is.
func checksRoot(t *testing.T, dir string) *os.Root {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	return root
}

// onlyLog is the one log of logs (a driver's evaluations) and its
// content.
func onlyLog(t *testing.T, logs []string) (string, []byte) {
	t.Helper()
	if len(logs) != 1 {
		t.Fatalf("logs after one driver's evaluations: %v, want one", logs)
	}
	data, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	return logs[0], data
}

// removeResultLogs removes the results kept in dir: an input whose result
// is kept is read back whatever its input log says.
func removeResultLogs(t *testing.T, dir string) {
	t.Helper()
	for _, p := range resultLogs(t, dir) {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

// The inputs of one driver version are one file, a line each: a line
// that does not read (a process stopped mid-write, two writers) costs
// only its own input, the others are still found.
func TestAnInputLogLineThatDoesNotReadCostsOnlyItsInput(t *testing.T) {
	dir := t.TempDir()
	if _, sent := nextProcess(t, dir, "hub"); sent == 0 {
		t.Fatal("the first process sent no evaluation to a child")
	}
	log, data := onlyLog(t, inputLogs(t, dir))
	lines := strings.SplitAfter(string(data), "\n")
	lines = lines[:len(lines)-1]
	// The first line cut short and run into the next: both are lost.
	torn := lines[0][:20] + strings.Join(lines[1:], "") + hexKey('f')[:30]
	if err := os.WriteFile(log, []byte(torn), 0o600); err != nil {
		t.Fatal(err)
	}
	removeResultLogs(t, dir)
	_, sent := nextProcess(t, dir, "hub")
	if sent != 2 {
		t.Errorf("after two lines were lost, the next process sent %d evaluations to a child, want 2", sent)
	}
	if _, sent := nextProcess(t, dir, "hub"); sent != 0 {
		t.Errorf("the lines written again after a torn one were not read: %d evaluations sent to a child", sent)
	}
}

// An input log past its bound is started again by the next process that
// reads it: a long-lived folder does not grow without end.
func TestAnInputLogPastItsBoundIsStartedAgain(t *testing.T) {
	dir := t.TempDir()
	nextProcess(t, dir, "hub")
	log, data := onlyLog(t, inputLogs(t, dir))
	// Exactly at its bound, as a process that filled it leaves it.
	full := string(data) + strings.Repeat(hexKey('e')+"\n", inputLogMax-strings.Count(string(data), "\n"))
	if err := os.WriteFile(log, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	removeResultLogs(t, dir)
	_, sent := nextProcess(t, dir, "hub")
	if sent == 0 {
		t.Error("the inputs of a log past its bound were taken as checked")
	}
	after, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(after), "\n"); got != int(sent) {
		t.Errorf("the log started again holds %d lines, want the %d inputs checked since", got, sent)
	}
}

// An input log is a check as the trim sees it: removed once unused for
// checksKeep, kept while used (reading it renews its time).
func TestAnInputLogUnusedForAMonthIsRemoved(t *testing.T) {
	dir := t.TempDir()
	root := checksRoot(t, dir)
	c := &loadChecks{root: root, code: "x"}
	now := time.Now()
	old, used := hexKey('a')+inputLogSuffix, hexKey('b')+inputLogSuffix
	for _, name := range []string{old, used, "notes" + inputLogSuffix} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(hexKey('c')+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-checksKeep-time.Hour), now.Add(-checksKeep-time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	ic := &inputChecks{c: c, name: used}
	var k [32]byte
	for i := range k {
		k[i] = 0xcc
	}
	if !ic.has(k) {
		t.Fatal("the line of the log was not read")
	}
	c.trim(now, true)
	got := checks(t, dir)
	if slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, old) }) {
		t.Errorf("an input log unused for a month was kept: %v", got)
	}
	if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, used) }) ||
		!slices.Contains(got, "notes"+inputLogSuffix) {
		t.Errorf("after trimming: %v, want the log read today and the file that is no log kept", got)
	}
}
