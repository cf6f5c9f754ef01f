package ui

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/timeline"
)

// Cluster is one cluster the pages show.
type Cluster struct {
	// Name is the Styrmin cluster's name (the agent's --cluster, or what
	// the cluster's StyrminSource says).
	Name string
	// Reader reads StyrminDeployments, StyrminTasks and StyrminSources
	// (the agent's cache, or a direct client).
	Reader client.Reader
	// Live reads pods and events, which the agent does not cache, the
	// task of the task page (the agent caches finished tasks without
	// their steps) and, to mask a message a pod's program wrote, the
	// namespace's Secret of sensitive values (health.NamespaceSensitive):
	// the API server, never a cache (nil: Reader).
	Live client.Reader
}

// Repository is the desired-state repository's git history:
// *gitsource.Repo.
type Repository interface {
	timeline.History
	// Head is the tracked branch's head (as last fetched).
	Head() (gitsource.Hash, error)
	// Resolve turns a ref ("main", "origin/feature", a commit) into a
	// commit.
	Resolve(rev string) (gitsource.Hash, error)
	// TreeAt is the desired-state folder sub at a commit.
	TreeAt(commit gitsource.Hash, sub string) (fs.FS, error)
	// LockedSequences and ReusedSequences are what the history of head
	// used (gitsource.Repo's): a plan of a commit numbers as the lock
	// of that commit would.
	LockedSequences(head gitsource.Hash, dir, lockDir string) (map[string]int, error)
	ReusedSequences(head gitsource.Hash, dir, lockDir string) (map[string]int, error)
}

var _ Repository = (*gitsource.Repo)(nil)

// Planner computes plans between two trees: planner.ComputeTrees.
type Planner interface {
	ComputeTrees(t planner.Trees, o planner.Options) (*planner.Plan, error)
}

// PlannerFunc makes a function a Planner.
type PlannerFunc func(t planner.Trees, o planner.Options) (*planner.Plan, error)

// ComputeTrees implements Planner.
func (f PlannerFunc) ComputeTrees(t planner.Trees, o planner.Options) (*planner.Plan, error) {
	return f(t, o)
}

var _ Planner = PlannerFunc(nil)

// Options configure New.
type Options struct {
	// Clusters are the clusters shown, in this order.
	Clusters []Cluster
	// Repo is the desired-state repository (nil: no timeline from git,
	// no plans, and the overview shows what the clusters know only).
	Repo Repository
	// Dir is the folder of the git repository that holds the
	// desired-state repository ("" for its root).
	Dir string
	// Planner computes plans and diffs (nil: planner.ComputeTrees).
	Planner Planner
	// PlanOptions tune the plans (driver limits, a sandbox).
	PlanOptions planner.Options
	// Refresh is how often a live page reloads its content (0: 5 s).
	Refresh time.Duration
	// Timeout bounds the reads of one request and its wait for another
	// plan or resolution to be computed (0: 20 s).
	Timeout time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Follow, when set, fetches Repo before a page is read when another
	// process fetched a newer head (a replica of the agent that is not
	// elected).
	Follow *Follow
	// AllowedHosts are the host names (or addresses) the pages are served
	// under besides the loopback ones (localhost, 127.0.0.0/8, ::1), any
	// port: an Ingress's host ("styrmin.example.com"). A request whose
	// Host header names another is refused (421): any web page the user
	// opens could otherwise rebind its own name to the UI's address (DNS
	// rebinding) and read every page.
	AllowedHosts []string
	// Addr is the address the pages are served on ("10.0.0.5:8090"); its
	// host is allowed too unless it is loopback or every interface
	// (":8090", "0.0.0.0:8090": which names reach it is not known).
	Addr string
}

// Handler serves the pages. It is safe for concurrent use.
type Handler struct {
	o        Options
	clusters map[string]*Cluster
	mux      *http.ServeMux
	pages    map[string]*template.Template
	history  *timeline.Reader

	// head is what the overview reads from git, for one head commit.
	headMu sync.Mutex
	head   *headState
	// plans and settings remember what is slow to compute (a plan, a
	// resolution), by the commits it was computed from: they never
	// change.
	cacheMu  sync.Mutex
	plans    map[string]*planResult
	settings map[string]*settingsResult
	// computing lets one plan or resolution run at a time: each takes
	// seconds of CPU on a large repository, and the agent that serves
	// the pages has its own work to do.
	computing chan struct{}
	// walking lets one timeline not read yet walk the history at a time
	// (readTimeline).
	walking chan struct{}
	// follow brings Repo up to date before a page is read (nil: Repo is
	// fetched by its owner).
	follow *follower
	// hosts are the allowed hosts besides the loopback ones, normalised
	// (hostOf).
	hosts map[string]bool
}

var _ http.Handler = (*Handler)(nil)

//go:embed assets
var assets embed.FS

//go:embed templates
var templates embed.FS

// The security headers of every response. The policy allows the
// handler's own script, style sheet and images only: no inline script,
// no inline style, no frames, no form posting elsewhere.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// maxRemembered bounds the remembered plans and resolutions.
const maxRemembered = 32

// New builds the handler.
func New(o Options) (*Handler, error) {
	if o.Refresh <= 0 {
		o.Refresh = 5 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 20 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Dir == "" {
		o.Dir = "."
	}
	if o.Planner == nil {
		o.Planner = PlannerFunc(planner.ComputeTrees)
	}
	h := &Handler{o: o, clusters: map[string]*Cluster{}, plans: map[string]*planResult{}, settings: map[string]*settingsResult{}, computing: make(chan struct{}, 1), walking: make(chan struct{}, 1)}
	var err error
	for i := range o.Clusters {
		c := &h.o.Clusters[i]
		if c.Name == "" || c.Reader == nil {
			return nil, fmt.Errorf("ui: cluster %d: a name and a reader are required", i)
		}
		if _, dup := h.clusters[c.Name]; dup {
			return nil, fmt.Errorf("ui: cluster %s is given twice", c.Name)
		}
		if c.Live == nil {
			c.Live = c.Reader
		}
		h.clusters[c.Name] = c
	}
	if h.hosts, err = allowedHosts(o.AllowedHosts, o.Addr); err != nil {
		return nil, err
	}
	if o.Repo != nil {
		h.history = timeline.NewReader(o.Repo, o.Dir)
	}
	h.follow = newFollower(o.Follow, o.Repo, o.Now, o.Timeout)
	if h.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	m := http.NewServeMux()
	m.Handle("GET /static/", http.StripPrefix("/static/", staticFiles(static)))
	m.HandleFunc("GET /{$}", h.overview)
	m.HandleFunc("GET /d/{cluster}/{env}/{name}", h.deployment)
	m.HandleFunc("GET /d/{cluster}/{env}/{name}/timeline", h.timeline)
	m.HandleFunc("GET /t/{cluster}/{namespace}/{task}", h.task)
	m.HandleFunc("GET /plan", h.plan)
	h.mux = m
	return h, nil
}

// ServeHTTP serves GET and HEAD only, for the allowed hosts only, with
// the security headers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	if !h.allowedHost(r.Host) {
		h.fail(w, http.StatusMisdirectedRequest, fmt.Errorf("this Styrmin UI is not served under the host %q: it answers for localhost, 127.0.0.1 and [::1], "+
			"and for the hosts it is configured with (styrmin-agent --ui-allowed-hosts, styrminctl ui --allowed-hosts); "+
			"open it at one of those, or add this host there. Other hosts are refused so that no web site can read these pages by rebinding its name to this address", r.Host))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "the Styrmin UI is read-only: only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	if h.follow != nil && !strings.HasPrefix(r.URL.Path, "/static/") {
		ctx, cancel := h.ctx(r)
		h.follow.catchUp(ctx)
		cancel()
	}
	h.mux.ServeHTTP(w, r)
}

// allowedHosts is the set of hosts New allows besides the loopback ones:
// those given, and the host of the address the pages are served on.
func allowedHosts(given []string, addr string) (map[string]bool, error) {
	hosts := map[string]bool{}
	for _, g := range given {
		host := hostOf(g)
		if host == "" || strings.ContainsAny(g, "/@*") {
			return nil, fmt.Errorf("ui: allowed host %q: expected a host name or address (without a scheme, path or wildcard)", g)
		}
		hosts[host] = true
	}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		ip, err := netip.ParseAddr(host)
		if err != nil || !(ip.IsLoopback() || ip.IsUnspecified()) {
			hosts[hostOf(host)] = true
		}
	}
	return hosts, nil
}

// allowedHost tells whether a request's Host header names the UI:
// localhost, an IP address, or an allowed host. A browser sends the name
// it resolved, so a page whose name was rebound to the UI's address
// still sends its own name: rebinding needs a name, and an address
// (127.0.0.1, the pod's IP a load balancer's health check uses, the
// [::] styrminctl ui prints for --listen :8090) names no one else.
func (h *Handler) allowedHost(header string) bool {
	host := hostOf(header)
	if host == "localhost" || h.hosts[host] {
		return true
	}
	_, err := netip.ParseAddr(host)
	return err == nil
}

// hostOf is the host of a Host header or an allowed host, without its
// port, brackets, a final dot, in lower case.
func hostOf(s string) string {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	return strings.ToLower(strings.TrimSuffix(s, "."))
}

// staticFiles serves the embedded script and style sheet, cached for a
// while (their content changes only with the binary).
func staticFiles(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		files.ServeHTTP(w, r)
	})
}

// page is what every page's layout needs.
type page struct {
	Title string
	// Nav are the breadcrumbs before the title.
	Nav []link
	// Live makes the script reload the content every Refresh seconds.
	Live    bool
	Refresh int
	Now     string
	// Data is the page's own model.
	Data any
}

type link struct{ Text, Href string }

// render writes a page; a template error is a bug, answered with 500.
func (h *Handler) render(w http.ResponseWriter, name string, p page) {
	p.Refresh = int(h.o.Refresh / time.Second)
	p.Now = h.o.Now().UTC().Format(time.RFC3339)
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		http.Error(w, "rendering the page: "+mask(err.Error()), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// fail answers with a page that says what went wrong.
func (h *Handler) fail(w http.ResponseWriter, code int, err error) {
	var buf bytes.Buffer
	p := page{Title: http.StatusText(code), Data: mask(err.Error()), Now: h.o.Now().UTC().Format(time.RFC3339)}
	if terr := h.pages["error"].ExecuteTemplate(&buf, "layout", p); terr != nil {
		http.Error(w, mask(err.Error()), code)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// ctx bounds one request's reads.
func (h *Handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.o.Timeout)
}

// cluster finds the cluster a path names.
func (h *Handler) cluster(name string) (*Cluster, error) {
	c, ok := h.clusters[name]
	if !ok {
		return nil, fmt.Errorf("no cluster %q here (clusters: %s)", name, strings.Join(h.clusterNames(), ", "))
	}
	return c, nil
}

func (h *Handler) clusterNames() []string {
	out := make([]string, 0, len(h.o.Clusters))
	for _, c := range h.o.Clusters {
		out = append(out, c.Name)
	}
	return out
}

// errNoRepository answers the pages that need git when there is none.
var errNoRepository = errors.New("this page reads the desired-state repository, and none is configured")

// placeholder finds the placeholders of sensitive values in any text.
var placeholder = regexp.MustCompile(regexp.QuoteMeta(resolver.PlaceholderPrefix) + `[0-9a-f]{64}`)

// mask shows every placeholder of a sensitive value as the planner does.
// Instances, tasks and events never hold a value, only its placeholder;
// the placeholder is not for people either.
func mask(s string) string {
	if !strings.Contains(s, resolver.PlaceholderPrefix) {
		return s
	}
	return placeholder.ReplaceAllLiteralString(s, planner.Masked)
}

// maskValue masks every string of a JSON value.
func maskValue(v any) any {
	switch t := v.(type) {
	case string:
		return mask(t)
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[mask(k)] = maskValue(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = maskValue(x)
		}
		return out
	}
	return v
}

// turnToCompute waits until no other plan or resolution is computed,
// or until ctx ends (the client went away, or its time ran out): then
// nothing is computed for it. release ends the turn.
func (h *Handler) turnToCompute(ctx context.Context) (release func(), err error) {
	select {
	case h.computing <- struct{}{}:
		// Both may have been ready: a request already gone computes
		// nothing either.
		if ctx.Err() == nil {
			return func() { <-h.computing }, nil
		}
		<-h.computing
	case <-ctx.Done():
	}
	return nil, fmt.Errorf("waiting for another plan or resolution to be computed: %w (reload the page)", context.Cause(ctx))
}

// remember keeps v under key in m, dropping everything past the bound.
func remember[V any](mu *sync.Mutex, m map[string]V, key string, v V) {
	mu.Lock()
	defer mu.Unlock()
	if len(m) >= maxRemembered {
		clear(m)
	}
	m[key] = v
}

func recall[V any](mu *sync.Mutex, m map[string]V, key string) (V, bool) {
	mu.Lock()
	defer mu.Unlock()
	v, ok := m[key]
	return v, ok
}

// ClusterName is the Styrmin cluster a client reads: what its
// StyrminSources name (the agent records its --cluster there), else
// fallback (a kubeconfig context's name) when they name none or several.
func ClusterName(ctx context.Context, c client.Reader, fallback string) (string, error) {
	var srcs v1alpha1.StyrminSourceList
	if err := c.List(ctx, &srcs); err != nil {
		return fallback, fmt.Errorf("listing StyrminSources: %w", err)
	}
	names := map[string]bool{}
	for _, s := range srcs.Items {
		if s.Spec.Cluster != "" {
			names[s.Spec.Cluster] = true
		}
	}
	if len(names) == 1 {
		for n := range names {
			return n, nil
		}
	}
	return fallback, nil
}
