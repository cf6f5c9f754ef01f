package task

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stepShellRun is stepShell started by shell (a command line: "dash",
// "busybox sh") leading its own process group, as runc starts an exec'd
// process, with an input the test holds open as the exec's connection.
type stepShellRun struct {
	cmd            *exec.Cmd
	stdin          *os.File // the test's end: closing it is the connection gone
	stdout, stderr strings.Builder
	done           chan error
}

func startStepShell(t *testing.T, shell string, command ...string) *stepShellRun {
	t.Helper()
	args := append(strings.Fields(shell)[1:], "-c", stepShell, "styrmin-exec")
	cmd := exec.Command(strings.Fields(shell)[0], append(args, command...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	run := &stepShellRun{cmd: cmd, stdin: w, done: make(chan error, 1)}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, &run.stdout, &run.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	go func() { run.done <- cmd.Wait() }()
	t.Cleanup(func() {
		w.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	return run
}

// alive reports whether process pid runs (a zombie does not).
func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	return !strings.HasPrefix(s[strings.LastIndexByte(s, ')')+2:], "Z")
}

// readPids waits for the pids a command writes into file, one a line.
func readPids(t *testing.T, file string, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(file)
		if pids := strings.Fields(string(b)); len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command wrote no %d pids into %s", n, file)
		}
	}
}

// The shell an exec step's command runs under, under each shell an image
// may have as /bin/sh (Debian's dash, busybox's ash, bash): once the
// exec's connection closes, the command and the child it started end,
// and so does a command that moved to a process group of its own
// (timeout, dumb-init), and the child a command that ended left behind;
// a command that ends on its own gives its output and exit status, and
// reads an empty input. dash refuses kill's "--", which a first version
// used: under dash nothing was signalled.
func TestTheStepShellEndsTheCommandOnceTheConnectionCloses(t *testing.T) {
	for _, shell := range []string{"dash", "busybox sh", "bash"} {
		t.Run(strings.Fields(shell)[0], func(t *testing.T) {
			if _, err := exec.LookPath(strings.Fields(shell)[0]); err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("CI is set, so %s must be installed: %v", shell, err)
				}
				t.Skipf("skipped: %v", err)
			}
			t.Parallel()
			dir := t.TempDir()
			for i, tc := range []struct {
				name    string
				command string
				pids    int
			}{
				{"a command and its child", `echo $$ > %[1]s; sleep 300 & echo $! >> %[1]s; wait`, 2},
				{"a command in a process group of its own (timeout passes the signal on)", `echo $$ > %[1]s; exec timeout 300 sh -c 'echo $$ >> %[1]s; exec sleep 299'`, 2},
				{"a command that ended, leaving a child", `sleep 300 >/dev/null 2>&1 & echo $! > %[1]s; exit 0`, 1},
			} {
				file := filepath.Join(dir, fmt.Sprintf("pids-%d", i))
				run := startStepShell(t, shell, "sh", "-c", fmt.Sprintf(tc.command, file))
				pids := readPids(t, file, tc.pids)
				closed := time.Now()
				run.stdin.Close()
				for _, pid := range pids {
					for alive(pid) {
						if time.Since(closed) > 5*time.Second {
							t.Fatalf("%s: process %s still runs 5 s after the connection closed (stderr %q)", tc.name, pid, run.stderr.String())
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
				select {
				case <-run.done:
				case <-time.After(5 * time.Second):
					t.Fatalf("%s: the shell still runs 5 s after the connection closed", tc.name)
				}
			}

			run := startStepShell(t, shell, "sh", "-c", `cat; echo out; echo err >&2; exit 3`)
			select {
			case err := <-run.done:
				ee, ok := err.(*exec.ExitError)
				if !ok || ee.ExitCode() != 3 || run.stdout.String() != "out\n" || run.stderr.String() != "err\n" {
					t.Fatalf("a command ending on its own: %v, stdout %q, stderr %q; want exit 3 and its own output", err, run.stdout.String(), run.stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a command reading its input did not end: its input is the connection's")
			}
		})
	}
}
