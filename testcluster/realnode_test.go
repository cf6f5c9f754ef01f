package testcluster_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/testcluster"
)

// realNodePod is a busybox pod on the real node running script.
func realNodePod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector:                  testcluster.RealNodeSelector(),
			Tolerations:                   []corev1.Toleration{testcluster.RealNodeToleration()},
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:    "main",
				Image:   testcluster.BusyboxImage,
				Command: []string{"sh", "-c", script},
			}},
		},
	}
}

// execIn runs command in the pod's container through the API server (and
// so the kubelet), returning its output and exit code.
func execIn(t *testing.T, c *testcluster.Cluster, pod string, command ...string) (string, int) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(c.RESTConfig)
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "main", Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(c.RESTConfig, "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	// One buffer each: the streams are copied by goroutines of their own.
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return stdout.String() + stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String() + stderr.String(), exit.ExitStatus()
	default:
		t.Fatalf("exec %v in %s: %v", command, pod, err)
		return "", -1
	}
}

// The real node runs a pod's process: its output is in the logs, a command
// exec'd in it answers with its output and exit code, the fake nodes keep
// the other pods, and Stop leaves no process, mount, cgroup or network
// device of the node behind.
func TestRealNodeRunsPodsWithExecAndLogs(t *testing.T) {
	testcluster.RequireRealNode(t)
	begin := time.Now()
	c := testcluster.StartT(t, testcluster.Options{Workloads: true, Nodes: 1, RealNode: &testcluster.RealNodeOptions{}})
	t.Logf("cluster with a real node started in %s (the real node: %s)", time.Since(begin).Round(time.Millisecond), c.RealNodeStartTime.Round(time.Millisecond))
	cl := newClient(t, c)
	ctx := context.Background()

	var node corev1.Node
	if err := cl.Get(ctx, client.ObjectKey{Name: testcluster.RealNodeName}, &node); err != nil {
		t.Fatal(err)
	}
	if node.Labels[testcluster.RealNodeLabel] != "true" || len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != testcluster.RealNodeLabel {
		t.Fatalf("real node labels %v, taints %v: want the label and the taint %s", node.Labels, node.Spec.Taints, testcluster.RealNodeLabel)
	}

	started := time.Now()
	if err := cl.Create(ctx, realNodePod("real", "echo started; exec sleep 3599")); err != nil {
		t.Fatal(err)
	}
	// A pod without the selector stays on the fake node.
	fake := realNodePod("fake", "never runs")
	fake.Spec.NodeSelector, fake.Spec.Tolerations = nil, nil
	if err := cl.Create(ctx, fake); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"real", "fake"} {
		eventually(t, "pod "+name+" Running", func(ctx context.Context) (bool, string) {
			var p corev1.Pod
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &p); err != nil {
				return false, err.Error()
			}
			return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase) + " on " + p.Spec.NodeName + " " + p.Status.Message
		})
	}
	t.Logf("pod on the real node Running after %s", time.Since(started).Round(time.Millisecond))
	var real, onFake corev1.Pod
	_ = cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: "real"}, &real)
	_ = cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fake"}, &onFake)
	if real.Spec.NodeName != testcluster.RealNodeName || onFake.Spec.NodeName != c.NodeNames[0] {
		t.Fatalf("pods on %s and %s, want %s and %s", real.Spec.NodeName, onFake.Spec.NodeName, testcluster.RealNodeName, c.NodeNames[0])
	}
	if real.Status.PodIP == "" {
		t.Errorf("the pod on the real node has no IP")
	}

	out, code := execIn(t, c, "real", "sh", "-c", "echo out; echo err >&2; cat /proc/1/cmdline | tr '\\0' ' '")
	if code != 0 || !strings.Contains(out, "out\n") || !strings.Contains(out, "err\n") || !strings.Contains(out, "sleep 3599") {
		t.Errorf("exec: exit %d, output %q; want 0 with out, err and the pod's own process", code, out)
	}
	out, code = execIn(t, c, "real", "sh", "-c", "echo failing; exit 7")
	if code != 7 || out != "failing\n" {
		t.Errorf("exec of a failing command: exit %d, output %q; want 7 and its output", code, out)
	}

	cs := kubernetes.NewForConfigOrDie(c.RESTConfig)
	logs, err := cs.CoreV1().Pods("default").GetLogs("real", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || string(logs) != "started\n" {
		t.Errorf("logs %q (%v), want the container's output", logs, err)
	}

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	// The pod's process is the machine's: Stop must have ended it.
	if pids := processesWithCmdline("sleep\x003599"); len(pids) > 0 {
		t.Errorf("the real node's pod still runs after Stop: pids %v", pids)
	}
	// Only this cluster's folder: another cluster's real node (another
	// package's test, make cluster-up) may start or stop meanwhile.
	if c.RealNodeDir == "" {
		t.Fatal("the cluster does not say where its real node's folder is")
	}
	if realNodeMounts(t)[c.RealNodeDir] {
		t.Errorf("mounts of the real node left after Stop in %s", c.RealNodeDir)
	}
}

// realNodeMounts returns the real nodes' folders that have mounts.
func realNodeMounts(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(os.TempDir(), "testcluster-node-")
	dirs := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && strings.HasPrefix(fields[4], prefix) {
			rest := strings.TrimPrefix(fields[4], prefix)
			slot, _, _ := strings.Cut(rest, "/")
			dirs[prefix+slot] = true
		}
	}
	return dirs
}

// processesWithCmdline returns the pids whose command line contains s.
func processesWithCmdline(s string) []string {
	entries, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// Where the machine lacks what the real node needs, RealNodeAvailable and
// Start say what is missing and how to get it, and Start runs nothing.
func TestRealNodeUnavailableSaysWhy(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no containerd, runc, ctr, ip or busybox
	err := testcluster.RealNodeAvailable("")
	if !errors.Is(err, testcluster.ErrRealNodeUnavailable) {
		t.Fatalf("RealNodeAvailable = %v, want ErrRealNodeUnavailable", err)
	}
	want := []string{"containerd", "runc", "busybox", "apt-get install containerd runc containernetworking-plugins busybox-static"}
	if os.Geteuid() != 0 {
		want = []string{"needs root"}
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	_, err = testcluster.Start(context.Background(), testcluster.Options{Workloads: true, RealNode: &testcluster.RealNodeOptions{}})
	if !errors.Is(err, testcluster.ErrRealNodeUnavailable) && !errors.Is(err, testcluster.ErrBinariesMissing) {
		t.Fatalf("Start = %v, want ErrRealNodeUnavailable", err)
	}
	_, err = testcluster.Start(context.Background(), testcluster.Options{RealNode: &testcluster.RealNodeOptions{}})
	if err == nil || !strings.Contains(err.Error(), "needs Options.Workloads") {
		t.Errorf("Start without workloads = %v, want it refused", err)
	}
}
