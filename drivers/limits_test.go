package drivers

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/styrmin/styrmin/internal/hostile"
)

// TestMain lets the test binary serve as its own Sandbox child.
func TestMain(m *testing.M) {
	if IsSandboxChild() {
		os.Exit(ServeSandbox(os.Stdin, os.Stdout, os.Stderr, testFuncs()))
	}
	os.Exit(m.Run())
}

func testLimits() Limits {
	l := hostile.Test()
	return Limits{Timeout: l.Timeout, Memory: l.Memory, RenderedBytes: l.RenderedBytes, ChartBytes: l.ChartBytes}
}

func mapFS(files map[string][]byte) fstest.MapFS {
	fsys := fstest.MapFS{}
	for n, b := range files {
		fsys[n] = &fstest.MapFile{Data: b}
	}
	return fsys
}

// hostileSlack is how much longer than its time limit a hostile case
// may take to fail (see checkLimitError).
const hostileSlack = 15 * time.Second

// checkLimitError checks err is what case c may fail with: one of its
// limits, naming the driver and a file of it, within the time limit.
func checkLimitError(t *testing.T, c hostile.Case, source string, err error, took time.Duration, l Limits) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: loaded without an error", c.Name)
	}
	// What this pins is that hostile input ends: a case the limits did
	// not stop runs for minutes or for ever. The slack is for a loaded
	// machine, where unpacking the archive bomb up to its byte limit took
	// 7.6 s on two cores running other packages' tests.
	if took > l.Timeout+hostileSlack {
		t.Errorf("%s: failed after %s, limit %s (and %s for a loaded machine)", c.Name, took, l.Timeout, hostileSlack)
	}
	var le *LimitError
	if !errors.As(err, &le) {
		if len(c.Limits) == 0 || slices.Contains(c.Limits, "") {
			t.Logf("%s: %s: %v", c.Name, took.Round(time.Millisecond), err)
			return // a template or YAML error, as long as it is quick
		}
		t.Fatalf("%s: %v (%T), want a limit error (%v)", c.Name, err, err, c.Limits)
	}
	if !slices.Contains(c.Limits, string(le.Limit)) {
		t.Errorf("%s: hit the %s limit, want one of %v: %v", c.Name, le.Limit, c.Limits, err)
	}
	if !strings.HasPrefix(le.File, source+"/") || le.Driver != source || !errors.Is(err, ErrLimit) {
		t.Errorf("%s: error names driver %q file %q, want inside %s: %v", c.Name, le.Driver, le.File, source, err)
	}
	t.Logf("%s: %s: %v", c.Name, took.Round(time.Millisecond), err)
}

func TestHostileDriversFailWithinTheirLimits(t *testing.T) {
	sb, err := SelfSandbox(0)
	if err != nil {
		t.Fatal(err)
	}
	l := testLimits()
	for _, c := range hostile.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			const source = "drivers/bad/1.0.0"
			start := time.Now()
			_, err := Load(mapFS(c.Files("bad", "1.0.0")), LoadOptions{Source: source, Limits: l, Sandbox: sb})
			checkLimitError(t, c, source, err, time.Since(start), l)
		})
	}
}

// In-process, without a Sandbox, the limits that need no child hold too:
// the chart and rendered bytes, and the deadline (the work itself is
// abandoned, not stopped, so the slow cases are left to the Sandbox).
func TestInProcessLoadKeepsByteLimits(t *testing.T) {
	l := testLimits()
	for _, c := range hostile.Cases() {
		if c.Name != "subchart-archive-bomb" && c.Name != "render-over-the-byte-limit" && c.Name != "deep-template-recursion" {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			const source = "drivers/bad/1.0.0"
			start := time.Now()
			_, err := Load(mapFS(c.Files("bad", "1.0.0")), LoadOptions{Source: source, Limits: l})
			checkLimitError(t, c, source, err, time.Since(start), l)
		})
	}
}

func TestSandboxedDriverRendersLikeInProcess(t *testing.T) {
	sb, err := SelfSandbox(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"../examples/drivers/webapp/1.0.0", "../examples/drivers/graphhub/2.0.0"} {
		local, err := Load(os.DirFS(dir), LoadOptions{Source: dir})
		if err != nil {
			t.Fatal(err)
		}
		boxed, err := Load(os.DirFS(dir), LoadOptions{Source: dir, Sandbox: sb})
		if err != nil {
			t.Fatal(err)
		}
		c := exampleContext(local)
		vals, err := local.Values(c)
		if err != nil {
			t.Fatal(err)
		}
		want, err := local.Render(c, vals)
		if err != nil {
			t.Fatal(err)
		}
		got, err := boxed.Render(c, vals)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.YAML()) != string(want.YAML()) {
			t.Errorf("%s: sandboxed render differs:\n%s\nwant:\n%s", dir, got.YAML(), want.YAML())
		}
	}
}

func TestLimitsMergeAndDefaults(t *testing.T) {
	l := Limits{Timeout: time.Second}.Merge(Limits{Memory: 5}).WithDefaults()
	if l.Timeout != time.Second || l.Memory != 5 || l.RenderedBytes != DefaultRenderedBytes || l.ChartBytes != DefaultChartBytes {
		t.Fatalf("%+v", l)
	}
}
