package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/internal/eventnote"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/operator/source"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/operator/webhook"
	"github.com/styrmin/styrmin/resolver"
)

// Keys of the Secret holding the repository's credentials.
const (
	SecretKeyToken      = "token"       // https access token
	SecretKeyUsername   = "username"    // https user name (optional)
	SecretKeyIdentity   = "identity"    // ssh private key
	SecretKeyPassphrase = "passphrase"  // of the ssh key (optional)
	SecretKeyKnownHosts = "known_hosts" // ssh host keys
)

// DefaultAgentNamespace is the namespace of the agent's own objects (its
// StyrminSource, its leader election lease) when none is given.
const DefaultAgentNamespace = "styrmin-system"

// eventSource is the reporting controller of the agent's events.
const eventSource = v1alpha1.AgentEventSource

// Options configure the agent.
type Options struct {
	// Manager configures the controller manager and the StyrminDeployment
	// controller (Drivers is filled in by NewAgent). Manager.Namespace is
	// the agent's namespace (default DefaultAgentNamespace).
	Manager ManagerOptions
	// Cluster is the cluster this agent applies locks of.
	Cluster string
	// URL and Branch name the desired-state repository.
	URL    string
	Branch string
	// SecretName names the Secret holding the repository's credentials
	// (keys token and username, or identity, passphrase and known_hosts).
	// Empty: none.
	SecretName string
	// SecretNamespace is the Secret's namespace (default: the agent's).
	SecretNamespace string
	// CredentialsInterval is how often the repository's credentials (and
	// the lock mode's) are read again from their Secret, so a rotated
	// token is used without a restart (0: CredentialsInterval).
	CredentialsInterval time.Duration
	// CloneDir is where the repository is cloned ("" keeps it in memory).
	CloneDir string
	// GitTimeout bounds each clone, fetch and push of the repository
	// (0: gitsource.DefaultNetworkTimeout).
	GitTimeout time.Duration
	// Path is the folder of the git repository that holds the
	// desired-state repository (a monorepo's deploy/); "" is its root.
	Path string
	// PollInterval between fetches (default source.DefaultPollInterval).
	PollInterval time.Duration
	// SourceName names the StyrminSource keeping the sync position
	// (default "styrmin").
	SourceName string
	// InstallCRDs applies the styrmin.io CRDs at start.
	InstallCRDs bool
	// Task tunes the task controller (Client, Drivers, Locks and Recorder
	// are filled in by NewAgent).
	Task task.Options
	// ScheduleInterval is how often the backup scheduler looks at the
	// environments' schedules (0: operation.DefaultScheduleInterval).
	ScheduleInterval time.Duration
	// Now is the clock of backups and their schedules (nil: time.Now;
	// tests move it).
	Now func() time.Time
	// Webhook, when its Addr is set, serves GitHub webhooks.
	Webhook WebhookOptions
	// UI, when its Addr is set, serves the read-only web UI.
	UI UIOptions
	// Statuses, when enabled, reports each lock commit's result to the
	// git host.
	Statuses StatusOptions
	// LockMode, when set, runs the lock step in the agent (see
	// source.Locker); only the elected replica locks.
	LockMode *source.LockModeOptions
	// Drivers bound every driver load and render (limits, sandbox).
	Drivers driversource.LoadOptions
	// DriverFetchBytes bounds what one fetch of a driver repository holds
	// in memory, and the fetched trees kept (0:
	// gitsource.DefaultMaxFetchBytes).
	DriverFetchBytes int64
}

// WebhookOptions configure the agent's webhook receiver.
type WebhookOptions struct {
	// Addr, when set, serves GitHub webhooks there.
	Addr string
	// SecretName names the Secret in the agent's namespace holding the
	// shared secret under SecretKey (default webhook.DefaultSecretKey).
	SecretName string
	SecretKey  string
	// OnListening, when set, receives the bound address (tests listen on
	// port 0).
	OnListening func(net.Addr)
}

// Agent is the in-cluster agent: one controller manager running the
// StyrminDeployment and task controllers, the source sync and, when
// configured, the locker and the webhook receiver.
type Agent struct {
	mgr    ctrl.Manager
	syncer *source.Syncer
	locker *source.Locker
	log    logr.Logger
}

// NewAgent clones the repository (retrying while the remote cannot be
// reached) and builds the agent: the controller manager once, with every
// runnable added to it. The syncer and the locker run only on the elected
// replica; the webhook receiver on every replica.
func NewAgent(ctx context.Context, cfg *rest.Config, opts Options) (*Agent, error) {
	if opts.Cluster == "" || opts.URL == "" {
		return nil, errors.New("agent: the cluster name and the repository URL are required")
	}
	if opts.Manager.Namespace == "" {
		opts.Manager.Namespace = DefaultAgentNamespace
	}
	if opts.SourceName == "" {
		opts.SourceName = "styrmin"
	}
	if opts.Manager.Logger.GetSink() == nil {
		opts.Manager.Logger = logr.Discard()
	}
	log := opts.Manager.Logger
	if opts.InstallCRDs {
		if err := InstallCRDs(ctx, cfg); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("agent: client: %w", err)
	}
	creds, err := credentialsOf(ctx, direct, opts.SecretName, opts.SecretNamespace, opts)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	auth := creds.Current()
	clone, err := cloneWithRetry(ctx, opts, auth)
	if err != nil {
		return nil, err
	}
	creds.Use(clone.SetAuth)
	// Everything below reads the desired-state folder as its root.
	repo, err := clone.InFolder(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("agent: --path: %w", err)
	}
	if opts.Drivers.Config == nil {
		// What the agent reads of the repository's own configuration
		// is evaluated in the drivers' sandbox first: an author of the
		// repository could otherwise exhaust the agent's memory.
		opts.Drivers.Config = resolver.NewConfigSandbox(opts.Drivers.Sandbox, opts.Drivers.Limits)
	}
	// Drivers kept in other repositories are fetched with the
	// repository's own credentials (sent only to its host).
	remotes := driversource.Remotes{RepoURL: opts.URL, Auth: auth, Credentials: creds.Current, MaxFetchBytes: opts.DriverFetchBytes}
	// Tasks and renders read the repository at their lock's commit: a
	// replica elected after another is handed commits its clone has not
	// seen yet, which are fetched, not taken as gone; that fetch has the
	// bound of the agent's others (--git-timeout).
	caught := gitsource.NewCatchUp(repo, gitsource.CatchUpOptions{Timeout: opts.GitTimeout})
	drv := driversource.NewRepoDrivers(caught, driversource.NewRemoteTrees(remotes.FetchCommit, driversource.RemoteTreesOptions{MaxBytes: opts.DriverFetchBytes}), opts.Drivers)
	opts.Manager.Drivers = drv
	// A change is rendered by its task and by the StyrminDeployment
	// controller: once, through one cache.
	renders := driversource.NewRenders(0)
	opts.Manager.Renders = renders
	// Whether a change whose task's last step writes the instance ended
	// active or failed is settled between the two controllers here.
	claims := instance.NewActiveClaims()
	opts.Manager.ActiveClaims = claims
	mgr, err := NewManager(cfg, opts.Manager)
	if err != nil {
		return nil, err
	}
	a := &Agent{mgr: mgr, log: log}
	if err := creds.addTo(mgr); err != nil {
		return nil, err
	}
	recorder := eventnote.Wrap(mgr.GetEventRecorder(eventSource))
	locks := instance.NewRepoLocks(caught).WithConfigSandbox(opts.Drivers.Config)
	topts := opts.Task
	topts.Client = mgr.GetClient()
	topts.APIReader = mgr.GetAPIReader()
	topts.Drivers = drv
	topts.Renders = renders
	topts.ActiveClaims = claims
	topts.Locks = locks
	topts.Branch = repo
	topts.Policies = locks
	topts.Source = types.NamespacedName{Namespace: opts.Manager.Namespace, Name: opts.SourceName}
	topts.Recorder = recorder
	if topts.Exec == nil || topts.Logs == nil {
		pods, err := task.NewKubePods(cfg)
		if err != nil {
			return nil, err
		}
		if topts.Exec == nil {
			topts.Exec = pods
		}
		if topts.Logs == nil {
			topts.Logs = pods
		}
	}
	if topts.Impersonate == nil {
		topts.Impersonate = task.NewImpersonation(cfg, mgr.GetScheme(), mgr.GetRESTMapper())
	}
	if topts.AgentNamespace == "" {
		topts.AgentNamespace = opts.Manager.Namespace
	}
	settings := a.backupSettings(mgr.GetClient(), repo, opts)
	if topts.BackupSettings == nil {
		topts.BackupSettings = func(ctx context.Context, cluster, env string) (resolver.EnvironmentBackups, error) {
			return operation.EnvironmentSettings(ctx, settings, cluster, env)
		}
	}
	tr, err := task.NewReconciler(topts)
	if err != nil {
		return nil, err
	}
	if err := tr.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("agent: task controller: %w", err)
	}
	if err := a.addOperations(mgr, settings, drv, opts); err != nil {
		return nil, err
	}
	a.syncer, err = source.NewSyncer(source.SyncerOptions{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Repo:      repo,
		Cluster:   opts.Cluster,
		Source:    types.NamespacedName{Namespace: opts.Manager.Namespace, Name: opts.SourceName},
		Path:      opts.Path,
		Spec:      v1alpha1.StyrminSourceSpec{URL: repo.RemoteURL(), Branch: repo.Branch(), Cluster: opts.Cluster, SecretName: opts.SecretName},
		Interval:  opts.PollInterval,
		Locks:     locks,
		Recorder:  recorder,
		LockMode:  opts.LockMode != nil,
		Log:       log.WithName("sync"),
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(a.syncer); err != nil {
		return nil, err
	}
	var poster *commitstatus.Client
	if opts.Statuses.Enabled {
		if poster, err = statusPoster(ctx, direct, opts); err != nil {
			return nil, err
		}
	}
	if opts.LockMode != nil {
		if err := a.addLocker(ctx, direct, opts, creds, remotes, poster); err != nil {
			return nil, err
		}
	}
	// A sync request recorded on the StyrminSource (by the webhook
	// receiver of any replica, or by hand) wakes the elected replica's
	// syncer and locker.
	srcKey := types.NamespacedName{Namespace: opts.Manager.Namespace, Name: opts.SourceName}
	triggers := []func(){a.syncer.Trigger}
	if a.locker != nil {
		triggers = append(triggers, a.locker.Trigger)
	}
	if err := source.WatchRequests(mgr, srcKey, triggers...); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if opts.Webhook.Addr != "" {
		if err := a.addWebhook(direct, srcKey, opts); err != nil {
			return nil, err
		}
	}
	if opts.UI.Addr != "" {
		if err := a.addUI(clone, opts); err != nil {
			return nil, err
		}
	}
	if poster != nil {
		if err := a.addStatusReporter(opts, repo, poster); err != nil {
			return nil, err
		}
	}
	log.Info("agent built", "cluster", opts.Cluster, "repository", repo.RemoteURL(), "branch", repo.Branch())
	return a, nil
}

// Start runs the agent until ctx ends.
func (a *Agent) Start(ctx context.Context) error {
	return a.mgr.Start(ctx)
}

// Syncer is the agent's source sync (its Trigger asks for a sync now).
func (a *Agent) Syncer() *source.Syncer { return a.syncer }

// Locker is the agent's locker, nil without lock mode.
func (a *Agent) Locker() *source.Locker { return a.locker }

// RunAgent builds the agent and runs it until ctx ends.
func RunAgent(ctx context.Context, cfg *rest.Config, opts Options) error {
	a, err := NewAgent(ctx, cfg, opts)
	if err != nil {
		return err
	}
	return a.Start(ctx)
}

// backupSettings reads the environments' backup settings from git at the
// commit the agent synced last (its fetched head before the first sync).
func (a *Agent) backupSettings(c client.Reader, repo *gitsource.Folder, opts Options) operation.SettingsFunc {
	srcKey := types.NamespacedName{Namespace: opts.Manager.Namespace, Name: opts.SourceName}
	return func(ctx context.Context) ([]resolver.EnvironmentBackups, error) {
		var src v1alpha1.StyrminSource
		if err := c.Get(ctx, srcKey, &src); err != nil {
			return nil, fmt.Errorf("reading StyrminSource %s: %w", srcKey, err)
		}
		commit := src.Status.LastSyncedCommit
		if commit == "" {
			commit = src.Status.LastFetchedCommit
		}
		h, err := gitsource.ParseHash(commit)
		if err != nil {
			return nil, fmt.Errorf("StyrminSource %s has synced no commit yet", srcKey)
		}
		fsys, err := repo.FS(h)
		if err != nil {
			return nil, err
		}
		return resolver.NewLoader(0).WithSandbox(opts.Drivers.Config).BackupSettings(fsys)
	}
}

// addOperations adds the StyrminBackup and StyrminRestore controllers
// and the backup scheduler.
func (a *Agent) addOperations(mgr ctrl.Manager, settings operation.SettingsFunc, drv driversource.Source, opts Options) error {
	c := mgr.GetClient()
	oo := operation.Options{Client: c, APIReader: mgr.GetAPIReader(), Drivers: drv, Settings: settings,
		Namespace: opts.Manager.Namespace, Cluster: opts.Cluster, Now: opts.Now,
		Source: types.NamespacedName{Namespace: opts.Manager.Namespace, Name: opts.SourceName}}
	br, err := operation.NewBackupReconciler(oo)
	if err != nil {
		return err
	}
	if err := br.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("agent: backup controller: %w", err)
	}
	rr, err := operation.NewRestoreReconciler(oo)
	if err != nil {
		return err
	}
	if err := rr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("agent: restore controller: %w", err)
	}
	sched, err := operation.NewScheduler(oo, opts.ScheduleInterval, a.log.WithName("backups"))
	if err != nil {
		return err
	}
	return mgr.Add(sched)
}

// addLocker adds the lock mode's locker as a runnable of the elected
// replica: two replicas never lock the same head twice. Each lock commit
// it pushes triggers the syncer. It fetches driver sources as the
// agent's driver source does (remotes), so what it locks the agent can
// fetch.
func (a *Agent) addLocker(ctx context.Context, direct client.Reader, opts Options, repoCreds *repoCredentials, remotes driversource.Remotes, poster *commitstatus.Client) error {
	lo := *opts.LockMode
	if lo.URL == "" {
		lo.URL = opts.URL
	}
	if lo.Branch == "" {
		lo.Branch = opts.Branch
	}
	if lo.NetworkTimeout == 0 {
		lo.NetworkTimeout = opts.GitTimeout
	}
	if lo.Dir == "" {
		lo.Dir = opts.Path
	}
	if lo.Interval == 0 {
		lo.Interval = opts.PollInterval
	}
	if lo.Log.GetSink() == nil {
		lo.Log = a.log.WithName("lock")
	}
	if lo.FetchDriver == nil {
		lo.FetchDriver = remotes.LockFetcher
	}
	if lo.Sandbox == nil && lo.DriverLimits == (drivers.Limits{}) {
		lo.DriverLimits, lo.Sandbox = opts.Drivers.Limits, opts.Drivers.Sandbox
	}
	if lo.ConfigSandbox == nil {
		lo.ConfigSandbox = opts.Drivers.Config
	}
	if lo.Used == nil {
		c := a.mgr.GetClient()
		lo.Used = func(ctx context.Context) (resolver.UsedSequences, error) { return UsedSequences(ctx, c) }
	}
	if lo.RanDigests == nil {
		c := a.mgr.GetClient()
		lo.RanDigests = func(ctx context.Context) (map[resolver.ID]string, error) { return RanDigests(ctx, c) }
	}
	if lo.SecretName == "" {
		lo.SecretName, lo.SecretNamespace = opts.SecretName, opts.SecretNamespace
	}
	// The push credentials are read again as the repository's are (the
	// same, unless --lock-secret names others).
	creds := repoCreds
	if lo.SecretName != opts.SecretName || cmp.Or(lo.SecretNamespace, opts.Manager.Namespace) != cmp.Or(opts.SecretNamespace, opts.Manager.Namespace) {
		var err error
		if creds, err = credentialsOf(ctx, direct, lo.SecretName, lo.SecretNamespace, opts); err != nil {
			return fmt.Errorf("agent: lock mode: %w", err)
		}
		if err := creds.addTo(a.mgr); err != nil {
			return err
		}
	}
	lo.Auth = creds.Current()
	if lo.Statuses == nil && poster != nil {
		lo.Statuses, lo.StatusContext, lo.StatusTargetURL = poster, "styrmin/"+opts.Cluster+"/lock", opts.Statuses.TargetURL
	}
	sc := &source.SourceConditions{Client: a.mgr.GetClient(), Reader: a.mgr.GetAPIReader(),
		Source: types.NamespacedName{Namespace: opts.Manager.Namespace, Name: opts.SourceName}}
	if lo.Conditions == nil {
		lo.Conditions = sc
	}
	if lo.State == nil {
		// The statuses the host has not taken outlive this process.
		lo.State = sc
	}
	prev := lo.OnLocked
	lo.OnLocked = func(r source.LockResult) {
		a.syncer.Trigger()
		if prev != nil {
			prev(r)
		}
	}
	locker, err := source.NewLocker(lo)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.locker = locker
	creds.Use(locker.SetAuth)
	return a.mgr.Add(a.locker)
}

// addWebhook adds the webhook receiver, on every replica: a verified push
// is recorded on the StyrminSource src (source.RequestSync), which the
// elected replica watches, so a push that reaches another replica still
// triggers its locker and syncer.
func (a *Agent) addWebhook(direct client.Client, src types.NamespacedName, opts Options) error {
	wo := opts.Webhook
	if wo.SecretName == "" {
		return errors.New("agent: the webhook receiver needs the name of the Secret holding its shared secret")
	}
	if opts.Branch == "" {
		return errors.New("agent: the webhook receiver needs the tracked branch named (--branch)")
	}
	ws, err := webhook.NewServer(webhook.ServerOptions{
		Addr:      wo.Addr,
		Reader:    direct,
		Secret:    types.NamespacedName{Namespace: opts.Manager.Namespace, Name: wo.SecretName},
		SecretKey: wo.SecretKey,
		Branch:    opts.Branch,
		// An organisation's webhook sends every repository's pushes.
		Repo: opts.URL,
		OnPush: func(ctx context.Context, _ webhook.Event) error {
			return source.RequestSync(ctx, direct, src, time.Now())
		},
		Log: a.log.WithName("webhook"),
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	addr, err := ws.Listen()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if wo.OnListening != nil {
		wo.OnListening(addr)
	}
	return a.mgr.Add(ws)
}

var (
	_ manager.LeaderElectionRunnable = (*source.Locker)(nil)
	_ manager.LeaderElectionRunnable = (*webhook.Server)(nil)
)

// cloneObjectCache bounds the decoded git objects the agent's clone on
// disk keeps in memory. The sync reads each lock commit's lockfiles once
// (and hands them to their tasks), so go-git's default of 96 MiB only
// filled with them: 12 MB at 2,000 deployments after two lock commits,
// more with each, and still 6.5 MB under a bound of 8 MiB. What is read
// again (commits and trees of recent history, a locks folder's tree of
// 2,000 entries is about 100 KB) fits in a few MiB.
const cloneObjectCache = 2 << 20

// cloneWithRetry clones the repository, retrying with backoff while the
// remote is unreachable; bad credentials end the agent at once.
func cloneWithRetry(ctx context.Context, opts Options, auth gitsource.Auth) (*gitsource.Repo, error) {
	if opts.CloneDir != "" {
		// A clone left by an earlier run is reused: fetching it costs less
		// than cloning again.
		if entries, err := os.ReadDir(opts.CloneDir); err == nil && len(entries) > 0 {
			repo, err := gitsource.Open(opts.CloneDir, gitsource.OpenOptions{Remote: "origin", Branch: opts.Branch, Auth: auth, ObjectCacheSize: cloneObjectCache, NetworkTimeout: opts.GitTimeout})
			if err != nil {
				return nil, fmt.Errorf("agent: opening the clone in %s: %w (remove the folder to clone again)", opts.CloneDir, err)
			}
			return repo, nil
		}
	}
	delay := time.Second
	for {
		repo, err := gitsource.Clone(ctx, opts.URL, opts.CloneDir, gitsource.CloneOptions{Branch: opts.Branch, Auth: auth, ObjectCacheSize: cloneObjectCache, NetworkTimeout: opts.GitTimeout})
		if err == nil {
			return repo, nil
		}
		if errors.Is(err, gitsource.ErrAuth) || ctx.Err() != nil {
			return nil, fmt.Errorf("agent: cloning %s: %w", gitsource.PublicURL(opts.URL), err)
		}
		opts.Manager.Logger.Error(err, "cloning the repository failed; retrying", "after", delay)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("agent: cloning %s: %w", gitsource.PublicURL(opts.URL), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Minute)
	}
}

// AuthFromSecret reads the repository's credentials from a Secret: token
// (and username) for https, identity (and passphrase, known_hosts) for
// ssh. The values stay in memory; nothing logs them (gitsource.Auth
// redacts itself).
func AuthFromSecret(ctx context.Context, c client.Reader, key types.NamespacedName) (gitsource.Auth, error) {
	var s corev1.Secret
	if err := c.Get(ctx, key, &s); err != nil {
		return gitsource.Auth{}, fmt.Errorf("reading the repository credentials from Secret %s: %w", key, err)
	}
	a := gitsource.Auth{
		Token:            string(s.Data[SecretKeyToken]),
		Username:         string(s.Data[SecretKeyUsername]),
		SSHKey:           s.Data[SecretKeyIdentity],
		SSHKeyPassphrase: string(s.Data[SecretKeyPassphrase]),
		KnownHosts:       s.Data[SecretKeyKnownHosts],
	}
	if a.Token == "" && len(a.SSHKey) == 0 {
		return a, fmt.Errorf("Secret %s: expected key %q (https) or %q (ssh), found neither", key, SecretKeyToken, SecretKeyIdentity)
	}
	return a, nil
}
