package planner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"sync"
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
}

// Options tune Compute.
type Options struct {
	// DeletionThreshold overrides the repository's deletionThreshold
	// (nil: the repository's, or DefaultDeletionThreshold).
	DeletionThreshold *int
	// AllowDeletions allows a plan to delete up to this many deployments
	// even above the threshold.
	AllowDeletions int
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
		"if that is intended, allow it explicitly (styrminctl plan --allow-deletions %d)",
		e.Deletions.Count, e.Deletions.Threshold, e.Deletions.Count)
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
	changes, err := resolver.NextInstances(in.Head, in.Base)
	if err != nil {
		return nil, err
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

	at := newAttributor(in)
	for i, c := range changes {
		plan.Deployments[i].Causes = at.causes(c, plan.Deployments[i])
	}

	changed := map[resolver.ID]bool{}
	for i, d := range plan.Deployments {
		changed[changes[i].ID] = true
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
	return plan, nil
}

// parallel runs f(0..n-1) on up to p goroutines (p <= 0: GOMAXPROCS).
func parallel(n, p int, f func(int)) {
	if p <= 0 {
		p = runtime.GOMAXPROCS(0)
	}
	if p > n {
		p = n
	}
	if p <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < p; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// deletionRail applies resolver.DeletionRule, the rule lock applies too.
func deletionRail(in Input, opts Options, count int) Deletions {
	var settings resolver.RepoSettings
	if in.Repo != nil {
		settings = in.Repo.Settings
	}
	r := resolver.DeletionRule(settings, opts.DeletionThreshold, opts.AllowDeletions, count)
	return Deletions{Count: r.Count, Threshold: r.Threshold, Allowed: r.Allowed, Refused: r.Refused}
}

// planOne plans one lock change: workflow, refs, path diff, actions and
// the manifest diff. Causes are filled in later (attribution reads files
// and is cheap; this part renders charts and runs in parallel).
func planOne(in Input, opts Options, c resolver.LockChange) (*Deployment, error) {
	prev, next := c.Previous, c.Next
	if prev != nil && prev.Tombstone() {
		prev = nil
	}
	if next != nil && next.Tombstone() {
		next = nil
	}
	w := SelectWorkflow(prev, next)
	d := &Deployment{
		ID:           c.ID.String(),
		Cluster:      c.ID.Cluster,
		Environment:  c.ID.Environment,
		Name:         c.ID.Name,
		Workflow:     w,
		ToSequence:   c.Next.Sequence,
		Causes:       []Cause{},
		Changes:      []Change{},
		Actions:      []Action{},
		Manifests:    ManifestDiff{Objects: []ObjectDiff{}},
		FromSequence: 0,
		After:        c.Next.After,
		Internal:     c.Next.Internal,
	}
	if c.Previous != nil {
		d.FromSequence = c.Previous.Sequence
	}
	var oldDrv, newDrv *drivers.Driver
	var missing []string
	if prev != nil {
		d.From = refOfInstance(prev)
		d.Namespace = namespaceOf(prev)
		var ok bool
		if oldDrv, ok = in.Drivers.Driver(prev.Driver); !ok {
			missing = append(missing, fmt.Sprintf("driver %s@%s (%s) of the locked instance is not available", prev.Driver.Name, prev.Driver.Version, prev.Driver.Digest))
		}
	}
	if next != nil {
		d.To = refOfInstance(next)
		d.Namespace = namespaceOf(next)
		var ok bool
		if newDrv, ok = in.Drivers.Driver(next.Driver); !ok {
			missing = append(missing, fmt.Sprintf("driver %s@%s (%s) is not available", next.Driver.Name, next.Driver.Version, next.Driver.Digest))
		}
	}

	// Both sides hold placeholders where sensitive values were (a lock
	// from before placeholders holds them in clear: it is shown from a
	// copy with placeholders), so nothing rendered below can hold a value
	// in any form. The maskers then only hide the placeholders.
	hidden := sensitiveParams(oldDrv, newDrv)
	prev, err := resolver.WithPlaceholders(prev, oldDrv, hidden)
	if err != nil {
		return nil, err
	}
	if next, err = resolver.WithPlaceholders(next, newDrv, hidden); err != nil {
		return nil, err
	}
	// What the agent renders comes from the lockfile, so both sides are
	// taken through the JSON form a lockfile holds.
	oldSide, err := sideOf(prev)
	if err != nil {
		return nil, err
	}
	newSide, err := sideOf(next)
	if err != nil {
		return nil, err
	}
	masks := newMaskers(sensitiveParams(oldDrv, newDrv), oldSide.params(), newSide.params())
	if w != WorkflowDelete {
		secret := secretParams(oldDrv, newDrv)
		sensitive := sensitiveParams(oldDrv, newDrv)
		td := &treeDiff{masks: masks, rule: func(segs []pathSegment) (bool, bool, bool) {
			if len(segs) == 3 && segs[0].key == "context" && segs[1].key == "parameters" && !segs[2].isIdx {
				n := segs[2].key
				return secret[n] || sensitive[n], sensitive[n], secret[n]
			}
			return false, false, false
		}}
		td.diff(nil, oldSide.tree, newSide.tree, prev != nil, next != nil)
		d.Changes = td.out
		d.rawPaths = td.segs
	}

	actionDriver := newDrv
	if w == WorkflowDelete {
		actionDriver = oldDrv
	}
	d.Actions = Actions(w, actionDriver)
	if d.Actions == nil {
		d.Actions = []Action{}
	}

	if opts.SkipManifests {
		return d, nil
	}
	if len(missing) > 0 {
		d.Manifests.Error = strings.Join(missing, "; ")
		return d, nil
	}
	var oldM, newM *drivers.Manifests
	if prev != nil {
		if oldM, err = oldDrv.Render(oldSide.ctx, oldSide.values); err != nil {
			d.Manifests.Error = "rendering the locked instance: " + err.Error()
			return d, nil
		}
	}
	if next != nil {
		if newM, err = newDrv.Render(newSide.ctx, newSide.values); err != nil {
			d.Manifests.Error = "rendering the new instance: " + err.Error()
			return d, nil
		}
	}
	md, err := diffManifests(oldM, newM, masks)
	if err != nil {
		d.Manifests.Error = err.Error()
		return d, nil
	}
	if md.Objects == nil {
		md.Objects = []ObjectDiff{}
	}
	d.Manifests = md
	return d, nil
}

func refOfInstance(in *resolver.Instance) *InstanceRef {
	return &InstanceRef{
		Sequence:      in.Sequence,
		Digest:        in.Digest,
		Driver:        in.Driver.Name,
		DriverVersion: in.Driver.Version,
		DriverDigest:  in.Driver.Digest,
		AppVersion:    in.AppVersion,
	}
}

func namespaceOf(in *resolver.Instance) string {
	if in.Context == nil {
		return ""
	}
	return in.Context.Deployment.Namespace
}

// side is one instance as the agent would read it from its lockfile: the
// context and values for rendering, and the normalized tree for diffing.
type side struct {
	ctx    drivers.Context
	values map[string]any
	tree   any // {"context": …, "values": …}
}

func (s side) params() map[string]any { return s.ctx.Parameters }

func sideOf(in *resolver.Instance) (side, error) {
	var s side
	if in == nil {
		return s, nil
	}
	// The lockfile is YAML read into JSON types: numbers become float64.
	type doc struct {
		Context *drivers.Context `json:"context,omitempty"`
		Values  map[string]any   `json:"values,omitempty"`
	}
	var lock doc
	b, err := json.Marshal(doc{in.Context, in.Values})
	if err != nil {
		return s, fmt.Errorf("planner: %s: %w", in.ID, err)
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return s, fmt.Errorf("planner: %s: %w", in.ID, err)
	}
	if lock.Context != nil {
		s.ctx = *lock.Context
	}
	s.values = lock.Values
	// The same bytes, with exact numbers, for diffing.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return s, fmt.Errorf("planner: %s: %w", in.ID, err)
	}
	s.tree = tree
	return s, nil
}
