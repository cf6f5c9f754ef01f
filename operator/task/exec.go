package task

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
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
func (k *KubePods) Exec(ctx context.Context, namespace, pod, container string, command []string) (string, string, error) {
	req := k.clientset.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   command,
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
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
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
type tailBuffer struct {
	max int
	buf []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
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
