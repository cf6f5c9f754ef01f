package drivers

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"sync"
	"time"
)

// childDrivers is how many loaded drivers a sandbox child keeps: a fan-out
// renders many deployments of few driver versions.
const childDrivers = 8

// ServeSandbox serves the requests read from in, one at a time, writing
// each answer to out; it returns the exit code when in ends. The first
// request's limits are the process's: the parent starts a child per set of
// limits. Memory is watched from the start: over the limit, the answer is
// a memory LimitError and the process exits at once (nothing it could
// still do is worth the memory).
//
// funcs are the functions Sandbox.Call may run besides (nil: none).
func ServeSandbox(in io.Reader, out io.Writer, stderr io.Writer, funcs SandboxFuncs) int {
	br := bufio.NewReaderSize(in, 64<<10)
	s := &sandboxServer{out: out, stderr: stderr, drivers: map[[32]byte]*Driver{}, kept: keptHeap, funcs: funcs, phaseOut: phaseFromEnv()}
	for first := true; ; first = false {
		req, err := readRequest(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0
			}
			fmt.Fprintf(stderr, "drivers: sandbox: bad request: %v\n", err)
			return 2
		}
		if first {
			s.limits = req.Limits.WithDefaults()
			// The garbage collector works harder near the limit (each
			// evaluation's, above what the child keeps), so only live
			// data trips the watchdog; the rlimit stops what the watchdog
			// is too slow to see (one huge allocation).
			debug.SetMemoryLimit(s.limits.Memory + s.limits.Memory/keptShare)
			limitAddressSpace(s.limits.Memory)
			// An evaluation allocates many times what it keeps: at the
			// default target the collector took a fifth of a child's CPU
			// in a fan-out's first lock. The watchdog collects before it
			// counts garbage against the limit (watchMemory), and what a
			// child keeps between evaluations is bounded by keptShare
			// either way. GOGC still wins when set.
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(childGCPercent)
			}
		}
		if s.serve(req) {
			return 0
		}
	}
}

// sandboxServer is a child's state across requests.
type sandboxServer struct {
	out, stderr io.Writer
	limits      Limits
	// phaseOut, when the parent gave one, is where phases are written
	// (writePhase) instead of stderr.
	phaseOut *os.File

	mu       sync.Mutex
	req      *sandboxRequest // in flight
	phase    string          // the file it evaluates
	named    string          // the file the request's phases named last ("": none yet)
	answered bool

	drivers map[[32]byte]*Driver // loaded, by driverKey
	order   [][32]byte           // drivers' keys, the least recently used first

	kept func(limit uint64) uint64 // keptHeap; tests set another

	funcs SandboxFuncs // what a "call" may run
}

// keptShare: a child keeps at most 1/keptShare of the memory limit
// between evaluations (its drivers, their caches); past it, it retires.
// An evaluation may use the whole limit above what was kept.
const keptShare = 4

// keptHeap is what the child holds between evaluations: the heap in use
// when it is small, else the heap a collection finds live (a collection
// only then: it costs more than a small render).
func keptHeap(limit uint64) uint64 {
	h := heapObjects()
	if h <= limit/keptShare {
		return h
	}
	runtime.GC()
	return liveHeap()
}

// serve answers req; it reports whether the child should end (what it
// keeps grew past its share of the limit: a new child is cheaper than
// holding memory the next evaluation is owed).
func (s *sandboxServer) serve(req *sandboxRequest) bool {
	s.mu.Lock()
	s.req, s.phase, s.named, s.answered = req, req.Source, "", false
	s.mu.Unlock()
	s.setPhase("") // the request has begun
	// Watched only while it runs (an idle child costs no CPU), against
	// the limit above what the child held when it began: what an earlier
	// driver left never counts against this one.
	base := heapObjects()
	stop := make(chan struct{})
	defer close(stop)
	go watchMemory(uint64(s.limits.Memory)+base, stop, func(heap uint64) { s.overMemory(req, heap-base) })
	var resp sandboxResponse
	var (
		d   *Driver
		err error
	)
	if req.Op == "load" || req.Op == "render" || req.Op == "check" {
		d, err = s.driver(req)
	}
	switch {
	case errors.Is(err, errNeedFiles):
		err, resp.NeedFiles = nil, true
	case err != nil:
	case req.Op == "call":
		fn, ok := s.funcs[req.Func]
		if !ok {
			err = fmt.Errorf("drivers: sandbox: this binary serves no function %q", req.Func)
			break
		}
		resp.Output, err = fn(req.Files, req.Input, s.setPhase)
	case req.Op == "load":
		if sample, ok := d.SampleContext(); ok {
			_, err = d.renderSample(sample)
		}
	case req.Op == "check":
		err = d.checkLocal(req.Eval, req.Input, &resp)
	case req.Op == "render" && req.Context != nil:
		var m *Manifests
		c := *req.Context
		c.Parameters, _ = normalizeNumbers(c.Parameters).(map[string]any)
		values, _ := normalizeNumbers(req.Values).(map[string]any)
		if m, err = d.renderLocal(c, values); err == nil {
			resp.Objects = m.Objects
		}
	default:
		err = fmt.Errorf("drivers: sandbox: unknown operation %q", req.Op)
	}
	resp.Errors = toWire(err)
	resp.Retire = s.kept(uint64(s.limits.Memory)) > uint64(s.limits.Memory)/keptShare
	s.answer(&resp)
	s.mu.Lock()
	s.req = nil
	s.mu.Unlock()
	return resp.Retire
}

// driver loads the request's driver, or returns the one loaded for an
// earlier request of the same files and options. A driver that fails to
// load is not kept.
func (s *sandboxServer) driver(req *sandboxRequest) (*Driver, error) {
	key := driverKey(req)
	if req.Files == nil && len(req.Known) == len(key) {
		copy(key[:], req.Known)
	}
	if d, ok := s.drivers[key]; ok {
		s.touch(key)
		return d, nil
	}
	if req.Files == nil && req.Known != nil {
		return nil, errNeedFiles
	}
	f := &folder{source: req.Source, files: req.Files}
	for p := range req.Files {
		f.paths = append(f.paths, p)
	}
	sort.Strings(f.paths)
	d, err := loadFolder(f, LoadOptions{Source: req.Source, KubeVersion: req.KubeVersion, APIVersions: req.APIVersions,
		Limits: s.limits, phase: s.setPhase})
	if err != nil {
		return nil, err
	}
	if len(s.order) >= childDrivers {
		delete(s.drivers, s.order[0])
		s.order = s.order[1:]
	}
	s.drivers[key] = d
	s.order = append(s.order, key)
	return d, nil
}

// errNeedFiles is a request naming a driver by its key (Known) that the
// child no longer holds: the parent sends it again with the files.
var errNeedFiles = errors.New("drivers: sandbox: the driver's files are needed")

// touch makes key the most recently used driver.
func (s *sandboxServer) touch(key [32]byte) {
	for i, k := range s.order {
		if k == key {
			s.order = append(append(s.order[:i:i], s.order[i+1:]...), key)
			return
		}
	}
}

// driverKey identifies what a load depends on: the folder's files (by
// their digest, computed once per folder in the parent: hashing a chart's
// files for every request was a twentieth of a fan-out's first lock) and
// the options (the limits are the process's).
func driverKey(req *sandboxRequest) [32]byte {
	h := sha256.New()
	field := func(s string) {
		fmt.Fprintf(h, "%d:", len(s))
		h.Write([]byte(s))
	}
	field(req.Source)
	field(req.KubeVersion)
	fmt.Fprintf(h, "%d:", len(req.APIVersions))
	for _, v := range req.APIVersions {
		field(v)
	}
	sum := req.folderSum
	if sum == "" {
		f := &folder{files: req.Files}
		for p := range req.Files {
			f.paths = append(f.paths, p)
		}
		sort.Strings(f.paths)
		sum = f.digest()
	}
	field(sum)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// setPhase records the file being evaluated and tells the parent ("" only
// says the request has begun).
func (s *sandboxServer) setPhase(file string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if file != "" {
		s.phase, s.named = file, file
	}
	id := uint64(0)
	if s.req != nil {
		id = s.req.ID
	}
	if s.phaseOut != nil {
		writePhase(s.phaseOut, id, s.named)
		return
	}
	fmt.Fprintf(s.stderr, "%s%d\t%s\n", phasePrefix, id, file)
}

// answer writes the request's answer once.
func (s *sandboxServer) answer(resp *sandboxResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answered {
		return
	}
	s.answered = true
	_, _ = s.out.Write(encodeAnswer(resp))
}

// overMemory answers req with the memory limit, heap being what it used,
// and ends the process; unless req is no longer in flight (its watchdog
// saw the heap after it was answered).
func (s *sandboxServer) overMemory(req *sandboxRequest, heap uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.req != req || s.answered {
		return
	}
	s.answered = true
	_, _ = s.out.Write(encodeAnswer(&sandboxResponse{Retire: true, Errors: toWire(&LimitError{Driver: req.Source, File: s.phase,
		Limit: LimitMemory, Max: sizeText(s.limits.Memory), Detail: fmt.Sprintf("the evaluation reached %s", sizeText(int64(heap)&^(1<<20-1)))})}))
	os.Exit(3)
}

// heapObjects is the Go heap in use, garbage not yet collected included.
func heapObjects() uint64 { return readUint64Metric("/memory/classes/heap/objects:bytes") }

// liveHeap is the heap the last garbage collection found live: what the
// child keeps, not the garbage an evaluation left.
func liveHeap() uint64 { return readUint64Metric("/gc/heap/live:bytes") }

func readUint64Metric(name string) uint64 {
	sample := []metrics.Sample{{Name: name}}
	metrics.Read(sample)
	if v := sample[0].Value; v.Kind() == metrics.KindUint64 {
		return v.Uint64()
	}
	return 0
}

// childGCPercent is a sandbox child's collector target (GOGC), as
// styrminctl's own.
const childGCPercent = 400

// watchMemory calls over when the Go heap exceeds limit, until stop is
// closed. It polls: CUE allocates in many small steps, so a few
// milliseconds see it well before the address-space limit. A heap over
// the limit is collected first, and counts only if what that collection
// found live is still over: garbage is not the evaluation's use (under a
// collector target above the default, a heap may hold several times its
// live data). The collection's own figure, not the heap read after it:
// what the evaluation allocated in between is garbage-to-be as often as not.
func watchMemory(limit uint64, stop <-chan struct{}, over func(heap uint64)) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if heapObjects() <= limit {
			continue
		}
		runtime.GC()
		if h := liveHeap(); h > limit {
			over(h)
			return
		}
	}
}
