package testcluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// component is one control plane process that testcluster starts itself
// (envtest runs etcd and the API server). It runs in its own process group
// so that stop reaches anything it spawned.
type component struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been waited for

	mu  sync.Mutex
	err error // exit status, set when done closes
}

// startComponent starts path with args, extra environment variables env and
// both output streams into out.
func startComponent(name, path string, args, env []string, out io.Writer) (*component, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &component{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if err == nil {
			err = errors.New("exited with status 0")
		}
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// exitErr returns why the process ended, or nil while it runs.
func (p *component) exitErr() error {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.err
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after timeout, and
// always SIGKILLs the group at the end for any straggling child.
func (p *component) stop(timeout time.Duration) error {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	var err error
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(timeout):
			err = fmt.Errorf("testcluster: %s (pid %d) did not exit after SIGKILL", p.name, pgid)
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return err
}
