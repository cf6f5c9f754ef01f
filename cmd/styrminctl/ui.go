package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/ui"
)

// contextConfigFunc loads the REST config of one context of a kubeconfig
// ("" for kubectl's loading rules; context "" for the current one) and
// names the context.
type contextConfigFunc func(kubeconfig, context string) (*rest.Config, string, error)

// kubeContextConfig is the contextConfigFunc of the real command.
func kubeContextConfig(kubeconfig, kubeContext string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	name := kubeContext
	if name == "" {
		name = raw.CurrentContext
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig context %q: %w", name, err)
	}
	return cfg, name, nil
}

// defaultUIAddress keeps the UI on this machine unless --listen says
// otherwise.
const defaultUIAddress = "127.0.0.1:8090"

// newUICmd builds `styrminctl ui`: the agent's web pages served on this
// machine from the user's kubeconfig contexts and a clone.
func newUICmd(g *globalOptions, load contextConfigFunc, stdout io.Writer) *cobra.Command {
	var kubeconfig, listen string
	var contexts, allowedHosts []string
	cmd := &cobra.Command{
		Use:         "ui",
		Annotations: map[string]string{readsRepo: "true", readsCommitWith: readsCommitsOnly},
		Short:       "Serve the read-only web UI for your clusters and repository on localhost",
		Long: `ui serves the pages the agent serves with --ui-bind-address, for every cluster at
once, from this machine: the overview of each cluster's environments and deployments,
a deployment's active instance (values masked, each setting's layer), its timeline from
the git history of --repo (every lock commit) with the plan between any two, its tasks
and their steps, and the plan of any branch against another.

Each --context is one cluster of your kubeconfig (default: the current context); the
cluster's name is what its agent's StyrminSource says, else the context's name. The
pages read only, hold no secret value and are served on 127.0.0.1 unless --listen says
otherwise. Stop it with Ctrl-C.`,
		Example: `  styrminctl ui --repo ./desired-state
  styrminctl ui --context prod-eu --context prod-us --repo ./desired-state --listen 127.0.0.1:9000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runUI(cmd.Context(), g, load, stdout, kubeconfig, contexts, listen, allowedHosts)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: kubectl's: $KUBECONFIG, then ~/.kube/config)")
	cmd.Flags().StringArrayVar(&contexts, "context", nil, "a kubeconfig context, one per cluster (repeat it; default: the current context)")
	cmd.Flags().StringVar(&listen, "listen", defaultUIAddress, "address to serve on (port 0 picks a free one)")
	cmd.Flags().StringSliceVar(&allowedHosts, "allowed-hosts", nil, "host names the pages are served under besides loopback and --listen's host (comma-separated or repeated): a request for any other Host is refused, so a web site rebound to 127.0.0.1 reads nothing")
	return cmd
}

func runUI(ctx context.Context, g *globalOptions, load contextConfigFunc, stdout io.Writer, kubeconfig string, contexts []string, listen string, allowedHosts []string) error {
	dir, err := filepath.Abs(g.Repo)
	if err != nil {
		return err
	}
	repo, err := gitsource.Open(dir, gitsource.OpenOptions{})
	if err != nil {
		return fmt.Errorf("--repo %s: the timeline and plans read its git history: %w", g.Repo, err)
	}
	sub, err := repo.Subdir(dir)
	if err != nil {
		return err
	}
	if len(contexts) == 0 {
		contexts = []string{""}
	}
	scheme, err := operator.NewScheme()
	if err != nil {
		return err
	}
	var clusters []ui.Cluster
	seen := map[string]string{}
	for _, kc := range contexts {
		cfg, name, err := load(kubeconfig, kc)
		if err != nil {
			return err
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return fmt.Errorf("context %s: kubernetes client: %w", name, err)
		}
		// Reading the sources checks the access too: the cache below would
		// only retry a refused watch.
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		cluster, err := ui.ClusterName(rctx, c, name)
		if err == nil {
			err = c.List(rctx, &v1alpha1.StyrminDeploymentList{}, client.Limit(1))
		}
		cancel()
		if err != nil {
			return fmt.Errorf("context %s: %w", name, err)
		}
		if other, dup := seen[cluster]; dup {
			return fmt.Errorf("contexts %s and %s both reach cluster %s: give each cluster once", other, name, cluster)
		}
		seen[cluster] = name
		// Styrmin's objects are read through a cache (list once, then
		// watch), as the agent serves them: a page of 500 deployments
		// renders in tens of milliseconds, not a full list per request.
		informers, err := cache.New(cfg, cache.Options{Scheme: scheme})
		if err != nil {
			return fmt.Errorf("context %s: %w", name, err)
		}
		go func() { _ = informers.Start(ctx) }()
		clusters = append(clusters, ui.Cluster{Name: cluster, Reader: informers, Live: c})
	}
	limits, sandbox := g.driverOptions()
	h, err := ui.New(ui.Options{Clusters: clusters, Repo: repo, Dir: sub, PlanOptions: planner.Options{DriverLimits: limits, Sandbox: sandbox},
		AllowedHosts: allowedHosts, Addr: listen})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	names := make([]string, 0, len(clusters))
	for _, c := range clusters {
		names = append(names, c.Name)
	}
	fmt.Fprintf(stdout, "Styrmin UI: http://%s/ (clusters %s; repository %s). Ctrl-C stops it.\n", ln.Addr(), strings.Join(names, ", "), dir)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
