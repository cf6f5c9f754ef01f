package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Defaults applied by Start.
const (
	// DefaultNodes is the number of fake nodes when Options.Nodes is zero.
	DefaultNodes = 2
	// DefaultServiceCIDR leaves room for thousands of Services (envtest's
	// own default, a /24, runs out above about 250).
	DefaultServiceCIDR = "10.96.0.0/16"
	// podCIDR is where kwok takes fake pod IPs from.
	podCIDR = "10.244.0.1/16"
	// nodeIP is the address kwok reports for every fake node.
	nodeIP = "10.1.0.1"
	// startTimeout bounds the start of etcd and of the API server each.
	startTimeout = time.Minute
	// stopTimeout bounds the graceful stop of each component before it is killed.
	stopTimeout = 10 * time.Second
)

// controllers are the kube-controller-manager loops that make Deployments,
// Jobs, namespace deletion and fake nodes work. node-lifecycle-controller is
// required: it removes the not-ready taint new nodes carry.
var controllers = []string{
	"cronjob-controller",
	"daemonset-controller",
	"deployment-controller",
	"disruption-controller",
	"endpointslice-controller",
	"garbage-collector-controller",
	"job-controller",
	"namespace-controller",
	"node-lifecycle-controller",
	"persistentvolume-binder-controller",
	"pod-garbage-collector-controller",
	"replicaset-controller",
	// Quotas: tests put a namespace out of room (a cause outside git).
	"resourcequota-controller",
	"serviceaccount-controller",
	"statefulset-controller",
	"ttl-after-finished-controller",
}

// Options configures Start. The zero value starts etcd and the API server only.
type Options struct {
	// Workloads also starts kube-controller-manager, kube-scheduler and kwok
	// with Nodes fake nodes, so that Pods are scheduled and become Ready,
	// Deployments Available and Jobs Complete.
	Workloads bool
	// Nodes is the number of fake nodes (only with Workloads); 0 means DefaultNodes.
	// Each node holds 250 pods, 32 CPUs and 256Gi of memory.
	Nodes int
	// ServiceCIDR is the API server's Service IP range; empty means DefaultServiceCIDR.
	ServiceCIDR string
	// LogDir receives one log file per component. Empty means a fresh
	// temporary folder that Stop removes.
	LogDir string
	// APIServerArgs are extra kube-apiserver flags, "--name=value" or
	// "name=value". A flag given here replaces envtest's default for it; a
	// flag given twice here is passed twice.
	APIServerArgs []string
	// BinDir holds the binaries; empty means BinDir().
	BinDir string
	// RealNode, with Workloads, adds the real node (RealNodeName): a
	// kubelet with containerd, where pods that select RealNodeLabel (and
	// tolerate its taint) run real processes, so exec and logs work. It
	// needs root and the machine's container runtime; RealNodeAvailable
	// tells whether it can run, and Start fails (wrapping
	// ErrRealNodeUnavailable) if it cannot. With it the API server also
	// runs the PodNodeSelector and PodTolerationRestriction admission
	// plugins, so that annotations on a namespace can send all of its new
	// pods to the real node (RealNodeNamespaceAnnotations).
	RealNode *RealNodeOptions
}

// Cluster is a running control plane. Stop it when done.
type Cluster struct {
	// RESTConfig authenticates as an admin (group system:masters).
	RESTConfig *rest.Config
	// KubeconfigPath is a kubeconfig file for the same admin user.
	KubeconfigPath string
	// LogDir holds one log file per component.
	LogDir string
	// BinDir holds the binaries the cluster runs (kubectl too).
	BinDir string
	// NodeNames are the fake nodes, in order (empty without workloads).
	NodeNames []string

	env        *envtest.Environment
	workDir    string // kubeconfigs, etcd data, certificates
	ownsLogDir bool
	logFiles   []*os.File
	procs      []*component

	// RealNodeStartTime is how long the real node took to start and be
	// Ready (zero without one).
	RealNodeStartTime time.Duration
	// RealNodeDir is the real node's folder (empty without one): every
	// mount, socket and state file of its containerd and kubelet is below
	// it. Other clusters' real nodes on the machine have folders of their own.
	RealNodeDir string

	node *realNode // nil without a real node

	stopStorage context.CancelFunc // ends the storage provisioner

	stopOnce sync.Once
	stopErr  error
}

// Start starts a control plane as Options says and returns once it serves
// requests (and, with workloads, once every fake node is Ready). ctx bounds the
// start only; the cluster runs until Stop. On error nothing is left running.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Nodes < 0 {
		return nil, fmt.Errorf("testcluster: Options.Nodes is %d, want 0 (default %d) or more", opts.Nodes, DefaultNodes)
	}
	if opts.Nodes == 0 {
		opts.Nodes = DefaultNodes
	}
	if opts.ServiceCIDR == "" {
		opts.ServiceCIDR = DefaultServiceCIDR
	}
	apiArgs, err := parseArgs(opts.APIServerArgs)
	if err != nil {
		return nil, fmt.Errorf("testcluster: Options.APIServerArgs: %w", err)
	}
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = BinDir(); err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
	}
	if err := checkBinaries(binDir, opts.Workloads); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	if opts.RealNode != nil {
		if !opts.Workloads {
			return nil, errors.New("testcluster: Options.RealNode needs Options.Workloads")
		}
		if err := RealNodeAvailable(binDir); err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
		// The API server reaches kubelets at their InternalIP (the
		// default tries the node's name first, which does not resolve).
		// Given first: a flag of APIServerArgs comes after them, and the
		// last value of a flag wins.
		apiArgs = append([]arg{
			{name: "kubelet-preferred-address-types", value: "InternalIP"},
			{name: "enable-admission-plugins", value: "PodNodeSelector,PodTolerationRestriction"},
		}, apiArgs...)
	}

	c := &Cluster{BinDir: binDir, LogDir: opts.LogDir}
	defer func() {
		if err != nil {
			// The logs say why (a component that exited, a node that
			// never became Ready): keep them.
			_ = c.shutdown(true)
			if c.ownsLogDir {
				err = fmt.Errorf("%w (component logs kept in %s)", err, c.LogDir)
			}
		}
	}()
	if c.workDir, err = os.MkdirTemp("", "testcluster-"); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	if c.LogDir == "" {
		c.ownsLogDir = true
		c.LogDir = filepath.Join(c.workDir, "logs")
	}
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("testcluster: log folder: %w", err)
	}

	if err := c.startAPIServer(opts.ServiceCIDR, apiArgs); err != nil {
		return nil, err
	}
	if !opts.Workloads {
		return c, nil
	}
	if err := c.startWorkloadComponents(); err != nil {
		return nil, err
	}
	if err := c.addNodes(ctx, opts.Nodes); err != nil {
		return nil, err
	}
	volumes := defaultVolumeRoot
	if opts.RealNode != nil {
		if err := c.startRealNode(ctx, opts.RealNode); err != nil {
			return nil, err
		}
		// On the real node hostPath volumes are real folders: they live
		// in the node's folder, removed with it.
		volumes = filepath.Join(c.node.dir, "volumes")
	}
	storageCtx, cancel := context.WithCancel(context.Background())
	c.stopStorage = cancel
	if err := c.startStorage(storageCtx, volumes); err != nil {
		return nil, err
	}
	return c, nil
}

// startAPIServer starts etcd and kube-apiserver through envtest and writes the
// admin kubeconfig.
func (c *Cluster) startAPIServer(serviceCIDR string, extra []arg) error {
	etcdLog, err := c.logFile("etcd")
	if err != nil {
		return err
	}
	apiLog, err := c.logFile("kube-apiserver")
	if err != nil {
		return err
	}
	// Paths are set explicitly so that KUBEBUILDER_ASSETS and TEST_ASSET_*
	// from the environment cannot swap in other binaries; data and
	// certificates live under workDir so that Stop can find every process.
	c.env = &envtest.Environment{
		BinaryAssetsDirectory:    c.BinDir,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	cp := &c.env.ControlPlane
	cp.Etcd = &envtest.Etcd{
		Path:    filepath.Join(c.BinDir, "etcd"),
		DataDir: filepath.Join(c.workDir, "etcd"),
		Out:     etcdLog,
		Err:     etcdLog,
	}
	api := cp.GetAPIServer()
	api.Path = filepath.Join(c.BinDir, "kube-apiserver")
	api.CertDir = filepath.Join(c.workDir, "apiserver")
	api.Out, api.Err = apiLog, apiLog
	cp.KubectlPath = filepath.Join(c.BinDir, "kubectl")
	for _, d := range []string{cp.Etcd.DataDir, api.CertDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	args := api.Configure()
	args.Set("service-cluster-ip-range", serviceCIDR)
	applyArgs(args, extra)

	cfg, err := c.env.Start()
	if err != nil {
		return fmt.Errorf("testcluster: starting etcd and kube-apiserver (logs in %s): %w", c.LogDir, err)
	}
	c.RESTConfig = cfg
	c.KubeconfigPath = filepath.Join(c.workDir, "admin.kubeconfig")
	if err := os.WriteFile(c.KubeconfigPath, c.env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return nil
}

// startWorkloadComponents starts kube-controller-manager, kube-scheduler and
// kwok, each with its own admin identity (names show in audit and logs).
func (c *Cluster) startWorkloadComponents() error {
	kcm, err := c.componentKubeconfig("kube-controller-manager")
	if err != nil {
		return err
	}
	sched, err := c.componentKubeconfig("kube-scheduler")
	if err != nil {
		return err
	}
	kwok, err := c.componentKubeconfig("kwok")
	if err != nil {
		return err
	}
	kwokHome := filepath.Join(c.workDir, "kwok-home")
	if err := os.MkdirAll(kwokHome, 0o700); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	specs := []struct {
		name string
		args []string
		env  []string
	}{
		{"kube-controller-manager", []string{
			"--kubeconfig=" + kcm,
			"--leader-elect=false",
			"--secure-port=0",
			"--controllers=" + strings.Join(controllers, ","),
			"--kube-api-qps=200",
			"--kube-api-burst=400",
			"--concurrent-deployment-syncs=10",
			"--concurrent-replicaset-syncs=10",
		}, nil},
		{"kube-scheduler", []string{
			"--kubeconfig=" + sched,
			"--leader-elect=false",
			"--secure-port=0",
			"--kube-api-qps=200",
			"--kube-api-burst=400",
		}, nil},
		// HOME points into workDir so that kwok does not load ~/.kwok/kwok.yaml.
		{"kwok", []string{
			"--kubeconfig=" + kwok,
			"--config=" + filepath.Join(c.BinDir, StagesFile),
			// Only the fake nodes: the real node has a kubelet.
			"--manage-nodes-with-annotation-selector=" + fakeNodeAnnotation + "=fake",
			"--node-lease-duration-seconds=40",
			"--cidr=" + podCIDR,
			"--node-ip=" + nodeIP,
		}, []string{"HOME=" + kwokHome}},
	}
	for _, s := range specs {
		out, err := c.logFile(s.name)
		if err != nil {
			return err
		}
		p, err := startComponent(s.name, filepath.Join(c.BinDir, s.name), s.args, s.env, out)
		if err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
		c.procs = append(c.procs, p)
	}
	return nil
}

// componentKubeconfig provisions an admin user named after a component and
// writes its kubeconfig.
func (c *Cluster) componentKubeconfig(name string) (string, error) {
	u, err := c.env.AddUser(envtest.User{Name: "testcluster:" + name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("testcluster: user for %s: %w", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("testcluster: kubeconfig for %s: %w", name, err)
	}
	path := filepath.Join(c.workDir, name+".kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return "", fmt.Errorf("testcluster: %w", err)
	}
	return path, nil
}

// logFile creates LogDir/<name>.log and keeps it for Stop to close.
func (c *Cluster) logFile(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(c.LogDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	c.logFiles = append(c.logFiles, f)
	return f, nil
}

// exited returns an error naming every workload component that has exited.
func (c *Cluster) exited() error {
	var errs []error
	for _, p := range c.procs {
		if err := p.exitErr(); err != nil {
			errs = append(errs, fmt.Errorf("%s exited (see %s): %w", p.name, filepath.Join(c.LogDir, p.name+".log"), err))
		}
	}
	return errors.Join(errs...)
}

// Stop stops every component (process groups are killed if they do not end
// in time), makes sure none of their processes is left, and removes the
// cluster's temporary files (and the log folder if Start created it).
// It is safe to call more than once.
func (c *Cluster) Stop() error { return c.shutdown(false) }

// shutdown is Stop with the choice to keep a log folder that Start created
// (StartT keeps it when the test failed; c.LogDir then names where it went).
func (c *Cluster) shutdown(keepLogs bool) error {
	c.stopOnce.Do(func() { c.stopErr = c.stop(keepLogs) })
	return c.stopErr
}

func (c *Cluster) stop(keepLogs bool) error {
	var errs []error
	if c.stopStorage != nil {
		c.stopStorage()
	}
	// The real node first: its pods' processes are the machine's, not
	// the API server's.
	if c.node != nil {
		if err := c.node.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	// Reverse order: workload components first, then the API server and etcd.
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].stop(stopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("testcluster: stopping kube-apiserver and etcd: %w", err))
		}
	}
	if c.workDir != "" {
		// Anything still running from this cluster has workDir in its
		// command line (data folder, certificates, kubeconfig).
		if err := killLeftovers(c.workDir); err != nil {
			errs = append(errs, fmt.Errorf("testcluster: %w", err))
		}
	}
	for _, f := range c.logFiles {
		_ = f.Close()
	}
	if c.ownsLogDir && keepLogs {
		kept, err := os.MkdirTemp("", "testcluster-logs-")
		if err == nil {
			// os.Rename refuses an existing directory as the target:
			// the logs go into the new one.
			dst := filepath.Join(kept, "logs")
			if err = os.Rename(c.LogDir, dst); err == nil {
				c.LogDir = dst
			} else {
				_ = os.Remove(kept)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("testcluster: keeping logs: %w", err))
		}
	}
	if c.workDir != "" {
		if err := os.RemoveAll(c.workDir); err != nil {
			errs = append(errs, fmt.Errorf("testcluster: %w", err))
		}
	}
	return errors.Join(errs...)
}
