package task

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// PodExecutor runs a command in a container of a running pod.
type PodExecutor interface {
	Exec(ctx context.Context, namespace, pod, container string, command []string) (stdout, stderr string, err error)
}

// PodLogs reads the logs of a pod's container ("" for its only one).
type PodLogs interface {
	Logs(ctx context.Context, namespace, pod, container string) (string, error)
}

// maxActionOutput bounds what is kept of a command's or job's output.
const maxActionOutput = 4 << 10

// maxRawOutput bounds what is read of a command's or job's output before
// it is masked and cut to maxActionOutput: masking first, a value is never
// cut in two at the edge of what is kept.
const maxRawOutput = 64 << 10

// KubePods executes commands through the pods/exec subresource (WebSocket,
// falling back to SPDY on older API servers) and reads pods/log. Pods on
// fake nodes run no containers, so exec fails there: tests of drivers
// that exec run them on the local control plane's real node
// (testcluster.Options.RealNode).
type KubePods struct {
	config    *rest.Config
	clientset kubernetes.Interface
}

var (
	_ PodExecutor = (*KubePods)(nil)
	_ PodLogs     = (*KubePods)(nil)
)

// NewKubePods returns a KubePods talking to the API server of cfg.
func NewKubePods(cfg *rest.Config) (*KubePods, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("pods client: %w", err)
	}
	return &KubePods{config: cfg, clientset: cs}, nil
}

// Exec runs command in the container and returns its output; a non-zero
// exit status is an error (the output is still returned).
//
// The command ends with its step. A process started through pods/exec
// outlives the connection that started it: a command past its step's
// timeout, or whose agent died, kept running while the step ran again
// (a second migration beside the first). So the command runs under
// stepShell, which holds the exec's stdin open and, when it closes (the
// connection gone: deadline, cancel, the agent's process ended), stops
// the command with its children: SIGTERM, SIGKILL after
// stepShellGrace. An image without /bin/sh runs the command as given,
// which then outlives its step as before.
func (k *KubePods) Exec(ctx context.Context, namespace, pod, container string, command []string) (string, string, error) {
	wrapped := append([]string{"/bin/sh", "-c", stepShell, "styrmin-exec"}, command...)
	stdout, stderr, err := k.stream(ctx, namespace, pod, container, wrapped, true)
	if err != nil && noShell(err, stdout, stderr) {
		return k.stream(ctx, namespace, pod, container, command, false)
	}
	return stdout, stderr, err
}

// stepShellGrace is how long, in seconds, a command has between SIGTERM
// and SIGKILL once its step has ended without it.
const stepShellGrace = "10"

// stepShell runs "$@" (exec'd: no function or built-in of the shell) with
// /dev/null as its stdin, in the background, and a watcher reading the
// exec's stdin, which the agent never writes to: it reads end of file
// once the connection has closed, whether the command still runs (its
// step ended first: deadline, task ended, agent gone) or ended and left
// children behind. The watcher then signals the command, while it is
// still the shell's child (no pid reused), and the shell's process group
// when the shell leads one (an exec'd process does under runc: checked
// in /proc), which holds the command's children; with kill -s, since
// dash refuses kill's "--". A command that made a group of its own gets
// the signal itself (timeout and dumb-init pass it on). SIGTERM first,
// SIGKILL after the grace; the watcher and the shell ignore SIGTERM
// (the shell waits on, reaping the command), and the watcher holds none
// of the exec's streams, so a command that ends ends the exec. The
// shell's exit status is the command's. Only POSIX sh, its built-ins, and
// sleep. As for any background job of dash or busybox, the command
// starts with SIGINT and SIGQUIT ignored.
const stepShell = `exec 3<&0 </dev/null
exec "$@" 3<&- &
c=$!
t=$c
if read -r s </proc/$$/stat 2>/dev/null; then
	s=${s##*\) }
	set -- $s
	[ "$3" = "$$" ] && t=0
fi
{
	exec >/dev/null 2>&1
	while read -r _; do :; done <&3
	exec 3<&-
	trap '' TERM
	ours() { read -r s </proc/$c/stat && s=${s##*\) } && set -- $s && [ "$2" = "$$" ]; }
	ours && kill -s TERM "$c"
	[ "$t" = 0 ] && kill -s TERM 0
	sleep ` + stepShellGrace + `
	ours && kill -s KILL "$c"
	[ "$t" = 0 ] && kill -s KILL 0
} &
exec 3<&-
trap '' TERM
wait "$c"
`

// noShell reports whether err (with the exec's output) is the container
// runtime's refusal to start /bin/sh because the image has none (runc:
// "exec: \"/bin/sh\": stat /bin/sh: no such file or directory"; crun:
// "executable file `/bin/sh` not found"): nothing ran, so the command can
// run as given. containerd reports it as the exec's error. CRI-O runs
// runc exec as a process of its own, with the stream as its stderr: runc's
// exit status 255, its message on stderr, nothing on stdout; a command's
// own exit status says no such thing (read from CRI-O's code, not seen on
// a CRI-O node).
func noShell(err error, stdout, stderr string) bool {
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitStatus() == 255 && stdout == "" && refusesShell(stderr) &&
			(strings.Contains(stderr, "exec failed") || strings.Contains(stderr, "executable file"))
	}
	return refusesShell(err.Error())
}

// refusesShell reports whether a runtime's message says /bin/sh is not
// there.
func refusesShell(msg string) bool {
	return strings.Contains(msg, "/bin/sh") &&
		(strings.Contains(msg, "no such file or directory") || strings.Contains(msg, "not found"))
}

// stream runs command in the container through pods/exec, with a stdin
// that stays open, never written to, until the command has ended when
// stdin is set.
func (k *KubePods) stream(ctx context.Context, namespace, pod, container string, command []string, stdin bool) (string, string, error) {
	req := k.clientset.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   command,
			Stdin:     stdin,
			Stdout:    true,
			Stderr:    true,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(k.config, "GET", req.URL().String())
	if err != nil {
		return "", "", fmt.Errorf("exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(k.config, "POST", req.URL())
	if err != nil {
		return "", "", fmt.Errorf("exec: %w", err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return "", "", fmt.Errorf("exec: %w", err)
	}
	stdout := &tailBuffer{max: maxRawOutput}
	stderr := &tailBuffer{max: maxRawOutput}
	opts := remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr}
	if stdin {
		r, w := io.Pipe()
		defer w.Close()
		opts.Stdin = r
	}
	err = exec.StreamWithContext(ctx, opts)
	return stdout.String(), stderr.String(), err
}

// Logs returns the end of a container's logs, at most maxRawOutput bytes,
// whole lines.
func (k *KubePods) Logs(ctx context.Context, namespace, pod, container string) (string, error) {
	// The last lines, bounded in bytes too; LimitBytes keeps the first
	// bytes of those, so it is well above what is kept here.
	lines, limit := int64(500), int64(1<<20)
	b, err := k.clientset.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, TailLines: &lines, LimitBytes: &limit}).DoRaw(ctx)
	if err != nil {
		return "", err
	}
	t := &tailBuffer{max: maxRawOutput}
	_, _ = t.Write(b)
	return t.String(), nil
}

// tailBuffer keeps the last max bytes written to it, from a line's start:
// a value cut in two at the edge is in no form a mask can find.
//
// It is safe for concurrent use: a stream that ends at its context's
// deadline returns while its copying goroutine may still write.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	buf []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if t.cut {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		} else {
			b = nil // one line longer than max: none of it is whole
		}
	}
	return string(b)
}
