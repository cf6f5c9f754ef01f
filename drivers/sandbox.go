package drivers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sandboxEnv, set to sandboxProtocol, makes a binary serve one sandboxed
// evaluation (IsSandboxChild, ServeSandbox) instead of running normally.
const (
	sandboxEnv      = "STYRMIN_DRIVER_SANDBOX"
	sandboxProtocol = "1"
)

// Sandbox runs a driver's load and renders in a child process: the same
// binary, started again with an environment variable that makes its main
// call ServeSandbox. CUE and Helm's template engine cannot be interrupted
// and a Go out-of-memory is fatal, so in-process checks can report a
// deadline but not stop the work nor bound its memory: a child can be
// killed at the deadline, runs under a memory ceiling (a watchdog on the
// Go heap, an address-space rlimit behind it), and its failure is one
// driver's error rather than the agent's crash. Measured on the example
// drivers a child costs about one process start and one spec compile
// (see docs/driver-limits.md).
type Sandbox struct {
	// Path is the executable; its main must call ServeSandbox when
	// IsSandboxChild.
	Path string
	// Args are passed to it (os.Args[1:] of the child; a test binary may
	// need -test.run=^$ so that it runs no test if it ignores the
	// variable).
	Args []string
	// slots, when set (NewSandbox), bounds the children running at once:
	// each may use up to its memory limit, and in a container they share
	// its memory with the parent.
	slots chan struct{}
}

// NewSandbox is a Sandbox running path with args, at most parallel
// children at once (0: no bound).
func NewSandbox(path string, args []string, parallel int) *Sandbox {
	s := &Sandbox{Path: path, Args: args}
	if parallel > 0 {
		s.slots = make(chan struct{}, parallel)
	}
	return s
}

// SelfSandbox is a Sandbox running this process's own executable, at
// most parallel children at once (0: no bound).
func SelfSandbox(parallel int) (*Sandbox, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("drivers: sandbox: %w", err)
	}
	return NewSandbox(exe, nil, parallel), nil
}

// IsSandboxChild reports whether this process was started by a Sandbox;
// main then calls ServeSandbox and exits with its code.
func IsSandboxChild() bool { return os.Getenv(sandboxEnv) == sandboxProtocol }

// sandboxRequest is what the parent writes to the child's stdin.
type sandboxRequest struct {
	Op          string            `json:"op"` // "load" or "render"
	Source      string            `json:"source"`
	Files       map[string][]byte `json:"files"`
	KubeVersion string            `json:"kubeVersion,omitempty"`
	APIVersions []string          `json:"apiVersions,omitempty"`
	Limits      Limits            `json:"limits"`
	Context     *Context          `json:"context,omitempty"`
	Values      map[string]any    `json:"values,omitempty"`
}

// sandboxResponse is what the child writes to its stdout.
type sandboxResponse struct {
	Errors  []wireError `json:"errors,omitempty"`
	Objects []Object    `json:"objects,omitempty"`
}

// wireError carries an error across the process boundary keeping its
// type, so callers classify it as they would in-process.
type wireError struct {
	Spec  *SpecError  `json:"spec,omitempty"`
	Limit *LimitError `json:"limit,omitempty"`
	Msg   string      `json:"msg,omitempty"`
}

func toWire(err error) []wireError {
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]wireError, 0, len(errs))
	for _, e := range errs {
		var se *SpecError
		var le *LimitError
		switch {
		case errors.As(e, &le):
			out = append(out, wireError{Limit: le})
		case errors.As(e, &se):
			c := *se
			c.Err = nil
			out = append(out, wireError{Spec: &c})
		default:
			out = append(out, wireError{Msg: e.Error()})
		}
	}
	return out
}

func fromWire(ws []wireError) error {
	var errs []error
	for _, w := range ws {
		switch {
		case w.Limit != nil:
			errs = append(errs, w.Limit)
		case w.Spec != nil:
			errs = append(errs, w.Spec)
		default:
			errs = append(errs, errors.New(w.Msg))
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// phasePrefix starts the lines the child writes to stderr naming the file
// it evaluates, so that a child killed at the deadline (or by the kernel)
// is reported at that file.
const phasePrefix = "styrmin-driver-phase\t"

// run sends req to a child and returns its answer. The child is killed at
// the deadline (the sooner of ctx's and the limit); a child that dies
// gives the limit it hit, located at the last file it named.
func (s *Sandbox) run(ctx context.Context, req *sandboxRequest, specFile string) (*sandboxResponse, error) {
	l := req.Limits
	if s.slots != nil {
		// Waiting for a slot is not the driver's time.
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		case <-ctx.Done():
			return nil, fmt.Errorf("driver %s: waiting for an evaluation slot: %w", req.Source, ctx.Err())
		}
	}
	max := deadlineText(ctx, l.Timeout)
	ctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	in, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("drivers: sandbox request: %w", err)
	}
	cmd := exec.CommandContext(ctx, s.Path, s.Args...)
	cmd.Env = append(os.Environ(), sandboxEnv+"="+sandboxProtocol)
	cmd.Stdin = bytes.NewReader(in)
	var stdout bytes.Buffer
	// The answer is bounded by the rendered-bytes limit (objects are
	// re-encoded, so allow for the framing).
	cmd.Stdout = &limitedWriter{w: &stdout, n: 2*l.RenderedBytes + 1<<20}
	stderr := &phaseWriter{file: specFile}
	cmd.Stderr = stderr
	cmd.WaitDelay = time.Second
	runErr := cmd.Run()
	file := stderr.last()
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &LimitError{Driver: req.Source, File: file, Limit: LimitTime, Max: max}
		}
		return nil, fmt.Errorf("driver %s: %w", req.Source, ctx.Err())
	}
	var exit *exec.ExitError
	if errors.As(runErr, &exit) && stdout.Len() == 0 {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			// Not killed by us (the deadline is handled above): the
			// kernel's out-of-memory killer, which the child invites.
			return nil, &LimitError{Driver: req.Source, File: file, Limit: LimitMemory, Max: sizeText(l.Memory),
				Detail: "killed by the kernel, most likely out of memory in its container"}
		}
	}
	var resp sandboxResponse
	if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil {
		if stderr.outOfMemory() {
			return nil, &LimitError{Driver: req.Source, File: file, Limit: LimitMemory, Max: sizeText(l.Memory)}
		}
		if runErr != nil {
			return nil, fmt.Errorf("driver %s: %s: evaluation failed: %w: %s", req.Source, file, runErr, stderr.tail())
		}
		return nil, fmt.Errorf("driver %s: %s: unreadable evaluation result: %w", req.Source, file, err)
	}
	if len(resp.Errors) > 0 {
		return nil, fromWire(resp.Errors)
	}
	return &resp, nil
}

// limitedWriter fails writes past n bytes.
type limitedWriter struct {
	w io.Writer
	n int64
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.n {
		return 0, errors.New("sandbox answer larger than its limit")
	}
	w.n -= int64(len(p))
	return w.w.Write(p)
}

// phaseWriter keeps the last phase line and the tail of the child's
// stderr.
type phaseWriter struct {
	mu   sync.Mutex
	file string
	buf  []byte
	tl   []byte // the start of what is not a phase line
}

func (w *phaseWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if f, ok := strings.CutPrefix(line, phasePrefix); ok {
			w.file = f
			continue
		}
		w.keep(line + "\n")
	}
	if len(w.buf) > 4096 {
		w.keep(string(w.buf))
		w.buf = nil
	}
	return len(p), nil
}

// keep keeps the first 4 KiB of the child's other output: a fatal
// error's message comes first, then a long goroutine dump.
func (w *phaseWriter) keep(s string) {
	if room := 4096 - len(w.tl); room > 0 {
		w.tl = append(w.tl, s[:min(room, len(s))]...)
	}
}

func (w *phaseWriter) last() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.file
}

func (w *phaseWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.TrimSpace(string(w.tl) + string(w.buf))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] // the fatal error's first line; the goroutine dump is noise
	}
	return s
}

// outOfMemory reports the Go runtime's fatal error when the address-space
// limit stops an allocation.
func (w *phaseWriter) outOfMemory() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := string(w.tl) + string(w.buf)
	return strings.Contains(s, "out of memory") || strings.Contains(s, "cannot allocate memory") ||
		strings.Contains(s, "stack exceeds")
}

// ServeSandbox reads one request from in, evaluates it and writes the
// answer to out; it returns the exit code. Memory is watched from the
// start: over the limit, the answer is a memory LimitError and the process
// exits at once (nothing it could still do is worth the memory).
func ServeSandbox(in io.Reader, out io.Writer, stderr io.Writer) int {
	var req sandboxRequest
	dec := json.NewDecoder(bufio.NewReader(in))
	dec.UseNumber() // numbers stay what the parent had: int64 or float64
	if err := dec.Decode(&req); err != nil {
		fmt.Fprintf(stderr, "drivers: sandbox: bad request: %v\n", err)
		return 2
	}
	l := req.Limits.WithDefaults()
	var (
		mu    sync.Mutex
		phase = req.Source
		done  bool
	)
	answer := func(resp *sandboxResponse) {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		done = true
		_ = json.NewEncoder(out).Encode(resp)
	}
	setPhase := func(file string) {
		mu.Lock()
		phase = file
		mu.Unlock()
		fmt.Fprintf(stderr, "%s%s\n", phasePrefix, file)
	}
	// The garbage collector works harder near the limit, so only live
	// data trips the watchdog; the rlimit stops what the watchdog is too
	// slow to see (one huge allocation).
	debug.SetMemoryLimit(l.Memory)
	limitAddressSpace(l.Memory)
	go watchMemory(l.Memory, func(heap uint64) {
		mu.Lock()
		file := phase
		mu.Unlock()
		answer(&sandboxResponse{Errors: toWire(&LimitError{Driver: req.Source, File: file, Limit: LimitMemory,
			Max: sizeText(l.Memory), Detail: fmt.Sprintf("the evaluation reached %s", sizeText(int64(heap)&^(1<<20-1)))})})
		os.Exit(3)
	})
	f := &folder{source: req.Source, files: req.Files}
	for p := range req.Files {
		f.paths = append(f.paths, p)
	}
	sort.Strings(f.paths)
	opts := LoadOptions{Source: req.Source, KubeVersion: req.KubeVersion, APIVersions: req.APIVersions, Limits: l, phase: setPhase}
	d, err := loadFolder(f, opts)
	var resp sandboxResponse
	switch {
	case err != nil:
	case req.Op == "load":
		if sample, ok := d.SampleContext(); ok {
			_, err = d.renderSample(sample)
		}
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
	answer(&resp)
	return 0
}

// watchMemory calls over when the Go heap exceeds limit. It polls: CUE
// allocates in many small steps, so a few milliseconds see it well before
// the address-space limit.
func watchMemory(limit int64, over func(heap uint64)) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	for range time.Tick(2 * time.Millisecond) {
		metrics.Read(sample)
		if v := sample[0].Value; v.Kind() == metrics.KindUint64 && v.Uint64() > uint64(limit) {
			over(v.Uint64())
			return
		}
	}
}
