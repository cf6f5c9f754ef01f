package gitsource

import (
	"context"
	"io/fs"
)

// Reader reads configuration at a commit. The resolver needs only this.
type Reader interface {
	// Resolve resolves a revision to a commit.
	Resolve(rev string) (Hash, error)
	// FS returns a read-only file system over the commit's tree.
	FS(commit Hash) (fs.FS, error)
}

// Fetcher keeps a tracked branch up to date with its remote.
type Fetcher interface {
	// Fetch updates the tracked branch; Moved is false when the remote head
	// is where it was.
	Fetch(ctx context.Context) (FetchResult, error)
	// Head returns the tracked branch head as last fetched.
	Head() (Hash, error)
}

// Walker lists the lockfile changes between two commits.
type Walker interface {
	LockChanges(from, to Hash, prefix string) ([]LockChange, error)
}

// Writer commits lockfiles with compare-and-swap semantics.
type Writer interface {
	CommitLocks(ctx context.Context, req CommitRequest) (CommitResult, error)
}
