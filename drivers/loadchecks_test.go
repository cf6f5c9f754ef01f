package drivers

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
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

// checks lists the checks remembered in dir.
func checks(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() != checksTrimmed {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestALoadAChildCheckedIsNotSentToAChildByTheNextProcess(t *testing.T) {
	dir := t.TempDir()
	opts := func(sb *Sandbox) LoadOptions {
		return LoadOptions{Source: "drivers/webapp/1.1.0", Sandbox: sb}
	}
	first := checkingSandbox(t, dir)
	checked, err := Load(folderFS(t), opts(first))
	if err != nil {
		t.Fatal(err)
	}
	if n := first.Requests(); n != 1 {
		t.Fatalf("the first load sent %d requests to a child, want 1", n)
	}
	if got := checks(t, dir); len(got) != 1 {
		t.Fatalf("checks after the first load: %v, want one", got)
	}

	next := checkingSandbox(t, dir)
	again, err := Load(folderFS(t), opts(next))
	if err != nil {
		t.Fatal(err)
	}
	if n := next.Requests(); n != 0 {
		t.Errorf("the next process's load of the same folder sent %d requests to a child, want 0", n)
	}
	c := exampleContext(checked)
	v1, err1 := checked.Values(c)
	v2, err2 := again.Values(c)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(v1, v2) || checked.Digest != again.Digest {
		t.Errorf("the driver loaded without a child differs: %v %v, digests %s %s", err1, err2, checked.Digest, again.Digest)
	}

	// Whatever the check depended on, changed, sends the load to a child
	// again.
	changed := folderFS(t)
	changed["driver.cue"] = &fstest.MapFile{Data: append([]byte("// changed\n"), changed["driver.cue"].Data...)}
	limits := opts(nil)
	limits.Limits = Limits{Timeout: 20 * time.Second}
	for _, tc := range []struct {
		name string
		fsys fstest.MapFS
		opts LoadOptions
	}{
		{"a file of the folder", changed, opts(nil)},
		{"the limits", folderFS(t), limits},
		{"the kube version", folderFS(t), LoadOptions{Source: "drivers/webapp/1.1.0", KubeVersion: "v1.30.0"}},
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
	if got := checks(t, dir); len(got) != 5 {
		t.Errorf("checks: %d, want 5 (one per load that differs)", len(got))
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

func TestKeepChecksRefusesAFolderOthersMayWriteTo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checks")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sb, err := SelfSandbox(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	err = sb.KeepChecks(dir)
	if err == nil || !strings.Contains(err.Error(), "not a folder only its owner may write to") {
		t.Fatalf("KeepChecks of a folder others may write to: %v, want a refusal", err)
	}
	// The sandbox checks every load in a child, as without checks.
	for range 2 {
		if _, err := Load(folderFS(t), LoadOptions{Source: "drivers/webapp/1.1.0", Sandbox: sb}); err != nil {
			t.Fatal(err)
		}
	}
	if n := sb.Requests(); n != 2 {
		t.Errorf("loads sent %d requests to a child, want 2", n)
	}
	if got := checks(t, dir); len(got) != 0 {
		t.Errorf("checks written in a refused folder: %v", got)
	}
}

func TestALoadCheckThatCannotBeWrittenLeavesTheLoadAlone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checks")
	sb := checkingSandbox(t, dir)
	// The folder replaced by a file: no check can be read or written
	// there, whoever runs the test.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := Load(folderFS(t), LoadOptions{Source: "drivers/webapp/1.1.0", Sandbox: sb}); err != nil {
			t.Fatalf("a load whose check cannot be written: %v", err)
		}
	}
	if n := sb.Requests(); n != 2 {
		t.Errorf("loads sent %d requests to a child, want 2", n)
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
}

func TestLoadChecksUnusedForAMonthAreRemoved(t *testing.T) {
	dir := t.TempDir()
	c := &loadChecks{dir: dir, code: "x"}
	now := time.Now()
	for name, age := range map[string]time.Duration{"old": checksKeep + time.Hour, "recent": checksKeep - 48*time.Hour} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	c.trim(now)
	if got := checks(t, dir); !reflect.DeepEqual(got, []string{"recent"}) {
		t.Fatalf("after trimming: %v, want [recent]", got)
	}
	// Not again within a day: an entry gone stale since is kept.
	p := filepath.Join(dir, "stale")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	old := now.Add(-checksKeep - time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	c.trim(now.Add(time.Hour))
	if got := checks(t, dir); len(got) != 2 {
		t.Errorf("trimmed again within a day: %v left", got)
	}
	c.trim(now.Add(checksTrim + time.Hour))
	if got := checks(t, dir); !reflect.DeepEqual(got, []string{"recent"}) {
		t.Errorf("a day later: %v, want [recent]", got)
	}
	// A use renews a check's time.
	c.add("used")
	used := filepath.Join(dir, "used")
	if err := os.Chtimes(used, old, old); err != nil {
		t.Fatal(err)
	}
	if !c.has("used") {
		t.Fatal("a check written is not found")
	}
	if fi, err := os.Stat(used); err != nil || now.Sub(fi.ModTime()) > time.Minute {
		t.Errorf("a check used keeps its old time: %v %v", fi.ModTime(), err)
	}
	if c.has("missing") || (*loadChecks)(nil).has("used") {
		t.Error("a check never written is found")
	}
	if _, err := os.Stat(filepath.Join(dir, checksTrimmed)); errors.Is(err, os.ErrNotExist) {
		t.Error("no trim marker")
	}
}
