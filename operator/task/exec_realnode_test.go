package task

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilexec "k8s.io/client-go/util/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/testcluster"
)

// realNodeShellPod is a busybox pod on the real node whose process runs
// script, Running once the function returns.
func realNodeShellPod(t *testing.T, cl client.Client, name, script string) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector:                  testcluster.RealNodeSelector(),
			Tolerations:                   []corev1.Toleration{testcluster.RealNodeToleration()},
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "main", Image: testcluster.BusyboxImage, Command: []string{"sh", "-c", script}}},
		},
	}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase == corev1.PodRunning {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not Running: %+v", name, pod.Status)
		}
	}
}

// An exec step's command ends with its step. A process started through
// pods/exec outlived the connection that started it: a migration past its
// step's timeout (or whose agent died, which closes the connection the
// same way) went on running while the step ran again. On the real node:
// a command past its deadline is gone with the child it started a few
// seconds later; a command that ends gives its output and exit status as
// before and reads no input; an image without /bin/sh still runs the
// command as given.
func TestAnExecCommandEndsWithItsStep(t *testing.T) {
	t.Parallel()
	testcluster.RequireRealNode(t)
	c := testcluster.StartT(t, testcluster.Options{Workloads: true, Nodes: 1, RealNode: &testcluster.RealNodeOptions{}})
	cl, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := NewKubePods(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	const idle = `trap "exit 0" TERM; while :; do sleep 3600 & wait $!; done`
	realNodeShellPod(t, cl, "app", idle)
	exec := func(ctx context.Context, pod string, command ...string) (string, string, error) {
		return pods.Exec(ctx, "default", pod, "main", command)
	}

	t.Run("past its deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		began := time.Now()
		_, _, err := exec(ctx, "app", "sh", "-c", `echo $$ > /tmp/command; sleep 300 & echo $! > /tmp/child; wait`)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a command past its deadline returned %v after %s, want the deadline", err, time.Since(began))
		}
		// Alive is any process of the two not yet a zombie (nothing in
		// the container need reap them).
		const alive = `for p in $(cat /tmp/command /tmp/child); do
	if read -r s </proc/$p/stat 2>/dev/null; then s=${s##*\) }; case $s in Z*) ;; *) echo "$p alive";; esac; fi
done`
		var out string
		for wait := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			out, _, err = exec(context.Background(), "app", "sh", "-c", alive)
			if err != nil {
				t.Fatalf("looking at the command's processes: %v", err)
			}
			if out == "" {
				t.Logf("the command and its child ended %s after the deadline", time.Since(began)-3*time.Second)
				break
			}
			if time.Now().After(wait) {
				t.Fatalf("the command of a step past its deadline still runs 20 s later: %s", out)
			}
		}
	})

	t.Run("ending on its own", func(t *testing.T) {
		stdout, stderr, err := exec(context.Background(), "app", "sh", "-c", `echo out; echo err >&2; exit 3`)
		var exit utilexec.ExitError
		if !errors.As(err, &exit) || exit.ExitStatus() != 3 {
			t.Fatalf("exit: %v, want exit status 3", err)
		}
		if stdout != "out\n" || stderr != "err\n" {
			t.Fatalf("stdout %q and stderr %q, want the command's own", stdout, stderr)
		}
		// The command's input is empty, not the connection's (which the
		// agent never writes to): a command reading it ends.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stdout, _, err = exec(ctx, "app", "sh", "-c", `cat; echo read all`)
		if err != nil || stdout != "read all\n" {
			t.Fatalf("a command reading its input: %q, %v", stdout, err)
		}
	})

	t.Run("an image without a shell", func(t *testing.T) {
		// The pod's own shell runs on after its file is gone.
		realNodeShellPod(t, cl, "noshell", "rm /bin/sh && "+idle)
		for wait := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			_, _, err := exec(context.Background(), "noshell", "test", "-e", "/bin/sh")
			var exit utilexec.ExitError
			if errors.As(err, &exit) && exit.ExitStatus() == 1 {
				break
			}
			if time.Now().After(wait) {
				t.Fatalf("/bin/sh still in the pod: %v", err)
			}
		}
		stdout, _, err := exec(context.Background(), "noshell", "echo", "ran", "as", "given")
		if err != nil || stdout != "ran as given\n" {
			t.Fatalf("a command in an image without /bin/sh: %q, %v", stdout, err)
		}
	})
}

// noShell tells the runtime's refusal to start /bin/sh (the image has
// none: nothing ran) from any other failure, a command's own exit status
// above all.
func TestOnlyAMissingShellRunsTheCommandAsGiven(t *testing.T) {
	t.Parallel()
	const runcMsg = `OCI runtime exec failed: exec failed: unable to start container process: exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown`
	// What runc writes when CRI-O runs it for an exec (its log line).
	const runcLine = `time="2026-12-06T18:00:00Z" level=error msg="exec failed: unable to start container process: exec: \"/bin/sh\": stat /bin/sh: no such file or directory"` + "\n"
	exit := func(code int) error {
		return fmt.Errorf("exec: %w", utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code})
	}
	for _, tc := range []struct {
		name           string
		err            error
		stdout, stderr string
		want           bool
	}{
		{"runc through containerd", errors.New(`Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "c0e2": ` + runcMsg), "", "", true},
		{"crun", errors.New("OCI runtime exec failed: executable file `/bin/sh` not found in $PATH: No such file or directory"), "", "", true},
		{"runc through CRI-O: exit status 255, its message on stderr", exit(255), "", runcLine, true},
		{"a command exiting 255 that printed first", exit(255), "migrating\n", runcLine, false},
		{"the command's own exit", exit(127), "", "sh: /bin/sh: not found\n", false},
		{"another command missing", errors.New(`exec: "/usr/bin/migrate": stat /usr/bin/migrate: no such file or directory`), "", "", false},
		{"the pod gone", errors.New(`pods "app-1" not found`), "", "", false},
		{"a deadline", context.DeadlineExceeded, "", "", false},
	} {
		if got := noShell(tc.err, tc.stdout, tc.stderr); got != tc.want {
			t.Errorf("%s: noShell = %t, want %t", tc.name, got, tc.want)
		}
	}
}
