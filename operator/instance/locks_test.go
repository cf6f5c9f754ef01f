package instance

import (
	"context"
	"fmt"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// treeOf serves the same files at every commit.
type treeOf fstest.MapFS

func (t treeOf) FS(gitsource.Hash) (fs.FS, error) { return fstest.MapFS(t), nil }

var _ TreeReader = treeOf(nil)

// TestRepoLocksKeepAtMostTheirBoundOfHandedOverInstances pins that a lock
// commit larger than the bound does not keep a decoded lockfile per task
// until the task runs: the first maxHandedOver are kept and given as they
// are, the others are read from git when asked for, and nothing handed
// over is dropped to make room.
func TestRepoLocksKeepAtMostTheirBoundOfHandedOverInstances(t *testing.T) {
	in := testInstance(t)
	data, err := resolver.EncodeLock(in)
	if err != nil {
		t.Fatal(err)
	}
	files := treeOf{}
	refs := make([]v1alpha1.LockRef, maxHandedOver+10)
	handed := make([]*resolver.Instance, len(refs))
	locks := NewRepoLocks(files)
	for i := range refs {
		// The same lockfile at as many commits.
		refs[i] = v1alpha1.LockRef{Commit: fmt.Sprintf("%040x", i+1), Path: in.ID.LockPath()}
		files[refs[i].Path] = &fstest.MapFile{Data: data}
		copied := *in
		handed[i] = &copied
		locks.HandOver(refs[i], handed[i])
	}
	if n := len(locks.handed); n != maxHandedOver {
		t.Fatalf("%d instances kept after %d were handed over; want %d", n, len(refs), maxHandedOver)
	}
	for i, ref := range refs {
		got, err := locks.Lock(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		if kept := i < maxHandedOver; (got == handed[i]) != kept {
			t.Errorf("hand-over %d given as it is: %v; want %v", i, got == handed[i], kept)
		}
		if got.Digest != in.Digest || got.Sequence != in.Sequence {
			t.Errorf("lock %d: sequence %d digest %s; want %d %s", i, got.Sequence, got.Digest, in.Sequence, in.Digest)
		}
	}
}
