package resolver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"cuelang.org/go/cue/token"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/keypath"
)

// Options configures a resolution.
type Options struct {
	// Catalog holds every loaded driver version.
	Catalog *drivers.Catalog
	// Locks are the current lockfiles by deployment, used by the driver
	// selection rule (keep the locked driver while the app version is
	// unchanged). May be nil.
	Locks map[ID]*Instance
	// SourceCommit is recorded in new instances.
	SourceCommit string
	// Only restricts resolution to these deployments (nil: all).
	Only map[ID]bool
	// DriverOrigins are the catalog's driver versions kept in other git
	// repositories, by name@version; new instances record them
	// (DriverRef.Source). The others come from the repository itself.
	DriverOrigins map[string]*DriverOrigin
	// Progress, when set, is told how many of the deployments resolved so
	// far (both passes done, or failed) out of total; it is called from
	// several goroutines at once.
	Progress func(done, total int)
}

// Resolved is one resolved deployment: the instance (sequence 0: not yet
// locked) and where each setting came from.
type Resolved struct {
	Instance   *Instance
	Deployment *Deployment
	Provenance Provenance
	// Settings is the merged settings tree (domain, config, parameters…)
	// before driver defaults were applied.
	Settings map[string]any
	// Sensitive holds the values of the sensitive parameters by the
	// placeholder the instance holds instead (nil: none). It is never
	// encoded: only the agent needs the values, and it finds them in git.
	Sensitive Sensitive
}

// Result is the outcome of resolving a repository. One deployment failing
// does not stop the others: its error is in Errors.
type Result struct {
	Resolved []*Resolved // sorted by ID
	Errors   []*DeploymentError
	// Present lists every deployment defined in the configuration, resolved
	// or not, so a failing deployment is never mistaken for a deleted one.
	Present map[ID]bool
	// Held maps the deployments on hold to the reason: they keep their
	// current lock.
	Held map[ID]string
	// Warnings are what the configuration may not mean, though nothing
	// refuses it (SharedDomains): plan and lock show them.
	Warnings []string
	// rollout is how fan-outs split into waves (nil: they do not).
	rollout *rolloutConfig
	// renders and held are, in a cluster where a changed deployment
	// renders objects outside its namespace, what each changed one's new
	// instance renders there and what each lock renders there (of the
	// changed deployments and of the deleted ones): orderMoves orders an
	// object's move from one deployment to another.
	renders, held map[ID]map[objectKey]bool
}

// Err joins the per-deployment errors, nil when there are none.
func (r *Result) Err() error {
	errs := make([]error, len(r.Errors))
	for i, e := range r.Errors {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// Get returns the resolved deployment with id.
func (r *Result) Get(id ID) (*Resolved, bool) {
	i := sort.Search(len(r.Resolved), func(i int) bool { return !lessID(r.Resolved[i].Instance.ID, id) })
	if i < len(r.Resolved) && r.Resolved[i].Instance.ID == id {
		return r.Resolved[i], true
	}
	return nil, false
}

func lessID(a, b ID) bool {
	if a.Cluster != b.Cluster {
		return a.Cluster < b.Cluster
	}
	if a.Environment != b.Environment {
		return a.Environment < b.Environment
	}
	return a.Name < b.Name
}

// SortIDs sorts ids by cluster, environment, name.
func SortIDs(ids []ID) { sort.Slice(ids, func(i, j int) bool { return lessID(ids[i], ids[j]) }) }

// pending is a deployment between the two passes of Resolve.
type pending struct {
	res       *Resolved
	driver    *drivers.Driver
	endpoints map[string]drivers.Endpoint
	// rendered is set when the second pass rendered the instance (it is
	// not its lock's); outside then holds the objects it renders outside
	// its own namespace: those another deployment may render too.
	rendered bool
	outside  []drivers.Object
	// hosts are the hosts its rendered Ingresses claim (when rendered).
	hosts []hostOf
}

// resolveJob is one deployment of Resolve and its first pass's outcome.
type resolveJob struct {
	c   *Cluster
	e   *Environment
	d   *Deployment
	p   *pending
	err error
}

// Resolve turns the loaded repository into instances. The first pass
// merges layers, selects drivers and computes each deployment's own
// endpoints; the second pass hands every deployment the endpoints of the
// siblings it connects to and evaluates the driver's values.
func Resolve(repo *Repository, opts Options) *Result {
	out := &Result{Present: map[ID]bool{}, Held: map[ID]string{}, rollout: rolloutConfigOf(repo), Warnings: SharedDomains(repo)}
	if opts.Catalog == nil {
		opts.Catalog = drivers.NewCatalog()
	}
	var jobs []*resolveJob
	moveErrs, kept := namespaceMoveErrors(repo, opts.Locks)
	nsErrs := namespaceErrors(repo, kept)
	// A refused move says so, rather than that the namespace it keeps is
	// also another's.
	maps.Copy(nsErrs, moveErrs)
	for _, c := range repo.Clusters {
		for _, e := range c.Environments {
			for _, d := range e.Deployments {
				out.Present[d.ID] = true
				if d.Hold != "" {
					out.Held[d.ID] = d.Hold
				}
				if opts.Only != nil && !opts.Only[d.ID] && !connectedFromOnly(e, d, opts.Only) {
					continue
				}
				jobs = append(jobs, &resolveJob{c: c, e: e, d: d})
			}
		}
	}
	// Deployments resolve independently (drivers are safe for concurrent
	// use), so both passes run on every core; results keep their order.
	// Each pass is half a deployment's progress.
	var halves atomic.Int64
	progress := func() {
		if opts.Progress != nil {
			opts.Progress(int(halves.Add(1)/2), len(jobs))
		}
	}
	parallel(len(jobs), func(i int) {
		defer progress()
		j := jobs[i]
		if err := nsErrs[j.d.ID]; err != nil {
			j.err = err
			return
		}
		j.p, j.err = firstPass(j.c, j.e, j.d, opts)
	})
	byEnv := map[*Environment]map[string]*pending{}
	failedByEnv := map[*Environment]map[string]error{}
	for _, j := range jobs {
		if j.err != nil {
			if failedByEnv[j.e] == nil {
				failedByEnv[j.e] = map[string]error{}
			}
			failedByEnv[j.e][j.d.ID.Name] = j.err
			continue
		}
		if byEnv[j.e] == nil {
			byEnv[j.e] = map[string]*pending{}
		}
		byEnv[j.e][j.d.ID.Name] = j.p
	}
	second := make([]error, len(jobs))
	parallel(len(jobs), func(i int) {
		defer progress()
		j := jobs[i]
		if j.err != nil || (opts.Only != nil && !opts.Only[j.d.ID]) {
			return
		}
		second[i] = secondPass(j.e, j.p, byEnv[j.e], failedByEnv[j.e], opts.Locks[j.d.ID])
	})
	// A deployment failed in the second pass fails those connecting to
	// it, as one failed in the first does; then of the rest, two that
	// render one object fail the later, which fails its own in turn.
	failConnectors(jobs, second, opts.Only)
	objectConflicts(repo, jobs, second, opts, out)
	hostConflicts(repo, jobs, second, opts, out)
	failConnectors(jobs, second, opts.Only)
	for failTakers(jobs, second, out) {
		failConnectors(jobs, second, opts.Only)
	}
	resolveInternal(repo, opts, nsErrs, out)
	for i, j := range jobs {
		switch {
		case j.err != nil:
			out.Errors = append(out.Errors, &DeploymentError{ID: j.d.ID, Err: j.err})
		case opts.Only != nil && !opts.Only[j.d.ID]:
		case second[i] != nil:
			out.Errors = append(out.Errors, &DeploymentError{ID: j.d.ID, Err: second[i]})
		default:
			out.Resolved = append(out.Resolved, j.p.res)
		}
	}
	sort.Slice(out.Resolved, func(i, j int) bool { return lessID(out.Resolved[i].Instance.ID, out.Resolved[j].Instance.ID) })
	sort.Slice(out.Errors, func(i, j int) bool { return lessID(out.Errors[i].ID, out.Errors[j].ID) })
	return out
}

// resolveInternal adds the internal deployments of every cluster (its
// ingress controllers) to out. They are few and cheap (no siblings, no
// services), so they resolve one after another.
func resolveInternal(repo *Repository, opts Options, nsErrs map[ID]error, out *Result) {
	for _, c := range repo.Clusters {
		ics := ingressControllers(c)
		classErrs := ingressClassErrors(c, ics)
		for _, ic := range ics {
			out.Present[ic.id] = true
			if opts.Only != nil && !opts.Only[ic.id] {
				continue
			}
			err := nsErrs[ic.id]
			if err == nil {
				err = classErrs[ic.id]
			}
			if err != nil {
				out.Errors = append(out.Errors, &DeploymentError{ID: ic.id, Err: err})
				continue
			}
			r, err := resolveIngress(ic, opts)
			if err != nil {
				out.Errors = append(out.Errors, &DeploymentError{ID: ic.id, Err: err})
				continue
			}
			out.Resolved = append(out.Resolved, r)
		}
	}
}

// parallel runs f(0..n-1) on GOMAXPROCS goroutines.
func parallel(n int, f func(int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

// connectedFromOnly reports whether a deployment selected by only
// connects to d, so d's endpoints are needed.
// connectsCycle returns the deployments of a connects cycle through d (d
// first and last, each named with its file), or nil.
func connectsCycle(e *Environment, d *Deployment) []string {
	byName := make(map[string]*Deployment, len(e.Deployments))
	for _, o := range e.Deployments {
		byName[o.ID.Name] = o
	}
	seen := map[string]bool{}
	var path []*Deployment
	var walk func(o *Deployment) bool
	walk = func(o *Deployment) bool {
		path = append(path, o)
		for _, ref := range o.Connects {
			next := byName[strings.SplitN(ref, ".", 2)[0]]
			switch {
			case next == nil || next == o: // unknown or itself: secondPass says so

			case next == d:
				path = append(path, d)
				return true
			case !seen[next.ID.Name]:
				seen[next.ID.Name] = true
				if walk(next) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		return false
	}
	if !walk(d) {
		return nil
	}
	names := make([]string, len(path))
	for i, o := range path {
		names[i] = o.ID.Name + " (" + o.File + ")"
	}
	return names
}

func connectedFromOnly(e *Environment, d *Deployment, only map[ID]bool) bool {
	for _, o := range e.Deployments {
		if !only[o.ID] {
			continue
		}
		for _, c := range o.Connects {
			if strings.SplitN(c, ".", 2)[0] == d.ID.Name {
				return true
			}
		}
	}
	return false
}

func firstPass(c *Cluster, e *Environment, d *Deployment, opts Options) (*pending, error) {
	merged := map[string]any{}
	prov := Provenance{}
	// Parameters from the cluster and environment apply only where the
	// driver declares them, so they are merged after the driver is known.
	layers := []struct {
		settings map[string]any
		origin   Origin
	}{
		{c.Settings, Origin{Layer: LayerCluster, File: c.File}},
		{e.Settings, Origin{Layer: LayerEnvironment, File: e.File}},
		{d.Settings, Origin{Layer: LayerDeployment, File: d.File}},
	}
	for _, l := range layers {
		mergeInto(merged, l.settings, "", l.origin, prov)
	}

	var locked *Instance
	if opts.Locks != nil {
		locked = opts.Locks[d.ID]
	}
	sel, request := selection(d, locked)
	drv, err := opts.Catalog.Select(d.Driver, sel)
	if err != nil {
		return nil, d.errorAt("driver", err.Error(), err)
	}

	// Keep only the parameters the driver declares from the outer layers;
	// the deployment's own parameters must all be known.
	declared := map[string]bool{}
	for _, p := range drv.Parameters {
		declared[p.Name] = true
	}
	if params, ok := merged["parameters"].(map[string]any); ok {
		own, _ := d.Settings["parameters"].(map[string]any)
		for k := range params {
			if declared[k] {
				continue
			}
			if _, fromDeployment := own[k]; fromDeployment {
				return nil, d.errorAt("parameters."+k, fmt.Sprintf("driver %s@%s has no parameter %q (it has: %s)", drv.Name, drv.Version, k, strings.Join(sortedKeys(declared), ", ")), nil)
			}
			delete(params, k)
			forget(prov, "parameters."+k)
		}
	}
	params, _ := merged["parameters"].(map[string]any)
	if params == nil {
		params = map[string]any{}
	}
	applied, err := drv.ApplyParameters(deepCopy(params).(map[string]any))
	if err != nil {
		return nil, parameterErrors(err, drv, params, prov, []layer{c.layer(), e.layer(), d.layer()}, d.File)
	}
	for _, p := range drv.Parameters {
		if _, set := params[p.Name]; !set && p.HasDefault {
			prov[keypath.Join("parameters", p.Name)] = Origin{Layer: "driver", File: drv.Source}
		}
	}
	// From here on the instance holds placeholders: the values, services
	// and everything rendered from it never see a sensitive value.
	sensitive := hidePlaceholders(d.ID, drv, applied)

	ns := NamespaceOf(e, d)
	if len(ns) > 63 {
		return nil, &ConfigError{File: d.File, Msg: fmt.Sprintf("namespace %q is longer than 63 characters: shorten the namespacePrefix or the deployment name", ns)}
	}
	ctx := drivers.Context{
		Cluster: drivers.ClusterContext{
			Name:             c.Name,
			Domain:           str(merged["domain"]),
			IngressClass:     str(merged["ingressClass"]),
			DedicatedIngress: merged["dedicatedIngress"] == true,
			StorageClasses:   strMap(merged["storageClasses"]),
		},
		Environment: drivers.EnvironmentContext{
			Name:           e.Name,
			Namespace:      e.NamespacePrefix,
			BackupLocation: str(merged["backupLocation"]),
			Config:         mapOrNil(merged["config"]),
			Policy:         EffectivePolicy(c, e),
			ClonedFrom:     cloneSourceFor(e, d.ID.Name),
		},
		Deployment: drivers.DeploymentContext{
			Name: d.ID.Name, Namespace: ns, AppVersion: d.AppVersion,
			Driver: drv.Name, DriverVersion: drv.Version,
		},
		Parameters: applied,
	}
	if err := policyErrors(c, e, ns); err != nil {
		return nil, err
	}
	eps, err := drv.Endpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: services of driver %s@%s: %w", d.File, drv.Name, drv.Version, err)
	}
	backupFirst, err := backupFirstOf(c, e, d, merged, prov, drv)
	if err != nil {
		return nil, err
	}
	in := &Instance{
		APIVersion:   APIVersion,
		Kind:         KindInstance,
		BackupFirst:  backupFirst,
		ID:           d.ID,
		SourceCommit: opts.SourceCommit,
		Driver:       DriverRef{Name: drv.Name, Version: drv.Version, Digest: drv.Digest, UpgradeRequest: request, Source: driverOrigin(opts, drv)},
		AppVersion:   d.AppVersion,
		Context:      &ctx,
	}
	return &pending{
		res:       &Resolved{Instance: in, Deployment: d, Provenance: prov, Settings: merged, Sensitive: sensitive},
		driver:    drv,
		endpoints: eps,
	}, nil
}

// policyErrors checks what the policy names before anything renders: the
// service account the agent impersonates must be in a namespace the
// environment may use.
func policyErrors(c *Cluster, e *Environment, ns string) error {
	p := EffectivePolicy(c, e)
	sans, _, ok := p.ServiceAccount(ns)
	if !ok || p.AllowsNamespace(ns, sans) {
		return nil
	}
	file := e.File
	if e.Policy == nil || e.Policy.ServiceAccountName == "" {
		file = c.File
	}
	return &ConfigError{File: file, Line: 1, Column: 1, Field: "policy.serviceAccountName",
		Msg: fmt.Sprintf("service account %q is in namespace %q, outside the environment's namespaces (the deployment's own %q and policy.namespaces)", p.ServiceAccountName, sans, ns)}
}

// driverOrigin is where drv was fetched from; nil for a driver of the
// repository's own drivers/ folder. A copy: instances never share it.
func driverOrigin(opts Options, drv *drivers.Driver) *DriverOrigin {
	o, ok := opts.DriverOrigins[drv.Name+"@"+drv.Version]
	if !ok {
		return nil
	}
	c := *o
	return &c
}

// selection is what the driver selection rule is asked for d, given its
// current lock (nil when it has none), and the upgrade request token the
// new instance records. The deployment keeps its locked driver version
// unless it pins one, its application version changed, or its upgrade
// request is new (it differs from the one the lock recorded): so a
// fan-out, which changes none of these, never changes a driver version,
// and a request is honoured once. A file without a token keeps the lock's
// (removing a spent token is no change).
func selection(d *Deployment, locked *Instance) (drivers.Selection, string) {
	sel := drivers.Selection{AppVersion: d.AppVersion, Pinned: d.DriverVersion}
	if locked == nil || locked.Tombstone() {
		return sel, d.UpgradeRequest
	}
	request := cmp.Or(d.UpgradeRequest, locked.Driver.UpgradeRequest)
	if locked.Driver.Name == d.Driver {
		sel.Locked = locked.Driver.Version
		sel.LockedAppVersion = locked.AppVersion
		sel.Upgrade = request != locked.Driver.UpgradeRequest
	}
	return sel, request
}

// layer is a loaded file and where its fields were written.
type layer struct {
	file string
	pos  map[string]token.Position
}

func (c *Cluster) layer() layer     { return layer{c.File, c.pos} }
func (e *Environment) layer() layer { return layer{e.File, e.pos} }
func (d *Deployment) layer() layer  { return layer{d.File, d.pos} }

// errorAt is a ConfigError at field of the deployment's file, placed where
// the field was written (or the file's start when it was not written).
func (d *Deployment) errorAt(field, msg string, err error) *ConfigError {
	return placed(&ConfigError{File: d.File, Field: field, Msg: msg, Err: err}, d.pos)
}

// placed positions e at its field in pos, else at the start of its file:
// every configuration error names a line and column.
func placed(e *ConfigError, pos map[string]token.Position) *ConfigError {
	e.at(placeOf(pos, e.Field))
	if e.Line == 0 {
		e.Line, e.Column = 1, 1
	}
	return e
}

// parameterErrors turns the errors of the driver's parameter schema into
// ConfigErrors, one per parameter, each in the file that set the
// parameter (a layer above may have) at the line it was set, else in the
// deployment's own file: a missing required parameter belongs there. A
// struct parameter's fields may come from several layers: the error names
// the field that fails and the file that set it (culprit). params are
// the parameters drv was given.
func parameterErrors(err error, drv *drivers.Driver, params map[string]any, prov Provenance, layers []layer, deploymentFile string) error {
	var out []*ConfigError
	for _, e := range flatten(err) {
		var pe *drivers.ParameterError
		if !errors.As(e, &pe) {
			out = append(out, &ConfigError{File: deploymentFile, Line: 1, Column: 1, Msg: e.Error(), Err: e})
			continue
		}
		field, file, msg := keypath.Join("parameters", pe.Parameter), deploymentFile, pe.Msg
		if leaf, o, ok := culprit(drv, params, prov, pe.Parameter); ok {
			file = o.File
			if leaf != field {
				msg = fmt.Sprintf("the value set here fails parameter %s: %s", pe.Parameter, pe.Msg)
				field = leaf
			}
		}
		var pos map[string]token.Position
		for _, l := range layers {
			if l.file == file {
				pos = l.pos
			}
		}
		out = append(out, placed(&ConfigError{File: file, Field: field, Msg: msg, Err: pe}, pos))
	}
	return joinConfigErrors(out)
}

// culprit is the path of parameter name (or of a field of it) that its
// error is about and the layer that set it; ok is false when no layer set
// any (a missing parameter). It is the same for the same input, though
// Provenance is a map: of a struct parameter whose fields layers set, the
// first field in path order that fails on its own (the parameter holding
// only it, the rest at their defaults), else the parameter itself in the
// most specific layer that set part of it.
func culprit(drv *drivers.Driver, params map[string]any, prov Provenance, name string) (string, Origin, bool) {
	field := keypath.Join("parameters", name)
	var leaves []string
	for _, p := range prov.Under(field).Paths() {
		if prov[p].Layer != "driver" {
			leaves = append(leaves, p)
		}
	}
	if len(leaves) == 0 {
		return "", Origin{}, false
	}
	fails := func(v any) bool {
		probe := make(map[string]any, len(params))
		for k, x := range params {
			probe[k] = x
		}
		probe[name] = v
		_, err := drv.ApplyParameters(deepCopy(probe).(map[string]any))
		for _, e := range flatten(err) {
			var pe *drivers.ParameterError
			if errors.As(e, &pe) && pe.Parameter == name {
				return true
			}
		}
		return false
	}
	// A field alone tells only when the parameter passes without any.
	if drv != nil && leaves[0] != field && !fails(map[string]any{}) {
		for _, leaf := range leaves {
			if v, ok := fieldAlone(params[name], below(leaf, field)); ok && fails(v) {
				return leaf, prov[leaf], true
			}
		}
	}
	rank := map[string]int{LayerCluster: 1, LayerEnvironment: 2, LayerDeployment: 3}
	best := leaves[0]
	for _, l := range leaves[1:] {
		if rank[prov[l].Layer] > rank[prov[best].Layer] {
			best = l
		}
	}
	return field, prov[best], true
}

// below is the keys of path p below its parent path parent (both
// Provenance paths); nil when p is not under it.
func below(p, parent string) []string {
	keys, ok := keypath.Split(p)
	top, ok2 := keypath.Split(parent)
	if !ok || !ok2 || len(keys) <= len(top) {
		return nil
	}
	return keys[len(top):]
}

// fieldAlone is struct value v holding only its field at the keys parts;
// false when v has no value there.
func fieldAlone(v any, parts []string) (any, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(parts) == 0 {
		return nil, false
	}
	x := settingAt(m, parts)
	if x == nil {
		return nil, false
	}
	for i := len(parts) - 1; i >= 0; i-- {
		x = map[string]any{parts[i]: x}
	}
	return x, true
}

// flatten lists the errors joined in err (errors.Join), err itself
// otherwise.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// secondPass evaluates the values of p's deployment with the services of
// the deployments it connects to (byName: those of its environment that
// passed the first pass; failed: the errors of those that did not), and
// renders its chart unless its instance is its lock's (locked).
func secondPass(e *Environment, p *pending, byName map[string]*pending, failed map[string]error, locked *Instance) error {
	d := p.res.Deployment
	if cycle := connectsCycle(e, d); cycle != nil {
		return d.errorAt("connects", "connects make a cycle ("+strings.Join(cycle, " → ")+"): a new deployment waits until the deployments it connects to are Ready, so one of them must not connect back", nil)
	}
	services := map[string]map[string]drivers.Endpoint{}
	for i, ref := range d.Connects {
		dep, svc, hasSvc := strings.Cut(ref, ".")
		field := fmt.Sprintf("connects[%d]", i)
		if dep == d.ID.Name {
			return d.errorAt(field, "a deployment cannot connect to itself", nil)
		}
		other, ok := byName[dep]
		if !ok {
			if !hasDeployment(e, dep) {
				return d.errorAt(field, fmt.Sprintf("no deployment %q in environment %s (it has: %s)", dep, e.Name, strings.Join(deploymentNames(e), ", ")), nil)
			}
			return peerFailed(d, i, dep, failed[dep])
		}
		if !hasSvc {
			services[dep] = other.endpoints
			continue
		}
		ep, ok := other.endpoints[svc]
		if !ok {
			return d.errorAt(field, fmt.Sprintf("deployment %q has no service %q (it has: %s)", dep, svc, strings.Join(sortedKeys(other.endpoints), ", ")), nil)
		}
		if services[dep] == nil {
			services[dep] = map[string]drivers.Endpoint{}
		}
		services[dep][svc] = ep
	}
	ctx := p.res.Instance.Context
	if len(services) > 0 {
		ctx.Services = services
	}
	values, err := p.driver.Values(*ctx)
	if err != nil {
		return fmt.Errorf("%s: values of driver %s@%s: %w", d.File, p.driver.Name, p.driver.Version, err)
	}
	in := p.res.Instance
	in.Values = values
	dg, err := in.ComputeDigest()
	if err != nil {
		return err
	}
	in.Digest = dg
	if locked != nil && !locked.Tombstone() && locked.Digest == dg {
		// The locked instance is this one: it passed the check when it
		// was locked, and the digest covers the driver, the policy (in
		// the context) and the values. A lock or plan of a large
		// repository renders only what changed.
		return nil
	}
	// The policy is checked on what the agent will apply, so a chart that
	// reaches out of its environment fails here, at lock time, and keeps
	// its previous lock, rather than in the cluster. So does a chart that
	// does not render with this deployment's values (a Helm hook, a
	// `fail` or `required` its parameters switch on): the agent would
	// stall on it.
	m, err := p.driver.RenderForPolicy(context.Background(), *ctx, values)
	if err != nil {
		return fmt.Errorf("%s: chart of driver %s@%s: %w", d.File, p.driver.Name, p.driver.Version, err)
	}
	if err := drivers.CheckPolicy(*ctx, m, d.ID.String()); err != nil {
		return fmt.Errorf("%s: %w", e.File, err)
	}
	p.rendered, p.outside = true, outsideOf(m.Objects, ctx.Deployment.Namespace)
	if p.hosts, err = hostsOf(m.Objects); err != nil {
		return fmt.Errorf("%s: chart of driver %s@%s: %w", d.File, p.driver.Name, p.driver.Version, err)
	}
	return nil
}

// peerFailed is the error of d, whose connects[i] names dep, when dep
// failed to resolve with err (nil: not known): d would be resolved with
// the services of an instance that is not locked, and locked new with
// nothing to wait for.
func peerFailed(d *Deployment, i int, dep string, err error) error {
	msg := fmt.Sprintf("deployment %q failed to resolve", dep)
	if err != nil {
		msg += ": " + strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	return d.errorAt(fmt.Sprintf("connects[%d]", i), msg, nil)
}

// failConnectors fails, until none is left, each deployment resolved in
// the second pass (second[i] nil; of only, when set) that connects to a
// deployment of its environment failed there, naming the first such
// one of its connects. Each round decides on the failures of the rounds
// before, so the peer named does not depend on the order of jobs.
func failConnectors(jobs []*resolveJob, second []error, only map[ID]bool) {
	if !slices.ContainsFunc(second, func(err error) bool { return err != nil }) {
		return
	}
	index := map[*Environment]map[string]int{}
	for i, j := range jobs {
		if index[j.e] == nil {
			index[j.e] = map[string]int{}
		}
		index[j.e][j.d.ID.Name] = i
	}
	for {
		failing := map[int]error{}
		for i, j := range jobs {
			if j.err != nil || second[i] != nil || (only != nil && !only[j.d.ID]) {
				continue
			}
			for k, ref := range j.d.Connects {
				dep, _, _ := strings.Cut(ref, ".")
				if o, ok := index[j.e][dep]; ok && second[o] != nil {
					failing[i] = peerFailed(j.d, k, dep, second[o])
					break
				}
			}
		}
		if len(failing) == 0 {
			return
		}
		for i, err := range failing {
			second[i] = err
		}
	}
}

// objectKey is a rendered object as the cluster knows it: two objects of
// one key are one object, whichever version renders them.
type objectKey struct {
	cluster, group, kind, namespace, name string
}

// keyOf is o's key in cluster; a cluster-scoped kind has no namespace
// whatever the chart wrote.
func keyOf(cluster string, o drivers.Object) objectKey {
	group, _, ok := strings.Cut(o.APIVersion, "/")
	if !ok {
		group = ""
	}
	ns := o.Namespace
	if drivers.IsClusterScoped(o.Kind) {
		ns = ""
	}
	return objectKey{cluster, group, o.Kind, ns, o.Name}
}

// outsideOf lists the objects not in namespace own: cluster-scoped ones
// and those in a namespace the policy lists. Only they can be another
// deployment's too, since no policy lists a deployment's own namespace.
func outsideOf(objects []drivers.Object, own string) []drivers.Object {
	var out []drivers.Object
	for _, o := range objects {
		if o.Namespace != own || drivers.IsClusterScoped(o.Kind) {
			out = append(out, o)
		}
	}
	return out
}

// claim is what one deployment of the cluster will run after this
// resolution, for objectConflicts: its new instance, or the lock it
// stands on (unchanged, failed, on hold, or not resolved).
type claim struct {
	id   ID
	file string
	// job is the index in jobs of a deployment this resolution changes;
	// standingClaim for one standing on its lock, deletedClaim for a lock
	// of a deployment no longer configured (its held objects only).
	job int
	// existing is set when it has a lock that is no tombstone: its
	// objects may be in the cluster already, as its release's.
	existing bool
	// outside are its objects outside its namespace; in (with drv when
	// known) is the instance to render for them.
	outside []drivers.Object
	in      *Instance
	drv     *drivers.Driver
	// held are the objects outside its namespace its lock renders (the
	// cluster may hold them as its release's): for one standing on its
	// lock, all of outside; for a changed one, what its lock rendered.
	held map[objectKey]bool
	// lock is a changed deployment's lock, rendered for held when its
	// policy lets it out of its namespace.
	lock *Instance
}

// Claims that are no job of this resolution (claim.job).
const (
	standingClaim = -1
	deletedClaim  = -2
)

// sortedLockIDs are the ids of locks, sorted.
func sortedLockIDs(locks map[ID]*Instance) []ID {
	ids := make([]ID, 0, len(locks))
	for id := range locks {
		ids = append(ids, id)
	}
	SortIDs(ids)
	return ids
}

// before orders the claims on object k: the deployment whose lock renders
// it first (the agent applied it as that release's), then one with a lock
// (its objects may be in the cluster), then by id. A deployment that only
// now renders an object never takes it from one whose lock has it.
func (a *claim) before(b *claim, k objectKey) bool {
	if ah, bh := a.held[k], b.held[k]; ah != bh {
		return ah
	}
	if a.existing != b.existing {
		return a.existing
	}
	return lessID(a.id, b.id)
}

// objectConflicts fails each deployment this resolution changes that
// renders an object (same group, kind, namespace and name) that another
// deployment of its cluster renders and comes before it in claim order:
// the agent applies an object for one release only and would refuse the
// later deployment's apply, after the merge. The others run what their
// locks hold, so an instance they stand on is rendered for its objects,
// only when its policy lets it out of its namespace and its cluster has a
// changed deployment that renders outside its own; a fan-out with the
// default policy renders nothing more.
//
// It records in out what the changed deployments render outside their
// namespaces and what their locks, and the locks of deployments no longer
// configured, render there (Result.renders, Result.held).
func objectConflicts(repo *Repository, jobs []*resolveJob, second []error, opts Options, out *Result) {
	// resolved: the job resolved, and its instance is what a lock of
	// this resolution records (not on hold).
	resolved := func(i int) bool {
		j := jobs[i]
		return j.err == nil && second[i] == nil && (opts.Only == nil || opts.Only[j.d.ID]) && j.d.Hold == ""
	}
	// The clusters where a changed deployment renders outside its
	// namespace: only there can an object be two deployments'.
	reaching := map[string]bool{}
	for i, j := range jobs {
		if resolved(i) && j.p.rendered && len(j.p.outside) > 0 {
			reaching[j.c.Name] = true
		}
	}
	if len(reaching) == 0 {
		return
	}
	byID := map[ID]int{}
	for i, j := range jobs {
		if reaching[j.c.Name] {
			byID[j.d.ID] = i
		}
	}
	var claims []*claim
	configured := map[ID]bool{}
	for _, c := range repo.Clusters {
		if !reaching[c.Name] {
			continue
		}
		for _, e := range c.Environments {
			for _, d := range e.Deployments {
				configured[d.ID] = true
				lock := opts.Locks[d.ID]
				cl := &claim{id: d.ID, file: d.File, job: standingClaim, existing: lock != nil && !lock.Tombstone()}
				i, ok := byID[d.ID]
				switch {
				case ok && resolved(i) && jobs[i].p.rendered:
					cl.job, cl.outside = i, jobs[i].p.outside
					if cl.existing {
						cl.lock = lock
					}
				case ok && resolved(i):
					cl.in, cl.drv = jobs[i].p.res.Instance, jobs[i].p.driver
				case cl.existing:
					cl.in = lock
				default:
					continue
				}
				claims = append(claims, cl)
			}
		}
	}
	// Deployments no longer configured (deleted by this lock): their
	// locks' objects are no claim, but one may move to another
	// deployment (orderMoves).
	for _, id := range sortedLockIDs(opts.Locks) {
		// (An ingress controller is no deployment of an environment: it
		// is resolved apart, resolveInternal, and its tombstone waits for
		// its applications, orderIngress.)
		if lock := opts.Locks[id]; reaching[id.Cluster] && !configured[id] && !lock.Tombstone() && lock.Context != nil && lock.Internal == "" {
			claims = append(claims, &claim{id: id, job: deletedClaim, existing: true, lock: lock})
		}
	}
	// What the locks render outside their namespaces: of the deployments
	// standing on theirs (what they run), and of the changed ones (what
	// the cluster may hold as their releases').
	var toRender []*claim
	for _, cl := range claims {
		in := cl.in
		if cl.job != standingClaim {
			in = cl.lock
		}
		if in != nil && in.Context != nil && policyReaches(in.Context.Environment.Policy) {
			toRender = append(toRender, cl)
		}
	}
	parallel(len(toRender), func(i int) {
		cl := toRender[i]
		in, drv := cl.in, cl.drv
		if cl.job != standingClaim {
			in, drv = cl.lock, nil
		}
		if drv == nil {
			var ok bool
			if drv, ok = opts.Catalog.Get(in.Driver.Name, in.Driver.Version); !ok || drv.Digest != in.Driver.Digest {
				return // its objects are not known here
			}
		}
		// A lock that no longer renders is its own deployment's error.
		m, err := drv.RenderForPolicy(context.Background(), *in.Context, in.Values)
		if err != nil {
			return
		}
		objs := outsideOf(m.Objects, in.Context.Deployment.Namespace)
		if cl.job == standingClaim {
			cl.outside = objs
		}
		if cl.existing && (cl.job != standingClaim || in == cl.in) {
			cl.held = make(map[objectKey]bool, len(objs))
			for _, o := range objs {
				cl.held[keyOf(cl.id.Cluster, o)] = true
			}
		}
	})
	out.renders, out.held = map[ID]map[objectKey]bool{}, map[ID]map[objectKey]bool{}
	for _, cl := range claims {
		if cl.job == standingClaim {
			continue
		}
		if len(cl.held) > 0 {
			out.held[cl.id] = cl.held
		}
		if cl.job >= 0 {
			keys := make(map[objectKey]bool, len(cl.outside))
			for _, o := range cl.outside {
				keys[keyOf(cl.id.Cluster, o)] = true
			}
			out.renders[cl.id] = keys
		}
	}
	owner := map[objectKey]*claim{}
	for _, cl := range claims {
		for _, o := range cl.outside {
			k := keyOf(cl.id.Cluster, o)
			if w := owner[k]; w == nil || cl.before(w, k) {
				owner[k] = cl
			}
		}
	}
	for _, cl := range claims {
		if cl.job < 0 {
			continue
		}
		var first *drivers.Object
		var other *claim
		n := 0
		for i, o := range cl.outside {
			if w := owner[keyOf(cl.id.Cluster, o)]; w != cl {
				if first == nil {
					first, other = &cl.outside[i], w
				}
				n++
			}
		}
		if first != nil {
			second[cl.job] = conflictError(cl, *first, other, n-1)
		}
	}
}

// failTakers fails each deployment resolved in the second pass that
// renders an object outside its namespace which the lock of a deployment
// failed since (refused for another object, or for what it connects to)
// renders: that one keeps its lock, and the object with it, so the
// taker's apply would be refused. It reports whether it failed any.
func failTakers(jobs []*resolveJob, second []error, out *Result) bool {
	if len(out.held) == 0 {
		return false
	}
	failed := map[ID]bool{}
	for i, j := range jobs {
		if j.err != nil || second[i] != nil {
			failed[j.d.ID] = true
		}
	}
	givers := slices.SortedFunc(maps.Keys(out.held), func(a, b ID) int {
		if lessID(a, b) {
			return -1
		}
		if lessID(b, a) {
			return 1
		}
		return 0
	})
	any := false
	for i, j := range jobs {
		if j.err != nil || second[i] != nil || len(out.renders[j.d.ID]) == 0 {
			continue
		}
		for _, g := range givers {
			if !failed[g] || g == j.d.ID {
				continue
			}
			var held []objectKey
			for k := range out.held[g] {
				if out.renders[j.d.ID][k] {
					held = append(held, k)
				}
			}
			if len(held) == 0 {
				continue
			}
			slices.SortFunc(held, func(a, b objectKey) int {
				if lessKey(a, b) {
					return -1
				}
				if lessKey(b, a) {
					return 1
				}
				return 0
			})
			second[i] = fmt.Errorf("%s: deployment %s renders %s, which the lock of deployment %s renders: %s failed to resolve, keeps its lock and the object with it, and the agent would refuse this deployment's apply; lock this one once %s resolves",
				j.d.File, j.d.ID, held[0].describe(), g, g, g)
			any = true
			break
		}
	}
	return any
}

// policyReaches reports whether p lets a chart out of its deployment's
// namespace: it lists namespaces, or kinds (besides "*"), which may be
// cluster-scoped ones.
func policyReaches(p *drivers.Policy) bool {
	return p != nil && (len(p.Namespaces) > 0 || slices.ContainsFunc(p.Kinds, func(k string) bool { return k != "*" }))
}

// conflictError is the error of the deployment of cl, which renders o
// (and more objects besides) that other renders too.
func conflictError(cl *claim, o drivers.Object, other *claim, more int) error {
	what := o.Kind + " " + o.Name
	if ns := keyOf("", o).namespace; ns != "" {
		what = o.Kind + " " + ns + "/" + o.Name
	}
	if more > 0 {
		what += fmt.Sprintf(" (and %d more objects)", more)
	}
	locked := ""
	if other.existing && !cl.existing {
		locked = ", locked already,"
	}
	return fmt.Errorf("%s: deployment %s renders %s, which deployment %s (%s)%s renders too: an object belongs to one release, and the agent would refuse this deployment's apply; keep one of them from rendering it (its parameters) or rename one of them",
		cl.file, cl.id, what, other.id, other.file, locked)
}

func hasDeployment(e *Environment, name string) bool {
	for _, d := range e.Deployments {
		if d.ID.Name == name {
			return true
		}
	}
	return false
}

func deploymentNames(e *Environment) []string {
	var out []string
	for _, d := range e.Deployments {
		out = append(out, d.ID.Name)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func str(v any) string { s, _ := v.(string); return s }

func mapOrNil(v any) map[string]any {
	m, _ := v.(map[string]any)
	if len(m) == 0 {
		return nil
	}
	return m
}

func strMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		out[k] = str(x)
	}
	return out
}

// lockDir is where lockfiles live.
const lockDir = LocksDir

// LocksDir is the folder of the repository that holds every lockfile.
const LocksDir = "locks"

// ClusterLocksDir is the folder of the lockfiles of one cluster
// (locks/<cluster>): what an agent of that cluster follows.
func ClusterLocksDir(cluster string) string {
	return path.Join(LocksDir, cluster)
}

// IDFromLockPath parses locks/<cluster>/<env>/<name>.lock.yaml.
func IDFromLockPath(p string) (ID, bool) {
	rest, ok := strings.CutPrefix(p, lockDir+"/")
	if !ok {
		return ID{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || !strings.HasSuffix(parts[2], ".lock.yaml") {
		return ID{}, false
	}
	id := ID{Cluster: parts[0], Environment: parts[1], Name: strings.TrimSuffix(parts[2], ".lock.yaml")}
	if path.Join(lockDir, id.Cluster, id.Environment, id.Name+".lock.yaml") != p {
		return ID{}, false
	}
	return id, true
}
