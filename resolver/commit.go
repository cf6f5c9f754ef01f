package resolver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"strconv"
	"strings"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
)

// CommitOutcome reports what CommitLocks locked.
type CommitOutcome struct {
	gitsource.CommitResult
	// Changes are the lockfiles of the attempt that landed.
	Changes []LockChange
	// Skipped are the deployments that failed to resolve (LockKeepGoing).
	Skipped error
	// NotRetried are the deployments asked to be retried whose lock had
	// moved on at the head the commit was built on.
	NotRetried []ID
	// BrokenDrivers are the driver versions of the head that do not load
	// (WorkspaceOptions.DriversKeepGoing): named whether or not a
	// deployment was held back by one.
	BrokenDrivers []*drivers.BrokenDriverError
	// Warnings are the head's LockOutcome.Warnings.
	Warnings []string
	// Steps are the lock commits of the attempt that landed, one per
	// configuration commit that changes an instance, oldest first.
	Steps []ChainStep
}

// ChainStep is one lock commit of a chain: the configuration commit it
// locks (the head's for a lock of the head alone) and its lockfiles.
type ChainStep struct {
	Commit  gitsource.Hash
	Changes []LockChange
}

// CommitLocks locks the head of the writer's branch and commits the
// lockfiles onto it with compare-and-swap: every attempt loads the
// workspace at the newest head and renumbers, so concurrent lockers never
// assign one sequence twice. A head whose locks are current makes no
// commit, so the engine's own lock commits never cause another lock.
func CommitLocks(ctx context.Context, w gitsource.Writer, opts WorkspaceOptions, policy LockPolicy, maxAttempts int) (CommitOutcome, error) {
	return CommitLocksWith(ctx, w, opts, LockRequest{Policy: policy}, CommitOptions{Attempts: maxAttempts})
}

// DefaultMaxUnlocked bounds how many first-parent commits a lock walks
// back to find the last lock.
const DefaultMaxUnlocked = 1000

// ConfigCommitTrailer records, on a lock commit, the configuration commit
// whose change it locks.
const ConfigCommitTrailer = "Styrmin-Config-Commit"

// CommitOptions says how CommitLocksWith commits.
type CommitOptions struct {
	// Attempts bounds the compare-and-swap attempts (0: gitsource's
	// default).
	Attempts int
	// Dir is the folder of the git repository that holds the
	// desired-state repository ("" or "." for its root).
	Dir string
	// History reads the branch's history: the configuration commits since
	// the last lock, each locked as its own change, and the sequences ever
	// used. Nil locks the head only and numbers after its lockfiles.
	History gitsource.History
	// Squash locks the head only, as one change, even when several
	// configuration commits are unlocked (sequences still come after
	// every one ever used).
	Squash bool
	// MaxUnlocked bounds the walk back (0: DefaultMaxUnlocked).
	MaxUnlocked int
	// Used are sequences known used beyond the history (the agent's lock
	// mode: those its cluster ran, which a rewound branch forgot).
	Used UsedSequences
	// Reused are sequences known used for another instance than the
	// lockfile at that number holds, beyond the history (the agent's lock
	// mode: a number its cluster ran for other content, which a lock made
	// after a rewind took again): such a lockfile is locked again past
	// them, as one the history reused.
	Reused ReusedSequences
	// Author authors and commits (gitsource's default when empty); Sign
	// signs each commit (nil: unsigned). gitsource.Repo.Identity chooses
	// them as git does.
	Author gitsource.Signature
	Sign   gitsource.SignFunc
	// RequireRepository refuses a branch that does not exist
	// (gitsource.BranchNotFoundError) and a head whose Dir holds no
	// desired-state repository (CheckRepository): either would otherwise
	// lock nothing and report nothing to lock. For branches and folders
	// named by hand (styrminctl), where that success hides a wrong name.
	RequireRepository bool
}

// checkHead refuses, with RequireRepository, a head tree whose folder
// Dir is no desired-state repository, naming the folder (gitsource names
// the branch and commit).
func (co CommitOptions) checkHead(headFS fs.FS) error {
	if !co.RequireRepository {
		return nil
	}
	if err := CheckRepository(headFS); err != nil {
		if d := dirOf(co.Dir); d != "." {
			return fmt.Errorf("folder %s/ of its tree: %w", d, err)
		}
		return fmt.Errorf("the root folder of its tree: %w", err)
	}
	return nil
}

// request is the gitsource request to commit what build or chain gives.
func (co CommitOptions) request(build gitsource.BuildFunc, chain gitsource.ChainFunc) gitsource.CommitRequest {
	return gitsource.CommitRequest{Build: build, Chain: chain, Dir: co.Dir, MaxAttempts: co.Attempts, Author: co.Author, Sign: co.Sign,
		ExistingBranch: co.RequireRepository}
}

// CommitLocksWith is CommitLocks for a whole LockRequest
// (Workspace.LockFor, on each attempt's head).
//
// With History, every first-parent commit since the locks last changed
// that changes a deployment's instance is locked as its own change: one
// lock commit per such configuration commit, in order, each recording the
// commit it locks in its instances' sourceCommit and a
// Styrmin-Config-Commit trailer, all pushed in one compare-and-swap. So
// two upgrades merged before a lock each get a sequence, and the agent
// runs both. A commit in between that does not resolve is skipped for the
// deployments it breaks (they lock at the next commit that resolves); the
// request's policy applies to the head. The deletion rule applies to the
// whole lock; a Styrmin-Allow-Deletions trailer on a configuration commit
// allows as --allow-deletions does. One whose value is no whole number
// allows nothing, and a lock the rule refuses names it
// (*AllowanceTrailerError).
//
// The retries the request asks for are locked in the last commit, a
// Styrmin-Retry trailer each, when their lock is still at the sequence
// asked for (the others are reported in NotRetried); an allowance of
// deletions that the lock uses is recorded in a Styrmin-Allow-Deletions
// trailer.
func CommitLocksWith(ctx context.Context, w gitsource.Writer, opts WorkspaceOptions, req LockRequest, co CommitOptions) (CommitOutcome, error) {
	var out CommitOutcome
	chain := func(ctx context.Context, head gitsource.Hash, headFS fs.FS) ([]gitsource.Change, error) {
		if err := co.checkHead(headFS); err != nil {
			return nil, err
		}
		steps, err := lockSteps(co, head)
		if err != nil {
			return nil, err
		}
		o := opts
		o.FetchDriver = fetchOnce(opts.FetchDriver)
		if co.History != nil && !head.IsZero() {
			seqs, err := co.History.LockedSequences(head, dirOf(co.Dir), lockDir)
			if err != nil {
				return nil, err
			}
			o.Used = UsedFromTrailers(seqs)
			reused, err := co.History.ReusedSequences(head, dirOf(co.Dir), lockDir)
			if err != nil {
				return nil, err
			}
			o.Reused = ReusedFromHistory(reused)
		}
		for id, seq := range co.Used {
			if o.Used == nil {
				o.Used = UsedSequences{}
			}
			o.Used.record(id, seq)
		}
		if len(co.Reused) > 0 {
			o.Reused = maps.Clone(o.Reused)
			if o.Reused == nil {
				o.Reused = ReusedSequences{}
			}
			maps.Copy(o.Reused, co.Reused)
		}
		if len(steps) > 1 || steps[0].commit != head {
			// The steps' lockfiles are their commits'; a lock committed
			// after one (a retry) is the head's.
			headLocks, err := LoadLocks(headFS)
			if err != nil {
				return nil, err
			}
			o.HeadLocks = make(map[ID]int64, len(headLocks))
			for id, in := range headLocks {
				o.HeadLocks[id] = in.Sequence
			}
		}
		var running map[ID]*Instance
		var changes []gitsource.Change
		var lastWS *Workspace
		allowed := req.AllowDeletions
		out.Changes, out.Skipped, out.NotRetried, out.BrokenDrivers, out.Warnings, out.Steps = nil, nil, nil, nil, nil, nil
		for i, step := range steps {
			last := i == len(steps)-1
			fsys := headFS
			if step.commit != head {
				if fsys, err = co.History.TreeAt(step.commit, dirOf(co.Dir)); err != nil {
					return nil, err
				}
			}
			if !step.commit.IsZero() {
				o.SourceCommit = step.commit.String()
			}
			ws, err := LoadWorkspace(fsys, o)
			if err != nil && !last {
				continue // a broken commit in between: the next one locks
			}
			if err != nil {
				return nil, err
			}
			if running == nil {
				running = ws.Locks
			}
			ws.Locks = running
			// The versions the deployments run as the chain left them,
			// not as this tree's lockfiles say.
			if err := runsBroken(ws.Catalog, running); err != nil {
				if !last {
					continue
				}
				return nil, err
			}
			allowed += step.allowDeletions
			r := LockRequest{Policy: LockKeepGoing, AllowDeletions: maxAllowance}
			if last {
				r.Policy, r.Retry = req.Policy, req.Retry
			}
			lo, err := ws.LockFor(r)
			if err != nil && !last {
				continue
			}
			if err != nil {
				return nil, err
			}
			if last {
				out.Skipped, out.NotRetried, lastWS = lo.Skipped, lo.NotRetried, ws
				out.Warnings = lo.Warnings
				out.BrokenDrivers = ws.Catalog.Broken()
			}
			if len(lo.All()) == 0 {
				continue
			}
			next := maps.Clone(running)
			for _, c := range lo.All() {
				next[c.ID] = c.Next
				o.Used = recordUsed(o.Used, c)
			}
			running = next
			out.Changes = append(out.Changes, lo.All()...)
			out.Steps = append(out.Steps, ChainStep{Commit: step.commit, Changes: lo.All()})
			changes = append(changes, stepChange(lo, step, len(steps) > 1))
		}
		if lastWS == nil {
			return nil, nil
		}
		ids := Deleted(out.Changes)
		d := DeletionRule(lastWS.Repo.Settings, nil, allowed, len(ids))
		if d.Refused {
			out.Changes, out.Steps = nil, nil
			refused := &DeletionsRefusedError{Deletions: d, IDs: ids}
			for _, step := range steps {
				if step.badAllowance != "" {
					return nil, &AllowanceTrailerError{Commit: step.commit, Value: step.badAllowance, Refused: refused}
				}
			}
			return nil, refused
		}
		if d.Count > d.Threshold {
			for i := range changes {
				changes[i].Trailers = append(changes[i].Trailers, gitsource.Trailer{Key: AllowDeletionsTrailer, Value: strconv.Itoa(d.Count)})
			}
		}
		return changes, nil
	}
	res, err := w.CommitLocks(ctx, co.request(nil, chain))
	out.CommitResult = res
	if err != nil {
		return out, err
	}
	if !res.Committed {
		out.Changes, out.Steps = nil, nil
	}
	return out, nil
}

// DryLockChain works out the lock commits CommitLocksWith would make on
// head, whose tree at co.Dir is headFS, and commits nothing: a plan or a
// check of several configuration commits whose sum changes nothing (an
// upgrade and its revert) still has the lock run each, hooks and all.
func DryLockChain(ctx context.Context, head gitsource.Hash, headFS fs.FS, opts WorkspaceOptions, req LockRequest, co CommitOptions) ([]ChainStep, error) {
	out, err := CommitLocksWith(ctx, dryWriter{head: head, fsys: headFS}, opts, req, co)
	return out.Steps, err
}

// dryWriter builds a chain on one head and commits nothing; it reports
// a commit made when the chain has one to make.
type dryWriter struct {
	head gitsource.Hash
	fsys fs.FS
}

func (d dryWriter) CommitLocks(ctx context.Context, req gitsource.CommitRequest) (gitsource.CommitResult, error) {
	res := gitsource.CommitResult{Commit: d.head, Parent: d.head, Attempts: 1}
	if req.Chain == nil {
		return res, errors.New("a dry lock builds chains only")
	}
	changes, err := req.Chain(ctx, d.head, d.fsys)
	res.Committed = len(changes) > 0
	return res, err
}

// maxAllowance lets a step of a chain lock any number of deletions: the
// deletion rule applies to the whole lock, after the last step.
const maxAllowance = int(^uint(0) >> 1)

// lockStep is one configuration commit a lock locks.
type lockStep struct {
	commit gitsource.Hash
	// allowDeletions is the commit's Styrmin-Allow-Deletions trailer.
	allowDeletions int
	// badAllowance is the value of a Styrmin-Allow-Deletions trailer of
	// the commit that is no whole number ("" when none). It allows
	// nothing; it is reported when the lock needed an allowance, the one
	// case its value would have counted. Refusing it always would stop
	// every later lock (lock mode's above all) for a trailer that changes
	// nothing, with no commit able to fix a pushed commit's message.
	badAllowance string
}

// lockSteps lists the configuration commits a lock on head locks, oldest
// first: the head alone without History or with Squash, and for a branch
// never locked (its first lock is one change); otherwise every
// configuration commit since the last lock.
func lockSteps(co CommitOptions, head gitsource.Hash) ([]lockStep, error) {
	commits := []gitsource.Hash{head}
	if co.History != nil && !head.IsZero() {
		limit := co.MaxUnlocked
		if limit <= 0 {
			limit = DefaultMaxUnlocked
		}
		un, err := co.History.UnlockedChanges(head, dirOf(co.Dir), lockDir, limit)
		if errors.Is(err, gitsource.ErrTooManyUnlocked) {
			return nil, fmt.Errorf("%w: lock the head as one change with --squash", err)
		}
		if err != nil {
			return nil, err
		}
		if !co.Squash && !un.Base.IsZero() && len(un.Commits) > 0 {
			commits = un.Commits
		}
	}
	steps := make([]lockStep, len(commits))
	for i, c := range commits {
		steps[i].commit = c
		if co.History == nil || c.IsZero() {
			continue
		}
		msg, err := co.History.Message(c)
		if err != nil {
			return nil, err
		}
		for _, t := range gitsource.ParseTrailers(msg) {
			if strings.EqualFold(t.Key, AllowDeletionsTrailer) {
				n, ok := parseAllowance(t.Value)
				if !ok {
					if steps[i].badAllowance == "" {
						steps[i].badAllowance = t.Value
					}
					continue
				}
				steps[i].allowDeletions = max(steps[i].allowDeletions, n)
			}
		}
	}
	return steps, nil
}

// stepChange is the lock commit of one step: its lockfiles and trailers,
// and, in a chain, the configuration commit it locks.
func stepChange(lo LockOutcome, step lockStep, chained bool) gitsource.Change {
	ch := RetryChange(lo.Retries)
	if len(lo.Changes) > 0 {
		ch.Summary = "" // a lock with retries: the summary lists every deployment
	}
	for _, c := range lo.Changes {
		ch.Files[c.Path()] = c.Data
		ch.Locks[c.ID.String()] = int(c.Next.Sequence)
	}
	if chained && !step.commit.IsZero() {
		ch.Trailers = append(ch.Trailers, gitsource.Trailer{Key: ConfigCommitTrailer, Value: step.commit.String()})
	}
	return ch
}

// fetchOnce is f remembering its answers for the steps of one attempt: a
// driver source listed at every commit of a chain is fetched once (its
// ref is read at the same moment for all of them).
func fetchOnce(f DriverFetcher) DriverFetcher {
	if f == nil {
		return nil
	}
	type answer struct {
		fsys   fs.FS
		commit string
		err    error
	}
	seen := map[DriverSource]answer{}
	return func(src DriverSource) (fs.FS, string, error) {
		if a, ok := seen[src]; ok {
			return a.fsys, a.commit, a.err
		}
		fsys, commit, err := f(src)
		seen[src] = answer{fsys, commit, err}
		return fsys, commit, err
	}
}

func recordUsed(u UsedSequences, c LockChange) UsedSequences {
	if u == nil {
		u = UsedSequences{}
	}
	u.record(c.ID, c.Next.Sequence)
	return u
}

func dirOf(dir string) string {
	if dir == "" {
		return "."
	}
	return dir
}

// commitBuilt commits what build gives with compare-and-swap and fills
// out (build records its changes there).
func commitBuilt(ctx context.Context, w gitsource.Writer, build gitsource.BuildFunc, co CommitOptions, out *CommitOutcome) (CommitOutcome, error) {
	res, err := w.CommitLocks(ctx, co.request(build, nil))
	out.CommitResult = res
	if err != nil {
		return *out, err
	}
	if !res.Committed {
		out.Changes = nil
	}
	return *out, nil
}
