package operator

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/styrmin/styrmin/gitsource"
)

// CredentialsInterval is how often the agent reads the repository's
// credentials from their Secret again.
const CredentialsInterval = time.Minute

// repoCredentials are a repository's credentials as their Secret holds
// them now. The agent read them once at start, so a token rotated there
// (a GitHub App's installation token expires within the hour, a personal
// token is replaced before it expires) stalled the source on
// AuthenticationFailed until the agent was restarted. They are read again
// every interval, on every replica (each fetches), and each change is
// handed to what fetches or pushes with them.
type repoCredentials struct {
	reader   client.Reader
	key      types.NamespacedName
	interval time.Duration
	log      logr.Logger

	mu   sync.Mutex
	auth gitsource.Auth
	uses []func(gitsource.Auth) error
}

var _ manager.LeaderElectionRunnable = (*repoCredentials)(nil)

// newRepoCredentials reads the credentials of Secret key once: a Secret
// missing or without its keys is a mistake to report at start.
func newRepoCredentials(ctx context.Context, reader client.Reader, key types.NamespacedName, interval time.Duration, log logr.Logger) (*repoCredentials, error) {
	auth, err := AuthFromSecret(ctx, reader, key)
	if err != nil {
		return nil, err
	}
	if interval <= 0 {
		interval = CredentialsInterval
	}
	return &repoCredentials{reader: reader, key: key, interval: interval, log: log, auth: auth}, nil
}

// credentialsOf are the credentials of Secret name (in namespace, default
// the agent's), read again every opts.CredentialsInterval once added to
// the manager; nil (no credentials) without a name.
func credentialsOf(ctx context.Context, reader client.Reader, name, namespace string, opts Options) (*repoCredentials, error) {
	if name == "" {
		return nil, nil
	}
	key := types.NamespacedName{Namespace: cmp.Or(namespace, opts.Manager.Namespace), Name: name}
	return newRepoCredentials(ctx, reader, key, opts.CredentialsInterval, opts.Manager.Logger.WithName("credentials"))
}

// addTo runs the reading again on mgr (nothing for no credentials).
func (c *repoCredentials) addTo(mgr manager.Manager) error {
	if c == nil {
		return nil
	}
	return mgr.Add(c)
}

// Current returns the credentials read last (none for nil).
func (c *repoCredentials) Current() gitsource.Auth {
	if c == nil {
		return gitsource.Auth{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.auth
}

// Use hands every later change of the credentials to f (a clone's
// SetAuth); nothing for nil.
func (c *repoCredentials) Use(f func(gitsource.Auth) error) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uses = append(c.uses, f)
}

// Refresh reads the Secret again and, when the credentials changed, hands
// them on. A Secret that cannot be read, or holds no credentials, keeps
// the ones read before (they may still be good; the fetches say when not).
func (c *repoCredentials) Refresh(ctx context.Context) error {
	auth, err := AuthFromSecret(ctx, c.reader, c.key)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if auth.Equal(c.auth) {
		return nil
	}
	for _, use := range c.uses {
		if err := use(auth); err != nil {
			return err
		}
	}
	c.auth = auth
	c.log.Info("the repository's credentials changed in their Secret: using them", "secret", c.key.String())
	return nil
}

// Start reads the Secret again every interval until ctx ends.
func (c *repoCredentials) Start(ctx context.Context) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
				c.log.Error(err, "reading the repository's credentials again: the ones read before stay in use")
			}
		}
	}
}

// NeedLeaderElection is false: every replica fetches the repository.
func (c *repoCredentials) NeedLeaderElection() bool { return false }
