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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sandboxEnv, set to sandboxProtocol, makes a binary serve sandboxed
// evaluations (IsSandboxChild, ServeSandbox) instead of running normally.
const (
	sandboxEnv      = "STYRMIN_DRIVER_SANDBOX"
	sandboxProtocol = "1"
)

// sandboxIdle is how long a child waits for its next request before the
// parent ends it: a fan-out reuses its children, a quiet agent holds none.
const sandboxIdle = 30 * time.Second

// Sandbox runs a driver's load and renders in child processes: the same
// binary, started again with an environment variable that makes its main
// call ServeSandbox. CUE and Helm's template engine cannot be interrupted
// and a Go out-of-memory is fatal, so in-process checks can report a
// deadline but not stop the work nor bound its memory: a child can be
// killed at the deadline, runs under a memory ceiling (a watchdog on the
// Go heap, an address-space rlimit behind it), and its failure is one
// driver's error rather than the agent's crash.
//
// A child serves one evaluation at a time and then waits for the next
// (it keeps the drivers it loaded), so a render costs a render rather than
// a process start and a spec compile (see docs/driver-limits.md). A child
// that hits a limit, dies or is killed at a deadline is never used again;
// one idle for sandboxIdle ends.
type Sandbox struct {
	// Path is the executable; its main must call ServeSandbox when
	// IsSandboxChild.
	Path string
	// Args are passed to it (os.Args[1:] of the child; a test binary may
	// need -test.run=^$ so that it runs no test if it ignores the
	// variable).
	Args []string
	// slots, when set (NewSandbox), bounds the evaluations running at
	// once: each may use up to its memory limit, and in a container they
	// share its memory with the parent.
	slots chan struct{}

	// idleAfter, when set, replaces sandboxIdle (tests).
	idleAfter time.Duration
	// checks, when set (KeepChecks), are the loads checked by earlier
	// processes.
	checks *loadChecks

	mu     sync.Mutex
	idle   []*sandboxChild // children waiting for a request, the most recent last
	live   int             // children started and not yet ended
	nextID uint64
	starts int // children started, for tests
}

// NewSandbox is a Sandbox running path with args, at most parallel
// evaluations at once (0: no bound).
func NewSandbox(path string, args []string, parallel int) *Sandbox {
	s := &Sandbox{Path: path, Args: args}
	if parallel > 0 {
		s.slots = make(chan struct{}, parallel)
	}
	return s
}

// SelfSandbox is a Sandbox running this process's own executable, at
// most parallel evaluations at once (0: no bound).
func SelfSandbox(parallel int) (*Sandbox, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("drivers: sandbox: %w", err)
	}
	return NewSandbox(exe, nil, parallel), nil
}

// Requests is how many evaluations (loads and renders) the Sandbox has
// sent to its children so far, a retry on a new child included.
func (s *Sandbox) Requests() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextID
}

// IsSandboxChild reports whether this process was started by a Sandbox;
// main then calls ServeSandbox and exits with its code.
func IsSandboxChild() bool { return os.Getenv(sandboxEnv) == sandboxProtocol }

// Close ends the idle children; one busy with an evaluation goes back to
// the pool when it is done, and ends after sandboxIdle. The Sandbox still
// works after Close, starting children as needed.
func (s *Sandbox) Close() {
	s.mu.Lock()
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, c := range idle {
		c.timer.Stop()
		s.end(c)
	}
}

// sandboxRequest is what the parent writes to the child's stdin: a JSON
// line, then its Input (encodeRequest).
type sandboxRequest struct {
	// ID tells this request's phases (phasefile.go) from an earlier one's.
	ID          uint64            `json:"id"`
	Op          string            `json:"op"` // "load", "check", "render" or "call"
	Source      string            `json:"source"`
	Files       map[string][]byte `json:"files"`
	KubeVersion string            `json:"kubeVersion,omitempty"`
	APIVersions []string          `json:"apiVersions,omitempty"`
	Limits      Limits            `json:"limits"`
	Context     *Context          `json:"context,omitempty"`
	Values      map[string]any    `json:"values,omitempty"`
	// Eval and Input are a "check": the evaluation the parent is about
	// to make in-process (evalParameters, …) of Input, an evalWire.
	Eval string `json:"eval,omitempty"`
	// Func and Input are a "call": the child's SandboxFunc of that name,
	// given Files and Input.
	Func  string `json:"func,omitempty"`
	Input []byte `json:"-"`
	// InputLen is Input's length: its bytes follow the request's line as
	// they are (sandboxFrame), not in JSON's base64.
	InputLen int `json:"inputLen,omitempty"`
	// Known, set instead of Files, is the driverKey of a driver the
	// child was sent before: the files of a driver version are most of a
	// request, and a fan-out sends one version thousands of times.
	Known []byte `json:"known,omitempty"`

	// folderSum is the digest of Files (folder.digest), when the parent
	// has it: driverKey's, not sent.
	folderSum string
}

// sandboxResponse is what the child writes to its stdout: a JSON line, then
// its Output and Objects (encodeAnswer).
type sandboxResponse struct {
	Errors []wireError `json:"errors,omitempty"`
	// Objects are a render's, sent after the answer's line in a kept
	// result's form (encodeKept): as JSON (their text in base64), reading
	// them was a fifth of a first plan's CPU in this process.
	Objects []Object `json:"-"`
	// Output is a call's result, or a check's (evalChecked) in its wire
	// form, sent after the answer's line as it is.
	Output []byte `json:"-"`
	// OutputLen and ObjectsLen are the lengths of Output and of Objects'
	// encoding, which follow the line in that order (0: none).
	OutputLen  int `json:"outputLen,omitempty"`
	ObjectsLen int `json:"objectsLen,omitempty"`
	// kept is Objects' encoding as read, which a kept result takes as it
	// is (encodeKept).
	kept []byte
	// Evaluated says a check's evaluation ended without an error: its
	// result is Output, or Objects for a render.
	Evaluated bool `json:"evaluated,omitempty"`
	// Retire says the child ends after this answer (a limit was hit, or
	// its heap grew too large to be worth keeping).
	Retire bool `json:"retire,omitempty"`
	// NeedFiles answers a request naming a driver the child no longer
	// holds (Known): it is sent again with the files.
	NeedFiles bool `json:"needFiles,omitempty"`
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
// it evaluates (after the request's ID and a tab), so that a child killed
// at the deadline (or by the kernel) is reported at that file.
const phasePrefix = "styrmin-driver-phase\t"

// ErrSandboxStart is a child that could not be started: the machine's
// trouble (a process or pipe limit), not the evaluation's.
var ErrSandboxStart = errors.New("starting the sandbox")

// errStaleChild is an idle child found dead when given a request (it
// retired, or was killed): the request runs again on a new child.
var errStaleChild = errors.New("the sandbox child had ended")

// SandboxFunc is an evaluation a sandbox child runs for its parent
// besides loading and rendering drivers: a package that evaluates
// untrusted input (the resolver, a repository's configuration) names its
// functions, the binary's main passes them to ServeSandbox, and the
// parent runs one with Sandbox.Call. It is given the request's files and
// input; phase names the file it is about to evaluate, so that a limit it
// hits is reported at that file. Its error crosses the process boundary
// as text (a LimitError keeps its type).
type SandboxFunc func(files map[string][]byte, input []byte, phase func(file string)) ([]byte, error)

// SandboxFuncs are the functions a child serves by name.
type SandboxFuncs map[string]SandboxFunc

// Call runs the child's function name with files and input, under limits
// as a driver's load is: the child is killed at the time limit, stopped at
// the memory limit, and either is a *LimitError whose Driver is source
// and whose File is the last file the function named (file until it
// names one). A child without that function answers with an error.
func (s *Sandbox) Call(ctx context.Context, name, source, file string, files map[string][]byte, input []byte, limits Limits) ([]byte, error) {
	req := &sandboxRequest{Op: "call", Func: name, Source: source, Files: files, Input: input, Limits: limits.WithDefaults()}
	resp, err := s.run(ctx, req, file)
	if err != nil {
		return nil, err
	}
	return resp.Output, nil
}

// run sends req to a child and returns its answer. The child is killed at
// the deadline (the sooner of ctx's and the limit); a child that dies
// gives the limit it hit, located at the last file it named.
func (s *Sandbox) run(ctx context.Context, req *sandboxRequest, specFile string) (*sandboxResponse, error) {
	if s.slots != nil {
		// Waiting for a slot is not the driver's time.
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		case <-ctx.Done():
			return nil, fmt.Errorf("driver %s: waiting for an evaluation slot: %w", req.Source, ctx.Err())
		}
	}
	l := req.Limits
	max := deadlineText(ctx, l.Timeout)
	ctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	for {
		c, reused, err := s.child(l)
		if err != nil {
			return nil, fmt.Errorf("driver %s: %w: %w", req.Source, ErrSandboxStart, err)
		}
		r := *req
		var key [32]byte
		keyed := req.Op == "render" || req.Op == "check"
		if keyed {
			key = driverKey(req)
			if c.sent[key] {
				r.Files, r.Known = nil, key[:]
			}
		}
		resp, err := s.send(ctx, c, &r, specFile, max, reused)
		if err == nil && resp.NeedFiles && !resp.Retire {
			// Evicted by the child meanwhile: again, with the files.
			r.Files, r.Known = req.Files, nil
			resp, err = s.send(ctx, c, &r, specFile, max, reused)
		}
		needFiles := err == nil && resp.NeedFiles
		if err == nil && !needFiles && keyed && r.Files != nil && len(resp.Errors) == 0 {
			c.remember(key)
		}
		if err == nil && !resp.Retire {
			s.release(c)
		} else {
			s.end(c)
		}
		if errors.Is(err, errStaleChild) && reused || needFiles && resp.Retire {
			continue // another idle child, or a new one (given the files)
		}
		if needFiles {
			return nil, fmt.Errorf("driver %s: the sandbox child did not take the driver's files", req.Source)
		}
		if err != nil {
			return nil, err
		}
		if len(resp.Errors) > 0 {
			return nil, fromWire(resp.Errors)
		}
		return resp, nil
	}
}

// send gives r, numbered, to c.
func (s *Sandbox) send(ctx context.Context, c *sandboxChild, r *sandboxRequest, specFile, max string, reused bool) (*sandboxResponse, error) {
	s.mu.Lock()
	s.nextID++
	r.ID = s.nextID
	s.mu.Unlock()
	return c.do(ctx, r, specFile, max, reused)
}

// child returns an idle child started with limits l (reused), or a new
// one. Children are at most as many as evaluations may run at once, idle
// ones included: when none fits l, the longest idle makes room.
func (s *Sandbox) child(l Limits) (*sandboxChild, bool, error) {
	s.mu.Lock()
	for i := len(s.idle) - 1; i >= 0; i-- {
		c := s.idle[i]
		if c.limits != l {
			continue
		}
		s.idle = append(s.idle[:i], s.idle[i+1:]...)
		s.mu.Unlock()
		c.timer.Stop()
		return c, true, nil
	}
	var evict *sandboxChild
	if s.live >= s.maxChildren() && len(s.idle) > 0 {
		evict = s.idle[0]
		s.idle = s.idle[1:]
	}
	s.live++
	s.mu.Unlock()
	if evict != nil {
		evict.timer.Stop()
		s.end(evict)
	}
	c, err := s.start(l)
	if err != nil {
		s.mu.Lock()
		s.live--
		s.mu.Unlock()
	}
	return c, false, err
}

// maxChildren bounds the children: the slots, or (unbounded) one a core.
func (s *Sandbox) maxChildren() int {
	if s.slots != nil {
		return cap(s.slots)
	}
	return runtime.GOMAXPROCS(0)
}

// end kills c, which is no longer counted.
func (s *Sandbox) end(c *sandboxChild) {
	c.kill()
	s.mu.Lock()
	s.live--
	s.mu.Unlock()
}

// release makes c idle, ending it after sandboxIdle without a request, or
// at once when there are more children than evaluations may run at once.
func (s *Sandbox) release(c *sandboxChild) {
	s.mu.Lock()
	if s.live > s.maxChildren() {
		s.mu.Unlock()
		s.end(c)
		return
	}
	after := sandboxIdle
	if s.idleAfter > 0 {
		after = s.idleAfter
	}
	// Set under the lock: child() stops it as soon as it takes c.
	c.timer = time.AfterFunc(after, func() {
		s.mu.Lock()
		for i, o := range s.idle {
			if o == c {
				s.idle = append(s.idle[:i], s.idle[i+1:]...)
				s.mu.Unlock()
				s.end(c)
				return
			}
		}
		s.mu.Unlock() // taken meanwhile
	})
	s.idle = append(s.idle, c)
	s.mu.Unlock()
}

// sandboxChild is one child process and its pipes.
type sandboxChild struct {
	limits Limits
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *os.File // the read end of its stdout
	stdout *bufio.Reader
	stderr *phaseWriter
	exited chan struct{} // closed when the process has been waited for
	err    error         // the process's end (after exited)
	timer  *time.Timer   // ends it while idle
	// sent are the drivers (driverKey) whose files the child was given:
	// a request for one names it instead (sandboxRequest.Known). Used by
	// one request at a time.
	sent map[[32]byte]bool
}

// maxSent bounds the drivers remembered as sent to a child (it keeps
// fewer: childDrivers).
const maxSent = 64

// remember notes that c was given the files of the driver key.
func (c *sandboxChild) remember(key [32]byte) {
	if c.sent == nil || len(c.sent) >= maxSent {
		c.sent = map[[32]byte]bool{}
	}
	c.sent[key] = true
}

func (s *Sandbox) start(l Limits) (*sandboxChild, error) {
	cmd := exec.Command(s.Path, s.Args...)
	// Not a phase file this process was given as a child: only its own.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, sandboxPhaseEnv+"=") })
	cmd.Env = append(cmd.Env, sandboxEnv+"="+sandboxProtocol)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// A pipe of our own rather than StdoutPipe: Wait closes that one when
	// the process exits, and a child that answers and then exits (it
	// retires, or its watchdog answered) would lose an answer not read yet.
	// Ours is read to its end and closed by kill.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	c := &sandboxChild{limits: l, cmd: cmd, stdin: stdin, out: r, stdout: bufio.NewReaderSize(r, 64<<10),
		stderr: &phaseWriter{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	if pf, err := newPhaseFile(); err == nil {
		cmd.ExtraFiles = []*os.File{pf}
		cmd.Env = append(cmd.Env, sandboxPhaseEnv+"="+strconv.Itoa(phaseFD))
		c.stderr.phases = pf
	}
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	_ = w.Close() // the child's now
	if err != nil {
		_ = r.Close()
		c.stderr.closePhases()
		return nil, err
	}
	s.mu.Lock()
	s.starts++
	s.mu.Unlock()
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// kill ends the child and waits for it. Not while a request is being
// read (do has its answer, or gave up on it).
func (c *sandboxChild) kill() {
	_ = c.stdin.Close() // an idle child ends by itself on EOF
	_ = c.cmd.Process.Kill()
	<-c.exited
	_ = c.out.Close()
	c.stderr.closePhases()
}

// do sends req and reads the answer. An error means the child cannot be
// used again; errStaleChild, that a reused child had ended before it
// began the request.
func (c *sandboxChild) do(ctx context.Context, req *sandboxRequest, specFile, max string, reused bool) (*sandboxResponse, error) {
	c.stderr.begin(req.ID, specFile)
	in, err := encodeRequest(req)
	if err != nil {
		return nil, fmt.Errorf("drivers: sandbox request: %w", err)
	}
	type result struct {
		resp       *sandboxResponse
		unreadable error // the answer came whole but does not decode
		err        error // no whole answer
		writeErr   bool
	}
	answer := make(chan result, 1)
	// The answer is bounded by the rendered-bytes limit (objects are
	// re-encoded, so allow for the framing).
	limit := 2*req.Limits.RenderedBytes + 1<<20
	go func() {
		if _, err := c.stdin.Write(in); err != nil {
			answer <- result{err: err, writeErr: true}
			return
		}
		resp, unreadable, err := readAnswer(c.stdout, limit)
		answer <- result{resp: resp, unreadable: unreadable, err: err}
	}()
	var got result
	select {
	case got = <-answer:
	case <-ctx.Done():
		_ = c.cmd.Process.Kill()
		<-c.exited
		<-answer
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &LimitError{Driver: req.Source, File: c.stderr.last(), Limit: LimitTime, Max: max}
		}
		return nil, fmt.Errorf("driver %s: %w", req.Source, ctx.Err())
	}
	if got.err == nil {
		if got.unreadable != nil {
			return nil, fmt.Errorf("driver %s: %s: unreadable evaluation result: %w", req.Source, c.stderr.last(), got.unreadable)
		}
		return got.resp, nil
	}
	if errors.Is(got.err, errAnswerTooLarge) {
		return nil, fmt.Errorf("driver %s: %s: unreadable evaluation result: %w", req.Source, c.stderr.last(), got.err)
	}
	// No answer: the child died. Wait for it, and for its last words.
	killed := false
	select {
	case <-c.exited:
	case <-time.After(2 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
		killed = true
	}
	if reused && !c.stderr.started() {
		return nil, errStaleChild
	}
	file := c.stderr.last()
	var exit *exec.ExitError
	if errors.As(c.err, &exit) && !killed && !c.stderr.outOfMemory() {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			// Not killed by us: the kernel's out-of-memory killer,
			// which the child invites.
			return nil, &LimitError{Driver: req.Source, File: file, Limit: LimitMemory, Max: sizeText(req.Limits.Memory),
				Detail: "killed by the kernel, most likely out of memory in its container"}
		}
	}
	if c.stderr.outOfMemory() {
		return nil, &LimitError{Driver: req.Source, File: file, Limit: LimitMemory, Max: sizeText(req.Limits.Memory)}
	}
	if got.writeErr && c.err == nil {
		return nil, fmt.Errorf("driver %s: %s: sending the evaluation: %w", req.Source, file, got.err)
	}
	return nil, fmt.Errorf("driver %s: %s: evaluation failed: %v: %s", req.Source, file, c.err, c.stderr.tail())
}

// errAnswerTooLarge is an answer longer than the request's limit allows.
var errAnswerTooLarge = errors.New("sandbox answer larger than its limit")

// readLine reads one line of at most limit bytes.
func readLine(r *bufio.Reader, limit int64) ([]byte, error) {
	var b []byte
	for {
		frag, err := r.ReadSlice('\n')
		if int64(len(b)+len(frag)) > limit {
			return nil, errAnswerTooLarge
		}
		b = append(b, frag...)
		switch {
		case err == nil:
			return b, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(b) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// encodeRequest is req's line, followed by its Input as it is: an
// input's wire form is JSON already, and base64 inside the request's JSON
// cost both processes a scan and a copy of it.
func encodeRequest(req *sandboxRequest) ([]byte, error) {
	h := *req
	h.InputLen = len(req.Input)
	line, err := json.Marshal(&h)
	if err != nil {
		return nil, err
	}
	return append(append(line, '\n'), req.Input...), nil
}

// readRequest reads a request written by encodeRequest; io.EOF when r
// ends before one begins. The parent is trusted: no bound.
func readRequest(r *bufio.Reader) (*sandboxRequest, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	var req sandboxRequest
	if err := decodeNumbers(line, &req); err != nil { // numbers stay what the parent had: int64 or float64
		return nil, err
	}
	if req.InputLen < 0 {
		return nil, fmt.Errorf("input length %d", req.InputLen)
	}
	if req.InputLen > 0 {
		req.Input = make([]byte, req.InputLen)
		if _, err := io.ReadFull(r, req.Input); err != nil {
			return nil, fmt.Errorf("the request's input: %w", err)
		}
	}
	return &req, nil
}

// encodeAnswer is resp's line, followed by its Output and its Objects in
// a kept result's form.
func encodeAnswer(resp *sandboxResponse) []byte {
	var objects []byte
	if resp.Objects != nil {
		objects = encodeKept(resp, true)
	}
	resp.OutputLen, resp.ObjectsLen = len(resp.Output), len(objects)
	line, _ := json.Marshal(resp) // plain fields: it cannot fail
	b := make([]byte, 0, len(line)+1+len(resp.Output)+len(objects))
	b = append(append(line, '\n'), resp.Output...)
	return append(b, objects...)
}

// readAnswer reads an answer written by encodeAnswer, of at most limit
// bytes. err is no whole answer (the child died, or wrote too much);
// unreadable, a whole one that does not decode.
func readAnswer(r *bufio.Reader, limit int64) (resp *sandboxResponse, unreadable, err error) {
	line, err := readLine(r, limit)
	if err != nil {
		return nil, nil, err
	}
	resp = &sandboxResponse{}
	if err := json.Unmarshal(line, resp); err != nil {
		return nil, err, nil
	}
	if resp.OutputLen < 0 || resp.ObjectsLen < 0 {
		return nil, fmt.Errorf("lengths %d and %d", resp.OutputLen, resp.ObjectsLen), nil
	}
	if rest := limit - int64(len(line)); int64(resp.OutputLen) > rest || int64(resp.ObjectsLen) > rest-int64(resp.OutputLen) {
		return nil, nil, errAnswerTooLarge
	}
	tail := make([]byte, resp.OutputLen+resp.ObjectsLen)
	if _, err := io.ReadFull(r, tail); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, err
	}
	if resp.OutputLen > 0 {
		resp.Output = tail[:resp.OutputLen:resp.OutputLen]
	}
	if resp.ObjectsLen > 0 {
		objs, err := decodeKept(tail[resp.OutputLen:], true)
		if err != nil {
			return nil, fmt.Errorf("the objects rendered: %w", err), nil
		}
		resp.Objects, resp.kept = objs.Objects, tail[resp.OutputLen:]
	}
	return resp, nil, nil
}

// phaseWriter keeps, for the request in flight, the last file its phase
// lines named and the tail of the child's other output.
type phaseWriter struct {
	mu    sync.Mutex
	id    string // the request in flight
	file  string
	begun bool   // the request's first phase was seen
	buf   []byte // an unfinished line
	tl    []byte // the start of what is not a phase line
	// phases, when set, is the file the child writes its phases to
	// (writePhase), read when they are asked for.
	phases *os.File
}

// readPhases takes the phase of the request in flight from the phase
// file. Called with mu held.
func (w *phaseWriter) readPhases() {
	if w.phases == nil {
		return
	}
	id, file, ok := readPhase(w.phases)
	if !ok || id != w.id {
		return
	}
	w.begun = true
	if file != "" {
		w.file = file
	}
}

// closePhases closes the phase file, once the child has ended.
func (w *phaseWriter) closePhases() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.phases != nil {
		w.readPhases() // what the request in flight reached, kept
		_ = w.phases.Close()
		w.phases = nil
	}
}

// begin starts a request: its file is specFile until a phase line names
// another.
func (w *phaseWriter) begin(id uint64, specFile string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.id, w.file, w.begun, w.tl = strconv.FormatUint(id, 10), specFile, false, nil
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
		if rest, ok := strings.CutPrefix(line, phasePrefix); ok {
			if id, f, ok := strings.Cut(rest, "\t"); ok && id == w.id {
				w.begun = true
				if f != "" {
					w.file = f
				}
			}
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
	w.readPhases()
	return w.file
}

// started reports whether the child began the request in flight.
func (w *phaseWriter) started() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.readPhases()
	return w.begun
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
// limit stops an allocation (in a binary built with -race, the race
// detector's own).
func (w *phaseWriter) outOfMemory() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := string(w.tl) + string(w.buf)
	return strings.Contains(s, "out of memory") || strings.Contains(s, "cannot allocate memory") ||
		strings.Contains(s, "stack exceeds") || strings.Contains(s, "ThreadSanitizer failed to allocate")
}
