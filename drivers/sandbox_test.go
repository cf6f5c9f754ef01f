package drivers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/styrmin/styrmin/internal/hostile"
)

// sandboxStarts is how many children sb has started.
func sandboxStarts(sb *Sandbox) int {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.starts
}

// idlePIDs are the pids of sb's idle children.
func idlePIDs(sb *Sandbox) []int {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	var pids []int
	for _, c := range sb.idle {
		pids = append(pids, c.cmd.Process.Pid)
	}
	return pids
}

// newSandbox is a Sandbox of this test binary, its idle children ended
// with the test.
func newSandbox(t *testing.T, parallel int) *Sandbox {
	t.Helper()
	sb, err := SelfSandbox(parallel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	return sb
}

// loadBoxed loads an example driver version through sb under the test
// limits.
func loadBoxed(t *testing.T, sb *Sandbox, dir string) (*Driver, Context, map[string]any) {
	t.Helper()
	return loadBoxedWithin(t, sb, dir, testLimits())
}

// loadBoxedWithin loads an example driver version through sb under l, and
// gives a context and values to render it with.
func loadBoxedWithin(t *testing.T, sb *Sandbox, dir string, l Limits) (*Driver, Context, map[string]any) {
	t.Helper()
	local, err := Load(os.DirFS("../examples/drivers/"+dir), LoadOptions{Source: "examples/drivers/" + dir})
	if err != nil {
		t.Fatal(err)
	}
	boxed, err := Load(os.DirFS("../examples/drivers/"+dir), LoadOptions{Source: "examples/drivers/" + dir, Limits: l, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	c := exampleContext(local)
	vals, err := local.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	return boxed, c, vals
}

// A child serves one evaluation after another: the load and many renders
// of two driver versions start one process, which keeps both drivers.
func TestSandboxChildServesManyEvaluations(t *testing.T) {
	sb := newSandbox(t, 1)
	webapp, wc, wv := loadBoxed(t, sb, "webapp/1.1.0")
	graphhub, gc, gv := loadBoxed(t, sb, "graphhub/2.0.0")
	for i := range 10 {
		wc.Deployment.Name = "web" + string(rune('a'+i))
		if _, err := webapp.Render(wc, wv); err != nil {
			t.Fatal(err)
		}
		if _, err := graphhub.Render(gc, gv); err != nil {
			t.Fatal(err)
		}
	}
	if n := sandboxStarts(sb); n != 1 {
		t.Errorf("2 loads and 20 renders started %d children, want 1", n)
	}
}

// A child that hit a limit is never used again: the next driver, a good
// one, renders in a new child, and the bad driver's error is its own.
func TestSandboxChildOverALimitIsReplaced(t *testing.T) {
	sb := newSandbox(t, 1)
	// Every evaluation under the same limits, so that the child a bad
	// driver ran in is the one the good driver would reuse.
	good, c, vals := loadBoxed(t, sb, "webapp/1.1.0")
	for _, name := range []string{"cue-list-range-oom", "nested-until-template"} {
		hc := hostileCase(t, name)
		_, err := Load(mapFS(hc.Files("bad", "1.0.0")), LoadOptions{Source: "drivers/bad/1.0.0", Limits: testLimits(), Sandbox: sb})
		var le *LimitError
		if !errors.As(err, &le) || le.Driver != "drivers/bad/1.0.0" || (le.Limit != LimitMemory && le.Limit != LimitTime) {
			t.Fatalf("%s: %v, want the bad driver's memory or time limit", name, err)
		}
		pids := idlePIDs(sb)
		if _, err := good.Render(c, vals); err != nil {
			t.Fatalf("after %s: the good driver: %v", name, err)
		}
		if len(pids) != 0 {
			t.Errorf("after %s: idle children %v, want none: the bad driver's child is never given back", name, pids)
		}
	}
	// The good load's child, lost to the first bad driver; the next,
	// lost to the second; the one the last render ran in.
	if n := sandboxStarts(sb); n != 3 {
		t.Errorf("%d children started, want 3: a new one after each child lost to a limit", n)
	}
}

// hostileCase is the hostile driver named name.
func hostileCase(t *testing.T, name string) hostile.Case {
	t.Helper()
	for _, c := range hostile.Cases() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no hostile case %s", name)
	return hostile.Case{}
}

// An idle child that died (killed from outside, say) is noticed when it is
// given the next request, which runs in a new child: the caller sees no
// error.
func TestSandboxReplacesAnIdleChildThatDied(t *testing.T) {
	sb := newSandbox(t, 1)
	d, c, vals := loadBoxed(t, sb, "webapp/1.1.0")
	pids := idlePIDs(sb)
	if len(pids) != 1 {
		t.Fatalf("idle children %v, want one", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := d.Render(c, vals); err != nil {
		t.Fatalf("render after the idle child died: %v", err)
	}
	if n := sandboxStarts(sb); n != 2 {
		t.Errorf("%d children started, want 2", n)
	}
}

// A child idle for longer than the sandbox keeps children ends; Close
// ends the others.
func TestSandboxIdleChildrenEnd(t *testing.T) {
	sb, err := SelfSandbox(2)
	if err != nil {
		t.Fatal(err)
	}
	sb.idleAfter = 200 * time.Millisecond
	loadBoxed(t, sb, "webapp/1.1.0")
	pids := idlePIDs(sb)
	if len(pids) != 1 {
		t.Fatalf("idle children %v, want one", pids)
	}
	deadline := time.Now().Add(5 * time.Second)
	for processRuns(pids[0]) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if processRuns(pids[0]) {
		t.Errorf("child %d still runs after being idle for %s", pids[0], sb.idleAfter)
	}

	sb.idleAfter = time.Hour
	loadBoxed(t, sb, "webapp/1.1.0")
	pids = idlePIDs(sb)
	sb.Close()
	for _, pid := range pids {
		if processRuns(pid) {
			t.Errorf("child %d still runs after Close", pid)
		}
	}
}

// processRuns reports whether pid is a live process (not a zombie: the
// sandbox waits for its children).
func processRuns(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

// The phase lines of an earlier request (late on the stderr pipe) do not
// move the file a request in flight is reported at, and a request has
// begun only once its own first line came.
func TestPhaseWriterKeepsToTheRequestInFlight(t *testing.T) {
	var w phaseWriter
	w.begin(2, "d/driver.cue")
	_, _ = w.Write([]byte(phasePrefix + "1\td/chart/templates/old.yaml\n"))
	if w.last() != "d/driver.cue" || w.started() {
		t.Fatalf("after an earlier request's line: file %q, started %v", w.last(), w.started())
	}
	_, _ = w.Write([]byte(phasePrefix + "2\t\n" + phasePrefix + "2\td/chart"))
	if !w.started() || w.last() != "d/driver.cue" {
		t.Fatalf("after the request's first line: file %q, started %v", w.last(), w.started())
	}
	_, _ = w.Write([]byte("\nfatal error: runtime: out of memory\n"))
	if w.last() != "d/chart" || !w.outOfMemory() || w.tail() != "fatal error: runtime: out of memory" {
		t.Fatalf("file %q, out of memory %v, tail %q", w.last(), w.outOfMemory(), w.tail())
	}
	w.begin(3, "e/driver.cue")
	if w.outOfMemory() || w.last() != "e/driver.cue" {
		t.Fatalf("a new request keeps the last one's output: %q at %q", w.tail(), w.last())
	}
}

// A child answers, and says it ends, once what it keeps passes a quarter
// of the memory limit; below that it keeps serving. Its drivers are kept
// by their files: a second request for the same folder loads nothing.
func TestSandboxServerRetiresPastAQuarterOfItsMemoryLimit(t *testing.T) {
	files, err := readFolder(os.DirFS("../examples/drivers/webapp/1.1.0"), "examples/drivers/webapp/1.1.0", defaultMaxFileSize, defaultMaxTotalSize)
	if err != nil {
		t.Fatal(err)
	}
	var out, stderr strings.Builder
	kept := uint64(0)
	s := &sandboxServer{out: &out, stderr: &stderr, drivers: map[[32]byte]*Driver{}, kept: func(uint64) uint64 { return kept },
		limits: Limits{Memory: 4 << 30}.WithDefaults()}
	req := &sandboxRequest{ID: 1, Op: "load", Source: "examples/drivers/webapp/1.1.0", Files: files.files, Limits: s.limits}
	for i, c := range []struct {
		kept   uint64
		retire bool
	}{{10 << 20, false}, {1 << 30, false}, {1<<30 + 1, true}} {
		before := maps.Clone(s.drivers)
		kept = c.kept
		out.Reset()
		if got := s.serve(req); got != c.retire {
			t.Errorf("%d MiB kept: serve says end %v, want %v", c.kept>>20, got, c.retire)
		}
		var resp sandboxResponse
		if err := json.Unmarshal([]byte(out.String()), &resp); err != nil || resp.Retire != c.retire || len(resp.Errors) > 0 {
			t.Errorf("answer %d: %q (%v), want retire %v and no error", i, out.String(), err, c.retire)
		}
		if len(s.drivers) != 1 || i > 0 && !maps.Equal(before, s.drivers) {
			t.Errorf("request %d: %d drivers kept, the same as before: %v; want the one loaded first", i, len(s.drivers), maps.Equal(before, s.drivers))
		}
	}
}

// A child that retires answers and then exits at once: its answer still
// arrives whole (it is read from a pipe the parent owns, not one closed
// when the child is waited for), render after render.
func TestSandboxReadsTheAnswerOfAChildThatRetires(t *testing.T) {
	sb := newSandbox(t, 1)
	// A limit so small that what a child keeps after one evaluation is
	// over its quarter: every child retires after its first answer.
	boxed, c, vals := loadBoxedWithin(t, sb, "webapp/1.1.0", Limits{Memory: 8 << 20}.WithDefaults())
	const renders = 20
	for i := range renders {
		if _, err := boxed.Render(c, vals); err != nil {
			t.Fatalf("render %d: %v", i, err)
		}
	}
	if n := sandboxStarts(sb); n != renders+1 {
		t.Errorf("%d children for a load and %d renders, want %d: one each, every child retiring", n, renders, renders+1)
	}
}

// Children, idle ones included, are never more than the evaluations that
// may run at once: an evaluation under other limits than the idle child's
// ends that child before it starts its own.
func TestSandboxChildrenStayWithinTheSlots(t *testing.T) {
	sb := newSandbox(t, 1)
	loadBoxed(t, sb, "webapp/1.1.0")
	first := idlePIDs(sb)
	if len(first) != 1 {
		t.Fatalf("idle children %v, want one", first)
	}
	other := testLimits()
	other.Memory *= 2
	loadBoxedWithin(t, sb, "webapp/1.1.0", other)
	now := idlePIDs(sb)
	if len(now) != 1 || now[0] == first[0] {
		t.Errorf("idle children %v after an evaluation under other limits, want one other than %d", now, first[0])
	}
	if processRuns(first[0]) {
		t.Errorf("child %d, idle under the first limits, still runs beside the new one: 2 children for 1 slot", first[0])
	}
	if n := sandboxStarts(sb); n != 2 {
		t.Errorf("%d children started, want 2", n)
	}
}

// testFuncs are the functions this test binary serves as a sandbox child:
// "echo" answers its file's content followed by its input, "grow" names
// its file and allocates until it is stopped.
func testFuncs() SandboxFuncs {
	return SandboxFuncs{
		"echo": func(files map[string][]byte, input []byte, phase func(string)) ([]byte, error) {
			if string(input) == "fail" {
				return nil, errors.New("echo: asked to fail")
			}
			return append(append([]byte{}, files["in.txt"]...), input...), nil
		},
		"grow": func(files map[string][]byte, _ []byte, phase func(string)) ([]byte, error) {
			phase("big.txt")
			var keep [][]byte
			for {
				keep = append(keep, bytes.Repeat([]byte{1}, 1<<20))
				if len(keep) < 0 {
					return nil, nil
				}
			}
		},
	}
}

// TestASandboxCallRunsTheChildsFunctionUnderTheLimits: Call runs the
// child's function of that name with the files and input and returns its
// output; its error comes back as an error; a function the binary does
// not serve is an error naming it; one that outgrows the memory limit is
// a LimitError at the file it named, and the child is not used again.
func TestASandboxCallRunsTheChildsFunctionUnderTheLimits(t *testing.T) {
	sb := newSandbox(t, 1)
	ctx := context.Background()
	limits := Limits{Memory: 64 << 20, Timeout: 20 * time.Second}
	out, err := sb.Call(ctx, "echo", "test", "in.txt", map[string][]byte{"in.txt": []byte("file,")}, []byte("input"), limits)
	if err != nil || string(out) != "file,input" {
		t.Fatalf("echo: %q, %v; want \"file,input\"", out, err)
	}
	if _, err := sb.Call(ctx, "echo", "test", "in.txt", nil, []byte("fail"), limits); err == nil || !strings.Contains(err.Error(), "asked to fail") {
		t.Fatalf("echo asked to fail: %v", err)
	}
	if _, err := sb.Call(ctx, "nothing", "test", "in.txt", nil, nil, limits); err == nil || !strings.Contains(err.Error(), `no function "nothing"`) {
		t.Fatalf("a function the child does not serve: %v", err)
	}
	_, err = sb.Call(ctx, "grow", "test", "in.txt", nil, nil, limits)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitMemory || le.File != "big.txt" || le.Driver != "test" {
		t.Fatalf("grow: %v; want the memory limit at big.txt", err)
	}
	if out, err := sb.Call(ctx, "echo", "test", "in.txt", map[string][]byte{"in.txt": []byte("again,")}, []byte("ok"), limits); err != nil || string(out) != "again,ok" {
		t.Fatalf("echo after the limit: %q, %v", out, err)
	}
}

// A phase record overwrites the one before, a shorter one too, and one
// of an earlier request neither moves the file a request in flight is
// reported at nor says it began.
func TestAPhaseFileKeepsToTheRequestInFlight(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "phase")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := phaseWriter{phases: f}
	w.begin(2, "d/driver.cue")
	if w.started() || w.last() != "d/driver.cue" {
		t.Fatalf("before any record: file %q, started %v", w.last(), w.started())
	}
	writePhase(f, 1, "d/chart/templates/a-long-name-of-an-old-template.yaml")
	if w.started() || w.last() != "d/driver.cue" {
		t.Fatalf("after an earlier request's record: file %q, started %v", w.last(), w.started())
	}
	writePhase(f, 2, "")
	if !w.started() || w.last() != "d/driver.cue" {
		t.Fatalf("after the request's first record: file %q, started %v", w.last(), w.started())
	}
	writePhase(f, 2, "d/chart")
	if w.last() != "d/chart" {
		t.Fatalf("after the request named its chart: file %q", w.last())
	}
	w.closePhases()
	if !w.started() || w.last() != "d/chart" {
		t.Fatalf("once the child ended: file %q, started %v", w.last(), w.started())
	}
}

// A child killed at its deadline is reported at the file it was
// evaluating, which it named in the phase file it shares with the
// parent: the chart a spinning template is in, not the driver's spec.
func TestAChildKilledAtItsDeadlineNamesTheFileItWasEvaluating(t *testing.T) {
	l := testLimits()
	const source = "drivers/bomb/1.0.0"
	files := bombDriver("", "values: {}\n", map[string]string{
		"spin.yaml": "{{- range until (int .Values.n) }}{{ range until 100000 }}{{ end }}{{ end }}\n",
	})
	sb := newSandbox(t, 1)
	d := loadBomb(t, sb, files, l)
	start := time.Now()
	_, err := d.RenderForPolicy(context.Background(), bombContext(t, d, map[string]any{}), map[string]any{"n": 100000})
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitTime || le.File != source+"/chart" {
		t.Fatalf("a render spinning past the time limit: %v after %s; want the time limit at %s/chart", err, time.Since(start), source)
	}
}

// The memory watchdog counts what an evaluation keeps, not the garbage a
// collector target above the default leaves on the heap: a heap over the
// limit that a collection brings under it goes on; one whose live data is
// over it is the limit.
//
// The watchdog reads the whole process's heap, so the test runs in a
// process of its own: in the test binary, what other tests left running
// allocates beside it. It waits for what the watchdog did rather than for
// a time, which a busy machine may not give it.
func TestTheMemoryWatchdogCountsLiveDataNotGarbage(t *testing.T) {
	if os.Getenv(watchdogAloneEnv) == "" {
		runAlone(t, watchdogAloneEnv)
		return
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // garbage stays until collected
	runtime.GC()
	const step = 64 << 20
	const patience = 30 * time.Second
	watch := func(limit uint64) (overSeen <-chan struct{}, stop func() (over bool)) {
		done, end, seen := make(chan struct{}), make(chan bool, 1), make(chan struct{})
		go func() {
			over := false
			watchMemory(limit, done, func(uint64) { over = true; close(seen) })
			end <- over
		}()
		return seen, func() bool { close(done); return <-end }
	}
	var sink [][]byte
	// In small pieces: what is allocated while a collection marks counts
	// as live for it, and the piece being filled is live.
	fill := func(keep bool) {
		for range 64 {
			b := make([]byte, step/64)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			if keep {
				sink = append(sink, b)
			}
		}
	}

	// Garbage: with the collector off, only the watchdog's collection
	// brings the heap back under the limit; once it has, it has decided.
	limit := heapObjects() + step/2
	overSeen, stop := watch(limit)
	fill(false)
	waitFor(patience, func() bool { return heapObjects() <= limit || closed(overSeen) })
	if heapObjects() > limit {
		t.Errorf("the watchdog left %d MiB of garbage uncollected for %s", step>>20, patience)
	}
	if stop() {
		t.Errorf("the watchdog called %d MiB of garbage over a limit of %d MiB", step>>20, (step/2)>>20)
	}

	// Live data: the watchdog says so, however long the machine makes it
	// wait. The limit is taken above a collected heap: the garbage the
	// first phase left since the watchdog's last collection would raise it.
	runtime.GC()
	limit = heapObjects() + step/2
	overSeen, stop = watch(limit)
	fill(true)
	waitFor(patience, func() bool { return closed(overSeen) })
	if !stop() {
		t.Errorf("the watchdog let %d MiB of live data pass a limit of %d MiB for %s", step>>20, (step/2)>>20, patience)
	}
	runtime.KeepAlive(sink)
}

// waitFor polls done until it holds or patience has passed.
func waitFor(patience time.Duration, done func() bool) {
	for deadline := time.Now().Add(patience); !done() && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
}

// closed says whether c is closed.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// watchdogAloneEnv marks the test binary run for the watchdog's test alone.
const watchdogAloneEnv = "STYRMIN_TEST_WATCHDOG_ALONE"

// runAlone runs t's test again in a new process of the test binary with
// env set, and fails t with its output if it fails.
func runAlone(t *testing.T, env string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s alone in a process of its own: %v\n%s", t.Name(), err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("%s alone in a process of its own did not run:\n%s", t.Name(), out)
	}
}
