package deployment

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/release"
)

// Defaults of Options.
const (
	// DefaultDriftInterval is how often each deployment's live objects are
	// compared with its release.
	DefaultDriftInterval = 5 * time.Minute
	// DefaultConcurrency is how many StyrminDeployments reconcile at once.
	DefaultConcurrency = 16
	// DefaultPodStatusAfter is how long a deployment stays not ready
	// before its pods are read: a rollout that is only slow costs no read.
	DefaultPodStatusAfter = 30 * time.Second
)

// Options configure the StyrminDeployment controller.
type Options struct {
	// Drivers gives the driver versions instances pin. Required.
	Drivers driversource.Source
	// Renders renders instances, sharing the renders with the task
	// controller (optional: nil renders each time).
	Renders *driversource.Renders
	// Releases applies, checks and uninstalls the releases. Required.
	Releases *release.Releases
	// Recorder records the Installed, Upgraded, Uninstalled and
	// DriftCorrected events. Required.
	Recorder events.EventRecorder
	// DriftInterval is how often each deployment is checked for drift (0:
	// DefaultDriftInterval).
	DriftInterval time.Duration
	// Concurrency is how many StyrminDeployments reconcile at once (0:
	// DefaultConcurrency).
	Concurrency int
	// PodStatusAfter is how long a deployment stays not ready before the
	// pods of its workloads that are not ready are read into its status
	// (0: DefaultPodStatusAfter). A failed workload's pods are read at
	// once.
	PodStatusAfter time.Duration
	// ActiveClaims is shared with the task controller: the controller
	// records a change active with Ready only when its task has not
	// claimed its failure (nil: it records without asking, for the
	// controller alone).
	ActiveClaims *instance.ActiveClaims
	// Registerer receives the controller's metrics (nil:
	// controller-runtime's registry).
	Registerer prometheus.Registerer
	// Logger is the controller's logger.
	Logger logr.Logger
	// BeforeApply, when set, is called by an apply after its checks (its
	// hosts taken), before it applies: tests hold an apply there to race
	// another against it. Nil in the agent.
	BeforeApply func(ctx context.Context, namespace string)
}

// Setup builds the controller and registers it with mgr: it reconciles
// StyrminDeployments and watches the workloads of their releases (a
// workload's change reconciles the StyrminDeployment of its namespace).
func Setup(mgr ctrl.Manager, opts Options) error {
	switch {
	case opts.Drivers == nil:
		return errors.New("StyrminDeployment controller: Options.Drivers is required")
	case opts.Releases == nil:
		return errors.New("StyrminDeployment controller: Options.Releases is required")
	case opts.Recorder == nil:
		return errors.New("StyrminDeployment controller: Options.Recorder is required")
	}
	if opts.DriftInterval <= 0 {
		opts.DriftInterval = DefaultDriftInterval
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.PodStatusAfter <= 0 {
		opts.PodStatusAfter = DefaultPodStatusAfter
	}
	if opts.Registerer == nil {
		opts.Registerer = crmetrics.Registry
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return err
	}
	r := &Reconciler{
		client:         mgr.GetClient(),
		apiReader:      mgr.GetAPIReader(),
		podStatusAfter: opts.PodStatusAfter,
		drivers:        opts.Drivers,
		renders:        opts.Renders,
		releases:       opts.Releases,
		scopes:         release.NewScopes(mgr.GetRESTMapper()),
		recorder:       opts.Recorder,
		claims:         opts.ActiveClaims,
		metrics:        m,
		interval:       opts.DriftInterval,
		now:            time.Now,
		beforeApply:    opts.BeforeApply,
		states:         map[string]*deploymentState{},
	}
	return r.setupWithManager(mgr, opts.Concurrency, opts.Logger)
}
