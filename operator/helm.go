package operator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	ri "helm.sh/helm/v4/pkg/release"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// Helm's labels and annotations on the objects of a release. Helm adds
// them when it applies; drift correction applies them too, so that the
// field set Styrmin owns is the same whichever of the two applied last.
const (
	helmManagedByLabel             = "app.kubernetes.io/managed-by"
	helmManagedByValue             = "Helm"
	helmReleaseNameAnnotation      = "meta.helm.sh/release-name"
	helmReleaseNamespaceAnnotation = "meta.helm.sh/release-namespace"
	// postRenderFilenameAnnotation is Helm's annotation that names the
	// "# Source:" file of a post-rendered object; Helm removes it.
	postRenderFilenameAnnotation = "postrenderer.helm.sh/postrender-filename"
	// driverDigestAnnotation on the release's chart records the driver's
	// digest.
	driverDigestAnnotation = v1alpha1.Group + "/driver-digest"
)

// helmReleases installs, upgrades and uninstalls the Helm releases of all
// deployments. Everything that does not depend on the namespace is shared:
// the REST config and its rate limiter, the REST mapper, the discovery
// client, kubectl's factory and the clientset. What does (the release
// storage, Helm's kube client) is built once per namespace and cached.
type helmReleases struct {
	getter     *sharedRESTGetter
	factory    cmdutil.Factory
	clientset  kubernetes.Interface
	caps       *common.Capabilities
	logger     slog.Handler
	maxHistory int

	mu      sync.Mutex
	configs map[string]*action.Configuration
}

// helmOptions configure helmReleases.
type helmOptions struct {
	// MaxHistory bounds the revisions kept per release (0: Helm's default
	// of unlimited).
	MaxHistory int
	// Logger receives Helm's log records.
	Logger slog.Handler
}

func newHelmReleases(cfg *rest.Config, mapper meta.RESTMapper, opts helmOptions) (*helmReleases, error) {
	// Helm names its field manager after a package variable; without it
	// Helm would use the binary's name, and drift detection would look for
	// the wrong manager.
	kube.ManagedFieldsManager = v1alpha1.FieldManager

	getter := &sharedRESTGetter{config: rest.CopyConfig(cfg), mapper: mapper}
	cs, err := kubernetes.NewForConfig(getter.config)
	if err != nil {
		return nil, fmt.Errorf("helm: clientset: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.DiscardHandler
	}
	// Helm renders no templates here (drivers.Render does, see
	// renderedObjects), so the capabilities only serve chart metadata
	// checks: the defaults avoid a discovery round per namespace.
	caps := common.DefaultCapabilities.Copy()
	return &helmReleases{
		getter:     getter,
		factory:    cmdutil.NewFactory(getter),
		clientset:  cs,
		caps:       caps,
		logger:     logger,
		maxHistory: opts.MaxHistory,
		configs:    map[string]*action.Configuration{},
	}, nil
}

// config returns the action configuration of a namespace, built once.
// The controller reconciles one StyrminDeployment per namespace at a
// time, so a configuration is never used by two actions at once.
func (h *helmReleases) config(namespace string) *action.Configuration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cfg, ok := h.configs[namespace]; ok {
		return cfg
	}
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(h.logger))
	kc := &kube.Client{Factory: h.factory, Namespace: namespace}
	kc.SetLogger(h.logger)
	d := driver.NewSecrets(h.clientset.CoreV1().Secrets(namespace))
	d.SetLogger(h.logger)
	store := storage.Init(d)
	store.MaxHistory = h.maxHistory
	cfg.RESTClientGetter = h.getter
	cfg.KubeClient = &kubeClient{Client: kc}
	cfg.Releases = store
	cfg.Capabilities = h.caps
	cfg.HookOutputFunc = func(_, _, _ string) io.Writer { return io.Discard }
	h.configs[namespace] = cfg
	return cfg
}

// forget drops a namespace's cached configuration.
func (h *helmReleases) forget(namespace string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.configs, namespace)
}

// releaseRequest is one install or upgrade.
type releaseRequest struct {
	Namespace string
	Name      string
	Driver    v1alpha1.DriverRef
	// AppVersion is recorded on the release's chart.
	AppVersion string
	// Values are recorded as the release's values.
	Values map[string]any
	// Objects are what drivers.Render produced: exactly what is applied.
	Objects []drivers.Object
	// Description is recorded on the revision.
	Description string
}

// apply installs the release or upgrades it to a new revision, with
// server-side apply, forcing conflicts: the fields in the manifest belong
// to Styrmin. exists says whether the caller knows of a release; the
// guess costs nothing when right and one more request when wrong, which
// saves reading the history before every operation. A revision left
// pending by an agent that stopped mid-way is marked failed, so the
// upgrade is not refused forever.
func (h *helmReleases) apply(ctx context.Context, req releaseRequest, exists bool) (*release.Release, bool, error) {
	cfg := h.config(req.Namespace)
	if !exists {
		rel, err := h.install(ctx, cfg, req)
		if err == nil {
			return rel, true, nil
		}
		// A release the caller did not know of (written by an agent that
		// stopped before recording it) makes the install fail: upgrade it.
		if _, lerr := lastRelease(cfg, req.Name); lerr != nil {
			return nil, true, err
		}
	}
	rel, err := h.upgrade(ctx, cfg, req)
	if err == nil {
		return rel, false, nil
	}
	last, lerr := lastRelease(cfg, req.Name)
	switch {
	case errors.Is(lerr, driver.ErrReleaseNotFound):
		// The release's records are gone: install it again.
		rel, err := h.install(ctx, cfg, req)
		return rel, true, err
	case lerr == nil && last.Info != nil && last.Info.Status.IsPending():
		// Only this agent writes the release and it runs no action on it
		// now: the pending revision was left by a stop.
		last.SetStatus(rcommon.StatusFailed, "interrupted: the agent stopped during the operation")
		if err := cfg.Releases.Update(last); err != nil {
			return nil, false, fmt.Errorf("release %s/%s: marking interrupted revision %d failed: %w", req.Namespace, req.Name, last.Version, err)
		}
		rel, err := h.upgrade(ctx, cfg, req)
		return rel, false, err
	}
	return nil, false, err
}

func (h *helmReleases) install(ctx context.Context, cfg *action.Configuration, req releaseRequest) (*release.Release, error) {
	in := action.NewInstall(cfg)
	in.ReleaseName = req.Name
	in.Namespace = req.Namespace
	in.ServerSideApply = true
	in.ForceConflicts = true
	in.WaitStrategy = kube.HookOnlyStrategy
	in.DisableOpenAPIValidation = true
	in.SkipSchemaValidation = true
	in.Description = req.Description
	in.PostRenderer = &renderedObjects{objects: req.Objects}
	rel, err := in.RunWithContext(ctx, releaseChart(req), req.Values)
	if err != nil {
		return nil, fmt.Errorf("install release %s/%s: %w", req.Namespace, req.Name, err)
	}
	return asV1(rel)
}

func (h *helmReleases) upgrade(ctx context.Context, cfg *action.Configuration, req releaseRequest) (*release.Release, error) {
	up := action.NewUpgrade(cfg)
	up.Namespace = req.Namespace
	up.ServerSideApply = "true"
	up.ForceConflicts = true
	up.WaitStrategy = kube.HookOnlyStrategy
	up.DisableOpenAPIValidation = true
	up.SkipSchemaValidation = true
	up.MaxHistory = h.maxHistory
	up.Description = req.Description
	up.PostRenderer = &renderedObjects{objects: req.Objects}
	rel, err := up.RunWithContext(ctx, req.Name, releaseChart(req), req.Values)
	if err != nil {
		return nil, fmt.Errorf("upgrade release %s/%s: %w", req.Namespace, req.Name, err)
	}
	return asV1(rel)
}

// uninstall removes the release and its objects. A missing release is not
// an error.
func (h *helmReleases) uninstall(namespace, name string) error {
	cfg := h.config(namespace)
	u := action.NewUninstall(cfg)
	u.IgnoreNotFound = true
	u.WaitStrategy = kube.HookOnlyStrategy
	u.DeletionPropagation = "background"
	if _, err := u.Run(name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return fmt.Errorf("uninstall release %s/%s: %w", namespace, name, err)
	}
	return nil
}

// get returns one revision of a release (one API call).
func (h *helmReleases) get(namespace, name string, revision int) (*release.Release, error) {
	rel, err := h.config(namespace).Releases.Get(name, revision)
	if err != nil {
		return nil, err
	}
	return asV1(rel)
}

func lastRelease(cfg *action.Configuration, name string) (*release.Release, error) {
	rel, err := cfg.Releases.Last(name)
	if err != nil {
		return nil, err
	}
	return asV1(rel)
}

func asV1(rel ri.Releaser) (*release.Release, error) {
	r, ok := rel.(*release.Release)
	if !ok || r == nil {
		return nil, fmt.Errorf("unexpected Helm release type %T", rel)
	}
	return r, nil
}

// releaseChart is the chart recorded on the release: the driver as name
// and version, the application version, and no templates. The objects
// come from drivers.Render through the post-renderer, so what Helm
// applies is exactly what the driver renders; Helm rendering the
// templates again would only produce output to throw away.
func releaseChart(req releaseRequest) *chartv2.Chart {
	return &chartv2.Chart{
		Metadata: &chartv2.Metadata{
			APIVersion:  chartv2.APIVersionV2,
			Name:        req.Driver.Name,
			Version:     req.Driver.Version,
			AppVersion:  req.AppVersion,
			Description: "Styrmin driver " + req.Driver.String(),
			Type:        "application",
			Annotations: map[string]string{driverDigestAnnotation: req.Driver.Digest},
		},
	}
}

// renderedObjects is the post-renderer: it hands Helm the objects
// drivers.Render produced (values from the instance, then the driver's
// patches), each named after its component so `helm get manifest` shows
// where an object comes from.
type renderedObjects struct {
	objects []drivers.Object
}

func (p *renderedObjects) Run(*bytes.Buffer) (*bytes.Buffer, error) {
	var out bytes.Buffer
	for _, o := range p.objects {
		node, err := kyaml.Parse(string(o.YAML))
		if err != nil {
			return nil, fmt.Errorf("rendered %s/%s: %w", o.Kind, o.Name, err)
		}
		if err := node.PipeE(kyaml.SetAnnotation(postRenderFilenameAnnotation, sourceName(o))); err != nil {
			return nil, fmt.Errorf("rendered %s/%s: %w", o.Kind, o.Name, err)
		}
		s, err := node.String()
		if err != nil {
			return nil, fmt.Errorf("rendered %s/%s: %w", o.Kind, o.Name, err)
		}
		out.WriteString("---\n")
		out.WriteString(s)
	}
	return &out, nil
}

// sourceName is the "# Source:" of an object in the release manifest.
func sourceName(o drivers.Object) string {
	comp := o.Component
	if comp == "" {
		comp = "shared"
	}
	return path.Join(comp, strings.ToLower(o.Kind)+"-"+o.Name+".yaml")
}

// kubeClient is Helm's kube client with the parts that would cost API
// calls per release and bring nothing here turned off: the reachability
// check (the controller just talked to the API server), client-side
// OpenAPI validation (server-side apply validates strictly on the server)
// and waiting for readiness (the controller watches the workloads and
// reports readiness in the status instead of blocking a worker).
type kubeClient struct {
	*kube.Client
}

var (
	_ kube.Interface            = (*kubeClient)(nil)
	_ kube.InterfaceWaitOptions = (*kubeClient)(nil)
)

func (c *kubeClient) IsReachable() error { return nil }

func (c *kubeClient) Build(r io.Reader, _ bool) (kube.ResourceList, error) {
	return c.Client.Build(r, false)
}

func (c *kubeClient) GetWaiter(ws kube.WaitStrategy) (kube.Waiter, error) {
	return c.GetWaiterWithOptions(ws)
}

func (c *kubeClient) GetWaiterWithOptions(kube.WaitStrategy, ...kube.WaitOption) (kube.Waiter, error) {
	return &hookWaiter{client: c.Client}, nil
}

// hookWaiter does not wait for the release's objects; it waits for Helm
// hooks (a chart's own pre/post-install Jobs) with Helm's polling waiter,
// built only when a chart has hooks.
type hookWaiter struct {
	client *kube.Client
}

func (w *hookWaiter) Wait(kube.ResourceList, time.Duration) error         { return nil }
func (w *hookWaiter) WaitWithJobs(kube.ResourceList, time.Duration) error { return nil }
func (w *hookWaiter) WaitForDelete(kube.ResourceList, time.Duration) error {
	return nil
}

func (w *hookWaiter) WatchUntilReady(resources kube.ResourceList, timeout time.Duration) error {
	legacy, err := w.client.GetWaiter(kube.LegacyStrategy)
	if err != nil {
		return err
	}
	return legacy.WatchUntilReady(resources, timeout)
}

// sharedRESTGetter gives Helm and kubectl's factory one REST config, one
// REST mapper (the manager's, which learns new kinds lazily) and one
// discovery client for every namespace.
type sharedRESTGetter struct {
	config *rest.Config
	mapper meta.RESTMapper

	once      sync.Once
	discovery discovery.CachedDiscoveryInterface
	discErr   error
}

func (g *sharedRESTGetter) ToRESTConfig() (*rest.Config, error) {
	return rest.CopyConfig(g.config), nil
}

func (g *sharedRESTGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	g.once.Do(func() {
		dc, err := discovery.NewDiscoveryClientForConfig(g.config)
		if err != nil {
			g.discErr = err
			return
		}
		g.discovery = memory.NewMemCacheClient(dc)
	})
	return g.discovery, g.discErr
}

func (g *sharedRESTGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.mapper, nil }

// ToRawKubeConfigLoader is only asked for a default namespace; Helm's
// clients here always name theirs.
func (g *sharedRESTGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{})
}
