package agenttest

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one run of the agent binary. Its log (stderr) is kept; when the
// test fails its tail is logged, or, when the agent crashed, the crash's
// first lines.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu    sync.Mutex
	lines []string
	wake  chan struct{} // closed and replaced at every new line
}

// FreeAddr is a loopback address whose port is free at the time, for
// one of the agent's listen flags.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// StartAgent runs the agent binary bin with args; it is stopped
// (SIGTERM, then SIGKILL after 15 s) when the test ends.
func StartAgent(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{}), wake: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.wake)
			p.wake = make(chan struct{})
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("agent (pid %d) log:\n%s", cmd.Process.Pid, p.logExcerpt(80))
		}
	})
	return p
}

// logExcerpt is the first n lines from a crash ("panic:", "fatal
// error:"), else the last n lines.
func (p *Proc) logExcerpt(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, l := range p.lines {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			return strings.Join(p.lines[i:min(len(p.lines), i+n)], "\n")
		}
	}
	return strings.Join(p.lines[max(0, len(p.lines)-n):], "\n")
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// ExitState describes how the process ended (nil while it runs).
func (p *Proc) ExitState() string {
	select {
	case <-p.done:
		return p.cmd.ProcessState.String()
	default:
		return "running"
	}
}

// Stop ends the agent gracefully (SIGTERM), killing it if it lingers.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill ends the agent with SIGKILL: no deferred code, no status write.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// LogEntry is one JSON log line of the agent.
type LogEntry map[string]any

// Str is a string field of the entry ("" when absent).
func (l LogEntry) Str(k string) string { s, _ := l[k].(string); return s }

// Num is a numeric field of the entry (0 when absent).
func (l LogEntry) Num(k string) int64 { f, _ := l[k].(float64); return int64(f) }

// WaitLog waits for a log line matching match and returns it; the agent
// exiting first, or the timeout, fails the test.
func (p *Proc) WaitLog(t testing.TB, timeout time.Duration, what string, match func(LogEntry) bool) LogEntry {
	t.Helper()
	deadline := time.After(timeout)
	seen := 0
	for {
		p.mu.Lock()
		lines, wake := p.lines[seen:], p.wake
		seen = len(p.lines)
		p.mu.Unlock()
		for _, l := range lines {
			var e LogEntry
			if json.Unmarshal([]byte(l), &e) == nil && match(e) {
				return e
			}
		}
		select {
		case <-wake:
		case <-p.done:
			t.Fatalf("the agent exited while waiting for %s", what)
		case <-deadline:
			t.Fatalf("timed out waiting for the agent to log %s", what)
		}
	}
}

// Logged counts the log lines so far that match match, without waiting.
func (p *Proc) Logged(match func(LogEntry) bool) int {
	p.mu.Lock()
	lines := p.lines
	p.mu.Unlock()
	n := 0
	for _, l := range lines {
		var e LogEntry
		if json.Unmarshal([]byte(l), &e) == nil && match(e) {
			n++
		}
	}
	return n
}

// Log returns everything the agent wrote to stderr so far.
func (p *Proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}
