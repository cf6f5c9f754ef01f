// Command styrmin-agent is the in-cluster operator of Styrmin. It only parses
// flags and wires the operator package.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/version"
)

func main() {
	// Started as a driver sandbox (drivers.Sandbox): evaluate one driver
	// and exit.
	if drivers.IsSandboxChild() {
		os.Exit(drivers.ServeSandbox(os.Stdin, os.Stdout, os.Stderr, resolver.SandboxFuncs()))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "styrmin-agent:", err)
		os.Exit(1)
	}
}

// flags are the agent's command-line settings.
type flags struct {
	cluster, repoURL, branch            string
	secretName, secretNamespace         string
	namespace, cloneDir, path           string
	pollInterval, driftInterval         time.Duration
	gitTimeout                          time.Duration
	credentialsInterval                 time.Duration
	podStatusAfter                      time.Duration
	stepTimeout, stepPause              time.Duration
	metricsAddr, healthAddr, pprofAddr  string
	webhookAddr, uiAddr                 string
	uiAllowedHosts                      []string
	reportStatuses                      bool
	statusSecret, statusSecretKey       string
	statusAPIURL, statusTargetURL       string
	statusRepository                    string
	leaderElect, installCRDs            bool
	kubeconfig, logLevel, logFormat     string
	webhookSecretName, webhookSecretKey string
	lockMode                            bool
	lockSecret                          string
	memoryLimit                         string
	gcPercent                           string
	kubeAPIQPS                          float64
	kubeAPIBurst                        int
	keepTasks                           int
	taskConcurrency                     int
	deploymentConcurrency               int
	driverTimeout                       time.Duration
	driverMemory, driverRendered        string
	driverChart                         string
	driverFetch                         string
	configMemory                        string
	driverInProcess                     bool
	stuckAfter                          time.Duration
	driverParallel                      int
	version                             bool
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("styrmin-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = operator.DefaultAgentNamespace
	}
	fs.StringVar(&f.cluster, "cluster", "", "name of the cluster this agent applies (locks/<cluster>/…); required")
	fs.StringVar(&f.repoURL, "repo", "", "URL of the desired-state repository (https, ssh or a local path); required")
	fs.StringVar(&f.branch, "branch", "", "branch to follow (default: the remote's HEAD)")
	fs.StringVar(&f.secretName, "repo-secret", "", "Secret holding the repository credentials (keys token [and username], or identity [passphrase] and known_hosts); also used for driver repositories on the same host")
	fs.StringVar(&f.secretNamespace, "repo-secret-namespace", "", "namespace of --repo-secret (default: the agent's namespace)")
	fs.StringVar(&f.namespace, "namespace", ns, "the agent's namespace: its StyrminSource, lease and credentials Secret (default $POD_NAMESPACE)")
	fs.StringVar(&f.cloneDir, "clone-dir", "", "folder for the repository clone (default: in memory)")
	fs.StringVar(&f.path, "path", "", "folder of the git repository that holds the desired-state repository (a monorepo's deploy/; default: its root)")
	fs.DurationVar(&f.gitTimeout, "git-timeout", gitsource.DefaultNetworkTimeout, "time limit of one clone, fetch or push of the repository (of the whole transfer: raise it for a large repository over a slow link)")
	fs.DurationVar(&f.credentialsInterval, "credentials-interval", operator.CredentialsInterval, "how often the credentials of --repo-secret (and --lock-secret) are read again, so a token rotated there is used without a restart")
	fs.DurationVar(&f.pollInterval, "poll-interval", operator.DefaultPollInterval, "how often to fetch the repository")
	fs.DurationVar(&f.driftInterval, "drift-interval", operator.DefaultDriftInterval, "how often each deployment's live objects are compared with its release")
	fs.DurationVar(&f.podStatusAfter, "pod-status-after", operator.DefaultPodStatusAfter, "how long a deployment stays not ready before the pods that are not ready are read into its status")
	fs.DurationVar(&f.stepTimeout, "step-timeout", operator.DefaultStepTimeout, "time a task step may take when its driver declares no timeout")
	fs.DurationVar(&f.stepPause, "debug-step-pause", 0, "testing only: pause after a task step starts and after its action is done, so fault-injection tests can kill the agent there")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", `address of the Prometheus metrics endpoint ("0" turns it off)`)
	fs.StringVar(&f.pprofAddr, "pprof-bind-address", "0", `address of Go's profiling endpoint, /debug/pprof ("0" turns it off)`)
	fs.StringVar(&f.healthAddr, "health-probe-bind-address", ":8081", `address of /healthz and /readyz ("" turns them off)`)
	fs.StringVar(&f.webhookAddr, "webhook-bind-address", "", `address of the GitHub webhook receiver ("" turns it off); needs --branch and --webhook-secret-name`)
	fs.StringVar(&f.uiAddr, "ui-bind-address", "", `address of the read-only web UI ("" turns it off); 127.0.0.1:8090 for kubectl port-forward, another interface only behind your own authentication`)
	fs.Func("ui-allowed-hosts", "host names the web UI is served under besides loopback and --ui-bind-address's host (an Ingress's; comma-separated): a request for any other Host is refused, so a web site rebound to 127.0.0.1 reads nothing through a port-forward", func(v string) error {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				f.uiAllowedHosts = append(f.uiAllowedHosts, h)
			}
		}
		return nil
	})
	fs.BoolVar(&f.reportStatuses, "report-statuses", false, "report each lock commit's result in this cluster to GitHub as a commit status (context styrmin/CLUSTER)")
	fs.StringVar(&f.statusSecret, "status-secret", "", "Secret in the agent's namespace holding the token for --report-statuses (default: --repo-secret)")
	fs.StringVar(&f.statusSecretKey, "status-secret-key", "token", "key of --status-secret holding the token")
	fs.StringVar(&f.statusAPIURL, "status-api-url", "", "GitHub's API for --report-statuses (default: api.github.com for github.com, https://HOST/api/v3 otherwise)")
	fs.StringVar(&f.statusRepository, "status-repository", "", "OWNER/NAME of the repository on GitHub for --report-statuses (default: from --repo)")
	fs.StringVar(&f.statusTargetURL, "status-target-url", "", "link of each commit status (for example the UI's address)")
	fs.StringVar(&f.webhookSecretName, "webhook-secret-name", "", "Secret in the agent's namespace holding the webhook's shared secret")
	fs.StringVar(&f.webhookSecretKey, "webhook-secret-key", operator.DefaultWebhookSecretKey, "key of --webhook-secret-name holding the shared secret")
	fs.BoolVar(&f.lockMode, "lock-mode", false, "lock each configuration head in the agent and push the lock commits (teams without CI; the credentials need write access)")
	fs.StringVar(&f.lockSecret, "lock-secret", "", "Secret holding the push credentials for --lock-mode (default: --repo-secret)")
	// On by default: two agents for one cluster without a shared lease
	// would both sync and run every step. A lone agent acquires the free
	// lease at once; one killed (not stopped) holds it until it expires.
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader (a Lease in --namespace) so that only one agent replica acts; --leader-elect=false only for a single agent that must take over at once after a crash")
	fs.BoolVar(&f.installCRDs, "install-crds", false, "apply the styrmin.io CRDs at start")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config, then $KUBECONFIG)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "json", "log format: json (one object a line) or text (key=value)")
	fs.Float64Var(&f.kubeAPIQPS, "kube-api-qps", operator.DefaultQPS, "requests per second the agent may send to the API server, shared by all its clients")
	fs.IntVar(&f.kubeAPIBurst, "kube-api-burst", operator.DefaultBurst, "requests the agent may send at once above --kube-api-qps")
	fs.IntVar(&f.taskConcurrency, "task-concurrency", operator.DefaultTaskConcurrency, "tasks (of different deployments) run at once")
	fs.IntVar(&f.deploymentConcurrency, "deployment-concurrency", operator.DefaultDeploymentConcurrency, "StyrminDeployments reconciled (applied, checked) at once")
	fs.IntVar(&f.keepTasks, "keep-tasks", operator.DefaultKeepTasks, "finished tasks kept per deployment (its history in the cluster); older ones are deleted")
	fs.StringVar(&f.gcPercent, "gc-percent", "", fmt.Sprintf(`garbage-collection target, Go's GOGC: the heap may grow by this percent of what is live before a collection ("": %d, unless GOGC is set)`, operator.DefaultGCPercent))
	fs.StringVar(&f.memoryLimit, "memory-limit", "", `soft memory limit of Go's heap, e.g. 200Mi ("": 90% of the container's memory limit, unless GOMEMLIMIT is set; "0": none)`)
	fs.DurationVar(&f.driverTimeout, "driver-timeout", drivers.DefaultTimeout, "time limit of one driver load or render (a repository's styrmin.cue may set less)")
	fs.StringVar(&f.driverMemory, "driver-memory", "128Mi", "memory limit of one driver evaluation, e.g. 128Mi; keep it under the container's memory limit minus the agent's own use")
	fs.StringVar(&f.driverRendered, "driver-rendered-bytes", "64Mi", "most bytes a chart may render to")
	fs.StringVar(&f.driverChart, "driver-chart-bytes", "64Mi", "most bytes a driver's subchart archives may unpack to")
	fs.StringVar(&f.driverFetch, "driver-fetch-bytes", "32Mi", "most bytes one fetch of a driver repository (styrmin.cue's driver sources) may hold in memory, objects counted inflated; the fetched trees kept are bounded the same")
	fs.StringVar(&f.configMemory, "config-memory", "64Mi", "memory limit of evaluating one configuration file of the repository (styrmin.cue, cluster, environment and deployment files), first in a sandbox child and then in the agent: keep it well under the container's memory limit minus the agent's own use")
	fs.IntVar(&f.driverParallel, "driver-parallelism", 2, "driver evaluations (child processes) running at once; each may use up to --driver-memory")
	fs.BoolVar(&f.driverInProcess, "driver-in-process", false, "evaluate drivers in the agent's process: no memory limit, and a driver over its time limit is abandoned, not stopped")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	fs.DurationVar(&f.stuckAfter, "stuck-after", operator.DefaultStuckAfter, "how long one reconcile may run before /healthz fails (the kubelet then restarts the agent); a task step's exec, which runs up to the step's timeout, is not counted")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// --version needs no cluster: it is how an image's build is told.
	if f.version {
		return f, nil
	}
	if f.cluster == "" || f.repoURL == "" {
		return nil, errors.New("--cluster and --repo are required")
	}
	if f.taskConcurrency < 1 || f.deploymentConcurrency < 1 {
		return nil, fmt.Errorf("--task-concurrency %d, --deployment-concurrency %d: expected at least 1 each", f.taskConcurrency, f.deploymentConcurrency)
	}
	return f, nil
}

// driverOptions turns the driver flags into the agent's driver options;
// the sandbox child is this executable (main serves it).
func (f *flags) driverOptions() (operator.DriverOptions, error) {
	o := operator.DriverOptions{Limits: drivers.Limits{Timeout: f.driverTimeout}}
	var configMemory int64
	for _, q := range []struct {
		flag, value string
		into        *int64
	}{
		{"--driver-memory", f.driverMemory, &o.Limits.Memory},
		{"--driver-rendered-bytes", f.driverRendered, &o.Limits.RenderedBytes},
		{"--driver-chart-bytes", f.driverChart, &o.Limits.ChartBytes},
		{"--config-memory", f.configMemory, &configMemory},
	} {
		v, err := resource.ParseQuantity(q.value)
		if err != nil || v.Value() <= 0 {
			return o, fmt.Errorf("%s: %q is not a positive quantity (for example 128Mi)", q.flag, q.value)
		}
		*q.into = v.Value()
	}
	if !f.driverInProcess {
		sb, err := drivers.SelfSandbox(f.driverParallel)
		if err != nil {
			return o, err
		}
		o.Sandbox = sb
		// The repository's own files are evaluated there too, within
		// their own memory limit.
		o.Config = resolver.NewConfigSandbox(sb, drivers.Limits{Timeout: f.driverTimeout, Memory: configMemory})
	}
	return o, nil
}

// run is the agent's command: --help and --version print and return nil
// (exit 0); otherwise it runs the agent until ctx ends.
// logHandler is the agent's log handler for --log-format and --log-level;
// an unknown value is an error naming the accepted ones.
func logHandler(format, level string, w io.Writer) (slog.Handler, error) {
	var lv slog.Level
	switch level {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level %q: expected debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	case "text":
		return slog.NewTextHandler(w, opts), nil
	default:
		return nil, fmt.Errorf("--log-format %q: expected json or text", format)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		// The flag package has printed the usage; asking for it is no error.
		return nil
	}
	if err != nil {
		return err
	}
	if f.version {
		_, err := fmt.Fprintln(stdout, version.Get().String())
		return err
	}
	handler, err := logHandler(f.logFormat, f.logLevel, stderr)
	if err != nil {
		return err
	}
	log := logr.FromSlogHandler(handler)
	ctrllog.SetLogger(log)
	percent, set, err := operator.GCPercent(f.gcPercent, os.Getenv("GOGC"))
	if err != nil {
		return err
	}
	if set {
		debug.SetGCPercent(percent)
	}
	limit, err := operator.SoftMemoryLimit(f.memoryLimit, os.Getenv("GOMEMLIMIT"), os.DirFS("/sys"))
	if err != nil {
		return err
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
		log.Info("soft memory limit set", "bytes", limit)
	}
	fetchBytes, err := resource.ParseQuantity(f.driverFetch)
	if err != nil || fetchBytes.Value() <= 0 {
		return fmt.Errorf("--driver-fetch-bytes: %q is not a positive quantity (for example 64Mi)", f.driverFetch)
	}
	dopts, err := f.driverOptions()
	if err != nil {
		return err
	}
	if dopts.Sandbox != nil {
		defer dopts.Sandbox.Close()
	}
	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	var lockMode *operator.LockModeOptions
	if f.lockMode {
		lockMode = &operator.LockModeOptions{SecretName: f.lockSecret}
	}
	return operator.RunAgent(ctx, cfg, operator.Options{
		Manager: operator.ManagerOptions{
			Namespace:      f.namespace,
			LeaderElection: f.leaderElect,
			MetricsAddr:    f.metricsAddr,
			PprofAddr:      f.pprofAddr,
			HealthAddr:     f.healthAddr,
			DriftInterval:  f.driftInterval,
			PodStatusAfter: f.podStatusAfter,
			QPS:            float32(f.kubeAPIQPS),
			Burst:          f.kubeAPIBurst,
			StuckAfter:     f.stuckAfter,
			Concurrency:    f.deploymentConcurrency,
			Logger:         log,
		},
		Cluster:             f.cluster,
		URL:                 f.repoURL,
		Branch:              f.branch,
		SecretName:          f.secretName,
		SecretNamespace:     f.secretNamespace,
		CloneDir:            f.cloneDir,
		GitTimeout:          f.gitTimeout,
		CredentialsInterval: f.credentialsInterval,
		Path:                f.path,
		PollInterval:        f.pollInterval,
		InstallCRDs:         f.installCRDs,
		Task:                operator.TaskOptions{StepTimeout: f.stepTimeout, StepPause: f.stepPause, KeepTasks: f.keepTasks, Concurrency: f.taskConcurrency},
		Webhook:             operator.WebhookOptions{Addr: f.webhookAddr, SecretName: f.webhookSecretName, SecretKey: f.webhookSecretKey},
		UI:                  operator.UIOptions{Addr: f.uiAddr, AllowedHosts: f.uiAllowedHosts},
		Statuses: operator.StatusOptions{Enabled: f.reportStatuses, SecretName: f.statusSecret, SecretKey: f.statusSecretKey,
			APIURL: f.statusAPIURL, TargetURL: f.statusTargetURL, Repository: f.statusRepository},
		LockMode:         lockMode,
		Drivers:          dopts,
		DriverFetchBytes: fetchBytes.Value(),
	})
}

// restConfig loads the kubeconfig named by the flag, else the in-cluster
// config, else $KUBECONFIG and the default loading rules.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w", err)
	}
	return cfg, nil
}
