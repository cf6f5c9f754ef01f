package resolver

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"cuelang.org/go/cue/token"

	"github.com/styrmin/styrmin/drivers"
)

// InternalIngress is Instance.Internal of an ingress controller.
const InternalIngress = "ingress"

// The names of the internal ingress deployments. A dot is in no folder
// or file name of the repository (those are DNS labels), so no user
// deployment or environment can have these IDs, while Kubernetes takes
// them as label values, task and release names.
const (
	// IngressName is the deployment name of every ingress controller:
	// CLUSTER/ENV/styrmin.ingress serves an environment's dedicated
	// class.
	IngressName = "styrmin.ingress"
	// ClusterEnvironment is the environment of the cluster's own internal
	// deployments: CLUSTER/styrmin.cluster/styrmin.ingress is the shared
	// controller.
	ClusterEnvironment = "styrmin.cluster"
	// sharedIngressPrefix is the namespace prefix of the shared
	// controller (its namespace: styrmin-ingress).
	sharedIngressPrefix = "styrmin"
	// ingressSuffix ends the namespace of an ingress controller: the
	// environment's prefix (or sharedIngressPrefix) and this.
	ingressSuffix = "-ingress"
	// envIngressSuffix ends an environment controller's namespace:
	// <prefix>-styrmin-ingress.
	envIngressSuffix = "-styrmin" + ingressSuffix
)

// SharedIngressID is the ID of cluster's shared ingress controller.
func SharedIngressID(cluster string) ID {
	return ID{Cluster: cluster, Environment: ClusterEnvironment, Name: IngressName}
}

// EnvironmentIngressID is the ID of an environment's dedicated ingress
// controller.
func EnvironmentIngressID(cluster, env string) ID {
	return ID{Cluster: cluster, Environment: env, Name: IngressName}
}

// ingressController is one ingress controller a cluster's configuration
// calls for: an internal deployment.
type ingressController struct {
	id      ID
	cluster *Cluster
	// env is the environment of a dedicated controller; nil for the
	// cluster's shared one.
	env *Environment
	// class is the IngressClass it creates and serves.
	class     string
	namespace string
}

// ingressControllers lists the ingress controllers of c, shared one first,
// then the environments' by name: none without ingress:; with it the
// shared one, serving the cluster's ingressClass, and one per environment
// whose dedicatedIngress (its own, else the cluster's) is true, serving
// "<environment>-<class>".
func ingressControllers(c *Cluster) []ingressController {
	if c.Ingress == nil {
		return nil
	}
	out := []ingressController{{
		id: SharedIngressID(c.Name), cluster: c, class: str(c.Settings["ingressClass"]),
		namespace: sharedIngressPrefix + ingressSuffix,
	}}
	for _, e := range c.Environments {
		if !DedicatedIngress(c, e) {
			continue
		}
		out = append(out, ingressController{
			id: EnvironmentIngressID(c.Name, e.Name), cluster: c, env: e,
			class:     DedicatedIngressClass(e.Name, environmentClass(c, e)),
			namespace: e.NamespacePrefix + envIngressSuffix,
		})
	}
	return out
}

// ingressClassErrors checks the classes of c's controllers: each a valid
// IngressClass name, none served twice (an environment overriding
// ingressClass could make "<env>-<class>" another controller's class).
func ingressClassErrors(c *Cluster, ics []ingressController) map[ID]error {
	out := map[ID]error{}
	owners := map[string][]ingressController{}
	for _, ic := range ics {
		if ic.class == "" {
			continue // resolveIngress says it is missing
		}
		owners[ic.class] = append(owners[ic.class], ic)
		if len(ic.class) > 253 || !classRE.MatchString(ic.class) {
			out[ic.id] = placed(&ConfigError{File: ic.classFile(), Field: "ingressClass", Msg: fmt.Sprintf(
				"the ingress controller %s would serve class %q, which is no IngressClass name (lowercase letters, digits, '-' and '.')", ic.id, ic.class)}, ic.classPos())
		}
	}
	for class, ics := range owners {
		if len(ics) < 2 {
			continue
		}
		for _, ic := range ics {
			var others []string
			for _, o := range ics {
				if o.id != ic.id {
					others = append(others, o.id.String())
				}
			}
			out[ic.id] = placed(&ConfigError{File: ic.classFile(), Field: "ingressClass", Msg: fmt.Sprintf(
				"the ingress controller %s would serve class %q, which %s serves too: one IngressClass has one controller; change an environment's ingressClass",
				ic.id, class, strings.Join(others, ", "))}, ic.classPos())
		}
	}
	return out
}

// classRE is a DNS subdomain: what an IngressClass may be named.
var classRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// classFile is the file whose ingressClass names the controller's class.
func (ic ingressController) classFile() string {
	if ic.env != nil {
		if _, own := ic.env.Settings["ingressClass"]; own {
			return ic.env.File
		}
	}
	return ic.cluster.File
}

func (ic ingressController) classPos() map[string]token.Position {
	if ic.classFile() == ic.cluster.File {
		return ic.cluster.pos
	}
	return ic.env.pos
}

// DedicatedIngress reports whether environment e has its own ingress
// controller class: its dedicatedIngress, else the cluster's.
func DedicatedIngress(c *Cluster, e *Environment) bool {
	if v, ok := e.Settings["dedicatedIngress"].(bool); ok {
		return v
	}
	v, _ := c.Settings["dedicatedIngress"].(bool)
	return v
}

// DedicatedIngressClass is the class of environment env's own controller:
// "<env>-<class>", the class the example drivers (and any driver reading
// context.cluster.dedicatedIngress) give their Ingresses.
func DedicatedIngressClass(env, class string) string { return env + "-" + class }

// environmentClass is the ingress class an environment's layer says: its
// own ingressClass, else the cluster's.
func environmentClass(c *Cluster, e *Environment) string {
	return cmp.Or(str(e.Settings["ingressClass"]), str(c.Settings["ingressClass"]))
}

// ingressPolicy is the policy of an ingress controller: every namespaced
// kind, and the cluster-scoped IngressClass it serves. It is the
// platform's deployment, not a tenant's: the environment's policy (and
// its service account) is for the applications.
func ingressPolicy() *drivers.Policy {
	return &drivers.Policy{Kinds: []string{"*", "IngressClass"}}
}

// resolveIngress resolves one ingress controller into an internal
// instance. Only what it reads reaches it: ingress: (driver, version,
// appVersion, parameters), its class, the cluster's and environment's
// names and its namespace. The layers' parameters, config, domain or
// storage classes never do, so application fan-outs leave it alone.
func resolveIngress(ic ingressController, opts Options) (*Resolved, error) {
	c, spec := ic.cluster, ic.cluster.Ingress
	errAt := func(field, format string, args ...any) *ConfigError {
		return placed(&ConfigError{File: c.File, Field: field, Msg: fmt.Sprintf(format, args...)}, c.pos)
	}
	if ic.class == "" {
		return nil, errAt("ingressClass", "missing: the cluster's ingress controller (ingress:) serves this class; set it (for example ingressClass: \"nginx\")")
	}
	drv, appVersion, err := selectIngressDriver(spec, opts.Locks[ic.id], opts.Catalog)
	if err != nil {
		field := "ingress.driver"
		if spec.Version != "" && !errors.Is(err, drivers.ErrUnknownDriver) {
			field = "ingress.version"
		}
		ce := errAt(field, "%s", err.Error())
		ce.Err = err
		return nil, ce
	}
	if !drv.Serves(drivers.ProvidesIngressClass) {
		return nil, errAt("ingress.driver", "driver %s@%s does not declare an IngressClass: an ingress controller's driver.cue says provides: [%q] and its chart creates the IngressClass named context.cluster.ingressClass", drv.Name, drv.Version, drivers.ProvidesIngressClass)
	}
	applied, err := ingressParameters(c, drv)
	if err != nil {
		return nil, err
	}
	sensitive := hidePlaceholders(ic.id, drv, applied)

	envName, prefix := ClusterEnvironment, sharedIngressPrefix
	if ic.env != nil {
		envName, prefix = ic.env.Name, ic.env.NamespacePrefix
	}
	ctx := drivers.Context{
		Cluster:     drivers.ClusterContext{Name: c.Name, IngressClass: ic.class},
		Environment: drivers.EnvironmentContext{Name: envName, Namespace: prefix, Policy: ingressPolicy()},
		Deployment: drivers.DeploymentContext{
			Name: ic.id.Name, Namespace: ic.namespace, AppVersion: appVersion,
			Driver: drv.Name, DriverVersion: drv.Version,
		},
		Parameters: applied,
	}
	values, err := drv.Values(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: ingress: values of driver %s@%s: %w", c.File, drv.Name, drv.Version, err)
	}
	if err := checkIngressChart(drv, ctx, values, ic); err != nil {
		return nil, fmt.Errorf("%s: ingress.driver: %w", c.File, err)
	}
	in := &Instance{
		APIVersion:   APIVersion,
		Kind:         KindInstance,
		ID:           ic.id,
		SourceCommit: opts.SourceCommit,
		Driver:       DriverRef{Name: drv.Name, Version: drv.Version, Digest: drv.Digest, Source: driverOrigin(opts, drv)},
		AppVersion:   appVersion,
		Context:      &ctx,
		Values:       values,
		Internal:     InternalIngress,
	}
	if in.Digest, err = in.ComputeDigest(); err != nil {
		return nil, err
	}
	settings, prov := ingressSettings(ic)
	d := &Deployment{ID: ic.id, File: c.File, Driver: spec.Driver, DriverVersion: spec.Version, AppVersion: appVersion, Settings: settings}
	return &Resolved{Instance: in, Deployment: d, Provenance: prov, Settings: settings, Sensitive: sensitive}, nil
}

// ingressParameters applies the driver's parameter schema to
// ingress.parameters (no other layer's parameters reach a controller):
// each error names its field in cluster.cue.
func ingressParameters(c *Cluster, drv *drivers.Driver) (map[string]any, error) {
	spec := c.Ingress
	declared := map[string]bool{}
	for _, p := range drv.Parameters {
		declared[p.Name] = true
	}
	for _, k := range sortedKeys(spec.Parameters) {
		if !declared[k] {
			return nil, placed(&ConfigError{File: c.File, Field: "ingress.parameters." + k, Msg: fmt.Sprintf(
				"driver %s@%s has no parameter %q (it has: %s)", drv.Name, drv.Version, k, strings.Join(sortedKeys(declared), ", "))}, c.pos)
		}
	}
	params := map[string]any{}
	if spec.Parameters != nil {
		params = deepCopy(spec.Parameters).(map[string]any)
	}
	applied, err := drv.ApplyParameters(params)
	if err == nil {
		return applied, nil
	}
	var out []*ConfigError
	for _, e := range flatten(err) {
		ce := &ConfigError{File: c.File, Field: "ingress.parameters", Msg: e.Error(), Err: e}
		var pe *drivers.ParameterError
		if errors.As(e, &pe) {
			ce.Field, ce.Msg = "ingress.parameters."+pe.Parameter, pe.Msg
		}
		out = append(out, placed(ce, c.pos))
	}
	return nil, joinConfigErrors(out)
}

// selectIngressDriver picks the ingress driver version and the
// application version: with ingress.appVersion the selection rule of
// every deployment; without, the pinned version, else the locked one,
// else the newest, running its chart's appVersion. So a fan-out never
// moves a controller to another driver version either.
func selectIngressDriver(spec *IngressSpec, locked *Instance, cat *drivers.Catalog) (*drivers.Driver, string, error) {
	sel := drivers.Selection{AppVersion: spec.AppVersion, Pinned: spec.Version}
	if locked != nil && !locked.Tombstone() && locked.Driver.Name == spec.Driver {
		sel.Locked, sel.LockedAppVersion = locked.Driver.Version, locked.AppVersion
	}
	if spec.AppVersion != "" {
		d, err := cat.Select(spec.Driver, sel)
		if gone, ok := errors.AsType[*drivers.LockedNotLoadedError](err); ok {
			return nil, "", ingressLockGone(gone)
		}
		return d, spec.AppVersion, err
	}
	versions := cat.Versions(spec.Driver)
	if len(versions) == 0 {
		if err := cat.BrokenAbove(spec.Driver, ""); err != nil {
			return nil, "", err
		}
		return nil, "", fmt.Errorf("driver %s: %w (loaded: %s)", spec.Driver, drivers.ErrUnknownDriver, strings.Join(cat.Names(), ", "))
	}
	d := versions[len(versions)-1] // the newest
	// A version a keep-going load could not load fails the choice it
	// could have been (pinned, kept, or newer than the newest that
	// loads), rather than another version being taken silently.
	if pinned, ok := cat.Get(spec.Driver, sel.Pinned); ok {
		d = pinned
	} else if sel.Pinned != "" {
		if err := cat.BrokenVersion(spec.Driver, sel.Pinned); err != nil {
			return nil, "", err
		}
		return nil, "", fmt.Errorf("driver %s: version %s is not loaded", spec.Driver, sel.Pinned)
	} else if locked, ok := cat.Get(spec.Driver, sel.Locked); ok {
		d = locked
	} else if err := cat.BrokenVersion(spec.Driver, sel.Locked); sel.Locked != "" && err != nil {
		return nil, "", err
	} else if sel.Locked != "" {
		// Gone: the newest would change the controller's driver, and its
		// application, with nobody asking.
		gone := &drivers.LockedNotLoadedError{Driver: spec.Driver, Version: sel.Locked}
		for _, v := range versions {
			gone.Loaded = append(gone.Loaded, v.Version)
		}
		return nil, "", ingressLockGone(gone)
	} else if err := cat.BrokenAbove(spec.Driver, d.Version); err != nil {
		return nil, "", err
	}
	app := d.ChartAppVersion()
	if app == "" {
		return nil, "", fmt.Errorf("driver %s@%s: its chart has no appVersion; set ingress.appVersion", d.Name, d.Version)
	}
	return d, app, nil
}

// ingressLockGone says that the driver version an ingress controller's
// lock runs is not loaded, with the remedies of an ingress block (it has
// no upgrade request).
func ingressLockGone(e *drivers.LockedNotLoadedError) error {
	return fmt.Errorf("driver %s: version %s, which the ingress controller's lock runs, is not loaded (loaded: %s); "+
		"the controller keeps its driver version until another is named: bring %s back, or pin a version (ingress.version)",
		e.Driver, e.Version, strings.Join(e.Loaded, ", "), e.Version)
}

// checkIngressChart renders the controller and checks what it declares:
// an IngressClass named its class, and nothing outside its policy. The
// render is what the agent applies, so a driver whose chart breaks the
// promise fails here, at lock time.
func checkIngressChart(drv *drivers.Driver, ctx drivers.Context, values map[string]any, ic ingressController) error {
	m, err := drv.RenderInProcess(context.Background(), ctx, values)
	if err != nil {
		return err
	}
	if err := drivers.CheckPolicy(ctx, m, ic.id.String()); err != nil {
		return err
	}
	var classes []string
	for _, o := range m.Objects {
		if o.Kind == "IngressClass" {
			if o.Name == ic.class {
				return nil
			}
			classes = append(classes, o.Name)
		}
	}
	found := "none"
	if len(classes) > 0 {
		found = strings.Join(classes, ", ")
	}
	return fmt.Errorf("driver %s@%s declares provides: [%q] but its chart creates no IngressClass %q (it creates: %s); name it after context.cluster.ingressClass",
		drv.Name, drv.Version, drivers.ProvidesIngressClass, ic.class, found)
}

// ingressSettings is what an ingress controller reads, as a settings tree
// with where each value came from (explain and the plan's causes).
func ingressSettings(ic ingressController) (map[string]any, Provenance) {
	c := ic.cluster
	var raw map[string]any
	b, _ := json.Marshal(c.Ingress)
	_ = json.Unmarshal(b, &raw)
	settings := map[string]any{"ingress": raw, "ingressClass": ic.class}
	prov := Provenance{}
	mergeInto(map[string]any{}, map[string]any{"ingress": raw}, "", Origin{Layer: LayerCluster, File: c.File}, prov)
	if ic.env != nil {
		settings["dedicatedIngress"] = true
		prov["dedicatedIngress"] = Origin{Layer: LayerCluster, File: c.File}
		if _, own := ic.env.Settings["dedicatedIngress"]; own {
			prov["dedicatedIngress"] = Origin{Layer: LayerEnvironment, File: ic.env.File}
		}
	}
	classLayer := LayerCluster
	if ic.classFile() != c.File {
		classLayer = LayerEnvironment
	}
	prov["ingressClass"] = Origin{Layer: classLayer, File: ic.classFile()}
	return settings, prov
}

// orderIngress orders the changes around each environment's ingress
// controller (internal deployments), so that no application points at a
// class without a ready controller:
//
//   - every application whose instance changes runs after the controller
//     of the class it uses (its environment's with dedicatedIngress, else
//     the shared one) when that controller's new instance is in this
//     lock: on, an environment's controller is created and its
//     applications move to its class after it; a new application waits
//     for its controller;
//   - off: an environment controller's tombstone runs after every changed
//     application of its environment (they move back to the shared class
//     first).
//
// Entries are added to After sorted and without duplicates.
func orderIngress(res *Result, current map[ID]*Instance, changes []LockChange) {
	internal := map[ID]*LockChange{}
	for i := range changes {
		c := &changes[i]
		if isInternal(c, current) {
			internal[c.ID] = c
		}
	}
	if len(internal) == 0 {
		return
	}
	apps := map[[2]string][]*LockChange{} // by cluster/environment
	for i := range changes {
		c := &changes[i]
		if _, ok := internal[c.ID]; !ok {
			key := [2]string{c.ID.Cluster, c.ID.Environment}
			apps[key] = append(apps[key], c)
		}
	}
	for i := range changes {
		c := &changes[i]
		if _, ok := internal[c.ID]; ok || c.Next.Tombstone() || c.Next.Context == nil {
			continue
		}
		// The controller of the class the application uses: its
		// environment's (on) or the shared one.
		ctl := internal[SharedIngressID(c.ID.Cluster)]
		if c.Next.Context.Cluster.DedicatedIngress {
			ctl = internal[EnvironmentIngressID(c.ID.Cluster, c.ID.Environment)]
		}
		if ctl != nil && !ctl.Next.Tombstone() {
			addAfter(c.Next, AfterRef(ctl.ID, ctl.Next.Sequence))
		}
	}
	// Off: a controller goes only after its applications moved away.
	for id, ctl := range internal {
		if !ctl.Next.Tombstone() || id.Environment == ClusterEnvironment {
			continue
		}
		for _, app := range apps[[2]string{id.Cluster, id.Environment}] {
			if !app.Next.Tombstone() {
				addAfter(ctl.Next, AfterRef(app.ID, app.Next.Sequence))
			}
		}
	}
}

// ingressStillUsed reports whether an environment's ingress controller
// that its configuration no longer calls for must stay locked: an
// application of its environment still runs on its class after this
// lock. Either it does not move (it failed to resolve, or is on hold),
// or its new instance still uses the class: removing ingress: while
// dedicatedIngress stays leaves the applications on "<env>-<class>"
// (their context does not read ingress:), and a tombstone there would
// take their controller away without the deletion rule counting it.
// The tombstone waits for a lock where they all move off the class, so
// no Ingress is left without a controller.
func ingressStillUsed(res *Result, current map[ID]*Instance, ctl *Instance) bool {
	if ctl.Internal != InternalIngress || ctl.ID.Environment == ClusterEnvironment || ctl.Context == nil {
		return false
	}
	isApp := func(in *Instance) bool {
		return in.ID.Cluster == ctl.ID.Cluster && in.ID.Environment == ctl.ID.Environment &&
			!in.Tombstone() && in.Internal == "" && in.Context != nil
	}
	class := ctl.Context.Cluster.IngressClass
	for id, in := range current {
		if !isApp(in) || !in.Context.Cluster.DedicatedIngress {
			continue
		}
		_, resolved := res.Get(id)
		if _, held := res.Held[id]; held || (!resolved && res.Present[id]) {
			return true
		}
	}
	for _, r := range res.Resolved {
		if _, held := res.Held[r.Instance.ID]; !held && isApp(r.Instance) && ingressClassOf(r.Instance) == class {
			return true
		}
	}
	return false
}

// ingressClassOf is the class an instance uses: an application's, its
// environment's dedicated class with dedicatedIngress, else its
// ingressClass; a controller's, the class it serves (its context's
// ingressClass); "" for a tombstone or an instance without context.
func ingressClassOf(in *Instance) string {
	if in == nil || in.Tombstone() || in.Context == nil {
		return ""
	}
	if in.Context.Cluster.DedicatedIngress {
		return DedicatedIngressClass(in.ID.Environment, in.Context.Cluster.IngressClass)
	}
	return in.Context.Cluster.IngressClass
}

// failUnservedIngressMoves fails the applications that would move to
// their environment's dedicated class while the controller of that class
// fails to resolve and its lock (if any) serves another: locked, they
// would point their Ingresses at a class no controller serves (orderIngress
// has no new controller instance to order them after), and under
// LockKeepGoing the rest of the lock goes through. As failures they keep
// their locks, each error naming the controller's, and move in the lock
// where it resolves. An application already on the class, or one on
// hold, is left alone: nothing it serves changes controller.
func failUnservedIngressMoves(res *Result, current map[ID]*Instance) {
	failed := map[ID]error{}
	for _, e := range res.Errors {
		if e.ID.Name == IngressName && e.ID.Environment != ClusterEnvironment {
			failed[e.ID] = e.Err
		}
	}
	if len(failed) == 0 {
		return
	}
	kept := make([]*Resolved, 0, len(res.Resolved))
	dropped := map[ID]bool{}
	for _, r := range res.Resolved {
		in := r.Instance
		ctl := EnvironmentIngressID(in.ID.Cluster, in.ID.Environment)
		err, broken := failed[ctl]
		_, held := res.Held[in.ID]
		class := ingressClassOf(in)
		if !broken || held || in.Internal != "" || in.Context == nil || !in.Context.Cluster.DedicatedIngress ||
			ingressClassOf(current[in.ID]) == class || ingressClassOf(current[ctl]) == class {
			kept = append(kept, r)
			continue
		}
		dropped[in.ID] = true
		res.Errors = append(res.Errors, &DeploymentError{ID: in.ID, Err: fmt.Errorf(
			"not locked: its ingress class would be %q, whose controller %s fails to resolve, so no controller would serve it; it keeps its current lock until the controller resolves: %w",
			class, ctl, err)})
	}
	if len(kept) == len(res.Resolved) {
		return
	}
	res.Resolved = failConnectedTo(kept, dropped, res)
	sort.Slice(res.Errors, func(i, j int) bool { return lessID(res.Errors[i].ID, res.Errors[j].ID) })
}

// failConnectedTo fails, until none is left, the deployments of resolved
// that connect to one of their environment in failed (those failed after
// the second pass, and in turn those failed here): they were resolved with
// its endpoints, and would be locked against a deployment that is not, as
// the second pass fails them when one they connect to does not resolve.
// Deployments on hold are kept: they lock nothing anyway.
func failConnectedTo(resolved []*Resolved, failed map[ID]bool, res *Result) []*Resolved {
	for {
		kept := resolved[:0:0]
		for _, r := range resolved {
			if _, held := res.Held[r.Instance.ID]; held {
				kept = append(kept, r)
				continue
			}
			var gone string
			var connects []string
			if r.Deployment != nil {
				connects = r.Deployment.Connects
			}
			for _, ref := range connects {
				dep, _, _ := strings.Cut(ref, ".")
				if failed[ID{Cluster: r.Instance.ID.Cluster, Environment: r.Instance.ID.Environment, Name: dep}] {
					gone = dep
					break
				}
			}
			if gone == "" {
				kept = append(kept, r)
				continue
			}
			failed[r.Instance.ID] = true
			res.Errors = append(res.Errors, &DeploymentError{ID: r.Instance.ID, Err: fmt.Errorf("%s: connects: deployment %q failed to resolve", r.Deployment.File, gone)})
		}
		if len(kept) == len(resolved) {
			return kept
		}
		resolved = kept
	}
}

// isInternal reports whether a change is of an internal deployment: its
// new instance (a tombstone too) says so, or the instance it replaces.
func isInternal(c *LockChange, current map[ID]*Instance) bool {
	if c.Next.Internal != "" {
		return true
	}
	prev := c.Previous
	if prev == nil {
		prev = current[c.ID]
	}
	return prev != nil && prev.Internal != ""
}

// addAfter adds ref to in.After, keeping it sorted and without
// duplicates.
func addAfter(in *Instance, ref string) {
	in.After = append(in.After, ref)
	slices.Sort(in.After)
	in.After = slices.Compact(in.After)
}
