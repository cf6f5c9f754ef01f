package resolver

import (
	"context"
	"errors"
	"io/fs"
	"strconv"

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
}

// CommitLocks locks the head of the writer's branch and commits the
// lockfiles onto it with compare-and-swap: every attempt loads the
// workspace at the newest head and renumbers, so concurrent lockers never
// assign one sequence twice. A head whose locks are current makes no
// commit, so the engine's own lock commits never cause another lock.
func CommitLocks(ctx context.Context, w gitsource.Writer, opts WorkspaceOptions, policy LockPolicy, maxAttempts int) (CommitOutcome, error) {
	return CommitLocksAndRetries(ctx, w, opts, policy, nil, maxAttempts)
}

// CommitOptions are the allowances of a lock commit.
type CommitOptions struct {
	// AllowDeletions allows up to this many deletions above the deletion
	// threshold; a commit that uses it records it in a
	// Styrmin-Allow-Deletions trailer.
	AllowDeletions int
}

// CommitLocksAndRetries is CommitLocks that also locks the deployments of
// retry again (see RetryLocks) when the configuration gives them no new
// instance and their lock, at the head the commit is built on, is still
// at the sequence retry gives (see StillAt; the others are reported in
// NotRetried): one commit, with a Styrmin-Retry trailer per retried
// deployment.
func CommitLocksAndRetries(ctx context.Context, w gitsource.Writer, opts WorkspaceOptions, policy LockPolicy, retry map[ID]int64, maxAttempts int) (CommitOutcome, error) {
	return CommitLocksWith(ctx, w, opts, policy, retry, CommitOptions{}, maxAttempts)
}

// CommitLocksWith is CommitLocksAndRetries with allowances.
func CommitLocksWith(ctx context.Context, w gitsource.Writer, opts WorkspaceOptions, policy LockPolicy, retry map[ID]int64, copts CommitOptions, maxAttempts int) (CommitOutcome, error) {
	var out CommitOutcome
	build := func(ctx context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
		o := opts
		if !head.IsZero() {
			o.SourceCommit = head.String()
		}
		ws, err := LoadWorkspace(headFS, o)
		if err != nil {
			return gitsource.Change{}, err
		}
		changes, _, rerr := ws.LockAllowing(policy, copts.AllowDeletions)
		var refused *DeletionsRefusedError
		if errors.As(rerr, &refused) || (rerr != nil && policy == LockAllOrNothing) {
			return gitsource.Change{}, rerr
		}
		still, moved := StillAt(ws.Locks, retry)
		out.NotRetried = moved
		retries, err := RetryLocks(ws.Locks, Unchanged(still, changes))
		if err != nil {
			return gitsource.Change{}, err
		}
		out.Changes, out.Skipped = append(changes, retries...), rerr
		ch := RetryChange(retries)
		if len(changes) > 0 {
			// A lock with retries: the summary lists every deployment.
			ch.Summary = ""
		}
		for _, c := range changes {
			ch.Files[c.Path()] = c.Data
			ch.Locks[c.ID.String()] = int(c.Next.Sequence)
		}
		if d := DeletionRule(ws.Repo.Settings, nil, copts.AllowDeletions, len(Deleted(changes))); d.Count > d.Threshold {
			ch.Trailers = append(ch.Trailers, gitsource.Trailer{Key: AllowDeletionsTrailer, Value: strconv.Itoa(d.Count)})
		}
		return ch, nil
	}
	return commitBuilt(ctx, w, build, maxAttempts, &out)
}

// commitBuilt commits what build gives with compare-and-swap and fills
// out (build records its changes there).
func commitBuilt(ctx context.Context, w gitsource.Writer, build gitsource.BuildFunc, maxAttempts int, out *CommitOutcome) (CommitOutcome, error) {
	res, err := w.CommitLocks(ctx, gitsource.CommitRequest{Build: build, MaxAttempts: maxAttempts})
	out.CommitResult = res
	if err != nil {
		return *out, err
	}
	if !res.Committed {
		out.Changes = nil
	}
	return *out, nil
}
