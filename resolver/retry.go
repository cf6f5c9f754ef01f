package resolver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/styrmin/styrmin/gitsource"
)

// RetryTrailer is the trailer of a lock commit that retries deployments:
// one per deployment, its value the deployment's key. The agent runs a
// retry's task like any other: the full workflow, chosen against the
// active instance.
const RetryTrailer = "Styrmin-Retry"

// ErrNothingToRetry reports a deployment that has no instance to lock
// again: never locked, or deleted (its lock is a tombstone).
var ErrNothingToRetry = errors.New("nothing to retry")

// RetryLocks returns the lock changes that lock the current instance of
// each deployment of ids again with the next sequence: a retry of a
// change that failed, or could not start. The instance's content, and so
// its digest and source commit, is unchanged; only its sequence moves. A
// deployment without a lock, or whose lock is a tombstone, is an error
// naming it (wrapping ErrNothingToRetry), and nothing is returned.
func RetryLocks(current map[ID]*Instance, ids []ID) ([]LockChange, error) {
	return retryLocks(current, ids, nil)
}

// RetryLocksAfter is RetryLocks numbering after the sequences the
// branch's history used (see UsedSequences).
func RetryLocksAfter(current map[ID]*Instance, ids []ID, used UsedSequences) ([]LockChange, error) {
	return retryLocks(current, ids, used)
}

// retryLocks is RetryLocks numbering after the sequences used.
func retryLocks(current map[ID]*Instance, ids []ID, used UsedSequences) ([]LockChange, error) {
	ids = append([]ID(nil), ids...)
	SortIDs(ids)
	out := make([]LockChange, 0, len(ids))
	for i, id := range ids {
		if i > 0 && ids[i-1] == id {
			continue
		}
		prev, ok := current[id]
		switch {
		case !ok:
			return nil, fmt.Errorf("retry %s: %w: it has no lockfile (%s)", id, ErrNothingToRetry, id.LockPath())
		case prev.Tombstone():
			return nil, fmt.Errorf("retry %s: %w: it was deleted (its lock at sequence %d is a tombstone)", id, ErrNothingToRetry, prev.Sequence)
		}
		next := *prev
		next.Sequence = used.next(id, prev)
		data, err := EncodeLock(&next)
		if err != nil {
			return nil, err
		}
		out = append(out, LockChange{ID: id, Previous: prev, Next: &next, Data: data})
	}
	return out, nil
}

// Unchanged returns the deployments of ids that changes do not lock: a
// deployment locked anew anyway needs no retry (its new sequence runs the
// full workflow against the active instance).
func Unchanged(ids []ID, changes []LockChange) []ID {
	locked := make(map[ID]bool, len(changes))
	for _, c := range changes {
		locked[c.ID] = true
	}
	var out []ID
	for _, id := range ids {
		if !locked[id] {
			out = append(out, id)
		}
	}
	return out
}

// StillAt splits the deployments of expected (each with the sequence
// its lock was at when it was chosen for a retry, for example the
// sequence whose task failed) into those whose lock in current is still
// that instance, and those whose lock moved on since (a change was
// locked, or the deployment deleted): retrying those would lock again
// what a newer change replaced. Both sorted.
func StillAt(current map[ID]*Instance, expected map[ID]int64) (still, moved []ID) {
	for id, seq := range expected {
		if in, ok := current[id]; ok && !in.Tombstone() && in.Sequence == seq {
			still = append(still, id)
		} else {
			moved = append(moved, id)
		}
	}
	SortIDs(still)
	SortIDs(moved)
	return still, moved
}

// RetryChange is the commit change of retries: the lockfiles, a
// Styrmin-Lock trailer and a Styrmin-Retry trailer per deployment.
func RetryChange(changes []LockChange) gitsource.Change {
	ch := gitsource.Change{Files: map[string][]byte{}, Locks: map[string]int{}}
	names := make([]string, 0, len(changes))
	for _, c := range changes {
		ch.Files[c.Path()] = c.Data
		ch.Locks[c.ID.String()] = int(c.Next.Sequence)
		ch.Trailers = append(ch.Trailers, gitsource.Trailer{Key: RetryTrailer, Value: c.ID.String()})
		names = append(names, c.Trailer())
	}
	ch.Summary = "retry " + strings.Join(names, ", ")
	return ch
}

// CommitRetries locks the deployments of ids again on the head of the
// writer's branch (see RetryLocks) and commits with compare-and-swap:
// each attempt reads the locks at the newest head, and with co.History
// the sequences its history used, so a retry never reuses a sequence.
// It locks no configuration commit waiting for its lock, and need not: a
// commit that only locks the same instances again is no last lock for
// the next lock's walk (gitsource.Repo.UnlockedChanges), so each of them
// still gets its own instance then.
func CommitRetries(ctx context.Context, w gitsource.Writer, ids []ID, co CommitOptions) (CommitOutcome, error) {
	var out CommitOutcome
	build := func(_ context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
		if err := co.checkHead(headFS); err != nil {
			return gitsource.Change{}, err
		}
		locks, err := LoadLocks(headFS)
		if err != nil {
			return gitsource.Change{}, err
		}
		var used UsedSequences
		if co.History != nil && !head.IsZero() {
			seqs, err := co.History.LockedSequences(head, dirOf(co.Dir), lockDir)
			if err != nil {
				return gitsource.Change{}, err
			}
			used = UsedFromTrailers(seqs)
		}
		changes, err := retryLocks(locks, ids, used)
		if err != nil {
			return gitsource.Change{}, err
		}
		out.Changes = changes
		return RetryChange(changes), nil
	}
	return commitBuilt(ctx, w, build, co, &out)
}
