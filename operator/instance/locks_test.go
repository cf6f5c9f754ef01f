package instance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// treeOf serves the same files at every commit.
type treeOf fstest.MapFS

func (t treeOf) FS(gitsource.Hash) (fs.FS, error) { return fstest.MapFS(t), nil }

var _ TreeReader = treeOf(nil)

// TestRepoLocksKeepAtMostTheirBoundOfHandedOverLockfiles pins that a lock
// commit larger than the bound does not keep a lockfile per task until
// the task runs: the first maxHandedOver are kept and given as they are,
// the others are read from git when asked for, and nothing handed over is
// dropped to make room, unless its task has not asked for it in
// handOverTTL (deleted before it ran): those make room for new ones.
func TestRepoLocksKeepAtMostTheirBoundOfHandedOverLockfiles(t *testing.T) {
	in := testInstance(t)
	data, err := resolver.EncodeLock(in)
	if err != nil {
		t.Fatal(err)
	}
	files := treeOf{}
	refs := make([]v1alpha1.LockRef, maxHandedOver+10)
	handed := make([][]byte, len(refs))
	locks := NewRepoLocks(files)
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	locks.now = func() time.Time { return now }
	// same tells whether got is the very slice handed over.
	same := func(got, handed []byte) bool { return len(got) > 0 && len(handed) > 0 && &got[0] == &handed[0] }
	for i := range refs {
		// The same lockfile at as many commits.
		refs[i] = v1alpha1.LockRef{Commit: fmt.Sprintf("%040x", i+1), Path: in.ID.LockPath()}
		files[refs[i].Path] = &fstest.MapFile{Data: data}
		handed[i] = bytes.Clone(data)
		locks.HandOver(refs[i], handed[i])
	}
	if n := len(locks.handed); n != maxHandedOver {
		t.Fatalf("%d lockfiles kept after %d were handed over; want %d", n, len(refs), maxHandedOver)
	}
	for i, ref := range refs {
		got, err := locks.LockFile(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		if kept := i < maxHandedOver; same(got, handed[i]) != kept {
			t.Errorf("hand-over %d given as it is: %v; want %v", i, same(got, handed[i]), kept)
		}
		dec, err := DecodeLockFile(ref, got)
		if err != nil {
			t.Fatal(err)
		}
		if dec.Digest != in.Digest || dec.Sequence != in.Sequence {
			t.Errorf("lock %d: sequence %d digest %s; want %d %s", i, dec.Sequence, dec.Digest, in.Sequence, in.Digest)
		}
	}

	// A full map of hand-overs no task asked for: within handOverTTL they
	// keep their places, after it a new one takes a place.
	for _, ref := range refs[:maxHandedOver] {
		locks.HandOver(ref, handed[0])
	}
	late := v1alpha1.LockRef{Commit: fmt.Sprintf("%040x", len(refs)+1), Path: in.ID.LockPath()}
	files[late.Path] = &fstest.MapFile{Data: data}
	now = now.Add(handOverTTL / 2)
	locks.HandOver(late, handed[1])
	if _, kept := locks.handed[late]; kept {
		t.Error("a hand-over took the place of one younger than handOverTTL")
	}
	now = now.Add(handOverTTL)
	locks.HandOver(late, handed[1])
	if got, err := locks.LockFile(context.Background(), late); err != nil || !same(got, handed[1]) {
		t.Errorf("after handOverTTL the stale hand-overs did not make room: given as it is %v, %v", same(got, handed[1]), err)
	}
	if n := len(locks.handed); n != 0 {
		t.Errorf("%d stale hand-overs kept", n)
	}
}

// TestALockfileThatDoesNotDecodeIsNotFound pins the class of a lockfile
// read (or kept) that does not decode: a LockNotFoundError naming the
// file and the commit, which stalls the task (a lockfile at a commit does
// not change), not an error retried.
func TestALockfileThatDoesNotDecodeIsNotFound(t *testing.T) {
	ref := v1alpha1.LockRef{Commit: fmt.Sprintf("%040x", 7), Path: "locks/local/dev/web.lock.yaml"}
	for name, data := range map[string][]byte{
		"not YAML":       []byte("{{{\n"),
		"edited by hand": []byte("apiVersion: styrmin.io/v1alpha1\nkind: Instance\nsequence: 1\nchecksum: sha256:00\n"),
		"empty":          nil,
	} {
		in, err := DecodeLockFile(ref, data)
		var nf *LockNotFoundError
		if in != nil || !errors.As(err, &nf) || !strings.Contains(err.Error(), ref.Path) || !strings.Contains(err.Error(), ref.Commit) {
			t.Errorf("%s: %v, %v; want a LockNotFoundError naming %s at %s", name, in, err, ref.Path, ref.Commit)
		}
	}
}

// unreadableTree is a tree whose files cannot be opened: a clone out of
// file handles, or missing an object.
type unreadableTree struct{}

func (unreadableTree) FS(gitsource.Hash) (fs.FS, error) { return unreadableFS{}, nil }

type unreadableFS struct{}

func (unreadableFS) Open(name string) (fs.File, error) {
	if name == "." || !strings.HasSuffix(name, ".yaml") {
		return fstest.MapFS{"locks/local/dev/web.lock.yaml": {Data: []byte("x")}}.Open(name)
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("too many open files")}
}

// TestALockfileTheCloneFailsToReadIsNotTakenForAMissingOne pins that a
// read the clone fails (not the lockfile's content) is an error retried,
// not a LockNotFoundError, which fails a waiting task and makes a running
// one give up its lock.
func TestALockfileTheCloneFailsToReadIsNotTakenForAMissingOne(t *testing.T) {
	l := NewRepoLocks(unreadableTree{})
	ref := v1alpha1.LockRef{Commit: fmt.Sprintf("%040x", 7), Path: "locks/local/dev/web.lock.yaml"}
	_, err := l.LockFile(context.Background(), ref)
	var nf *LockNotFoundError
	if err == nil || errors.As(err, &nf) || !errors.Is(err, resolver.ErrUnreadable) {
		t.Fatalf("LockFile: %v, want an error wrapping resolver.ErrUnreadable, not a LockNotFoundError", err)
	}
}

// blippingClone is a clone that does not hold the lock commit until it
// fetches, and whose first fetch fails (a remote blip during a leader
// handover).
type blippingClone struct {
	fetches int
	fetched bool
}

func (c *blippingClone) FS(commit gitsource.Hash) (fs.FS, error) {
	if !c.fetched {
		return nil, fmt.Errorf("commit %s: %w", commit, gitsource.ErrCommitNotFound)
	}
	return fstest.MapFS{"locks/local/dev/web.lock.yaml": {Data: []byte("lock")}}, nil
}

func (c *blippingClone) Head() (gitsource.Hash, error) { return gitsource.Hash{}, nil }

func (c *blippingClone) Fetch(context.Context) (gitsource.FetchResult, error) {
	c.fetches++
	if c.fetches == 1 {
		return gitsource.FetchResult{}, errors.New("503 Service Unavailable")
	}
	c.fetched = true
	return gitsource.FetchResult{}, nil
}

// TestALockWhoseCatchUpFetchFailedIsRetriedNotFailed: a lock commit the
// clone has not seen, whose fetch failed, read as a LockNotFoundError,
// and the task controller failed a new or waiting task for good
// (InvalidTask), though the commit was on the remote. It is an error
// retried, as is the declared policy at that commit, and once the remote
// answers the lockfile is read.
func TestALockWhoseCatchUpFetchFailedIsRetriedNotFailed(t *testing.T) {
	clone := &blippingClone{}
	now := time.Unix(1_800_000_000, 0)
	caught := gitsource.NewCatchUp(clone, gitsource.CatchUpOptions{Every: time.Minute, Now: func() time.Time { return now }})
	l := NewRepoLocks(caught)
	ref := v1alpha1.LockRef{Commit: fmt.Sprintf("%040x", 7), Path: "locks/local/dev/web.lock.yaml"}

	_, err := l.LockFile(context.Background(), ref)
	var nf *LockNotFoundError
	if err == nil || errors.As(err, &nf) || !errors.Is(err, gitsource.ErrNotFetched) {
		t.Fatalf("LockFile after a failed fetch: %v, want an error wrapping gitsource.ErrNotFetched, not a LockNotFoundError", err)
	}
	in := &resolver.Instance{}
	_, err = l.DeclaredPolicy(context.Background(), ref, in)
	var pu *PolicyUnknownError
	if err == nil || errors.As(err, &pu) {
		t.Fatalf("DeclaredPolicy within the interval after a failed fetch: %v, want an error retried, not a PolicyUnknownError", err)
	}

	now = now.Add(2 * time.Minute)
	data, err := l.LockFile(context.Background(), ref)
	if err != nil || string(data) != "lock" {
		t.Fatalf("LockFile once the remote answers: %q, %v", data, err)
	}
}
