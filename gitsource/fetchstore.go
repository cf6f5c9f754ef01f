package gitsource

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// fetchStore is the storer one fetch runs go-git over, so that it waits
// on the network without holding the Repo's mutex: a host that answers
// the ref list and then stalls while it sends the pack held every reader,
// of commits the clone holds too, for the whole network timeout. Each read
// takes the mutex for itself alone; the pack is spooled aside and the refs
// the fetch sets are kept, both written into the repository by store,
// under the mutex, once the fetch has succeeded: a reader never sees a
// pack half written, nor a ref whose objects are not stored yet.
//
// It serves what a fetch without depth, pruning or tags uses; other
// writes are refused, so a go-git that used them would fail, not write
// without the mutex.
type fetchStore struct {
	mu    *sync.Mutex
	inner storage.Storer

	spool *packSpool
	refs  map[plumbing.ReferenceName]*plumbing.Reference
}

var (
	_                        storage.Storer        = (*fetchStore)(nil)
	_                        storer.PackfileWriter = (*fetchStore)(nil)
	errFetchStoreUnsupported                       = errors.New("gitsource: a fetch writes only a pack and refs")
)

func newFetchStore(mu *sync.Mutex, inner storage.Storer) *fetchStore {
	return &fetchStore{mu: mu, inner: inner, refs: map[plumbing.ReferenceName]*plumbing.Reference{}}
}

// locked runs f under the Repo's mutex.
func locked[T any](s *fetchStore, f func() (T, error)) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f()
}

// NewEncodedObject returns a new object of the repository's kind.
func (s *fetchStore) NewEncodedObject() plumbing.EncodedObject {
	o, _ := locked(s, func() (plumbing.EncodedObject, error) { return s.inner.NewEncodedObject(), nil })
	return o
}

// SetEncodedObject is refused: the fetch's objects come as a pack.
func (s *fetchStore) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errFetchStoreUnsupported
}

// EncodedObject reads an object of the repository.
func (s *fetchStore) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	return locked(s, func() (plumbing.EncodedObject, error) { return s.inner.EncodedObject(t, h) })
}

// IterEncodedObjects is refused: its iterator would read without the mutex.
func (s *fetchStore) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errFetchStoreUnsupported
}

// HasEncodedObject reports whether the repository holds an object.
func (s *fetchStore) HasEncodedObject(h plumbing.Hash) error {
	_, err := locked(s, func() (struct{}, error) { return struct{}{}, s.inner.HasEncodedObject(h) })
	return err
}

// EncodedObjectSize returns the size of an object of the repository.
func (s *fetchStore) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	return locked(s, func() (int64, error) { return s.inner.EncodedObjectSize(h) })
}

// AddAlternate is refused.
func (s *fetchStore) AddAlternate(string) error { return errFetchStoreUnsupported }

// SetReference keeps ref, written by store.
func (s *fetchStore) SetReference(ref *plumbing.Reference) error {
	s.refs[ref.Name()] = ref
	return nil
}

// CheckAndSetReference keeps ref, written by store (which compares it
// with the ref as the fetch began).
func (s *fetchStore) CheckAndSetReference(ref, _ *plumbing.Reference) error {
	return s.SetReference(ref)
}

// Reference reads a ref: as the fetch set it, else the repository's.
func (s *fetchStore) Reference(name plumbing.ReferenceName) (*plumbing.Reference, error) {
	if ref, ok := s.refs[name]; ok {
		return ref, nil
	}
	return locked(s, func() (*plumbing.Reference, error) { return s.inner.Reference(name) })
}

// IterReferences lists the repository's refs, read at once.
func (s *fetchStore) IterReferences() (storer.ReferenceIter, error) {
	return locked(s, func() (storer.ReferenceIter, error) {
		it, err := s.inner.IterReferences()
		if err != nil {
			return nil, err
		}
		var refs []*plumbing.Reference
		err = it.ForEach(func(ref *plumbing.Reference) error {
			if kept, ok := s.refs[ref.Name()]; ok {
				ref = kept
			}
			refs = append(refs, ref)
			return nil
		})
		return storer.NewReferenceSliceIter(refs), err
	})
}

// RemoveReference is refused (a fetch without pruning removes none).
func (s *fetchStore) RemoveReference(plumbing.ReferenceName) error {
	return errFetchStoreUnsupported
}

// CountLooseRefs counts the repository's loose refs.
func (s *fetchStore) CountLooseRefs() (int, error) {
	return locked(s, func() (int, error) { return s.inner.CountLooseRefs() })
}

// PackRefs is refused.
func (s *fetchStore) PackRefs() error { return errFetchStoreUnsupported }

// SetShallow is refused (a fetch without depth sets none).
func (s *fetchStore) SetShallow([]plumbing.Hash) error { return errFetchStoreUnsupported }

// Shallow returns the repository's shallow commits.
func (s *fetchStore) Shallow() ([]plumbing.Hash, error) {
	return locked(s, func() ([]plumbing.Hash, error) { return s.inner.Shallow() })
}

// SetIndex is refused.
func (s *fetchStore) SetIndex(*index.Index) error { return errFetchStoreUnsupported }

// Index is refused: a bare clone's fetch reads none.
func (s *fetchStore) Index() (*index.Index, error) { return nil, errFetchStoreUnsupported }

// Config reads the repository's configuration.
func (s *fetchStore) Config() (*config.Config, error) {
	return locked(s, func() (*config.Config, error) { return s.inner.Config() })
}

// SetConfig is refused.
func (s *fetchStore) SetConfig(*config.Config) error { return errFetchStoreUnsupported }

// Module is refused.
func (s *fetchStore) Module(string) (storage.Storer, error) { return nil, errFetchStoreUnsupported }

// PackfileWriter spools the fetch's pack aside, without the mutex: the
// network is read while it is written.
func (s *fetchStore) PackfileWriter() (io.WriteCloser, error) {
	if s.spool != nil {
		return nil, errors.New("gitsource: a fetch wrote a second pack")
	}
	sp, err := newPackSpool(s.inner)
	if err != nil {
		return nil, err
	}
	s.spool = sp
	return sp, nil
}

// store writes the spooled pack into the repository. The caller holds
// the mutex.
func (s *fetchStore) store() error {
	if s.spool == nil || s.spool.n == 0 {
		return nil
	}
	rd, err := s.spool.reader()
	if err != nil {
		return fmt.Errorf("gitsource: read the fetched pack: %w", err)
	}
	defer func() { _ = rd.Close() }()
	if err := packfile.UpdateObjectStorage(s.inner, rd); err != nil {
		return fmt.Errorf("gitsource: store the fetched pack: %w", err)
	}
	return nil
}

// discard removes the spooled pack, if any.
func (s *fetchStore) discard() {
	if s.spool != nil {
		s.spool.remove()
	}
}

// packSpool holds a fetched pack until it is stored: a temporary file in
// the objects/pack folder of an on-disk repository (where go-git and git
// write theirs), memory for one in memory.
type packSpool struct {
	fs   billy.Filesystem // nil: in memory
	file billy.File
	buf  bytes.Buffer
	n    int64
}

func newPackSpool(inner storage.Storer) (*packSpool, error) {
	fsr, ok := inner.(*filesystem.Storage)
	if !ok {
		return &packSpool{}, nil
	}
	fs := fsr.Filesystem()
	f, err := fs.TempFile(fs.Join("objects", "pack"), "tmp_fetch_")
	if err != nil {
		return nil, fmt.Errorf("gitsource: spool the fetched pack: %w", err)
	}
	return &packSpool{fs: fs, file: f}, nil
}

func (p *packSpool) Write(b []byte) (int, error) {
	var n int
	var err error
	if p.fs == nil {
		n, err = p.buf.Write(b)
	} else {
		n, err = p.file.Write(b)
	}
	p.n += int64(n)
	return n, err
}

// Close ends the writing; the pack is stored, or removed, later.
func (p *packSpool) Close() error {
	if p.fs == nil {
		return nil
	}
	return p.file.Close()
}

func (p *packSpool) reader() (io.ReadCloser, error) {
	if p.fs == nil {
		return io.NopCloser(bytes.NewReader(p.buf.Bytes())), nil
	}
	return p.fs.Open(p.file.Name())
}

func (p *packSpool) remove() {
	if p.fs == nil {
		p.buf = bytes.Buffer{}
		return
	}
	_ = p.file.Close()
	_ = p.fs.Remove(p.file.Name())
}
