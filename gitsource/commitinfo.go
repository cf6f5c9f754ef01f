package gitsource

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// CommitInfo is what a reader of history shows of a commit: who wrote it,
// when, and what it says.
type CommitInfo struct {
	Hash Hash
	// Author wrote the change; Committer recorded it (a lock commit made
	// by the agent has the agent as both).
	Author    Signature
	Committer Signature
	// AuthorTime and CommitTime are the commit's two times.
	AuthorTime time.Time
	CommitTime time.Time
	// Message is the whole message, trailers included; Subject its first
	// line.
	Message string
	Subject string
	// Parents are the commit's parents, the first parent first.
	Parents []Hash
}

// maxBlobSize bounds what Blob reads: lockfiles and configuration files
// are far smaller, and a history reader must not load a planted huge
// object.
const maxBlobSize = 16 << 20

// Commit returns a commit's author, times and message; a commit the
// repository does not hold gives an error wrapping ErrCommitNotFound.
func (r *Repo) Commit(commit Hash) (CommitInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := object.GetCommit(r.storer, commit.plumbing())
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return CommitInfo{}, fmt.Errorf("gitsource: commit %s: %w", commit.Short(), ErrCommitNotFound)
	}
	if err != nil {
		return CommitInfo{}, fmt.Errorf("gitsource: commit %s: %w", commit.Short(), err)
	}
	subject, _, _ := strings.Cut(c.Message, "\n")
	info := CommitInfo{
		Hash:       commit,
		Author:     Signature{Name: c.Author.Name, Email: c.Author.Email},
		Committer:  Signature{Name: c.Committer.Name, Email: c.Committer.Email},
		AuthorTime: c.Author.When,
		CommitTime: c.Committer.When,
		Message:    c.Message,
		Subject:    strings.TrimSpace(subject),
	}
	for _, p := range c.ParentHashes {
		info.Parents = append(info.Parents, fromPlumbing(p))
	}
	return info, nil
}

// Blob returns the content of a file object (LockChange.Blob), read
// within a bound of 16 MiB.
func (r *Repo) Blob(h Hash) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Sized from its header first: a loose object is read whole to be
	// opened.
	if size, err := r.objectSize(h.plumbing()); err == nil && size > maxBlobSize {
		return nil, fmt.Errorf("gitsource: blob %s is %d bytes, more than the %d a reader of history reads", h.Short(), size, maxBlobSize)
	}
	b, err := object.GetBlob(r.storer, h.plumbing())
	if err != nil {
		return nil, fmt.Errorf("gitsource: blob %s: %w", h.Short(), err)
	}
	if b.Size > maxBlobSize {
		return nil, fmt.Errorf("gitsource: blob %s is %d bytes, more than the %d a reader of history reads", h.Short(), b.Size, maxBlobSize)
	}
	rd, err := b.Reader()
	if err != nil {
		return nil, fmt.Errorf("gitsource: blob %s: %w", h.Short(), err)
	}
	defer rd.Close()
	data, err := io.ReadAll(io.LimitReader(rd, maxBlobSize+1))
	if err != nil {
		return nil, fmt.Errorf("gitsource: blob %s: %w", h.Short(), err)
	}
	return data, nil
}
