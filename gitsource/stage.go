package gitsource

import (
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage"
)

// stagedObjects holds the objects a commit attempt writes (blobs, trees,
// commits) in memory, reading anything else from the repository, and
// then stores them in it as one pack. A lock of a large cluster writes
// thousands of lockfiles: as loose objects that is a file, a rename and
// often a directory each, most of the lock's system time.
type stagedObjects struct {
	storage.Storer
	objs  map[plumbing.Hash]plumbing.EncodedObject
	order []plumbing.Hash
}

var _ storer.EncodedObjectStorer = (*stagedObjects)(nil)

func newStagedObjects(s storage.Storer) *stagedObjects {
	return &stagedObjects{Storer: s, objs: map[plumbing.Hash]plumbing.EncodedObject{}}
}

// NewEncodedObject returns an object kept in memory.
func (s *stagedObjects) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

// SetEncodedObject stages o.
func (s *stagedObjects) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	h := o.Hash()
	if _, ok := s.objs[h]; !ok {
		s.objs[h] = o
		s.order = append(s.order, h)
	}
	return h, nil
}

// EncodedObject returns a staged object, else the repository's.
func (s *stagedObjects) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if o, ok := s.objs[h]; ok && (t == plumbing.AnyObject || o.Type() == t) {
		return o, nil
	}
	return s.Storer.EncodedObject(t, h)
}

// HasEncodedObject tells whether h is staged or in the repository.
func (s *stagedObjects) HasEncodedObject(h plumbing.Hash) error {
	if _, ok := s.objs[h]; ok {
		return nil
	}
	return s.Storer.HasEncodedObject(h)
}

// EncodedObjectSize is the size of a staged object or the repository's.
func (s *stagedObjects) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if o, ok := s.objs[h]; ok {
		return o.Size(), nil
	}
	return s.Storer.EncodedObjectSize(h)
}

// flush stores the staged objects in the repository: as one pack where
// its storage writes packs (a repository on disk), else one by one.
func (s *stagedObjects) flush() error {
	pw, ok := s.Storer.(storer.PackfileWriter)
	if !ok || len(s.order) < 2 {
		for _, h := range s.order {
			if _, err := s.Storer.SetEncodedObject(s.objs[h]); err != nil {
				return fmt.Errorf("store object %s: %w", h, err)
			}
		}
		return nil
	}
	w, err := pw.PackfileWriter()
	if err != nil {
		return fmt.Errorf("write pack: %w", err)
	}
	// No deltas (window 0): lockfiles are small and a lock is about time.
	if _, err := packfile.NewEncoder(w, s, false).Encode(s.order, 0); err != nil {
		_ = w.Close()
		return fmt.Errorf("write pack of %d objects: %w", len(s.order), err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write pack of %d objects: %w", len(s.order), err)
	}
	return nil
}
