package resolver

import (
	"context"
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
	return CommitLocksWith(ctx, w, opts, LockRequest{Policy: policy}, maxAttempts)
}

// CommitLocksWith is CommitLocks for a whole LockRequest
// (Workspace.LockFor, on each attempt's head): the retries it asks for are
// locked in the same commit, a Styrmin-Retry trailer each, when their lock
// is still at the sequence asked for (the others are reported in
// NotRetried); an allowance of deletions that the lock uses is recorded in
// a Styrmin-Allow-Deletions trailer.
func CommitLocksWith(ctx context.Context, w gitsource.Writer, opts WorkspaceOptions, req LockRequest, maxAttempts int) (CommitOutcome, error) {
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
		lo, err := ws.LockFor(req)
		if err != nil {
			return gitsource.Change{}, err
		}
		out.Changes, out.Skipped, out.NotRetried = lo.All(), lo.Skipped, lo.NotRetried
		ch := RetryChange(lo.Retries)
		if len(lo.Changes) > 0 {
			// A lock with retries: the summary lists every deployment.
			ch.Summary = ""
		}
		for _, c := range lo.Changes {
			ch.Files[c.Path()] = c.Data
			ch.Locks[c.ID.String()] = int(c.Next.Sequence)
		}
		if d := DeletionRule(ws.Repo.Settings, nil, req.AllowDeletions, len(Deleted(lo.Changes))); d.Count > d.Threshold {
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
