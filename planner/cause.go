package planner

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/keypath"
	"github.com/styrmin/styrmin/resolver"
)

// layerChange is what changed in one layer file between the base and the
// head: the settings paths, written as keypath writes them (a key that
// is no identifier quoted: it is the author's, shown in the plan's
// causes).
type layerChange struct {
	kind  CauseKind
	file  string
	paths []string
	// known is false when the base could not be read; attribution then
	// falls back to where the new value comes from.
	known bool
}

// touches reports whether the layer changed sp, a parent of it or a
// value below it.
func (l *layerChange) touches(sp string) bool {
	if l == nil {
		return false
	}
	for _, p := range l.paths {
		if keypath.Within(p, sp) || keypath.Within(sp, p) {
			return true
		}
	}
	return false
}

// touched returns the changed paths at or below sp, or sp itself when a
// parent of it changed.
func (l *layerChange) touched(sp string) []string {
	var out []string
	for _, p := range l.paths {
		switch {
		case keypath.Within(p, sp):
			out = append(out, p)
		case keypath.Within(sp, p):
			out = append(out, sp)
		}
	}
	return out
}

// attributor finds the causes of each change: it compares the cluster,
// environment and deployment files of the head with those at the base.
type attributor struct {
	in       Input
	loader   *resolver.Loader
	clusters map[string]*resolver.Cluster
	envs     map[string]*resolver.Environment // by "cluster/env"
	cl       map[string]*layerChange
	el       map[string]*layerChange
}

func newAttributor(in Input, config *resolver.ConfigSandbox) *attributor {
	a := &attributor{
		in:       in,
		loader:   resolver.NewLoader(0).WithSandbox(config),
		clusters: map[string]*resolver.Cluster{},
		envs:     map[string]*resolver.Environment{},
		cl:       map[string]*layerChange{},
		el:       map[string]*layerChange{},
	}
	if in.Repo == nil {
		return a
	}
	for _, c := range in.Repo.Clusters {
		a.clusters[c.Name] = c
		a.cl[c.Name] = a.compareLayer(CauseCluster, c.File, "#Cluster", withPolicy(clusterSettings(c), c.Policy), "", "")
		for _, e := range c.Environments {
			key := c.Name + "/" + e.Name
			a.envs[key] = e
			a.el[key] = a.compareLayer(CauseEnvironment, e.File, "#Environment", withPolicy(e.Settings, e.Policy), e.NamespacePrefix, e.Name)
		}
	}
	return a
}

// clusterSettings are a cluster's settings as its file writes them: with
// ingress:, which the loader moves out (it reaches the internal
// deployments alone).
func clusterSettings(c *resolver.Cluster) map[string]any {
	if c.Ingress == nil {
		return c.Settings
	}
	out := make(map[string]any, len(c.Settings)+1)
	for k, v := range c.Settings {
		out[k] = v
	}
	var raw map[string]any
	if b, err := json.Marshal(c.Ingress); err == nil && json.Unmarshal(b, &raw) == nil {
		out["ingress"] = raw
	}
	return out
}

// withPolicy is a layer's settings with its policy:, which the loader
// moves out (it reaches the context as the effective policy), put back as
// the file writes it, so that a policy change is the layer's.
func withPolicy(settings map[string]any, policy *drivers.Policy) map[string]any {
	if policy == nil {
		return settings
	}
	var raw map[string]any
	if b, err := json.Marshal(policy); err != nil || json.Unmarshal(b, &raw) != nil {
		return settings
	}
	out := make(map[string]any, len(settings)+1)
	for k, v := range settings {
		out[k] = v
	}
	out["policy"] = raw
	return out
}

// internalCauses attributes an internal deployment: the cluster's
// ingress: (driver, version, parameters), ingressClass or
// dedicatedIngress, in the most specific layer that changed it, else the
// driver, else the cluster file that declares it.
func (a *attributor) internalCauses(id resolver.ID, d *Deployment, set causeSet) {
	cl := a.cl[id.Cluster]
	el := a.el[id.Cluster+"/"+id.Environment]
	for _, sp := range []string{"ingressClass", "dedicatedIngress"} {
		for _, l := range []*layerChange{el, cl} {
			if l.touches(sp) {
				set.add(l.kind, l.file, l.touched(sp)...)
				break
			}
		}
	}
	if cl.touches("ingress") {
		set.add(cl.kind, cl.file, cl.touched("ingress")...)
	}
	if len(set) > 0 {
		return
	}
	if d.From != nil && d.To != nil && (d.From.DriverVersion != d.To.DriverVersion || d.From.DriverDigest != d.To.DriverDigest) {
		if r, ok := a.in.Head.Get(id); ok {
			if drv, ok := a.in.Drivers.Driver(r.Instance.Driver); ok {
				set.add(CauseDriver, drv.Source)
				return
			}
		}
	}
	f := path.Join("clusters", id.Cluster, "cluster.cue")
	if c := a.clusters[id.Cluster]; c != nil {
		f = c.File
	} else if bf, ok := a.baseFile(f); ok {
		f = bf
	}
	set.add(CauseCluster, f)
}

// baseFile finds the file at the base: the head's path, or the same
// name with another extension (a .cue file rewritten as .yaml).
func (a *attributor) baseFile(file string) (string, bool) {
	if a.in.BaseFS == nil {
		return "", false
	}
	dir, base := path.Split(file)
	stem := strings.TrimSuffix(base, path.Ext(base))
	for _, cand := range []string{file, dir + stem + ".cue", dir + stem + ".yaml", dir + stem + ".yml"} {
		if st, err := fs.Stat(a.in.BaseFS, cand); err == nil && st.Mode().IsRegular() {
			return cand, true
		}
	}
	return "", false
}

// sameBytes reports whether the head file and the base file are
// byte-identical, which spares parsing them.
func (a *attributor) sameBytes(headFile, baseFile string) bool {
	if a.in.HeadFS == nil || headFile != baseFile {
		return false
	}
	h, err := fs.ReadFile(a.in.HeadFS, headFile)
	if err != nil {
		return false
	}
	b, err := fs.ReadFile(a.in.BaseFS, baseFile)
	return err == nil && bytes.Equal(h, b)
}

// compareLayer compares a cluster or environment file with the base.
// nsPrefix and envName handle namespacePrefix, which the loader moves out
// of an environment's settings.
func (a *attributor) compareLayer(kind CauseKind, file, def string, head map[string]any, nsPrefix, envName string) *layerChange {
	lc := &layerChange{kind: kind, file: file}
	if a.in.BaseFS == nil {
		return lc
	}
	bf, ok := a.baseFile(file)
	if !ok {
		// The layer is new: everything in it changed.
		lc.known = true
		lc.paths = settingsDiff(nil, head)
		return lc
	}
	if a.sameBytes(file, bf) {
		lc.known = true
		return lc
	}
	var base map[string]any
	if err := a.loader.LoadFile(a.in.BaseFS, bf, def, &base); err != nil {
		return lc
	}
	if def == "#Environment" {
		bp := envName
		if p, ok := base["namespacePrefix"].(string); ok {
			bp = p
		}
		delete(base, "namespacePrefix")
		defer func() {
			if bp != nsPrefix {
				lc.paths = append(lc.paths, "namespacePrefix")
				sort.Strings(lc.paths)
			}
		}()
	}
	lc.known = true
	lc.paths = settingsDiff(base, head)
	return lc
}

// deploymentLayer compares a deployment's file with the base, including
// its driver, appVersion and connects.
func (a *attributor) deploymentLayer(d *resolver.Deployment) *layerChange {
	lc := &layerChange{kind: CauseDeployment, file: d.File}
	if a.in.BaseFS == nil {
		return lc
	}
	bf, ok := a.baseFile(d.File)
	if !ok {
		lc.known = true
		lc.paths = []string{"appVersion", "driver"}
		return lc
	}
	if a.sameBytes(d.File, bf) {
		lc.known = true
		return lc
	}
	var base, head map[string]any
	if err := a.loader.LoadFile(a.in.BaseFS, bf, "#Deployment", &base); err != nil {
		return lc
	}
	if a.in.HeadFS != nil {
		if err := a.loader.LoadFile(a.in.HeadFS, d.File, "#Deployment", &head); err != nil {
			return lc
		}
	} else {
		head = map[string]any{}
		for k, v := range d.Settings {
			head[k] = v
		}
		head["appVersion"] = d.AppVersion
		if d.DriverVersion == "" && d.UpgradeRequest == "" {
			head["driver"] = d.Driver
		} else {
			drv := map[string]any{"name": d.Driver}
			if d.DriverVersion != "" {
				drv["version"] = d.DriverVersion
			}
			if d.UpgradeRequest != "" {
				drv["upgrade"] = d.UpgradeRequest
			}
			head["driver"] = drv
		}
		if len(d.Connects) > 0 {
			cs := make([]any, len(d.Connects))
			for i, c := range d.Connects {
				cs[i] = c
			}
			head["connects"] = cs
		}
	}
	lc.known = true
	lc.paths = settingsDiff(base, head)
	return lc
}

// settingsDiff lists the leaf paths that differ between two settings
// trees: maps merge (descend), lists and scalars are leaves, as in the
// resolver's layering.
func settingsDiff(a, b map[string]any) []string {
	na, _ := normalize(a)
	nb, _ := normalize(b)
	am, _ := na.(map[string]any)
	bm, _ := nb.(map[string]any)
	var out []string
	var walk func(prefix string, x, y map[string]any)
	walk = func(prefix string, x, y map[string]any) {
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		for k := range keys {
			p := keypath.Child(prefix, k)
			xv, inX := x[k]
			yv, inY := y[k]
			xm, xIsMap := xv.(map[string]any)
			ym, yIsMap := yv.(map[string]any)
			switch {
			case (xIsMap || !inX) && (yIsMap || !inY):
				walk(p, xm, ym)
			case inX && inY && jsonEqual(xv, yv):
			default:
				out = append(out, p)
			}
		}
	}
	walk("", am, bm)
	sort.Strings(out)
	return out
}

// settingsPath maps a context path to the settings path that sets it and
// the kind of setting: "" for settings merged from the layers, or one of
// "service", "driver", "deployment", "namespace" for the special parts.
func settingsPath(segs []pathSegment) (kind, sp string) {
	if len(segs) < 2 || segs[0].key != "context" {
		return "skip", ""
	}
	var rest []string
	for _, s := range segs[2:] {
		if s.isIdx {
			break // lists are leaves in the settings
		}
		rest = append(rest, s.key)
	}
	first := ""
	if len(rest) > 0 {
		first = rest[0]
	}
	switch segs[1].key {
	case "cluster":
		switch first {
		case "domain", "ingressClass", "dedicatedIngress", "storageClasses", "config":
			return "", keypath.Join(rest...)
		}
	case "environment":
		switch first {
		case "backupLocation", "config", "policy":
			return "", keypath.Join(rest...)
		case "namespace":
			return "namespace", "namespacePrefix"
		}
	case "parameters":
		if len(rest) > 0 {
			return "", keypath.Join(append([]string{"parameters"}, rest...)...)
		}
	case "deployment":
		switch first {
		case "appVersion":
			return "deployment", "appVersion"
		case "driver", "driverVersion":
			return "driver", "driver"
		case "namespace":
			return "namespace", "namespacePrefix"
		}
	case "services":
		if len(rest) > 0 {
			return "service", rest[0]
		}
	}
	return "skip", ""
}

// causeSet collects causes, merging paths of the same kind and file.
type causeSet map[[2]string]map[string]bool

func (s causeSet) add(kind CauseKind, file string, paths ...string) {
	k := [2]string{string(kind), file}
	if s[k] == nil {
		s[k] = map[string]bool{}
	}
	for _, p := range paths {
		if p != "" {
			s[k][p] = true
		}
	}
}

func (s causeSet) list() []Cause {
	out := make([]Cause, 0, len(s))
	for k, ps := range s {
		c := Cause{Kind: CauseKind(k[0]), File: k[1]}
		for p := range ps {
			c.Paths = append(c.Paths, p)
		}
		sort.Strings(c.Paths)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if ri, rj := causeRank[out[i].Kind], causeRank[out[j].Kind]; ri != rj {
			return ri < rj
		}
		return out[i].File < out[j].File
	})
	return out
}

// causes attributes one planned deployment.
func (a *attributor) causes(c resolver.LockChange, d *Deployment) []Cause {
	set := causeSet{}
	if d.Internal != "" {
		a.internalCauses(c.ID, d, set)
		return set.list()
	}
	switch d.Workflow {
	case WorkflowDelete:
		a.deletionCause(c.ID, set)
		return set.list()
	}
	r, ok := a.in.Head.Get(c.ID)
	if !ok {
		return set.list()
	}
	if d.Workflow == WorkflowCreate {
		set.add(CauseDeployment, r.Deployment.File)
		return set.list()
	}
	dl := a.deploymentLayer(r.Deployment)
	envKey := c.ID.Cluster + "/" + c.ID.Environment
	el, cl := a.el[envKey], a.cl[c.ID.Cluster]
	driverChanged := d.From != nil && d.To != nil &&
		(d.From.Driver != d.To.Driver || d.From.DriverVersion != d.To.DriverVersion || d.From.DriverDigest != d.To.DriverDigest)
	driverSource := ""
	if drv, ok := a.in.Drivers.Driver(r.Instance.Driver); ok {
		driverSource = drv.Source
	}
	if driverChanged {
		set.add(CauseDriver, driverSource)
	}
	for _, segs := range d.rawPaths {
		kind, sp := settingsPath(segs)
		switch kind {
		case "skip":
			continue
		case "service":
			if dl.touches("connects") {
				set.add(CauseDeployment, dl.file, "connects")
			} else {
				set.add(CauseService, c.ID.Cluster+"/"+c.ID.Environment+"/"+sp)
			}
			continue
		case "deployment":
			set.add(CauseDeployment, dl.file, dl.touched("appVersion")...)
			continue
		case "driver":
			if dl.touches("driver") || dl.touches("appVersion") {
				set.add(CauseDeployment, dl.file, append(dl.touched("driver"), dl.touched("appVersion")...)...)
			} else {
				set.add(CauseDriver, driverSource)
			}
			continue
		case "namespace":
			if el.touches(sp) {
				set.add(CauseEnvironment, el.file, sp)
			} else {
				set.add(CauseDeployment, dl.file)
			}
			continue
		}
		// A merged setting: the most specific layer that changed it.
		found := false
		for _, l := range []*layerChange{dl, el, cl} {
			if l.touches(sp) {
				set.add(l.kind, l.file, l.touched(sp)...)
				found = true
				break
			}
		}
		if found {
			continue
		}
		// No layer file changed it (or the base is unknown): the layer
		// the value comes from, or the driver (defaults).
		if o, ok := originOf(r.Provenance, sp); ok {
			switch o.Layer {
			case resolver.LayerCluster:
				set.add(CauseCluster, o.File, sp)
			case resolver.LayerEnvironment:
				set.add(CauseEnvironment, o.File, sp)
			case resolver.LayerDeployment:
				set.add(CauseDeployment, o.File, sp)
			default:
				set.add(CauseDriver, o.File, sp)
			}
			continue
		}
		if driverChanged {
			set.add(CauseDriver, driverSource, sp)
		} else {
			set.add(CauseDeployment, dl.file, sp)
		}
	}
	if len(set) == 0 {
		if driverChanged {
			set.add(CauseDriver, driverSource)
		} else {
			set.add(CauseDeployment, dl.file)
		}
	}
	return set.list()
}

// originOf finds where sp's value (or the values below it, or the nearest
// parent value) came from.
func originOf(p resolver.Provenance, sp string) (resolver.Origin, bool) {
	if o, ok := p[sp]; ok {
		return o, true
	}
	under := p.Under(sp)
	if len(under) > 0 {
		paths := under.Paths()
		return under[paths[0]], true
	}
	keys, _ := keypath.Split(sp)
	for i := len(keys) - 1; i > 0; i-- {
		if o, ok := p[keypath.Join(keys[:i]...)]; ok {
			return o, true
		}
	}
	return resolver.Origin{}, false
}

// deletionCause names what removed a deployment: its file, or its whole
// environment or cluster.
func (a *attributor) deletionCause(id resolver.ID, set causeSet) {
	cdir := path.Join("clusters", id.Cluster)
	edir := path.Join(cdir, "environments", id.Environment)
	switch {
	case a.in.Repo != nil && a.clusters[id.Cluster] == nil:
		f, ok := a.baseFile(path.Join(cdir, "cluster.cue"))
		if !ok {
			f = cdir
		}
		set.add(CauseCluster, f)
	case a.in.Repo != nil && a.envs[id.Cluster+"/"+id.Environment] == nil:
		f, ok := a.baseFile(path.Join(edir, "environment.cue"))
		if !ok {
			f = edir
		}
		set.add(CauseEnvironment, f)
	default:
		f, ok := a.baseFile(path.Join(edir, "deployments", id.Name+".cue"))
		if !ok {
			f = path.Join(edir, "deployments", id.Name)
		}
		set.add(CauseDeployment, f)
	}
}

// layerRank orders layers from the least to the most specific.
var layerRank = map[string]int{resolver.LayerCluster: 0, resolver.LayerEnvironment: 1, resolver.LayerDeployment: 2}

// leftOut lists the unchanged deployments that a changed cluster or
// environment value reaches but that set the value in a more specific
// layer.
func (a *attributor) leftOut(changed, only map[resolver.ID]bool) []LeftOut {
	out := []LeftOut{}
	if a.in.Repo == nil {
		return out
	}
	for _, c := range a.in.Repo.Clusters {
		for _, e := range c.Environments {
			layers := []struct {
				lc    *layerChange
				layer string
			}{{a.cl[c.Name], resolver.LayerCluster}, {a.el[c.Name+"/"+e.Name], resolver.LayerEnvironment}}
			for _, d := range e.Deployments {
				if changed[d.ID] || (only != nil && !only[d.ID]) {
					continue
				}
				r, ok := a.in.Head.Get(d.ID)
				if !ok {
					continue
				}
				for _, l := range layers {
					if l.lc == nil {
						continue
					}
					for _, sp := range l.lc.paths {
						o, ok := originOf(r.Provenance, sp)
						if !ok || layerRank[o.Layer] <= layerRank[l.layer] || o.Layer == "driver" {
							continue
						}
						out = append(out, LeftOut{
							ID: d.ID.String(), Path: sp, ChangedIn: l.lc.file,
							OverriddenBy: Origin{Layer: o.Layer, File: o.File},
						})
					}
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].ID != out[j].ID {
			return lessIDString(out[i].ID, out[j].ID)
		}
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].ChangedIn < out[j].ChangedIn
	})
	return out
}

func lessIDString(a, b string) bool {
	ac, ae, an := splitID(a)
	bc, be, bn := splitID(b)
	if ac != bc {
		return ac < bc
	}
	if ae != be {
		return ae < be
	}
	return an < bn
}

// blastRadius counts, per environment with a change, how many of its
// deployments redeploy.
func blastRadius(in Input, p *Plan, only map[resolver.ID]bool) []EnvironmentImpact {
	type key struct{ c, e string }
	impacts := map[key]*EnvironmentImpact{}
	get := func(c, e string) *EnvironmentImpact {
		k := key{c, e}
		if impacts[k] == nil {
			impacts[k] = &EnvironmentImpact{Cluster: c, Environment: e, ByWorkflow: map[Workflow]int{}}
		}
		return impacts[k]
	}
	for _, d := range p.Deployments {
		im := get(d.Cluster, d.Environment)
		im.Redeploy++
		im.ByWorkflow[d.Workflow]++
		if d.Workflow == WorkflowDelete {
			im.Deployments++ // deleted: not present at the head, still part of the environment's blast
		}
	}
	for _, l := range p.LeftOut {
		c, e, _ := splitID(l.ID)
		get(c, e)
	}
	leftOut := map[key]map[string]bool{}
	for _, l := range p.LeftOut {
		c, e, _ := splitID(l.ID)
		k := key{c, e}
		if leftOut[k] == nil {
			leftOut[k] = map[string]bool{}
		}
		leftOut[k][l.ID] = true
	}
	if in.Head != nil {
		for id := range in.Head.Present {
			if only != nil && !only[id] {
				continue
			}
			if im, ok := impacts[key{id.Cluster, id.Environment}]; ok {
				im.Deployments++
			}
		}
	}
	out := make([]EnvironmentImpact, 0, len(impacts))
	for k, im := range impacts {
		im.LeftOut = len(leftOut[k])
		out = append(out, *im)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Cluster != out[j].Cluster {
			return out[i].Cluster < out[j].Cluster
		}
		return out[i].Environment < out[j].Environment
	})
	return out
}
