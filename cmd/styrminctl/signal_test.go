package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/testcluster"
)

// TestAnInterruptedWatchOrUIEndsCleanly runs the built binary against a
// real API server: `tasks list -w` and `status -w` ("until interrupted")
// and `ui` end with exit 0 on SIGINT (Ctrl-C) or SIGTERM, the UI after
// its graceful shutdown, rather than being killed by the signal.
func TestAnInterruptedWatchOrUIEndsCleanly(t *testing.T) {
	t.Parallel()
	bin := (&agenttest.Binaries{Dir: "styrminctl-signal-test", Packages: []string{"./cmd/styrminctl"}}).Path(t, "styrminctl")
	c := testcluster.StartT(t, testcluster.Options{})
	if _, err := fillCluster(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	repo := lockedGitRepo(t)
	for _, tc := range []struct {
		name  string
		args  []string
		ready string // printed once the command runs
		sig   os.Signal
	}{
		{"tasks list -w, SIGINT", []string{"tasks", "list", "-w"}, "web-1  local/dev/web", os.Interrupt},
		{"status -w, SIGTERM", []string{"status", "-w"}, "local/dev/web", syscall.SIGTERM},
		{"ui, SIGINT", []string{"--repo", repo, "ui", "--listen", "127.0.0.1:0"}, "Ctrl-C stops it.", os.Interrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := newSyncBuffer(), newSyncBuffer()
			cmd := exec.Command(bin, append(tc.args, "--kubeconfig", c.KubeconfigPath)...)
			cmd.Stdout, cmd.Stderr = stdout, stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			waitFor(t, stdout, tc.ready)
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("exit %v after %v, want 0\nstderr:\n%s", ee.ProcessState, tc.sig, stderr.String())
				}
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("still running 20 s after %v", tc.sig)
			}
			if s := stderr.String(); strings.Contains(s, "error") {
				t.Errorf("stderr:\n%s", s)
			}
		})
	}
}
