package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/webhook"
)

// DefaultWebhookSecretKey is the key of the webhook Secret holding the
// shared secret when WebhookOptions.SecretKey is empty.
const DefaultWebhookSecretKey = "webhook-secret"

// DefaultWebhookSecretTTL is how long a webhook secret read from its
// Secret is reused: a rotated secret takes effect within it.
const DefaultWebhookSecretTTL = 10 * time.Second

// WebhookOptions configures the agent's git webhook receiver.
type WebhookOptions struct {
	// Addr is the listen address (":9443", "127.0.0.1:0").
	Addr string
	// Reader reads the Secret holding the shared secret.
	Reader client.Reader
	// Secret names that Secret; SecretKey is its key (default
	// DefaultWebhookSecretKey).
	Secret    types.NamespacedName
	SecretKey string
	// SecretTTL bounds how long a read secret is reused (default
	// DefaultWebhookSecretTTL; negative: read on every request).
	SecretTTL time.Duration
	// Branch is the tracked branch; pushes to other refs are ignored.
	Branch string
	// OnPush is called for a verified push to Branch; it must not block.
	OnPush func(webhook.Event)
	// MaxBody bounds a request body (0: webhook.DefaultMaxBody).
	MaxBody int64
	// Log receives one line per request, never a payload or the secret.
	Log logr.Logger
}

// WebhookServer serves GitHub webhooks for the agent: a verified push to
// the tracked branch calls OnPush (the syncer's Trigger).
type WebhookServer struct {
	opts    WebhookOptions
	handler http.Handler

	mu      sync.Mutex
	cached  []byte
	expires time.Time

	ln net.Listener
}

// NewWebhookServer checks opts and builds the receiver; nothing listens
// until Listen or Start.
func NewWebhookServer(opts WebhookOptions) (*WebhookServer, error) {
	switch {
	case opts.Addr == "":
		return nil, errors.New("webhook server: Addr is required")
	case opts.Reader == nil:
		return nil, errors.New("webhook server: Reader is required")
	case opts.Secret.Name == "" || opts.Secret.Namespace == "":
		return nil, errors.New("webhook server: the webhook Secret needs a name and a namespace")
	case opts.Branch == "":
		return nil, errors.New("webhook server: Branch is required (the branch whose pushes trigger a sync)")
	}
	if opts.SecretKey == "" {
		opts.SecretKey = DefaultWebhookSecretKey
	}
	if opts.SecretTTL == 0 {
		opts.SecretTTL = DefaultWebhookSecretTTL
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	s := &WebhookServer{opts: opts}
	h, err := webhook.NewHandler(webhook.Options{
		Secret:  s.secret,
		Branch:  opts.Branch,
		OnPush:  opts.OnPush,
		MaxBody: opts.MaxBody,
		Log:     opts.Log,
	})
	if err != nil {
		return nil, err
	}
	s.handler = h
	return s, nil
}

// Handler is the receiver as an http.Handler (served at every path).
func (s *WebhookServer) Handler() http.Handler { return s.handler }

// secret returns the shared secret, read from the Secret at most once per
// SecretTTL. Failed reads are not cached, so a Secret created after the
// agent started is picked up by the next delivery.
func (s *WebhookServer) secret(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.cached != nil && now.Before(s.expires) {
		return s.cached, nil
	}
	var sec corev1.Secret
	if err := s.opts.Reader.Get(ctx, s.opts.Secret, &sec); err != nil {
		return nil, fmt.Errorf("reading the webhook secret from Secret %s: %w", s.opts.Secret, err)
	}
	v := sec.Data[s.opts.SecretKey]
	if len(v) == 0 {
		return nil, fmt.Errorf("Secret %s: key %q is missing or empty; expected the webhook's shared secret", s.opts.Secret, s.opts.SecretKey)
	}
	if s.opts.SecretTTL > 0 {
		s.cached, s.expires = v, now.Add(s.opts.SecretTTL)
	}
	return v, nil
}

// Listen opens the listen address and returns the address bound (useful
// with port 0). Start calls it when it was not called before.
func (s *WebhookServer) Listen() (net.Addr, error) {
	if s.ln != nil {
		return s.ln.Addr(), nil
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("webhook server: listening on %s: %w", s.opts.Addr, err)
	}
	s.ln = ln
	return ln.Addr(), nil
}

// Start serves until ctx ends, then shuts down gracefully. It fits
// manager.Runnable.
func (s *WebhookServer) Start(ctx context.Context) error {
	if _, err := s.Listen(); err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	s.opts.Log.Info("webhook receiver listening", "address", s.ln.Addr().String(), "branch", s.opts.Branch)
	select {
	case err := <-errc:
		return fmt.Errorf("webhook server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// AgentExtras are the optional parts of the agent that live around
// RunAgent: the webhook receiver and the lock mode.
type AgentExtras struct {
	// WebhookAddr, when set, serves GitHub webhooks there; the shared
	// secret is read from WebhookSecretName (key WebhookSecretKey, default
	// DefaultWebhookSecretKey) in the agent's namespace.
	WebhookAddr       string
	WebhookSecretName string
	WebhookSecretKey  string
	// OnWebhookListening, when set, receives the bound address (tests
	// listen on port 0).
	OnWebhookListening func(net.Addr)
	// LockMode, when set, runs the lock step in the agent (see Locker).
	LockMode *LockModeOptions
}

// RunAgentWithExtras runs RunAgent together with the extras: the webhook
// receiver triggers the syncer (and the locker) on a push; the locker
// triggers the syncer after each lock commit it pushed. Both stop with ctx.
func RunAgentWithExtras(ctx context.Context, cfg *rest.Config, opts AgentOptions, ex AgentExtras) error {
	if ex.WebhookAddr == "" && ex.LockMode == nil {
		return RunAgent(ctx, cfg, opts)
	}
	ns := opts.Manager.Namespace
	if ns == "" {
		ns = DefaultAgentNamespace
	}
	log := opts.Manager.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	scheme, err := NewScheme()
	if err != nil {
		return err
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("agent: client: %w", err)
	}

	var syncer atomic.Pointer[Syncer]
	triggerSync := func() {
		if s := syncer.Load(); s != nil {
			s.Trigger()
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 2)

	var locker *Locker
	if ex.LockMode != nil {
		lo := *ex.LockMode
		if lo.URL == "" {
			lo.URL = opts.URL
		}
		if lo.Branch == "" {
			lo.Branch = opts.Branch
		}
		if lo.Interval == 0 {
			lo.Interval = opts.PollInterval
		}
		if lo.Log.GetSink() == nil {
			lo.Log = log.WithName("lock")
		}
		if lo.SecretName == "" {
			lo.SecretName, lo.SecretNamespace = opts.SecretName, opts.SecretNamespace
		}
		if lo.SecretName != "" {
			sns := lo.SecretNamespace
			if sns == "" {
				sns = ns
			}
			if lo.Auth, err = AuthFromSecret(ctx, direct, types.NamespacedName{Namespace: sns, Name: lo.SecretName}); err != nil {
				return fmt.Errorf("agent: lock mode: %w", err)
			}
		}
		prev := lo.OnLocked
		lo.OnLocked = func(r LockResult) {
			triggerSync()
			if prev != nil {
				prev(r)
			}
		}
		if locker, err = NewLocker(lo); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := locker.Start(ctx); err != nil {
				errc <- err
			}
		}()
	}

	if ex.WebhookAddr != "" {
		if ex.WebhookSecretName == "" {
			return errors.New("agent: the webhook receiver needs the name of the Secret holding its shared secret")
		}
		branch := opts.Branch
		if branch == "" {
			return errors.New("agent: the webhook receiver needs the tracked branch named (--branch)")
		}
		ws, err := NewWebhookServer(WebhookOptions{
			Addr:      ex.WebhookAddr,
			Reader:    direct,
			Secret:    types.NamespacedName{Namespace: ns, Name: ex.WebhookSecretName},
			SecretKey: ex.WebhookSecretKey,
			Branch:    branch,
			OnPush: func(webhook.Event) {
				if locker != nil {
					locker.Trigger()
				}
				triggerSync()
			},
			Log: log.WithName("webhook"),
		})
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		addr, err := ws.Listen()
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		if ex.OnWebhookListening != nil {
			ex.OnWebhookListening(addr)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ws.Start(ctx); err != nil {
				errc <- err
			}
		}()
	}

	prev := opts.OnSyncer
	opts.OnSyncer = func(s *Syncer) {
		syncer.Store(s)
		if prev != nil {
			prev(s)
		}
	}
	agentErr := make(chan error, 1)
	go func() { agentErr <- RunAgent(ctx, cfg, opts) }()
	select {
	case err = <-agentErr:
	case err = <-errc:
		cancel()
		<-agentErr
	}
	cancel()
	wg.Wait()
	return err
}
