package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/ui"
)

// UIOptions configure the agent's read-only web UI.
type UIOptions struct {
	// Addr, when set, serves the UI there ("127.0.0.1:8090" for kubectl
	// port-forward; another interface only behind the team's own
	// authentication).
	Addr string
	// AllowedHosts are the host names the UI is served under besides
	// loopback and Addr's own host (an Ingress's): requests for any
	// other Host are refused (DNS rebinding).
	AllowedHosts []string
	// OnListening, when set, receives the bound address (tests listen on
	// port 0).
	OnListening func(net.Addr)
}

// addUI serves the web UI on every replica: it reads the manager's cache
// (StyrminDeployments, tasks, sources), the API server for pods and
// events (which the agent does not cache), and the agent's clone. Only
// the elected replica's syncer fetches that clone: on the others the UI
// fetches it before a page when the StyrminSource records a newer fetched
// head (ui.Follow), so a port-forward that lands on a standby does not
// show the repository as it was when the pod started.
func (a *Agent) addUI(clone *gitsource.Repo, opts Options) error {
	log := a.log.WithName("ui")
	elected := a.mgr.Elected()
	live, err := uiLiveReader(a.mgr)
	if err != nil {
		return fmt.Errorf("agent: ui: %w", err)
	}
	h, err := ui.New(ui.Options{
		Clusters:     []ui.Cluster{{Name: opts.Cluster, Reader: a.mgr.GetClient(), Live: live}},
		Repo:         clone,
		Dir:          opts.Path,
		PlanOptions:  planner.Options{DriverLimits: opts.Drivers.Limits, Sandbox: opts.Drivers.Sandbox, ConfigSandbox: opts.Drivers.Config},
		AllowedHosts: opts.UI.AllowedHosts,
		Addr:         opts.UI.Addr,
		Follow: &ui.Follow{
			Reader: a.mgr.GetClient(),
			Source: types.NamespacedName{Namespace: opts.Manager.Namespace, Name: opts.SourceName},
			Fetch: func(ctx context.Context) error {
				_, err := clone.Fetch(ctx)
				if err != nil {
					log.Info("fetching the repository for the web UI of a replica that is not elected", "error", err.Error())
				}
				return err
			},
			// Elected (or no election): the syncer fetches.
			Standby: func() bool {
				select {
				case <-elected:
					return false
				default:
					return true
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("agent: ui: %w", err)
	}
	ln, err := net.Listen("tcp", opts.UI.Addr)
	if err != nil {
		return fmt.Errorf("agent: ui: %w", err)
	}
	if opts.UI.OnListening != nil {
		opts.UI.OnListening(ln.Addr())
	}
	a.log.Info("serving the web UI", "address", ln.Addr().String())
	return a.mgr.Add(&uiServer{ln: ln, handler: h, log: log})
}

// The UI's own budget of requests to the API server: a page reads a few
// (pods, events, a task, the Secret of sensitive values), and every open
// live page reloads every 5 seconds.
const (
	uiQPS   = 20
	uiBurst = 40
)

// uiLiveReader is what the UI reads from the API server with: a client of
// its own token bucket. The manager's clients share one bucket (NewManager),
// and anyone who reaches the UI can ask for pages as fast as they like: on
// that bucket, their reads would make the controllers' requests wait.
func uiLiveReader(mgr manager.Manager) (client.Reader, error) {
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.QPS, cfg.Burst = uiQPS, uiBurst
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(uiQPS, uiBurst)
	return client.New(cfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
}

// uiServer serves the UI until the manager stops; every replica serves
// it (it only reads).
type uiServer struct {
	ln      net.Listener
	handler http.Handler
	log     logr.Logger
}

var _ manager.LeaderElectionRunnable = (*uiServer)(nil)

// NeedLeaderElection is false: every replica serves the UI.
func (s *uiServer) NeedLeaderElection() bool { return false }

// Start serves until ctx ends, then shuts down within 5 seconds.
func (s *uiServer) Start(ctx context.Context) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute, // a plan of many deployments takes a while
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(s.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("ui: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("ui: shutdown: %w", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("ui: %w", err)
	}
	return nil
}
