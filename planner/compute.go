package planner

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync/atomic"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

// DefaultDeletionThreshold is how many deployments a plan may delete
// without an explicit allowance when the repository sets no
// deletionThreshold (the resolver's rule).
const DefaultDeletionThreshold = resolver.DefaultDeletionThreshold

// Drivers finds the driver version an instance was resolved with.
type Drivers interface {
	// Driver returns the driver with the reference's name, version and
	// digest.
	Driver(ref resolver.DriverRef) (*drivers.Driver, bool)
}

// Catalogs finds drivers in several catalogs (typically the head's and the
// base's), matching name, version and digest, so an instance locked with a
// driver version that has since changed or been removed still renders.
type Catalogs []*drivers.Catalog

var _ Drivers = Catalogs(nil)

// Driver implements Drivers.
func (cs Catalogs) Driver(ref resolver.DriverRef) (*drivers.Driver, bool) {
	for _, c := range cs {
		if c == nil {
			continue
		}
		if d, ok := c.Get(ref.Name, ref.Version); ok && d.Digest == ref.Digest {
			return d, true
		}
	}
	return nil, false
}

// Input is what a plan compares.
type Input struct {
	// Base are the lockfiles at the base, by deployment (nil: none).
	Base map[resolver.ID]*resolver.Instance
	// Head is the resolution of the head configuration, resolved with
	// Base as its locks (the driver selection rule depends on them).
	Head *resolver.Result
	// Repo is the head configuration Head was resolved from; it gives
	// the fan-out's reach and the blast radius.
	Repo *resolver.Repository
	// BaseFS is the repository at the base. With it, each change is
	// attributed to the layer file that changed; without it, to the layer
	// the new value comes from.
	BaseFS fs.FS
	// HeadFS is the repository Repo was loaded from. With it, files that
	// are byte-identical at the base are not parsed again.
	HeadFS fs.FS
	// Drivers finds the driver versions of both sides.
	Drivers Drivers
	// BaseName and HeadName describe the two sides in the plan.
	BaseName, HeadName string
	// Used are the sequences the head's history used (nil: the base's
	// lockfiles only): a lock numbers after them, and locks a lockfile
	// behind one of them (a revert) again.
	Used resolver.UsedSequences
	// Reused are the sequences the head's history used for two instances
	// (two merged pull requests locked one): a lock locks a lockfile at
	// one again.
	Reused resolver.ReusedSequences
}

// headSequences are the sequences of the head's own lockfiles of the
// deployments whose base lockfile is behind a sequence used: a head that
// locked itself past it (a pull request's lock commit) is no revert to
// lock again.
func headSequences(base map[resolver.ID]*resolver.Instance, used resolver.UsedSequences, head fs.FS) map[resolver.ID]int64 {
	out := map[resolver.ID]int64{}
	for id, in := range base {
		if in == nil || in.Sequence >= used[id] {
			continue
		}
		if locked, err := resolver.ReadLock(head, id.LockPath()); err == nil {
			out[id] = locked.Sequence
		}
	}
	return out
}

// headLocked gives each change the sequence the head's own lockfile holds
// for the same instance (a pull request that locked itself: its trailers
// are among the sequences used, and a lock of the head changes nothing):
// the plan shows the sequence the head runs, not the one after it.
func headLocked(changes []resolver.LockChange, head fs.FS) {
	for i := range changes {
		c := &changes[i]
		if c.Next == nil || c.Next.Tombstone() {
			continue
		}
		locked, err := resolver.ReadLock(head, c.ID.LockPath())
		if err != nil || locked.Tombstone() || locked.Digest != c.Next.Digest || locked.Sequence <= seqOf(c.Previous) {
			continue
		}
		next := *c.Next
		next.Sequence = locked.Sequence
		c.Next = &next
	}
}

// seqOf is an instance's sequence, 0 for none.
func seqOf(in *resolver.Instance) int64 {
	if in == nil {
		return 0
	}
	return in.Sequence
}

// Options tune Compute.
type Options struct {
	// DeletionThreshold overrides the repository's deletionThreshold
	// (nil: the repository's, or DefaultDeletionThreshold).
	DeletionThreshold *int
	// AllowDeletions allows a plan to delete up to this many deployments
	// even above the threshold.
	AllowDeletions int
	// Restoring names, per deployment, a restore in progress in the
	// cluster (read by the caller: the planner reads no cluster); their
	// changes are shown as waiting for it.
	Restoring map[resolver.ID]string
	// Only restricts the plan to these deployments (nil: all).
	Only map[resolver.ID]bool
	// SkipManifests leaves out the rendered-manifest diff.
	SkipManifests bool
	// Parallelism bounds how many deployments are rendered at once
	// (0: GOMAXPROCS).
	Parallelism int
	// DriverLimits override the head's styrmin.cue limits where set;
	// Sandbox, when set, evaluates drivers in a child process (see
	// drivers.Sandbox). ComputeTrees loads both sides' drivers with them.
	DriverLimits drivers.Limits
	Sandbox      *drivers.Sandbox
	// ConfigSandbox, when set, evaluates each configuration file of both
	// sides in a sandbox child first (see resolver.ConfigSandbox): the
	// agent's web UI plans what any author of the repository wrote.
	ConfigSandbox *resolver.ConfigSandbox
	// RenderInProcess renders the manifests of both sides in this process
	// (bounded in time and rendered bytes, not in memory) even when the
	// drivers load through Sandbox, as the lock's policy render does: the
	// sandboxed load rendered each chart with its sample parameters within
	// every limit, and the head's instances were rendered in-process by
	// the resolver's policy check already. A child per render cost a CLI
	// plan of 1,000 deployments 0.6 s of its 1.7. The agent leaves it
	// off: everything it runs is sandboxed.
	RenderInProcess bool
	// Progress, when set, is told how far the plan is: stage "resolve"
	// (deployments resolved, ComputeTrees) and stage "render" (changed
	// deployments rendered and compared), done out of total; it is called
	// from several goroutines at once.
	Progress func(stage string, done, total int)
}

// RefusedError is returned by Plan.Err when a plan deletes more
// deployments than allowed.
type RefusedError struct {
	Deletions Deletions
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("plan refused: it deletes %d deployments, more than the deletion threshold of %d; "+
		"if that is intended, allow it explicitly (styrminctl plan --allow-deletions %d; for the lock, the trailer \"Styrmin-Allow-Deletions: %d\" on the configuration commit)",
		e.Deletions.Count, e.Deletions.Threshold, e.Deletions.Count, e.Deletions.Count)
}

// Err reports a refused plan as a *RefusedError; nil otherwise.
func (p *Plan) Err() error {
	if p.Deletions.Refused {
		return &RefusedError{Deletions: p.Deletions}
	}
	return nil
}

// Compute builds the plan: which deployments get a new instance, with
// which workflow, why, what changes in their context, values and rendered
// manifests, and which driver actions run. It writes nothing. Its error is
// for broken input (an instance that cannot be encoded); a deployment
// whose manifests cannot be rendered carries the error in its
// ManifestDiff, and a refused plan is reported by Plan.Err.
func Compute(in Input, opts Options) (*Plan, error) {
	if in.Head == nil {
		return nil, errors.New("planner: Input.Head is required")
	}
	if in.Drivers == nil {
		in.Drivers = Catalogs(nil)
	}
	var headSeqs map[resolver.ID]int64
	if in.Used != nil && in.HeadFS != nil {
		headSeqs = headSequences(in.Base, in.Used, in.HeadFS)
	}
	changes, err := resolver.NextInstancesAfter(in.Head, in.Base, in.Used, in.Reused, headSeqs)
	if err != nil {
		return nil, err
	}
	if in.Used != nil && in.HeadFS != nil {
		headLocked(changes, in.HeadFS)
	}
	if opts.Only != nil {
		kept := changes[:0:0]
		for _, c := range changes {
			if opts.Only[c.ID] {
				kept = append(kept, c)
			}
		}
		changes = kept
	}

	plan := &Plan{
		SchemaVersion: SchemaVersion,
		Base:          in.BaseName,
		Head:          in.HeadName,
		Deployments:   make([]*Deployment, len(changes)),
		BlastRadius:   []EnvironmentImpact{},
		LeftOut:       []LeftOut{},
		Errors:        []DeploymentError{},
		Held:          []Held{},
		Warnings:      slices.Clone(in.Head.Warnings),
	}
	errs := make([]error, len(changes))
	var rendered atomic.Int64
	parallel(len(changes), opts.Parallelism, func(i int) {
		plan.Deployments[i], errs[i] = planOne(in, opts, changes[i])
		if opts.Progress != nil {
			opts.Progress("render", int(rendered.Add(1)), len(changes))
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	at := newAttributor(in, opts.ConfigSandbox)
	for i, c := range changes {
		plan.Deployments[i].Causes = at.causes(c, plan.Deployments[i])
	}

	changed := map[resolver.ID]bool{}
	for i, d := range plan.Deployments {
		changed[changes[i].ID] = true
		d.Restoring = opts.Restoring[changes[i].ID]
		switch d.Workflow {
		case WorkflowCreate:
			plan.Summary.Create++
		case WorkflowUpdate:
			plan.Summary.Update++
		case WorkflowUpgrade:
			plan.Summary.Upgrade++
		case WorkflowDelete:
			plan.Summary.Delete++
		}
	}
	for _, r := range in.Head.Resolved {
		id := r.Instance.ID
		if opts.Only != nil && !opts.Only[id] {
			continue
		}
		if reason, held := in.Head.Held[id]; held {
			// Not "unchanged": held back, maybe with a change waiting.
			prev := in.Base[id]
			waiting := prev == nil || prev.Tombstone() || prev.Digest != r.Instance.Digest
			plan.Held = append(plan.Held, Held{ID: id.String(), Reason: reason, Waiting: waiting})
			continue
		}
		if !changed[id] {
			plan.Summary.Unchanged++
		}
	}
	for _, e := range in.Head.Errors {
		if opts.Only != nil && !opts.Only[e.ID] {
			continue
		}
		plan.Errors = append(plan.Errors, DeploymentError{ID: e.ID.String(), Message: e.Err.Error()})
	}
	plan.Summary.Errors = len(plan.Errors)

	plan.LeftOut = at.leftOut(changed, opts.Only)
	plan.BlastRadius = blastRadius(in, plan, opts.Only)
	plan.Deletions = deletionRail(in, opts, len(resolver.Deleted(changes)))
	plan.Waves = wavesOf(plan.Deployments)
	return plan, nil
}

// wavesOf groups the planned deployments (sorted by ID) into their
// waves, and keeps for each the instances it runs after besides the
// wave before (what it connects to, its ingress), which the renderers
// name one by one.
func wavesOf(ds []*Deployment) []Wave {
	type key struct {
		cluster, group string
		wave           int
	}
	byKey := map[key]*Wave{}
	refs := map[key]map[string]bool{}
	for _, d := range ds {
		if d.Wave == nil {
			continue
		}
		k := key{d.Cluster, d.Wave.Group, d.Wave.Wave}
		w := byKey[k]
		if w == nil {
			w = &Wave{Cluster: d.Cluster, Group: d.Wave.Group, Wave: d.Wave.Wave, Waves: d.Wave.Waves, Pause: d.Wave.Pause}
			byKey[k] = w
			refs[k] = map[string]bool{}
		}
		w.Deployments = append(w.Deployments, d.ID)
		refs[k][fmt.Sprintf("%s@%d", d.ID, d.ToSequence)] = true
	}
	for _, d := range ds {
		d.otherAfter = d.After
		if d.Wave == nil || d.Wave.Wave < 2 {
			continue
		}
		before := refs[key{d.Cluster, d.Wave.Group, d.Wave.Wave - 1}]
		d.otherAfter = nil
		for _, a := range d.After {
			if !before[a] {
				d.otherAfter = append(d.otherAfter, a)
			}
		}
	}
	out := make([]Wave, 0, len(byKey))
	for _, w := range byKey {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b Wave) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Wave, b.Wave))
	})
	return out
}
