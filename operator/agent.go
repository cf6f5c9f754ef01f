package operator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
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

// AgentOptions configures RunAgent.
type AgentOptions struct {
	// Manager configures the controller manager and the StyrminDeployment
	// controller (Drivers is filled in by RunAgent). Manager.Namespace is
	// the agent's namespace (default DefaultAgentNamespace).
	Manager Options
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
	// CloneDir is where the repository is cloned ("" keeps it in memory).
	CloneDir string
	// PollInterval between fetches (default DefaultPollInterval).
	PollInterval time.Duration
	// SourceName names the StyrminSource keeping the sync position
	// (default "styrmin").
	SourceName string
	// InstallCRDs applies the styrmin.io CRDs at start.
	InstallCRDs bool
	// Task tunes the task controller (Client, Drivers and Recorder are
	// filled in by RunAgent).
	Task TaskReconcilerOptions
	// OnSyncer, when set, receives the syncer once it exists (the webhook
	// receiver calls its Trigger).
	OnSyncer func(*Syncer)
}

// RunAgent runs the agent until ctx ends: it clones the repository, then
// runs the StyrminDeployment controller, the task controller and the
// source sync in one controller manager.
func RunAgent(ctx context.Context, cfg *rest.Config, opts AgentOptions) error {
	if opts.Cluster == "" || opts.URL == "" {
		return errors.New("agent: the cluster name and the repository URL are required")
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
	if opts.InstallCRDs {
		if err := InstallCRDs(ctx, cfg); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	scheme, err := NewScheme()
	if err != nil {
		return err
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("agent: client: %w", err)
	}
	var auth gitsource.Auth
	if opts.SecretName != "" {
		ns := opts.SecretNamespace
		if ns == "" {
			ns = opts.Manager.Namespace
		}
		key := types.NamespacedName{Namespace: ns, Name: opts.SecretName}
		if auth, err = AuthFromSecret(ctx, direct, key); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	repo, err := cloneWithRetry(ctx, opts, auth)
	if err != nil {
		return err
	}
	drv := NewRepoDrivers(repo)
	opts.Manager.Drivers = drv
	mgr, err := NewManager(cfg, opts.Manager)
	if err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("styrmin-agent")
	topts := opts.Task
	topts.Client = mgr.GetClient()
	topts.APIReader = mgr.GetAPIReader()
	topts.Drivers = drv
	locks := NewRepoLocks(repo)
	topts.Locks = locks
	topts.Recorder = recorder
	if topts.Exec == nil || topts.Logs == nil {
		pods, err := NewKubePods(cfg)
		if err != nil {
			return err
		}
		if topts.Exec == nil {
			topts.Exec = pods
		}
		if topts.Logs == nil {
			topts.Logs = pods
		}
	}
	tr, err := NewTaskReconciler(topts)
	if err != nil {
		return err
	}
	if err := tr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("agent: task controller: %w", err)
	}
	syncer, err := NewSyncer(SyncerOptions{
		Client:   mgr.GetClient(),
		Repo:     repo,
		Cluster:  opts.Cluster,
		Source:   types.NamespacedName{Namespace: opts.Manager.Namespace, Name: opts.SourceName},
		Spec:     v1alpha1.StyrminSourceSpec{URL: repo.RemoteURL(), Branch: repo.Branch(), Cluster: opts.Cluster, SecretName: opts.SecretName},
		Interval: opts.PollInterval,
		Locks:    locks,
		Recorder: recorder,
		Log:      opts.Manager.Logger.WithName("sync"),
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(syncer); err != nil {
		return err
	}
	if opts.OnSyncer != nil {
		opts.OnSyncer(syncer)
	}
	opts.Manager.Logger.Info("agent starting", "cluster", opts.Cluster, "repository", repo.RemoteURL(), "branch", repo.Branch())
	return mgr.Start(ctx)
}

// cloneWithRetry clones the repository, retrying with backoff while the
// remote is unreachable; bad credentials end the agent at once.
func cloneWithRetry(ctx context.Context, opts AgentOptions, auth gitsource.Auth) (*gitsource.Repo, error) {
	if opts.CloneDir != "" {
		// A clone left by an earlier run is reused: fetching it costs less
		// than cloning again.
		if entries, err := os.ReadDir(opts.CloneDir); err == nil && len(entries) > 0 {
			repo, err := gitsource.Open(opts.CloneDir, gitsource.OpenOptions{Remote: "origin", Branch: opts.Branch, Auth: auth})
			if err != nil {
				return nil, fmt.Errorf("agent: opening the clone in %s: %w (remove the folder to clone again)", opts.CloneDir, err)
			}
			return repo, nil
		}
	}
	delay := time.Second
	for {
		repo, err := gitsource.Clone(ctx, opts.URL, opts.CloneDir, gitsource.CloneOptions{Branch: opts.Branch, Auth: auth})
		if err == nil {
			return repo, nil
		}
		if errors.Is(err, gitsource.ErrAuth) || ctx.Err() != nil {
			return nil, fmt.Errorf("agent: cloning %s: %w", opts.URL, err)
		}
		opts.Manager.Logger.Error(err, "cloning the repository failed; retrying", "after", delay)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("agent: cloning %s: %w", opts.URL, err)
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

// DriverRepo is what RepoDrivers reads: the tracked head and the files at
// a commit. *gitsource.Repo implements it.
type DriverRepo interface {
	Head() (gitsource.Hash, error)
	FS(commit gitsource.Hash) (fs.FS, error)
}

var _ DriverRepo = (*gitsource.Repo)(nil)

// RepoDrivers is the agent's DriverSource: the drivers kept in the
// desired-state repository (drivers/<name>/<version>/), read at the
// fetched head. A version once loaded stays available (keyed by its
// digest), so an instance whose driver folder was since removed from the
// branch still runs while the agent lives.
type RepoDrivers struct {
	repo DriverRepo

	mu     sync.Mutex
	loaded map[string]*drivers.Driver // name@version@digest
}

var _ DriverSource = (*RepoDrivers)(nil)

// NewRepoDrivers returns a DriverSource over repo.
func NewRepoDrivers(repo DriverRepo) *RepoDrivers {
	return &RepoDrivers{repo: repo, loaded: map[string]*drivers.Driver{}}
}

// Driver returns the driver version ref pins.
func (s *RepoDrivers) Driver(_ context.Context, ref resolver.DriverRef) (*drivers.Driver, error) {
	key := ref.Name + "@" + ref.Version + "@" + ref.Digest
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.loaded[key]; ok {
		return d, nil
	}
	head, err := s.repo.Head()
	if err != nil {
		return nil, fmt.Errorf("driver %s@%s: %w", ref.Name, ref.Version, err)
	}
	fsys, err := s.repo.FS(head)
	if err != nil {
		return nil, fmt.Errorf("driver %s@%s: %w", ref.Name, ref.Version, err)
	}
	dir := path.Join("drivers", ref.Name, ref.Version)
	if !fs.ValidPath(dir) || ref.Name == "" || ref.Version == "" {
		return nil, &DriverNotFoundError{Ref: ref}
	}
	if _, err := fs.Stat(fsys, dir); errors.Is(err, fs.ErrNotExist) {
		return nil, &DriverNotFoundError{Ref: ref}
	}
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, err
	}
	d, err := drivers.Load(sub, drivers.LoadOptions{Source: dir})
	if err != nil {
		return nil, &DriverLoadError{Ref: ref, Err: err}
	}
	if ref.Digest != "" && d.Digest != ref.Digest {
		return nil, &DriverNotFoundError{Ref: ref, Digest: d.Digest}
	}
	s.loaded[ref.Name+"@"+ref.Version+"@"+d.Digest] = d
	s.loaded[key] = d
	return d, nil
}

// DriverLoadError reports a driver folder that exists but does not load:
// it needs a change in git.
type DriverLoadError struct {
	Ref resolver.DriverRef
	Err error
}

func (e *DriverLoadError) Error() string {
	return fmt.Sprintf("driver %s@%s: %v", e.Ref.Name, e.Ref.Version, e.Err)
}

func (e *DriverLoadError) Unwrap() error { return e.Err }
