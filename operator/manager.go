package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/deployment"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/health"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/internal/eventnote"
	"github.com/styrmin/styrmin/operator/internal/intern"
	"github.com/styrmin/styrmin/operator/internal/liveness"
	"github.com/styrmin/styrmin/operator/release"
	"github.com/styrmin/styrmin/operator/task"
)

// ManagerOptions configure the agent's controller manager and its
// StyrminDeployment controller.
type ManagerOptions struct {
	// Drivers gives the StyrminDeployment controller the drivers
	// instances pin. Required.
	Drivers driversource.Source
	// Renders is shared by the StyrminDeployment controller and the task
	// controller (optional: nil renders each time).
	Renders *driversource.Renders
	// ActiveClaims is shared by the StyrminDeployment controller and the
	// task controller (instance.ActiveClaims; nil: the controller records
	// a change active without asking its task).
	ActiveClaims *instance.ActiveClaims
	// Namespace is the agent's namespace: its leader election lease lives
	// there.
	Namespace string
	// LeaderElection makes only one agent replica act at a time.
	LeaderElection bool
	// LeaderElectionID names the lease (default "styrmin-agent").
	LeaderElectionID string
	// MetricsAddr is where Prometheus metrics are served (":8080"); "0"
	// turns the endpoint off (the default, for tests).
	MetricsAddr string
	// PprofAddr is where Go's profiles (/debug/pprof) are served; empty
	// or "0" turns them off.
	PprofAddr string
	// HealthAddr is where /healthz and /readyz are served; "" turns them
	// off.
	HealthAddr string
	// DriftInterval is how often each deployment's live objects are
	// compared with its release (default deployment.DefaultDriftInterval).
	DriftInterval time.Duration
	// PodStatusAfter is how long a deployment stays not ready before its
	// pods are read into its status (default
	// deployment.DefaultPodStatusAfter).
	PodStatusAfter time.Duration
	// Concurrency is how many StyrminDeployments reconcile at once
	// (default deployment.DefaultConcurrency).
	Concurrency int
	// QPS and Burst bound the agent's requests to the API server,
	// shared by all its clients (defaults DefaultQPS and DefaultBurst).
	QPS   float32
	Burst int
	// StuckAfter is how long one reconcile may run before /healthz fails
	// (default DefaultStuckAfter): longer than any normal reconcile, so
	// only a wedged controller gets the agent restarted.
	StuckAfter time.Duration
	// HelmMaxHistory bounds the revisions kept per release (default 10).
	HelmMaxHistory int
	// Logger is the agent's logger (default: discard).
	Logger logr.Logger
	// BeforeApply is deployment.Options.BeforeApply, for tests (nil in
	// the agent).
	BeforeApply func(ctx context.Context, namespace string)
}

func (o *ManagerOptions) defaults() error {
	if o.Drivers == nil {
		return errors.New("operator: Options.Drivers is required")
	}
	if o.LeaderElection && o.Namespace == "" {
		return errors.New("operator: leader election needs Options.Namespace (where the lease lives)")
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = "styrmin-agent"
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	if o.QPS <= 0 {
		o.QPS = DefaultQPS
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.HelmMaxHistory <= 0 {
		o.HelmMaxHistory = DefaultHelmMaxHistory
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	return nil
}

// The agent's default client rate limit. A deployment costs the agent
// about 12 requests; at 100 requests a second, 500 deployments in one
// commit waited on the agent's own token bucket while the API server had
// CPU to spare (60 s against 45 s at 300). The API server's priority and
// fairness, not this bucket, is what protects it from a busy agent.
const (
	DefaultQPS   = 300
	DefaultBurst = 600
)

// DefaultHelmMaxHistory is how many revisions of a release are kept, as
// `helm upgrade --history-max` keeps them.
const DefaultHelmMaxHistory = 10

// NewScheme returns a scheme with the built-in kinds and styrmin.io.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewManager returns the agent's controller manager with the
// StyrminDeployment controller registered. Start it with mgr.Start(ctx).
//
// The manager's cache holds StyrminDeployments and the apps/v1 workloads
// (Deployments, StatefulSets, DaemonSets) labelled
// app.kubernetes.io/managed-by=Helm, without managedFields. Reads of
// other workloads, or of managedFields, go through mgr.GetAPIReader().
func NewManager(cfg *rest.Config, opts ManagerOptions) (ctrl.Manager, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	// One token bucket for every client built from cfg (the manager's,
	// the clientset of the release records, the dynamic client).
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(opts.QPS, opts.Burst)
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        opts.Logger,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		// The lease is renewed with a client of its own, outside the
		// token bucket the controllers share: at hundreds of deployments
		// the controllers keep the bucket empty, and a renewal waiting
		// behind them past the deadline would end the agent.
		LeaderElectionConfig: leaderElectionConfig(cfg),
		// Flux's timings: an API server loaded by a large fan-out can
		// take seconds per request, and a lost lease restarts the agent.
		LeaseDuration:          ptr.To(35 * time.Second),
		RenewDeadline:          ptr.To(30 * time.Second),
		RetryPeriod:            ptr.To(5 * time.Second),
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: opts.HealthAddr,
		PprofBindAddress:       opts.PprofAddr,
		Cache:                  cacheOptions(),
	})
	if err != nil {
		return nil, fmt.Errorf("operator: new manager: %w", err)
	}
	if opts.HealthAddr != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
		stuck := opts.StuckAfter
		if stuck <= 0 {
			stuck = DefaultStuckAfter
		}
		if err := mgr.AddHealthzCheck("reconcile", liveness.Stuck(metrics.Registry, stuck)); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("operator: dynamic client: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("operator: clientset: %w", err)
	}
	releases, err := release.New(cs, dyn, mgr.GetRESTMapper(), release.Options{
		MaxHistory: opts.HelmMaxHistory,
		Logger:     logr.ToSlogHandler(opts.Logger.WithName("helm").V(1)),
		// Environments with a service account are applied as it.
		Config: cfg,
	})
	if err != nil {
		return nil, err
	}
	err = deployment.Setup(mgr, deployment.Options{
		Drivers:        opts.Drivers,
		Renders:        opts.Renders,
		ActiveClaims:   opts.ActiveClaims,
		Releases:       releases,
		Recorder:       eventnote.Wrap(mgr.GetEventRecorder(eventSource)),
		DriftInterval:  opts.DriftInterval,
		Concurrency:    opts.Concurrency,
		PodStatusAfter: opts.PodStatusAfter,
		Logger:         opts.Logger.WithName("styrmindeployment"),
		BeforeApply:    opts.BeforeApply,
	})
	if err != nil {
		return nil, fmt.Errorf("operator: StyrminDeployment controller: %w", err)
	}
	return mgr, nil
}

// leaderElectionConfig is cfg with a rate limiter of its own.
func leaderElectionConfig(cfg *rest.Config) *rest.Config {
	le := rest.CopyConfig(cfg)
	le.RateLimiter = nil
	le.QPS, le.Burst = 5, 10
	return le
}

// cacheOptions is what the agent's cache keeps of each kind: no
// managedFields, workloads without their pod templates
// (health.TrimWorkload), finished tasks without their steps but for what
// the hold on stopped components reads (task.TrimFinished), of Jobs only
// those of task steps and without their pod templates
// (deployment.TrimStepJob), and the strings that repeat across
// StyrminDeployments and tasks kept once (intern).
func cacheOptions() cache.Options {
	helmOwned := labels.SelectorFromSet(labels.Set{release.ManagedByLabel: release.ManagedByValue})
	workloads := cache.ByObject{Label: helmOwned, Transform: health.TrimWorkload}
	stepJob, err := labels.NewRequirement(v1alpha1.LabelTask, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label name
	}
	stepJobs := labels.NewSelector().Add(*stepJob)
	shared := intern.New(0)
	return cache.Options{
		// Nothing read from the cache needs managedFields (the drift
		// check reads them from the API server), and they are often
		// the largest part of a cached object.
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&appsv1.Deployment{}:  workloads,
			&appsv1.StatefulSet{}: workloads,
			&appsv1.DaemonSet{}:   workloads,
			// Finished tasks without their steps, but for what the hold
			// on stopped components reads (task.TrimFinished).
			&v1alpha1.StyrminTask{}:       {Transform: shared.Transform(task.TrimFinished, &v1alpha1.StyrminTask{})},
			&v1alpha1.StyrminDeployment{}: {Transform: shared.Transform(cache.TransformStripManagedFields(), &v1alpha1.StyrminDeployment{})},
			// Only the Jobs of task steps, for the drift check's hold
			// (deployment.TrimStepJob): a chart's Jobs are not watched.
			&batchv1.Job{}: {Label: stepJobs, Transform: deployment.TrimStepJob},
			// The releases' Ingresses, by host, for the check that an
			// apply takes no host another deployment holds
			// (deployment.HostIndex), with only what it reads.
			&networkingv1.Ingress{}: {Label: helmOwned, Transform: deployment.TrimIngress},
		},
	}
}
