package resolver

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/styrmin/styrmin/drivers"
)

// LoadLocks reads every lockfile under locks/. A missing folder is an
// empty set; a hand-edited or malformed lockfile is an error naming it.
// The files are decoded on every core: a plan or a lock of a large
// cluster reads thousands.
func LoadLocks(fsys fs.FS) (map[ID]*Instance, error) {
	return NewLockLoader().Load(fsys)
}

// LockLoader loads the lockfiles of several trees (the two sides of a
// plan), decoding a lockfile once when it has the same path and bytes in
// another tree: most of a plan's lockfiles are the same on both sides.
// The instances of such lockfiles are shared between the maps Load
// returns: callers must not modify them. Safe for concurrent use.
type LockLoader struct {
	mu      sync.Mutex
	decoded map[[sha256.Size]byte]*Instance
}

// NewLockLoader returns a loader that has decoded nothing yet.
func NewLockLoader() *LockLoader {
	return &LockLoader{decoded: map[[sha256.Size]byte]*Instance{}}
}

// read is ReadLock through the loader's decoded lockfiles.
func (l *LockLoader) read(fsys fs.FS, file string) (*Instance, error) {
	fi, err := lstat(fsys, file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var data []byte
	if err == nil && fs.ValidPath(file) {
		// Once: a file of a git tree is read whole to be described.
		data, err = readLimitedInfo(fsys, file, maxLockSize, fi)
	} else {
		data, err = readLimited(fsys, file, maxLockSize)
	}
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write([]byte(file))
	h.Write([]byte{0})
	h.Write(data)
	var key [sha256.Size]byte
	h.Sum(key[:0])
	l.mu.Lock()
	in, ok := l.decoded[key]
	l.mu.Unlock()
	if ok {
		return in, nil
	}
	if in, err = DecodeLock(file, data); err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.decoded[key] = in
	l.mu.Unlock()
	return in, nil
}

// LockTempPrefix starts the name of a lockfile being written: a temporary
// file in its folder, renamed over it. Loading skips such files, so a lock
// killed between the two leaves nothing that stops the next one.
const LockTempPrefix = ".styrmin-lock-"

// Load is LoadLocks of fsys.
func (l *LockLoader) Load(fsys fs.FS) (map[ID]*Instance, error) {
	type entry struct {
		path string
		id   ID
		in   *Instance
		err  error
	}
	var entries []*entry
	var errs []error
	// WalkDir follows a linked root (the links under it it reports): the
	// locks read, and then written, would be outside the repository.
	if err := refuseSymlinkedFolder(fsys, lockDir); err != nil {
		return nil, err
	}
	err := fs.WalkDir(fsys, lockDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == lockDir {
				return fs.SkipDir
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), LockTempPrefix) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			errs = append(errs, &ConfigError{File: p, Msg: "is a symbolic link; symbolic links are refused: lockfiles must be regular files, in real folders inside the repository"})
			return nil
		}
		id, ok := IDFromLockPath(p)
		if !ok {
			errs = append(errs, &ConfigError{File: p, Msg: "unexpected file under locks/: expected locks/<cluster>/<environment>/<name>.lock.yaml"})
			return nil
		}
		entries = append(entries, &entry{path: p, id: id})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", lockDir, err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(entries)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(entries); i = int(next.Add(1)) - 1 {
				e := entries[i]
				e.in, e.err = l.read(fsys, e.path)
			}
		})
	}
	wg.Wait()
	out := make(map[ID]*Instance, len(entries))
	for _, e := range entries {
		if e.err != nil {
			errs = append(errs, e.err)
			continue
		}
		out[e.id] = e.in
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// checkAfters refuses an after entry that names a deployment without a
// lock, or an instance its lock has not reached: the task would wait for
// something that never runs. It checks the locks as a lock would leave
// them, so a lockfile deleted by hand, which the lock writes again, is
// no error.
func checkAfters(locks map[ID]*Instance) error {
	ids := make([]ID, 0, len(locks))
	for id := range locks {
		ids = append(ids, id)
	}
	SortIDs(ids)
	var errs []error
	for _, id := range ids {
		for i, a := range locks[id].After {
			peer, seq, err := ParseAfter(a)
			if err != nil {
				continue // DecodeLock refused it already
			}
			switch p := locks[peer]; {
			case p == nil:
				errs = append(errs, &ConfigError{File: id.LockPath(), Field: fmt.Sprintf("after[%d]", i), Msg: fmt.Sprintf("%q: no deployment %s is locked (expected an instance of a locked deployment)", a, peer)})
			case p.Sequence < seq:
				errs = append(errs, &ConfigError{File: id.LockPath(), Field: fmt.Sprintf("after[%d]", i), Msg: fmt.Sprintf("%q: %s is locked at sequence %d (expected an instance up to it, not a later one)", a, peer, p.Sequence)})
			}
		}
	}
	return errors.Join(errs...)
}

// LockChange is one lockfile to write: a new instance (or tombstone) with
// the next sequence of its deployment.
type LockChange struct {
	ID       ID
	Previous *Instance // nil when the deployment is new
	Next     *Instance
	Data     []byte // the encoded lockfile
}

// Path is the lockfile's path in the repository.
func (c LockChange) Path() string { return c.ID.LockPath() }

// Trailer is the commit trailer value of the change: cluster/env/name=N.
func (c LockChange) Trailer() string { return fmt.Sprintf("%s=%d", c.ID, c.Next.Sequence) }

// PlanLocks compares resolved instances with the current locks and returns
// the lockfiles to write, sorted by deployment: NextInstances, encoded.
func PlanLocks(res *Result, current map[ID]*Instance) ([]LockChange, error) {
	return planLocks(res, current, nil, nil, nil)
}

// planLocks is PlanLocks numbering after the sequences used (reused: those
// used for two instances); head are the sequences of the branch head's
// lockfiles when current are another commit's (a step of a chain), nil
// when they are the head's.
func planLocks(res *Result, current map[ID]*Instance, used UsedSequences, reused ReusedSequences, head map[ID]int64) ([]LockChange, error) {
	changes, err := nextInstances(res, current, used, reused, head)
	if err != nil {
		return nil, err
	}
	// On every core: a fan-out encodes a lockfile per deployment.
	errs := make([]error, len(changes))
	parallel(len(changes), func(i int) {
		changes[i].Data, errs[i] = EncodeLock(changes[i].Next)
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return changes, nil
}

// NextInstances returns the new instances the resolution calls for, sorted
// by deployment, without encoding them (a plan needs no lockfile bytes): a
// deployment whose digest changed gets sequence+1; one whose configuration
// is gone gets a tombstone, so a re-created deployment never reuses a
// number. A deployment whose only change is a newly honoured upgrade
// request (no newer driver version was loaded) gets sequence+1 too, so
// the lock records the request as spent. Unchanged deployments are left
// alone (their files stay byte-identical), unless a lock (or a tombstone)
// is behind a sequence used already (numbering after used sequences
// only): a revert brought it back, and it is locked again past that
// sequence. Deployments that failed to resolve are neither locked
// nor tombstoned; deployments on hold keep their lock.
func NextInstances(res *Result, current map[ID]*Instance) ([]LockChange, error) {
	return nextInstances(res, current, nil, nil, nil)
}

// NextInstancesAfter is NextInstances numbering after the sequences the
// branch's history used, as a lock does: a lockfile behind one of them (a
// revert) is locked again past it, unless head (the sequences of the
// branch head's own lockfiles, nil: none) is not behind, and so is one at
// a sequence the history used for another instance too (reused). What
// plan shows of a lock.
func NextInstancesAfter(res *Result, current map[ID]*Instance, used UsedSequences, reused ReusedSequences, head map[ID]int64) ([]LockChange, error) {
	return nextInstances(res, current, used, reused, head)
}

// nextInstances is NextInstances numbering after the sequences used (nil:
// the current locks only); head as planLocks'.
func nextInstances(res *Result, current map[ID]*Instance, used UsedSequences, reused ReusedSequences, head map[ID]int64) ([]LockChange, error) {
	// behind: a lock below a sequence used, also at the head (in a chain,
	// a retry committed after the step's commit is the head's lock, not
	// a revert); or at a sequence used for another instance too (two
	// merged pull requests locked it), which the agent may have run.
	behind := func(id ID, prev *Instance) bool {
		if reused.Reuses(id, prev) {
			return true
		}
		u := used[id]
		if prev.Sequence >= u {
			return false
		}
		s, ok := head[id]
		return !ok || s < u
	}
	// First: an application failed there is ordered as any failed one.
	failUnservedIngressMoves(res, current)
	var out []LockChange
	for _, r := range res.Resolved {
		if _, held := res.Held[r.Instance.ID]; held {
			continue
		}
		prev := current[r.Instance.ID]
		if prev != nil && !prev.Tombstone() && prev.Digest == r.Instance.Digest && prev.Driver.UpgradeRequest == r.Instance.Driver.UpgradeRequest &&
			!behind(prev.ID, prev) {
			continue
		}
		// Else a change; or the lockfile is behind a sequence already
		// used (a revert or a rewind brought an older lockfile back with
		// its configuration): the agent, which ran the newer sequence,
		// never applies the older one, so the same content is locked
		// again past it.
		next := *r.Instance
		next.Sequence = used.next(next.ID, prev)
		out = append(out, LockChange{ID: next.ID, Previous: prev, Next: &next})
	}
	ids := make([]ID, 0, len(current))
	for id := range current {
		ids = append(ids, id)
	}
	SortIDs(ids)
	for _, id := range ids {
		prev := current[id]
		if (prev.Tombstone() && !behind(id, prev)) || res.Present[id] || ingressStillUsed(res, current, prev) {
			continue
		}
		t := &Instance{
			APIVersion:   APIVersion,
			Kind:         KindTombstone,
			ID:           id,
			Sequence:     used.next(id, prev),
			SourceCommit: sourceCommitOf(res),
			// A controller's tombstone is still internal: plans and
			// status show it so, and orderIngress orders it.
			Internal: prev.Internal,
		}
		dg, err := t.ComputeDigest()
		if err != nil {
			return nil, err
		}
		t.Digest = dg
		out = append(out, LockChange{ID: id, Previous: prev, Next: t})
	}
	sort.Slice(out, func(i, j int) bool { return lessID(out[i].ID, out[j].ID) })
	orderCreates(res, current, out)
	orderIngress(res, current, out)
	takers, err := orderMoves(res, out)
	if err != nil {
		return nil, err
	}
	if err := orderWaves(res, out, takers); err != nil {
		return nil, err
	}
	if err := checkOrderCycles(out); err != nil {
		return nil, err
	}
	after := maps.Clone(current)
	if after == nil {
		after = map[ID]*Instance{}
	}
	for _, c := range out {
		after[c.ID] = c.Next
	}
	if err := checkAfters(after); err != nil {
		return nil, err
	}
	return out, nil
}

// orderCreates makes each new deployment (none locked, or its lock a
// tombstone) run after the deployments it connects to: their instance
// in this lock, else their current one. A deployment that is already
// running has its peers running too, so an update waits for nothing.
func orderCreates(res *Result, current map[ID]*Instance, changes []LockChange) {
	next := make(map[ID]int64, len(changes))
	for _, c := range changes {
		if !c.Next.Tombstone() {
			next[c.ID] = c.Next.Sequence
		}
	}
	deployments := make(map[ID]*Deployment, len(res.Resolved))
	for _, r := range res.Resolved {
		deployments[r.Instance.ID] = r.Deployment
	}
	for _, c := range changes {
		d := deployments[c.ID]
		if c.Next.Tombstone() || d == nil || (c.Previous != nil && !c.Previous.Tombstone()) {
			continue
		}
		var after []string
		for _, ref := range d.Connects {
			peer := ID{Cluster: c.ID.Cluster, Environment: c.ID.Environment, Name: strings.SplitN(ref, ".", 2)[0]}
			seq, ok := next[peer]
			if !ok {
				if cur := current[peer]; cur != nil && !cur.Tombstone() {
					seq, ok = cur.Sequence, true
				}
			}
			if ok {
				after = append(after, AfterRef(peer, seq))
			}
		}
		slices.Sort(after)
		c.Next.After = slices.Compact(after)
	}
}

// orderMoves makes a deployment that now renders an object outside its
// namespace that another deployment's lock renders, and whose new
// instance no longer does (or which this lock deletes), run after that
// other deployment's change: the agent applies an object for one release
// only, and the other's change is what removes it from its release.
// Without the order the taking deployment's task could run first, be
// refused the object, and fail once its step's time was up. Two
// deployments that trade objects in one lock would wait for each other:
// refused, naming both, to be locked in two commits.
//
// It returns the takers: they run after their givers whatever wave those
// are in, so no wave holds them (a wave before would wait for them).
func orderMoves(res *Result, changes []LockChange) (map[ID]bool, error) {
	if len(res.held) == 0 || len(res.renders) == 0 {
		return nil, nil
	}
	takers := map[objectKey][]int{} // the changes whose new instance renders each object
	for i, c := range changes {
		if c.Next.Tombstone() {
			continue
		}
		for k := range res.renders[c.ID] {
			takers[k] = append(takers[k], i)
		}
	}
	moves := map[[2]int]objectKey{} // from, to: one object moved
	for from, c := range changes {
		kept := res.renders[c.ID]
		if !c.Next.Tombstone() && kept == nil {
			continue // not rendered: its objects are as its lock's
		}
		for k := range res.held[c.ID] {
			if kept[k] {
				continue
			}
			for _, to := range takers[k] {
				if to != from {
					if old, ok := moves[[2]int{from, to}]; !ok || lessKey(k, old) {
						moves[[2]int{from, to}] = k
					}
				}
			}
		}
	}
	pairs := slices.SortedFunc(maps.Keys(moves), func(a, b [2]int) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	var errs []error
	moved := map[ID]bool{}
	for _, p := range pairs {
		from, to := &changes[p[0]], &changes[p[1]]
		if back, ok := moves[[2]int{p[1], p[0]}]; ok {
			if p[0] < p[1] {
				errs = append(errs, fmt.Errorf("%s: deployment %s takes %s from deployment %s, which takes %s from it in the same lock: each would wait for the other; lock one move, then the other, in two commits",
					to.ID.LockPath(), to.ID, moves[p].describe(), from.ID, back.describe()))
			}
			continue
		}
		addAfter(to.Next, AfterRef(from.ID, from.Next.Sequence))
		moved[to.ID] = true
	}
	return moved, errors.Join(errs...)
}

// checkOrderCycles refuses changes whose afters, within this lock, wait
// for each other in a cycle (moves of objects around three deployments,
// say): the agent would hold every one of them for ever. It names the
// lockfiles of the cycle.
func checkOrderCycles(changes []LockChange) error {
	index := make(map[string]int, len(changes))
	for i, c := range changes {
		index[AfterRef(c.ID, c.Next.Sequence)] = i
	}
	const (
		unseen = iota
		open
		closed
	)
	state := make([]int, len(changes))
	var stack []int
	var visit func(i int) error
	visit = func(i int) error {
		state[i] = open
		stack = append(stack, i)
		for _, a := range changes[i].Next.After {
			j, ok := index[a]
			if !ok {
				continue
			}
			switch state[j] {
			case open:
				k := slices.Index(stack, j)
				files := make([]string, 0, len(stack)-k)
				for _, n := range stack[k:] {
					files = append(files, changes[n].ID.LockPath())
				}
				return fmt.Errorf("%s: these changes wait for each other in a cycle (their after:, from moves of objects between them, waves or connects): the agent would hold them all; lock them in more than one commit", strings.Join(files, ", "))
			case unseen:
				if err := visit(j); err != nil {
					return err
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = closed
		return nil
	}
	for i := range changes {
		if state[i] == unseen {
			if err := visit(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// lessKey orders object keys.
func lessKey(a, b objectKey) bool {
	return cmp.Or(strings.Compare(a.group, b.group), strings.Compare(a.kind, b.kind),
		strings.Compare(a.namespace, b.namespace), strings.Compare(a.name, b.name)) < 0
}

// describe names the object: its kind, and its namespace when it has one.
func (k objectKey) describe() string {
	if k.kind == hostKind {
		return "host " + drivers.HostClaim{Class: k.namespace, Host: k.name}.String()
	}
	if k.namespace != "" {
		return k.kind + " " + k.namespace + "/" + k.name
	}
	return k.kind + " " + k.name
}

// sourceCommitOf picks the commit recorded in a tombstone: the commit the
// other instances of this resolution came from.
func sourceCommitOf(res *Result) string {
	for _, r := range res.Resolved {
		return r.Instance.SourceCommit
	}
	return ""
}

// LockMessage is the commit message of a lock commit: a summary line and
// one Styrmin-Lock trailer per change.
func LockMessage(changes []LockChange) (subject string, trailers []string) {
	names := make([]string, 0, len(changes))
	for _, c := range changes {
		names = append(names, fmt.Sprintf("%s=%d", c.ID, c.Next.Sequence))
		trailers = append(trailers, c.Trailer())
	}
	subject = "styrmin: lock " + summarize(names)
	return subject, trailers
}

func summarize(names []string) string {
	const max = 3
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// ReadLock reads and decodes the lockfile at file in fsys (ReadLockFile,
// then DecodeLock).
func ReadLock(fsys fs.FS, file string) (*Instance, error) {
	data, err := ReadLockFile(fsys, file)
	if err != nil {
		return nil, err
	}
	return DecodeLock(file, data)
}

// ReadLockFile reads the lockfile at file in fsys without decoding it. It
// refuses symbolic links, anything but a regular file and files over the
// size limit; a missing file is an error wrapping fs.ErrNotExist.
func ReadLockFile(fsys fs.FS, file string) ([]byte, error) {
	if _, err := lstat(fsys, file); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return readLimited(fsys, file, maxLockSize)
}
