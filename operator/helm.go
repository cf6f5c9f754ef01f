package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
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
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
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

	// objects parses, applies and deletes a release's objects.
	objects *releaseObjects
	// records writes revisions in Helm's format.
	records *releaseRecords

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
	// Objects parses, applies and deletes a release's objects (required).
	Objects *releaseObjects
}

func newHelmReleases(cfg *rest.Config, mapper meta.RESTMapper, opts helmOptions) (*helmReleases, error) {
	if opts.Objects == nil {
		return nil, errors.New("helm: Objects is required")
	}
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
		objects:    opts.Objects,
		records:    newReleaseRecords(cs),
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
	// History is trimmed by apply (trimHistory): Helm's trimming lists
	// the history before every write.
	store.MaxHistory = 0
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

// appliedRevision is a release revision this agent wrote, with the
// objects it applied and the field sets Styrmin owns on them after the
// apply: the first drift check of the revision needs neither a read of
// the record nor a dry-run apply.
type appliedRevision struct {
	release *release.Release
	objects []*desiredObject
	fields  map[string][]byte
}

// apply applies the request's objects with server-side apply and records
// them as a new revision of the Helm release, in Helm's own storage
// format, so `helm list`, `helm history` and `helm get manifest` show the
// truth and `helm uninstall` works.
//
// It does what Helm's install and upgrade actions do here, with fewer
// requests, which is what bounds the agent at scale (issue: API-server
// CPU per deployment):
//
//   - Helm reads the release history (one or two LISTs) and reads every
//     object before applying it; here the previous revision comes from
//     memory (known), by its key (one GET) or, when the status names
//     none, from one LIST (see previousRevision), and objects are applied
//     without reading them.
//   - Helm writes a revision three times (pending, then deployed, then
//     the previous one superseded); here it is written once, when the
//     apply has succeeded or failed, and the previous one once.
//
// The first revision is applied without forcing conflicts: an object that
// exists and whose fields another manager owns is not taken over (Helm's
// install refuses it too); later revisions force, as the fields are
// Styrmin's. Objects of the previous revision that the new one lacks are
// deleted, but for those annotated helm.sh/resource-policy: keep.
//
// known is the last revision this agent wrote (nil: none in memory) and
// revision the one the StyrminDeployment's status records (0: none). A
// failure after some objects were applied is recorded as a failed
// revision, as Helm does.
func (h *helmReleases) apply(ctx context.Context, req releaseRequest, known *release.Release, revision int) (*appliedRevision, bool, error) {
	store := h.config(req.Namespace).Releases
	prev, err := previousRevision(store, req.Name, known, revision)
	if err != nil {
		return nil, false, fmt.Errorf("release %s/%s: reading revision %d: %w", req.Namespace, req.Name, revision, err)
	}
	manifest := releaseManifest(req.Objects)
	objs, err := h.objects.desiredObjects(manifest, req.Name, req.Namespace, componentsOf(req.Objects, req.Namespace))
	if err != nil {
		return nil, false, err
	}
	fields, applied, applyErr := h.objects.applyAll(ctx, objs, prev != nil)
	if applyErr != nil && applied == 0 {
		// Nothing changed in the cluster: no revision to record (Helm's
		// install refusing an object it would take over records none
		// either), and a retry does not fill the history with failures.
		return nil, prev == nil, fmt.Errorf("release %s/%s: %w", req.Namespace, req.Name, applyErr)
	}
	if applyErr == nil && prev != nil {
		applyErr = h.prune(ctx, prev, objs, req)
	}
	now := time.Now()
	rel := &release.Release{
		Name:        req.Name,
		Namespace:   req.Namespace,
		Chart:       releaseChart(req),
		Config:      req.Values,
		Manifest:    manifest,
		ApplyMethod: string(release.ApplyMethodServerSideApply),
		Info:        &release.Info{FirstDeployed: now, LastDeployed: now, Status: rcommon.StatusDeployed, Description: req.Description},
	}
	if applyErr != nil {
		rel.Info.Status = rcommon.StatusFailed
		rel.Info.Description = truncate(req.Description+": "+applyErr.Error(), 1024)
	}
	pruneFrom := prev
	if err := h.record(ctx, store, rel, &prev); err != nil {
		return nil, prev == nil, errors.Join(applyErr, err)
	}
	if applyErr == nil && pruneFrom == nil && prev != nil {
		// A record the caller did not know of: its objects may need
		// pruning too.
		applyErr = h.prune(ctx, prev, objs, req)
	}
	op := "install"
	if prev != nil {
		op = "upgrade"
	}
	if applyErr != nil {
		return nil, prev == nil, fmt.Errorf("%s release %s/%s: %w", op, req.Namespace, req.Name, applyErr)
	}
	if prev != nil && prev.Info != nil && prev.Info.Status == rcommon.StatusDeployed {
		prev.SetStatus(rcommon.StatusSuperseded, "Superseded by revision "+fmt.Sprint(rel.Version))
		if err := h.records.update(ctx, prev); err != nil {
			return nil, false, fmt.Errorf("release %s/%s: marking revision %d superseded: %w", req.Namespace, req.Name, prev.Version, err)
		}
	}
	h.trimHistory(ctx, rel)
	return &appliedRevision{release: rel, objects: objs, fields: fields}, prev == nil, nil
}

// previousRevision returns the release's latest revision, nil when it has
// none: the one in memory, else the one the status names (read by key),
// else whatever the history holds (one LIST: a status can be lost, and a
// revision 1 written over a longer, trimmed history would go unseen).
func previousRevision(store *storage.Storage, name string, known *release.Release, revision int) (*release.Release, error) {
	if known != nil && known.Version >= revision {
		return known, nil
	}
	if revision == 0 {
		return latestRevision(store, name)
	}
	rel, err := store.Get(name, revision)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		// The records were removed, or revision is stale: ask for all.
		return latestRevision(store, name)
	}
	if err != nil {
		return nil, err
	}
	return asV1(rel)
}

// latestRevision lists the release's records and returns the newest, nil
// when there is none.
func latestRevision(store *storage.Storage, name string) (*release.Release, error) {
	rel, err := store.Last(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return asV1(rel)
}

// record writes rel as the revision after *prev. A newer record than the
// caller knew (written by an agent that stopped before recording it in
// the status) moves the revision on; *prev becomes that record.
func (h *helmReleases) record(ctx context.Context, store *storage.Storage, rel *release.Release, prev **release.Release) error {
	for attempt := 0; ; attempt++ {
		rel.Version = 1
		if p := *prev; p != nil {
			rel.Version = p.Version + 1
			if p.Info != nil && !p.Info.FirstDeployed.IsZero() {
				rel.Info.FirstDeployed = p.Info.FirstDeployed
			}
		}
		err := h.records.create(ctx, rel)
		if !errors.Is(err, driver.ErrReleaseExists) || attempt == 2 {
			if err != nil {
				return fmt.Errorf("release %s/%s: recording revision %d: %w", rel.Namespace, rel.Name, rel.Version, err)
			}
			return nil
		}
		last, lerr := latestRevision(store, rel.Name)
		if lerr != nil {
			return fmt.Errorf("release %s/%s: reading its history: %w", rel.Namespace, rel.Name, lerr)
		}
		*prev = last
	}
}

// trimHistory deletes the revision that falls out of the kept history.
// Failing costs nothing but a record kept too long: it is logged only.
func (h *helmReleases) trimHistory(ctx context.Context, rel *release.Release) {
	old := rel.Version - h.maxHistory
	if h.maxHistory <= 0 || old < 1 {
		return
	}
	if err := h.records.remove(ctx, rel.Namespace, rel.Name, old); err != nil {
		h.logger.Handle(ctx, slog.NewRecord(time.Now(), slog.LevelWarn, //nolint:errcheck // logging only
			fmt.Sprintf("release %s/%s: deleting revision %d: %v", rel.Namespace, rel.Name, old, err), 0))
	}
}

// prune deletes the objects of the previous revision that the new one no
// longer has.
func (h *helmReleases) prune(ctx context.Context, prev *release.Release, objs []*desiredObject, req releaseRequest) error {
	old, err := h.objects.desiredObjects(prev.Manifest, req.Name, req.Namespace, nil)
	if err != nil {
		return fmt.Errorf("previous revision %d: %w", prev.Version, err)
	}
	keep := make(map[string]bool, len(objs))
	for _, o := range objs {
		keep[objectKey(o.ref)] = true
	}
	for _, o := range old {
		if keep[objectKey(o.ref)] || o.obj.GetAnnotations()[kube.ResourcePolicyAnno] == kube.KeepPolicy {
			continue
		}
		if err := h.objects.remove(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// componentsOf maps each rendered object's key to its component.
func componentsOf(objects []drivers.Object, namespace string) map[string]string {
	out := make(map[string]string, len(objects))
	for _, ref := range inventoryOf(objects, namespace) {
		out[objectKey(ref)] = ref.Component
	}
	return out
}

// releaseManifest is the release's manifest as Helm writes it: the
// objects in Helm's install order, each under a "# Source:" line naming
// its component, so `helm get manifest` shows where an object comes from.
func releaseManifest(objects []drivers.Object) string {
	sorted := slices.Clone(objects)
	order := make(map[string]int, len(releaseutil.InstallOrder))
	for i, k := range releaseutil.InstallOrder {
		order[k] = i
	}
	rank := func(kind string) int {
		if i, ok := order[kind]; ok {
			return i
		}
		return len(order)
	}
	slices.SortStableFunc(sorted, func(a, b drivers.Object) int {
		if c := rank(a.Kind) - rank(b.Kind); c != 0 {
			return c
		}
		if rank(a.Kind) == len(order) {
			return strings.Compare(a.Kind, b.Kind)
		}
		return 0
	})
	var b strings.Builder
	for _, o := range sorted {
		b.WriteString("---\n# Source: ")
		b.WriteString(sourceName(o))
		b.WriteString("\n")
		b.WriteString(strings.TrimSpace(string(o.YAML)))
		b.WriteString("\n")
	}
	return b.String()
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

func asV1(rel ri.Releaser) (*release.Release, error) {
	r, ok := rel.(*release.Release)
	if !ok || r == nil {
		return nil, fmt.Errorf("unexpected Helm release type %T", rel)
	}
	return r, nil
}

// releaseChart is the chart recorded on the release: the driver as name
// and version, the application version, and no templates: the objects
// are what drivers.Render produced, recorded as the release's manifest.
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
