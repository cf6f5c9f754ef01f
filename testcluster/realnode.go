package testcluster

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The real node: one kubelet with containerd and runc beside the fake
// nodes, for behaviour that needs a process that really runs (exec, logs,
// a Job that writes what the next step reads). Workloads choose it with
// RealNodeLabel; everything else stays on the fake nodes.
const (
	// RealNodeName is the name the real node registers with.
	RealNodeName = "testcluster-real-node"
	// RealNodeLabel is both a label (value "true") and a NoSchedule taint
	// (value "true") of the real node: a pod runs there when it selects the
	// label and tolerates the taint, and no other pod lands there.
	RealNodeLabel = "styrmin.io/real-node"
	// KubeletBinary is the kubelet's file in the binaries' folder. It is of
	// an older minor version than the control plane (hack/testcluster/kubelet).
	KubeletBinary = "kubelet"
	// realNodeSlots bounds how many real nodes run on one machine at once
	// (each has its own bridge, subnet, cgroup and state folder).
	realNodeSlots = 16
	// realNodeStartTimeout bounds the wait for the kubelet to report Ready.
	realNodeStartTimeout = 90 * time.Second
)

// RealNodeOptions adds the real node (Options.RealNode).
type RealNodeOptions struct {
	// Images are imported into the node's runtime besides PauseImage and
	// BusyboxImage.
	Images []Image
}

// ErrRealNodeUnavailable is wrapped by the errors that say why this
// machine cannot run the real node (not Linux, not root, a missing
// program). Tests that need it skip on it; see RealNodeAvailable.
var ErrRealNodeUnavailable = errors.New("the real node cannot run on this machine")

// realNodeHost is what the real node needs of the machine, found by
// findRealNodeHost.
type realNodeHost struct {
	containerd, ctr, ip, busybox string
	cniBinDir                    string
	kubelet                      string
	cgroupV2                     bool
	ownCgroup                    string // the starting process's cgroup, under which the pods go
}

// cniPlugins are the CNI plugins the node's network uses (containerd runs
// loopback for every pod itself).
var cniPlugins = []string{"bridge", "host-local", "loopback"}

// RealNodeAvailable reports whether Start can add a real node with the
// binaries in binDir (empty: BinDir()): nil, or an error wrapping
// ErrRealNodeUnavailable that names what is missing. The container runtime
// comes from the machine's packages (containerd, runc, the CNI plugins,
// busybox-static; .ci/run installs them on Debian).
func RealNodeAvailable(binDir string) error {
	_, err := findRealNodeHost(binDir)
	return err
}

func findRealNodeHost(binDir string) (*realNodeHost, error) {
	unavailable := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrRealNodeUnavailable, fmt.Sprintf(format, a...))
	}
	if runtime.GOOS != "linux" {
		return nil, unavailable("it needs Linux, this is %s", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return nil, unavailable("it needs root (a kubelet and containerd mount, make cgroups and network devices), running as uid %d", os.Geteuid())
	}
	if binDir == "" {
		d, err := BinDir()
		if err != nil {
			return nil, unavailable("%v", err)
		}
		binDir = d
	}
	h := &realNodeHost{kubelet: filepath.Join(binDir, KubeletBinary)}
	if _, err := os.Stat(h.kubelet); err != nil {
		return nil, unavailable("no kubelet in %s: run `make testcluster`", binDir)
	}
	var missing []string
	look := func(dst *string, name string) {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
		}
		*dst = p
	}
	var shim, runc string
	look(&h.containerd, "containerd")
	look(&shim, "containerd-shim-runc-v2")
	look(&h.ctr, "ctr")
	look(&runc, "runc")
	look(&h.ip, "ip")
	look(&h.busybox, "busybox")
	if len(missing) > 0 {
		return nil, unavailable("%s not found in PATH (Debian: apt-get install containerd runc containernetworking-plugins busybox-static iproute2)", strings.Join(missing, ", "))
	}
	// The images have no C library: a dynamically linked busybox (Debian's
	// busybox rather than busybox-static) cannot run in them.
	if f, err := elf.Open(h.busybox); err != nil {
		return nil, unavailable("reading %s: %v", h.busybox, err)
	} else {
		static := true
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				static = false
			}
		}
		_ = f.Close()
		if !static {
			return nil, unavailable("%s is linked dynamically; the images need a static busybox (Debian: busybox-static)", h.busybox)
		}
	}
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		ok := true
		for _, p := range cniPlugins {
			if _, err := os.Stat(filepath.Join(d, p)); err != nil {
				ok = false
			}
		}
		if ok {
			h.cniBinDir = d
			break
		}
	}
	if h.cniBinDir == "" {
		return nil, unavailable("no CNI plugins (%s) in /usr/lib/cni or /opt/cni/bin (Debian: containernetworking-plugins)", strings.Join(cniPlugins, ", "))
	}
	own, v2, err := ownCgroup()
	if err != nil {
		return nil, unavailable("cgroups: %v", err)
	}
	h.ownCgroup, h.cgroupV2 = own, v2
	for _, dir := range h.cgroupHierarchies() {
		if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
			return nil, unavailable("cgroup hierarchy %s is not writable: %v", dir, err)
		}
	}
	return h, nil
}

// ownCgroup returns this process's cgroup path (v1: of the memory
// controller, so that the pods count against the memory limit the caller
// runs under) and whether the machine has the unified hierarchy only.
func ownCgroup() (string, bool, error) {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		b, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			return "", true, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if p, ok := strings.CutPrefix(line, "0::"); ok {
				return p, true, nil
			}
		}
		return "", true, errors.New("no unified cgroup in /proc/self/cgroup")
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			return parts[2], false, nil
		}
	}
	return "", false, errors.New("no memory cgroup in /proc/self/cgroup")
}

// cgroupHierarchies are the folders a pod's cgroup is made in: each v1
// hierarchy's mount (the kubelet, through runc, joins every one) and, in
// the hybrid layout, the unified one; or the unified hierarchy alone.
func (h *realNodeHost) cgroupHierarchies() []string {
	if h.cgroupV2 {
		return []string{"/sys/fs/cgroup"}
	}
	var dirs []string
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "... mountpoint options - fstype source superoptions"
		fields := strings.Fields(sc.Text())
		i := slices.Index(fields, "-")
		// cgroup2 too: in the hybrid layout runc makes the containers'
		// cgroups in the unified hierarchy as well, and Stop removes them.
		if i < 0 || i+1 >= len(fields) || len(fields) < 5 || (fields[i+1] != "cgroup" && fields[i+1] != "cgroup2") {
			continue
		}
		dirs = append(dirs, unescapeMount(fields[4]))
	}
	sort.Strings(dirs)
	return slices.Compact(dirs)
}

// realNode is the running real node: its processes and what Stop removes.
type realNode struct {
	host       *realNodeHost
	slot       int
	lock       *os.File // holds the slot while the node runs
	dir        string   // containerd's and the kubelet's state: every mount is below it
	bridge     string
	subnet     string // a /24; .1 is the bridge's and the kubelet's address
	cgroupRoot string
	containerd *component
	kubelet    *component
}

func slotDir(slot int) string {
	return filepath.Join(os.TempDir(), "testcluster-node-"+strconv.Itoa(slot))
}

// acquireSlot takes the first slot no other real node on this machine
// holds (an exclusive flock, released by the kernel if the process dies).
func acquireSlot() (int, *os.File, error) {
	for slot := range realNodeSlots {
		f, err := os.OpenFile(slotDir(slot)+".lock", os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return 0, nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			continue
		}
		return slot, f, nil
	}
	return 0, nil, fmt.Errorf("all %d real node slots are taken by other clusters on this machine", realNodeSlots)
}

// startRealNode starts containerd and the kubelet of the real node and
// waits until the node is Ready. What a crashed earlier node of the same
// slot left (processes, mounts, cgroups, the bridge, its folder) is
// removed first.
func (c *Cluster) startRealNode(ctx context.Context, opts *RealNodeOptions) error {
	begin := time.Now()
	h, err := findRealNodeHost(c.BinDir)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	slot, lock, err := acquireSlot()
	if err != nil {
		return fmt.Errorf("testcluster: real node: %w", err)
	}
	n := &realNode{
		host:   h,
		slot:   slot,
		lock:   lock,
		dir:    slotDir(slot),
		bridge: "tcnode" + strconv.Itoa(slot),
		// 10.200.0.0/16 is not used by the fake nodes' addresses (podCIDR, nodeIP) or the Services.
		subnet:     fmt.Sprintf("10.200.%d.0/24", slot),
		cgroupRoot: filepath.Join(h.ownCgroup, "testcluster-node-"+strconv.Itoa(slot)),
	}
	c.node = n
	c.RealNodeDir = n.dir
	n.cleanup() // a crashed earlier node of this slot
	if err := n.prepare(); err != nil {
		return fmt.Errorf("testcluster: real node: %w", err)
	}
	if err := c.startContainerd(ctx, n); err != nil {
		return err
	}
	if err := c.importImages(ctx, n, opts.Images); err != nil {
		return err
	}
	if err := c.startKubelet(n); err != nil {
		return err
	}
	if err := c.waitRealNode(ctx, n); err != nil {
		return err
	}
	c.RealNodeStartTime = time.Since(begin)
	return nil
}

func (n *realNode) gateway() string {
	return strings.TrimSuffix(n.subnet, "0/24") + "1"
}

// prepare writes the configuration and makes the bridge and the cgroup.
func (n *realNode) prepare() error {
	for _, d := range []string{"containerd", "state", "runc", "opt", "cni", "ipam", "kubelet", "pod-logs", "volume-plugins", "volumes"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o700); err != nil {
			return err
		}
	}
	// Everything under the node's folder, so that nothing collides with
	// another containerd on the machine (or another real node): the runc
	// state root, the network namespaces' mounts, the CNI configuration.
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[8]q
        SystemdCgroup = false
`, filepath.Join(n.dir, "containerd"), filepath.Join(n.dir, "state"), n.socket(), filepath.Join(n.dir, "opt"),
		PauseImage, n.host.cniBinDir, filepath.Join(n.dir, "cni"), filepath.Join(n.dir, "runc"))
	if err := os.WriteFile(filepath.Join(n.dir, "containerd.toml"), []byte(config), 0o600); err != nil {
		return err
	}
	// A bridge of the node's own with no NAT: pods reach each other and
	// the host (the kubelet's probes), nothing beyond.
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "testcluster",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "gateway": %q}]], "dataDir": %q}
  }]
}
`, n.bridge, n.subnet, n.gateway(), filepath.Join(n.dir, "ipam"))
	if err := os.WriteFile(filepath.Join(n.dir, "cni", "10-testcluster.conflist"), []byte(cni), 0o600); err != nil {
		return err
	}
	// The bridge exists before the kubelet starts: its address is the
	// node's, where the kubelet listens (the API server reaches it there
	// for exec and logs). The CNI plugin finds it and adds the pods.
	for _, args := range [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		{"addr", "add", n.gateway() + "/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if out, err := exec.Command(n.host.ip, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	// The kubelet wants its cgroup root to exist in every hierarchy.
	for _, h := range n.host.cgroupHierarchies() {
		if err := mkdirCgroup(h, n.cgroupRoot); err != nil {
			return fmt.Errorf("cgroup %s in %s: %w", n.cgroupRoot, h, err)
		}
	}
	return nil
}

// mkdirCgroup makes path in the hierarchy at root, parents first; a new
// cpuset cgroup starts with no CPUs and memory nodes and takes its parent's.
func mkdirCgroup(root, path string) error {
	dir := root
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		parent := dir
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil || strings.TrimSpace(string(cur)) != "" {
				continue
			}
			if v, err := os.ReadFile(filepath.Join(parent, f)); err == nil {
				_ = os.WriteFile(filepath.Join(dir, f), v, 0o644)
			}
		}
	}
	return nil
}

func (n *realNode) socket() string { return filepath.Join(n.dir, "containerd.sock") }

func (c *Cluster) startContainerd(ctx context.Context, n *realNode) error {
	out, err := c.logFile("containerd")
	if err != nil {
		return err
	}
	n.containerd, err = startComponent("containerd", n.host.containerd, []string{"--config", filepath.Join(n.dir, "containerd.toml")}, nil, out)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := n.containerd.exitErr(); err != nil {
			return fmt.Errorf("testcluster: containerd exited (see %s): %w", filepath.Join(c.LogDir, "containerd.log"), err)
		}
		if conn, err := net.Dial("unix", n.socket()); err == nil {
			_ = conn.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("testcluster: containerd does not listen on %s (see %s)", n.socket(), filepath.Join(c.LogDir, "containerd.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// importImages writes the node's images as one archive and imports it into
// the namespace of containerd where the kubelet's pods run.
func (c *Cluster) importImages(ctx context.Context, n *realNode, extra []Image) error {
	applets, err := exec.Command(n.host.busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("testcluster: %s --list: %w", n.host.busybox, err)
	}
	archive := filepath.Join(n.dir, "images.tar")
	f, err := os.Create(archive)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	err = writeImageArchive(f, n.host.busybox, strings.Fields(string(applets)), append(builtinImages(), extra...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("testcluster: writing the real node's images: %w", err)
	}
	cmd := exec.CommandContext(ctx, n.host.ctr, "--address", n.socket(), "--namespace", "k8s.io", "images", "import", "--no-unpack=false", archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("testcluster: ctr images import: %v: %s", err, strings.TrimSpace(string(out)))
	}
	_ = os.Remove(archive)
	return nil
}

func (c *Cluster) startKubelet(n *realNode) error {
	kc, err := c.componentKubeconfig("kubelet")
	if err != nil {
		return err
	}
	port, err := freePort(n.gateway())
	if err != nil {
		return fmt.Errorf("testcluster: kubelet port: %w", err)
	}
	// Anonymous requests allowed (AlwaysAllow): the API server sends exec
	// and logs without a client certificate, and the kubelet listens on
	// the node's bridge only. Image garbage collection is off: the images
	// were imported, a deleted one cannot be pulled again. Eviction
	// thresholds are low, so that a full disk of the machine does not
	// taint the node.
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]q
port: %[2]d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: %[3]q
containerRuntimeEndpoint: %[4]q
failSwapOn: false
registerWithTaints:
  - {key: %[5]q, value: "true", effect: NoSchedule}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%%", nodefs.inodesFree: "1%%", imagefs.available: "1%%"}
podLogsDir: %[6]q
volumePluginDir: %[7]q
serializeImagePulls: false
maxPods: 110
nodeStatusUpdateFrequency: 5s
`, n.gateway(), port, n.cgroupRoot, "unix://"+n.socket(), RealNodeLabel,
		filepath.Join(n.dir, "pod-logs"), filepath.Join(n.dir, "volume-plugins"))
	cfgPath := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	out, err := c.logFile("kubelet")
	if err != nil {
		return err
	}
	n.kubelet, err = startComponent("kubelet", n.host.kubelet, []string{
		"--config=" + cfgPath,
		"--kubeconfig=" + kc,
		"--root-dir=" + filepath.Join(n.dir, "kubelet"),
		"--hostname-override=" + RealNodeName,
		"--node-ip=" + n.gateway(),
		"--node-labels=" + RealNodeLabel + "=true",
	}, nil, out)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitRealNode waits until the real node is Ready and carries no taint of
// Kubernetes' own (node.kubernetes.io/not-ready until the node lifecycle
// controller sees it Ready).
func (c *Cluster) waitRealNode(ctx context.Context, n *realNode) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, realNodeStartTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, p := range []*component{n.containerd, n.kubelet} {
			if err := p.exitErr(); err != nil {
				return fmt.Errorf("testcluster: %s exited (see %s): %w", p.name, filepath.Join(c.LogDir, p.name+".log"), err)
			}
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		if err == nil && isReady(*node) && !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
			return strings.HasPrefix(t.Key, "node.kubernetes.io/")
		}) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: waiting for the real node to be Ready (see %s): %w", filepath.Join(c.LogDir, "kubelet.log"), ctx.Err())
		case <-tick.C:
		}
	}
}

// stop stops the kubelet, the pods' processes and containerd, then
// removes what they left: shims, mounts, cgroups, the bridge, the folder.
func (n *realNode) stop() error {
	var errs []error
	if n.kubelet != nil {
		if err := n.kubelet.stop(stopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	// The containers outlive the kubelet and containerd (their shims run
	// on); killing them first lets the shims end by themselves.
	n.killPods()
	if n.containerd != nil {
		if err := n.containerd.stop(stopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	if err := n.cleanup(); err != nil {
		errs = append(errs, err)
	}
	if n.lock != nil {
		_ = n.lock.Close()
	}
	return errors.Join(errs...)
}

// cleanup removes everything of the node's slot but the lock: processes
// whose command line names its folder (containerd, shims, the kubelet),
// the pods' processes, mounts below the folder, the cgroups, the bridge,
// the kubelet's log links, the folder.
func (n *realNode) cleanup() error {
	var errs []error
	// With the slash: slot 1's folder is a prefix of slot 10's.
	if err := killLeftovers(n.dir + "/"); err != nil {
		errs = append(errs, err)
	}
	n.killPods()
	unmountErr := unmountBelow(n.dir)
	if unmountErr != nil {
		errs = append(errs, unmountErr)
	}
	for _, h := range n.host.cgroupHierarchies() {
		if err := removeCgroupTree(filepath.Join(h, n.cgroupRoot)); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := net.InterfaceByName(n.bridge); err == nil {
		if out, err := exec.Command(n.host.ip, "link", "del", n.bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link del %s: %v: %s", n.bridge, err, strings.TrimSpace(string(out))))
		}
	}
	removeLogLinks(n.dir)
	// Never remove through a mount that is still there (a volume).
	if unmountErr == nil {
		if err := os.RemoveAll(n.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("testcluster: cleaning up the real node: %w", errors.Join(errs...))
	}
	return nil
}

// killPods SIGKILLs every process in the node's cgroup tree until none is
// left (a few seconds at most).
func (n *realNode) killPods() {
	hs := n.host.cgroupHierarchies()
	if len(hs) == 0 {
		return
	}
	// Every pod process is in every hierarchy: one is enough to find them.
	root := filepath.Join(hs[0], n.cgroupRoot)
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := cgroupProcs(root)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cgroupProcs lists the processes in the cgroup at dir and below it.
func cgroupProcs(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// removeCgroupTree removes the cgroup at dir and those below it, deepest
// first (a cgroup folder is removed with rmdir, never its files).
func removeCgroupTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// unmountBelow detaches every mount at or below dir, deepest first.
func unmountBelow(dir string) error {
	var errs []error
	for range 3 { // a mount can hide others mounted before it at the same place
		mounts, err := mountsBelow(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountsBelow returns the mount points at or below dir, the deepest first.
func mountsBelow(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	return mounts, sc.Err()
}

// unescapeMount undoes the octal escapes of /proc/self/mountinfo (\040 for
// a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeLogLinks removes the links the kubelet keeps in /var/log/containers
// (a folder it does not let one move) to the node's pod logs.
func removeLogLinks(dir string) {
	const linkDir = "/var/log/containers"
	entries, err := os.ReadDir(linkDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(linkDir, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, dir+"/") {
			_ = os.Remove(p)
		}
	}
}

// RealNodeSelector is the node selector of a pod that must run on the real
// node; it also needs RealNodeToleration.
func RealNodeSelector() map[string]string {
	return map[string]string{RealNodeLabel: "true"}
}

// RealNodeToleration lets a pod run on the real node despite its taint.
func RealNodeToleration() corev1.Toleration {
	return corev1.Toleration{Key: RealNodeLabel, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}
}

// RealNodeNamespaceAnnotations, set on a namespace, send every pod created
// in it from then on to the real node (the PodNodeSelector and
// PodTolerationRestriction admission plugins add the node selector and the
// toleration), for charts that have no setting for either.
func RealNodeNamespaceAnnotations() map[string]string {
	return map[string]string{
		"scheduler.alpha.kubernetes.io/node-selector":      RealNodeLabel + "=true",
		"scheduler.alpha.kubernetes.io/defaultTolerations": fmt.Sprintf(`[{"key":%q,"operator":"Equal","value":"true","effect":"NoSchedule"}]`, RealNodeLabel),
	}
}
