package resolver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/styrmin/styrmin/drivers"
)

// hostOf is one host an Ingress of a deployment claims.
type hostOf struct {
	claim   drivers.HostClaim
	ingress string
	// unnamed: the Ingress names no class, and claim is on the cluster's
	// default class (onDefault).
	unnamed bool
}

// onDefault is hosts with the claims of Ingresses naming no class put on
// def, the cluster's default IngressClass (cluster.cue's
// defaultIngressClass; "": not said, kept as written): the API server's
// admission names the default class on such an Ingress, and its
// controller serves both as one, as the agent judges them. So dev's
// Ingress without a class and staging's naming the default meet on their
// host.
func onDefault(hosts []hostOf, def string) []hostOf {
	if def == "" {
		return hosts
	}
	out := slices.Clone(hosts)
	for i, h := range out {
		if h.claim.Class == "" {
			out[i].claim.Class, out[i].unnamed = def, true
		}
	}
	return out
}

// hostsOf are the hosts the Ingresses among objects claim.
func hostsOf(objects []drivers.Object) ([]hostOf, error) {
	var out []hostOf
	for _, o := range objects {
		claims, err := drivers.IngressHosts(o)
		if err != nil {
			return nil, err
		}
		for _, c := range claims {
			out = append(out, hostOf{claim: c, ingress: o.Name})
		}
	}
	return out, nil
}

// hostKind is the kind of the objectKey a host is recorded under in
// Result.renders and Result.held (its namespace the class, its name the
// host): orderMoves then runs a deployment taking a host after the one
// giving it up, as for an object, and failTakers fails a taker whose
// giver keeps its lock. No Kubernetes kind is lower-case.
const hostKind = "host"

// hostKey is the objectKey of claim c in cluster.
func hostKey(cluster string, c drivers.HostClaim) objectKey {
	return objectKey{cluster: cluster, group: "networking.k8s.io", kind: hostKind, namespace: c.Class, name: c.Host}
}

// hostClaimant is what one deployment of a cluster claims after this
// resolution, for hostConflicts.
type hostClaimant struct {
	id   ID
	file string
	// cluster is its cluster's configuration (its default class).
	cluster *Cluster
	// job, existing: as claim's.
	job      int
	existing bool
	// hosts are what it claims after this resolution (none for a
	// deployment this lock deletes).
	hosts []hostOf
	// held are what its lock claims (the hosts its Ingresses may hold in
	// the cluster), once known (heldKnown); lock is rendered for them
	// when they are needed and not known yet (see ensureHeld).
	held      []drivers.HostClaim
	heldKnown bool
	lock      *Instance
}

// ensureHeld renders c's lock for held, once.
func (c *hostClaimant) ensureHeld(opts Options) {
	if c.heldKnown {
		return
	}
	hosts, _ := hostsOfInstance(opts, c.lock, nil, c.cluster.DefaultIngressClass)
	c.held, c.heldKnown = claimsOf(hosts), true
}

// holds reports whether c's lock claims a host h overlaps.
func (c *hostClaimant) holds(opts Options, h drivers.HostClaim) bool {
	c.ensureHeld(opts)
	return slices.ContainsFunc(c.held, h.Overlaps)
}

// before orders the claimants of host h as claim.before orders those of
// an object: the one whose lock claims it (its Ingress holds it in the
// cluster), then one with a lock, then by id.
func (c *hostClaimant) before(opts Options, o *hostClaimant, h drivers.HostClaim) bool {
	if a, b := c.holds(opts, h), o.holds(opts, h); a != b {
		return a
	}
	if c.existing != o.existing {
		return c.existing
	}
	return lessID(c.id, o.id)
}

// hostConflicts fails each deployment this resolution changes whose
// Ingress claims a host (or a wildcard over one, or one under its
// wildcard) on an ingress class that an Ingress of another deployment of
// its cluster claims, and that comes before it (hostClaimant.before): the
// ingress controller merges the rules of every Ingress of a host and
// would split or take the other's traffic, both deployments reading
// Ready. The agent refuses it too (HostClaimed), after the merge.
//
// What it renders is bounded by the smaller side of each cluster. Where
// fewer deployments claiming hosts change than stand on their locks (a
// change of one deployment), each one's lock is rendered and the cluster
// is looked at only when one claims a host its lock did not (a new
// deployment, a host changed): then the others' locks are rendered. In a
// fan-out the few standing ones are rendered, and a changed one's lock
// only when it meets another's claim (to know which held it first).
func hostConflicts(repo *Repository, jobs []*resolveJob, second []error, opts Options, out *Result) {
	resolved := func(i int) bool {
		j := jobs[i]
		return j.err == nil && second[i] == nil && (opts.Only == nil || opts.Only[j.d.ID]) && j.d.Hold == "" && j.p.rendered
	}
	changing, standing := map[string]int{}, map[string]int{}
	var claiming []int
	for i, j := range jobs {
		switch {
		case resolved(i) && len(j.p.hosts) > 0:
			j.p.hosts = onDefault(j.p.hosts, j.c.DefaultIngressClass)
			claiming = append(claiming, i)
			changing[j.c.Name]++
		case !resolved(i) && opts.Locks[j.d.ID] != nil && !opts.Locks[j.d.ID].Tombstone():
			standing[j.c.Name]++
		}
	}
	if len(claiming) == 0 {
		return
	}
	fanOut := map[string]bool{}
	var few []int // claiming jobs of the clusters that are no fan-out
	for _, i := range claiming {
		if c := jobs[i].c.Name; changing[c] > standing[c] {
			fanOut[c] = true
		} else {
			few = append(few, i)
		}
	}
	locked := make([][]drivers.HostClaim, len(few))
	newly := make([]bool, len(few))
	parallel(len(few), func(k int) {
		j := jobs[few[k]]
		held, _ := hostsOfInstance(opts, opts.Locks[j.d.ID], nil, j.c.DefaultIngressClass)
		locked[k] = claimsOf(held)
		newly[k] = slices.ContainsFunc(j.p.hosts, func(h hostOf) bool { return !slices.Contains(locked[k], h.claim) })
	})
	checked := maps.Clone(fanOut)
	lockedOf := make(map[int][]drivers.HostClaim, len(few))
	for k, i := range few {
		lockedOf[i] = locked[k]
		if newly[k] {
			checked[jobs[i].c.Name] = true
		}
	}
	if len(checked) == 0 {
		return
	}
	claimants := hostClaimants(repo, jobs, opts, checked, fanOut, resolved, lockedOf)
	index := indexClaimants(claimants)
	for _, c := range claimants {
		if c.job < 0 {
			continue
		}
		if err := hostConflict(opts, c, claimants, index); err != nil {
			second[c.job] = err
		}
	}
	recordHosts(claimants, out)
}

// hostClaimants lists every deployment of the checked clusters, and those
// no longer configured, with their claims: a changed one's new instance
// is rendered already, the others' locks are rendered here; a changed
// one's lock too (for what it held) but in a fan-out, or when known
// (lockedOf, by job).
func hostClaimants(repo *Repository, jobs []*resolveJob, opts Options, checked, fanOut map[string]bool, resolved func(int) bool, lockedOf map[int][]drivers.HostClaim) []*hostClaimant {
	byID := map[ID]int{}
	for i, j := range jobs {
		if checked[j.c.Name] {
			byID[j.d.ID] = i
		}
	}
	var out []*hostClaimant
	configured := map[ID]bool{}
	clusters := map[string]*Cluster{}
	for _, c := range repo.Clusters {
		if !checked[c.Name] {
			continue
		}
		clusters[c.Name] = c
		for _, e := range c.Environments {
			for _, d := range e.Deployments {
				configured[d.ID] = true
				lock := opts.Locks[d.ID]
				cl := &hostClaimant{id: d.ID, file: d.File, cluster: c, job: standingClaim, existing: lock != nil && !lock.Tombstone(), lock: lock}
				if i, ok := byID[d.ID]; ok && resolved(i) {
					cl.job, cl.hosts = i, jobs[i].p.hosts
					if held, ok := lockedOf[i]; ok {
						cl.held, cl.heldKnown = held, true
					}
				} else if !cl.existing {
					continue // no lock: failed to resolve, nothing of it runs
				}
				if !cl.existing {
					cl.heldKnown = true
				}
				out = append(out, cl)
			}
		}
	}
	for _, id := range sortedLockIDs(opts.Locks) {
		if lock := opts.Locks[id]; checked[id.Cluster] && !configured[id] && !lock.Tombstone() && lock.Context != nil && lock.Internal == "" {
			out = append(out, &hostClaimant{id: id, cluster: clusters[id.Cluster], job: deletedClaim, existing: true, lock: lock})
		}
	}
	parallel(len(out), func(i int) {
		cl := out[i]
		if cl.heldKnown || (cl.job >= 0 && fanOut[cl.id.Cluster]) {
			return
		}
		if cl.job != standingClaim {
			cl.ensureHeld(opts)
			return
		}
		// Not known here (a driver not loaded): its own deployment's error.
		cl.hosts, _ = hostsOfInstance(opts, cl.lock, nil, cl.cluster.DefaultIngressClass)
		cl.held, cl.heldKnown = claimsOf(cl.hosts), true
	})
	return out
}

// hostsOfInstance renders in (with drv, else the catalog's driver of its
// digest) for the hosts its Ingresses claim, those naming no class on def
// (onDefault); false when it cannot be.
func hostsOfInstance(opts Options, in *Instance, drv *drivers.Driver, def string) ([]hostOf, bool) {
	if in == nil || in.Tombstone() || in.Context == nil {
		return nil, false
	}
	if drv == nil {
		var ok bool
		if drv, ok = opts.Catalog.Get(in.Driver.Name, in.Driver.Version); !ok || drv.Digest != in.Driver.Digest {
			return nil, false
		}
	}
	m, err := drv.RenderForPolicy(context.Background(), *in.Context, in.Values)
	if err != nil {
		return nil, false
	}
	hosts, err := hostsOf(m.Objects)
	return onDefault(hosts, def), err == nil
}

// claimsOf are the claims of hosts.
func claimsOf(hosts []hostOf) []drivers.HostClaim {
	out := make([]drivers.HostClaim, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, h.claim)
	}
	return out
}

// recordHosts adds the hosts the changed deployments claim to
// Result.renders, and those their locks and the deleted deployments'
// claim to Result.held, for orderMoves and failTakers.
func recordHosts(claimants []*hostClaimant, out *Result) {
	if out.renders == nil {
		out.renders = map[ID]map[objectKey]bool{}
	}
	if out.held == nil {
		out.held = map[ID]map[objectKey]bool{}
	}
	for _, c := range claimants {
		if c.job == standingClaim {
			continue
		}
		if c.job >= 0 {
			if out.renders[c.id] == nil {
				out.renders[c.id] = map[objectKey]bool{}
			}
			for _, h := range c.hosts {
				out.renders[c.id][hostKey(c.id.Cluster, h.claim)] = true
			}
		}
		if len(c.held) > 0 && out.held[c.id] == nil {
			out.held[c.id] = map[objectKey]bool{}
		}
		for _, h := range c.held {
			out.held[c.id][hostKey(c.id.Cluster, h)] = true
		}
	}
}

// indexClaimants maps each index key (drivers.HostClaim.IndexKeys) of a
// host a claimant claims to the claimants' positions, in order, so that
// hostConflict looks at the few that may overlap a host rather than at
// every claimant of the cluster (a fan-out of 1,000 deployments).
func indexClaimants(claimants []*hostClaimant) map[string][]int {
	index := map[string][]int{}
	for i, o := range claimants {
		if o.job == deletedClaim {
			continue
		}
		for _, h := range o.hosts {
			for _, k := range h.claim.IndexKeys() {
				if l := index[k]; len(l) == 0 || l[len(l)-1] != i {
					index[k] = append(l, i)
				}
			}
		}
	}
	return index
}

// hostConflict is the error of changed deployment c when a host it claims
// is another's that comes before it; nil when none is. index is
// indexClaimants(claimants).
func hostConflict(opts Options, c *hostClaimant, claimants []*hostClaimant, index map[string][]int) error {
	for _, h := range c.hosts {
		var near []int
		for _, k := range h.claim.LookupKeys() {
			near = append(near, index[k]...)
		}
		slices.Sort(near)
		for _, n := range slices.Compact(near) {
			o := claimants[n]
			if o == c {
				continue
			}
			i := slices.IndexFunc(o.hosts, func(oh hostOf) bool { return oh.claim.Overlaps(h.claim) })
			if i < 0 {
				if err := tlsConflict(opts, c, h, o); err != nil {
					return err
				}
				continue
			}
			if !o.before(opts, c, h.claim) {
				continue
			}
			theirs := o.hosts[i]
			as := ""
			if theirs.claim.Host != h.claim.Host {
				as = " as " + theirs.claim.Host
			}
			return fmt.Errorf("%s: deployment %s: Ingress %s claims host %s, which deployment %s (%s) claims%s with its Ingress %s%s: the ingress controller would split or take its traffic; a host's path belongs to one deployment per ingress class, so expected a host and path no other deployment of cluster %s claims on it: give one of them another host or path",
				c.file, c.id, h.ingress, h.claim, o.id, o.file, as, theirs.ingress, unnamedNote(c, h, theirs), c.id.Cluster)
		}
	}
	return nil
}

// tlsConflict is the error of changed deployment c when its claim h and
// one of o's serve their host over TLS apart (drivers.HostClaim.
// TLSConflicts: other paths of one host, one certificate served) and o
// comes first (tlsBefore); nil otherwise.
func tlsConflict(opts Options, c *hostClaimant, h hostOf, o *hostClaimant) error {
	i := slices.IndexFunc(o.hosts, func(oh hostOf) bool { return oh.claim.TLSConflicts(h.claim) })
	if i < 0 || !o.tlsBefore(opts, c, o.hosts[i].claim, h.claim) {
		return nil
	}
	theirs := o.hosts[i]
	return fmt.Errorf("%s: deployment %s: Ingress %s serves host %s with %s, which deployment %s (%s) serves with %s on its Ingress %s (path %s)%s: the ingress controller serves one certificate for a host, so one deployment's clients would get the other's certificate, or TLS it did not set up; expected the deployments routing paths of one host on one ingress class to serve it alike: name the same TLS Secret for host %s in both (each namespace holds its copy), or TLS in neither",
		c.file, c.id, h.ingress, h.claim, h.claim.TLSString(), o.id, o.file, theirs.claim.TLSString(), theirs.ingress, pathOf(theirs.claim), unnamedNote(c, h, theirs), h.claim.Host)
}

// pathOf is claim c's path as errors say it.
func pathOf(c drivers.HostClaim) string {
	switch {
	case c.Path == "":
		return "every path"
	case strings.HasPrefix(c.Path, "="):
		return c.Path[1:] + " (Exact)"
	}
	return c.Path
}

// servesTLS reports whether c's lock serves mine's host as mine does now
// (the same class, host and TLS).
func (c *hostClaimant) servesTLS(opts Options, mine drivers.HostClaim) bool {
	c.ensureHeld(opts)
	return slices.ContainsFunc(c.held, func(h drivers.HostClaim) bool {
		return h.Class == mine.Class && h.Host == mine.Host && h.TLS == mine.TLS
	})
}

// tlsBefore orders two deployments serving one host over TLS apart, o's
// claim theirs and c's mine: the one whose lock served the host as it
// does now first (the other changed it, or came to the host), then one
// with a lock, then by id. Paths play no part: the host's certificate is
// what they share.
func (o *hostClaimant) tlsBefore(opts Options, c *hostClaimant, theirs, mine drivers.HostClaim) bool {
	if a, b := o.servesTLS(opts, theirs), c.servesTLS(opts, mine); a != b {
		return a
	}
	if o.existing != c.existing {
		return o.existing
	}
	return lessID(o.id, c.id)
}

// unnamedNote says, when either Ingress of a collision names no class,
// that it is on the default class by cluster.cue's defaultIngressClass:
// the files name two classes ("" and the default's) the user would not
// take for one.
func unnamedNote(c *hostClaimant, mine, theirs hostOf) string {
	switch {
	case mine.unnamed && theirs.unnamed:
		return fmt.Sprintf(" (neither Ingress names a class: both are on the cluster's default class %s, defaultIngressClass of %s)", mine.claim.Class, c.cluster.File)
	case mine.unnamed:
		return fmt.Sprintf(" (Ingress %s names no class: it is on the cluster's default class %s, defaultIngressClass of %s)", mine.ingress, mine.claim.Class, c.cluster.File)
	case theirs.unnamed:
		return fmt.Sprintf(" (its Ingress %s names no class: it is on the cluster's default class %s, defaultIngressClass of %s)", theirs.ingress, theirs.claim.Class, c.cluster.File)
	}
	return ""
}
