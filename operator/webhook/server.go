package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultSecretKey is the key of the webhook Secret holding the
// shared secret when ServerOptions.SecretKey is empty.
const DefaultSecretKey = "webhook-secret"

// DefaultSecretTTL is how long a webhook secret read from its
// Secret is reused: a rotated secret takes effect within it.
const DefaultSecretTTL = 10 * time.Second

// DefaultSecretRetry is how long a failed read of the webhook Secret is
// answered from memory: while the Secret does not exist (or the agent may
// not read it), deliveries anyone can send cost at most one API read per
// interval, and a Secret created meanwhile takes effect within it.
const DefaultSecretRetry = 2 * time.Second

// DefaultReadHeaderTimeout bounds the time a connection may take to send
// its request headers: a slowloris sender holds a connection no longer.
const DefaultReadHeaderTimeout = 5 * time.Second

// DefaultMaxHeaderBytes bounds request headers; GitHub's are about 1 KiB.
const DefaultMaxHeaderBytes = 16 << 10

// ServerOptions configures the agent's git webhook receiver.
type ServerOptions struct {
	// Addr is the listen address (":9443", "127.0.0.1:0").
	Addr string
	// Reader reads the Secret holding the shared secret.
	Reader client.Reader
	// Secret names that Secret; SecretKey is its key (default
	// DefaultSecretKey).
	Secret    types.NamespacedName
	SecretKey string
	// SecretTTL bounds how long a read secret is reused (default
	// DefaultSecretTTL; negative: read on every request).
	SecretTTL time.Duration
	// SecretRetry bounds how long a failed read is answered without
	// reading again (default DefaultSecretRetry, at most SecretTTL;
	// negative, or a negative SecretTTL: read on every request).
	SecretRetry time.Duration
	// Branch is the tracked branch; pushes to other refs are ignored.
	Branch string
	// Repo is the tracked repository's remote URL; pushes naming another
	// repository are ignored (see Options.Repo).
	Repo string
	// OnPush is called for a verified, new push to Branch (see
	// Options.OnPush); it must return quickly.
	OnPush func(context.Context, Event) error
	// MaxBody bounds a request body (0: DefaultMaxBody).
	MaxBody int64
	// MaxInFlight, BodyTimeout and SlowAfter bound the requests not yet
	// verified (see Options; 0: their defaults).
	MaxInFlight int
	BodyTimeout time.Duration
	SlowAfter   time.Duration
	// ReadHeaderTimeout bounds the time to send the headers (0:
	// DefaultReadHeaderTimeout).
	ReadHeaderTimeout time.Duration
	// Log receives one line per request, never a payload or the secret.
	Log logr.Logger
}

// Server serves GitHub webhooks for the agent: a verified push to the
// tracked branch calls OnPush, which records the request on the
// StyrminSource so the elected replica syncs, whichever replica received
// it.
type Server struct {
	opts    ServerOptions
	handler http.Handler

	// lock serialises reads of the Secret; a channel, so a caller that
	// gives up (an evicted request) stops waiting for it.
	lock    chan struct{}
	cached  []byte
	expires time.Time
	// failed is the last read's error, answered until retryAt.
	failed  error
	retryAt time.Time

	ln net.Listener
}

// NewServer checks opts and builds the receiver; nothing listens
// until Listen or Start.
func NewServer(opts ServerOptions) (*Server, error) {
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
		opts.SecretKey = DefaultSecretKey
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.SecretTTL == 0 {
		opts.SecretTTL = DefaultSecretTTL
	}
	switch {
	case opts.SecretTTL < 0:
		opts.SecretRetry = -1
	case opts.SecretRetry == 0:
		opts.SecretRetry = min(DefaultSecretRetry, opts.SecretTTL)
	case opts.SecretRetry > opts.SecretTTL:
		opts.SecretRetry = opts.SecretTTL
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	s := &Server{opts: opts, lock: make(chan struct{}, 1)}
	h, err := NewHandler(Options{
		Secret:      s.secret,
		Branch:      opts.Branch,
		Repo:        opts.Repo,
		OnPush:      opts.OnPush,
		MaxBody:     opts.MaxBody,
		MaxInFlight: opts.MaxInFlight,
		BodyTimeout: opts.BodyTimeout,
		SlowAfter:   opts.SlowAfter,
		Log:         opts.Log,
	})
	if err != nil {
		return nil, err
	}
	s.handler = h
	return s, nil
}

// Handler is the receiver as an http.Handler (served at every path).
func (s *Server) Handler() http.Handler { return s.handler }

// secret returns the shared secret, read from the Secret at most once per
// SecretTTL. A failed read is answered for SecretRetry only, so a Secret
// created after the agent started is picked up soon, while deliveries
// until then (anyone's: their signature cannot be checked) do not each
// cost an API read.
func (s *Server) secret(ctx context.Context) ([]byte, error) {
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.lock }()
	now := time.Now()
	if s.cached != nil && now.Before(s.expires) {
		return s.cached, nil
	}
	if s.failed != nil && now.Before(s.retryAt) {
		return nil, s.failed
	}
	v, err := s.read(ctx)
	if err != nil {
		// Not an eviction's or a gone sender's cancellation: that says
		// nothing of the Secret.
		if ctx.Err() == nil && s.opts.SecretRetry > 0 {
			s.failed, s.retryAt = err, now.Add(s.opts.SecretRetry)
		}
		return nil, err
	}
	s.failed = nil
	if s.opts.SecretTTL > 0 {
		s.cached, s.expires = v, now.Add(s.opts.SecretTTL)
	}
	return v, nil
}

// read reads the shared secret from the Secret.
func (s *Server) read(ctx context.Context) ([]byte, error) {
	var sec corev1.Secret
	if err := s.opts.Reader.Get(ctx, s.opts.Secret, &sec); err != nil {
		return nil, fmt.Errorf("reading the webhook secret from Secret %s: %w", s.opts.Secret, err)
	}
	v := sec.Data[s.opts.SecretKey]
	if len(v) == 0 {
		return nil, fmt.Errorf("Secret %s: key %q is missing or empty; expected the webhook's shared secret", s.opts.Secret, s.opts.SecretKey)
	}
	return v, nil
}

// Listen opens the listen address and returns the address bound (useful
// with port 0). Start calls it when it was not called before.
func (s *Server) Listen() (net.Addr, error) {
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
func (s *Server) Start(ctx context.Context) error {
	if _, err := s.Listen(); err != nil {
		return err
	}
	srv := s.httpServer()
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

// httpServer is the server Start runs. Every timeout is short: GitHub
// sends a delivery at once and waits at most ten seconds for the answer,
// and each open connection is memory a stranger holds. ReadTimeout is a
// backstop; the handler sets the body's own deadline (BodyTimeout).
func (s *Server) httpServer() *http.Server {
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadHeaderTimeout + s.opts.BodyTimeout,
		WriteTimeout:      s.opts.ReadHeaderTimeout + s.opts.BodyTimeout + 10*time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
	}
}

// NeedLeaderElection is false: every replica serves webhooks.
func (s *Server) NeedLeaderElection() bool { return false }
