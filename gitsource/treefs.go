package gitsource

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// errSubmodule is returned when opening a submodule (gitlink) entry.
var errSubmodule = errors.New("is a submodule; submodules are not supported")

// FS returns a read-only file system over the tree of commit, read straight
// from the object store without a checkout. The zero Hash gives an empty
// file system (an unborn branch).
//
// The result implements fs.ReadFileFS, fs.ReadDirFS, fs.StatFS and
// fs.ReadLinkFS. Symbolic links are reported (Lstat, ReadDir, ReadLink) but
// never followed: Open, ReadFile and Stat of a link, or of a path through
// one, fail with an error wrapping ErrSymlink, so a link in the tree cannot
// lead a reader elsewhere. ModTime is the commit's committer time,
// FileInfo.Sys returns the entry's object Hash, and a file's Size is read
// from the object store when first asked (a Stat reads no object). The
// file system is safe for concurrent use; files are read whole when
// opened.
func (r *Repo) FS(commit Hash) (fs.FS, error) {
	if commit.IsZero() {
		return &treeFS{r: r}, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := object.GetCommit(r.storer, commit.plumbing())
	if err != nil {
		return nil, r.commitError(commit, err)
	}
	return &treeFS{r: r, root: c.TreeHash, modTime: c.Committer.When, checkout: r.worktreeDir}, nil
}

// subtree is the tree of f at the folder sub, as its own file system;
// ok is false when sub is not a folder of f (missing, a link on the way,
// a file).
func (f *treeFS) subtree(sub string) (*treeFS, bool) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	e, err := f.lookup("open", sub)
	if err != nil || e.Mode != filemode.Dir {
		return nil, false
	}
	t := &treeFS{r: f.r, root: e.Hash, modTime: f.modTime, dirs: f.dirs}
	if f.checkout != "" {
		t.checkout = filepath.Join(f.checkout, filepath.FromSlash(sub))
	}
	return t, true
}

// treeFS implements fs.FS over one git tree. Every storage access holds r.mu.
type treeFS struct {
	r       *Repo
	root    plumbing.Hash // zero for the empty tree
	modTime time.Time
	dirs    map[plumbing.Hash]*dirIndex // guarded by r.mu
	// checkout, when set, is the working tree's folder of root: a file
	// is read from there when it holds the same blob (see fromCheckout).
	checkout string
}

// ReadFileUpToFS is a file system that reads a file only when it holds at
// most limit bytes, learning its size as it reads: a reader that bounds
// what it reads needs no Stat first (of a git tree, sizing an object then
// reading it looked it up twice).
type ReadFileUpToFS interface {
	fs.FS
	// ReadFileUpTo returns the file's bytes and size, or no bytes and its
	// size when that is over limit.
	ReadFileUpTo(name string, limit int64) (data []byte, size int64, err error)
}

var (
	_ ReadFileUpToFS = (*treeFS)(nil)
	_ fs.ReadFileFS  = (*treeFS)(nil)
	_ fs.ReadDirFS   = (*treeFS)(nil)
	_ fs.StatFS      = (*treeFS)(nil)
	_ fs.ReadLinkFS  = (*treeFS)(nil)
)

// dirIndex is a decoded tree with its entries in fs order (sorted by name,
// unlike git's order, which sorts directories as if they ended in "/").
type dirIndex struct {
	entries []object.TreeEntry
	byName  map[string]int
}

// dir returns the decoded tree h; the caller holds r.mu.
func (f *treeFS) dir(h plumbing.Hash) (*dirIndex, error) {
	if d, ok := f.dirs[h]; ok {
		return d, nil
	}
	d := &dirIndex{}
	if !h.IsZero() {
		t, err := object.GetTree(f.r.storer, h)
		if err != nil {
			return nil, err
		}
		d.entries = slices.Clone(t.Entries)
	}
	slices.SortFunc(d.entries, func(a, b object.TreeEntry) int { return strings.Compare(a.Name, b.Name) })
	d.byName = make(map[string]int, len(d.entries))
	for i, e := range d.entries {
		d.byName[e.Name] = i
	}
	if f.dirs == nil {
		f.dirs = make(map[plumbing.Hash]*dirIndex)
	}
	f.dirs[h] = d
	return d, nil
}

// lookup finds the entry for name; the caller holds r.mu. The root is
// returned as a Dir entry named ".". Directories on the way must be real
// directories: a symbolic link among them is refused.
func (f *treeFS) lookup(op, name string) (object.TreeEntry, error) {
	if !fs.ValidPath(name) {
		return object.TreeEntry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	cur := object.TreeEntry{Name: ".", Mode: filemode.Dir, Hash: f.root}
	if name == "." {
		return cur, nil
	}
	parts := strings.Split(name, "/")
	for i, part := range parts {
		switch cur.Mode {
		case filemode.Dir:
		case filemode.Symlink:
			return object.TreeEntry{}, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("%s %w", strings.Join(parts[:i], "/"), ErrSymlink)}
		default:
			return object.TreeEntry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		d, err := f.dir(cur.Hash)
		if err != nil {
			return object.TreeEntry{}, &fs.PathError{Op: op, Path: name, Err: err}
		}
		idx, ok := d.byName[part]
		if !ok {
			return object.TreeEntry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		cur = d.entries[idx]
	}
	return cur, nil
}

// blob reads the whole blob h; the caller holds r.mu.
func (f *treeFS) blob(h plumbing.Hash) ([]byte, error) {
	data, _, err := f.blobUpTo(h, -1)
	return data, err
}

// blobUpTo reads the blob h and returns it with its size, or only its size
// when that is over limit (a negative limit: none); the caller holds r.mu.
func (f *treeFS) blobUpTo(h plumbing.Hash, limit int64) ([]byte, int64, error) {
	if limit >= 0 {
		// Sized from its header first: a loose object is read whole to
		// be opened, and a file of gigabytes is kilobytes compressed.
		if size, err := f.r.objectSize(h); err == nil && size > limit {
			return nil, size, nil
		}
	}
	obj, err := f.r.storer.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return nil, 0, err
	}
	if limit >= 0 && obj.Size() > limit {
		return nil, obj.Size(), nil
	}
	rd, err := obj.Reader()
	if err != nil {
		return nil, 0, err
	}
	defer rd.Close()
	buf := make([]byte, 0, obj.Size())
	w := bytes.NewBuffer(buf)
	if _, err := io.Copy(w, rd); err != nil {
		return nil, 0, err
	}
	return w.Bytes(), int64(w.Len()), nil
}

// blobSize returns the size of blob h; the caller holds r.mu.
func (f *treeFS) blobSize(h plumbing.Hash) (int64, error) {
	return f.r.objectSize(h)
}

// objectSize returns the size of object h; the caller holds r.mu.
func (r *Repo) objectSize(h plumbing.Hash) (int64, error) {
	// A git directory's storage reads the size from the object's header
	// (a packed object's too), without inflating the object: a lockfile
	// read from a commit was inflated twice, once to be described.
	if s, ok := r.storer.(interface {
		EncodedObjectSize(plumbing.Hash) (int64, error)
	}); ok {
		return s.EncodedObjectSize(h)
	}
	obj, err := r.storer.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return 0, err
	}
	return obj.Size(), nil
}

// info builds the FileInfo of e; the caller holds r.mu.
func (f *treeFS) info(e object.TreeEntry) (*fileInfo, error) {
	fi := &fileInfo{name: path.Base(e.Name), hash: fromPlumbing(e.Hash), modTime: f.modTime}
	switch e.Mode {
	case filemode.Dir:
		fi.mode = fs.ModeDir | 0o755
	case filemode.Regular, filemode.Deprecated:
		fi.mode = 0o644
	case filemode.Executable:
		fi.mode = 0o755
	case filemode.Symlink:
		fi.mode = fs.ModeSymlink | 0o777
	default: // submodule
		fi.mode = fs.ModeIrregular
	}
	if e.Mode.IsFile() {
		// Sized when asked: a Stat for a file's existence or mode (the
		// plan's attribution of changes to files) reads no object.
		fi.sizeOf = f
	}
	return fi, nil
}

// refuse returns the error for opening e as a regular file or directory, or
// nil when it can be opened.
func refuse(op, name string, e object.TreeEntry) error {
	switch e.Mode {
	case filemode.Symlink:
		return &fs.PathError{Op: op, Path: name, Err: ErrSymlink}
	case filemode.Submodule:
		return &fs.PathError{Op: op, Path: name, Err: errSubmodule}
	}
	return nil
}

// Open implements fs.FS.
func (f *treeFS) Open(name string) (fs.File, error) {
	if fi, ok := f.openFile(name); ok {
		// A plain file: read outside the lock, from the checkout when
		// it holds the blob.
		return f.openBlob(name, fi)
	}
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	e, err := f.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if err := refuse("open", name, e); err != nil {
		return nil, err
	}
	fi, err := f.info(e)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	if name == "." {
		fi.name = "."
	}
	if e.Mode == filemode.Dir {
		entries, err := f.readDirLocked(name, e)
		if err != nil {
			return nil, err
		}
		return &dirFile{info: fi, entries: entries}, nil
	}
	data, err := f.blob(e.Hash)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	fi.sizeOf, fi.size = nil, int64(len(data))
	return &file{info: fi, Reader: bytes.NewReader(data)}, nil
}

// openFile describes name when it is a regular file of the tree.
func (f *treeFS) openFile(name string) (*fileInfo, bool) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	e, err := f.lookup("open", name)
	if err != nil || !e.Mode.IsFile() || e.Mode == filemode.Symlink || refuse("open", name, e) != nil {
		return nil, false
	}
	fi, err := f.info(e)
	return fi, err == nil
}

// openBlob opens the regular file name, described by fi.
func (f *treeFS) openBlob(name string, fi *fileInfo) (fs.File, error) {
	h := fi.hash.plumbing()
	data, ok := f.fromCheckout(name, h, -1)
	if !ok {
		f.r.mu.Lock()
		var err error
		data, err = f.blob(h)
		f.r.mu.Unlock()
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
	fi.sizeOf, fi.size = nil, int64(len(data))
	return &file{info: fi, Reader: bytes.NewReader(data)}, nil
}

// ReadFile implements fs.ReadFileFS.
func (f *treeFS) ReadFile(name string) ([]byte, error) {
	data, _, err := f.readFile(name, -1)
	return data, err
}

// ReadFileUpTo implements ReadFileUpToFS: the file is read as ReadFile
// reads it, its object looked up once.
func (f *treeFS) ReadFileUpTo(name string, limit int64) ([]byte, int64, error) {
	if limit < 0 {
		limit = 0
	}
	return f.readFile(name, limit)
}

// readFile is ReadFile, or ReadFileUpTo with a limit of at least 0.
func (f *treeFS) readFile(name string, limit int64) ([]byte, int64, error) {
	f.r.mu.Lock()
	e, err := f.lookup("readfile", name)
	if err == nil {
		err = refuse("readfile", name, e)
	}
	if err == nil && e.Mode == filemode.Dir {
		err = &fs.PathError{Op: "readfile", Path: name, Err: errors.New("is a directory")}
	}
	f.r.mu.Unlock()
	if err != nil {
		return nil, 0, err
	}
	if data, ok := f.fromCheckout(name, e.Hash, limit); ok {
		return data, int64(len(data)), nil
	}
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	data, size, err := f.blobUpTo(e.Hash, limit)
	if err != nil {
		return nil, 0, &fs.PathError{Op: "readfile", Path: name, Err: err}
	}
	return data, size, nil
}

// checkoutMax bounds what fromCheckout reads without a limit: a larger
// file is read from the object store.
const checkoutMax = 4 << 20

// fromCheckout reads the file name from the working tree, if the tree has
// one and the file there is the blob h (its git hash is h's): the same
// bytes as the object store's, without inflating them from a pack (a plan
// reads a thousand lockfiles of HEAD, most of them checked out as they
// are). The hash is of the bytes read, so a file changed meanwhile is
// never taken for the blob. Only a plain file within limit (or
// checkoutMax) is read, never through a link at its own name, and never
// blocking on a pipe or device put there.
func (f *treeFS) fromCheckout(name string, h plumbing.Hash, limit int64) ([]byte, bool) {
	if f.checkout == "" {
		return nil, false
	}
	fd, err := openCheckedOut(filepath.Join(f.checkout, filepath.FromSlash(name)))
	if err != nil {
		return nil, false
	}
	defer fd.Close()
	fi, err := fd.Stat()
	max := int64(checkoutMax)
	if limit >= 0 {
		max = min(max, limit)
	}
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > max {
		return nil, false
	}
	data := make([]byte, fi.Size()+1)
	n, err := io.ReadFull(fd, data)
	if (err != io.ErrUnexpectedEOF && err != io.EOF) || int64(n) != fi.Size() {
		return nil, false // grown or shrunk since
	}
	data = data[:n]
	if plumbing.ComputeHash(plumbing.BlobObject, data) != h {
		return nil, false
	}
	return data, true
}

// ReadDir implements fs.ReadDirFS: entries sorted by name.
func (f *treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	e, err := f.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	if err := refuse("readdir", name, e); err != nil {
		return nil, err
	}
	if e.Mode != filemode.Dir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	return f.readDirLocked(name, e)
}

func (f *treeFS) readDirLocked(name string, e object.TreeEntry) ([]fs.DirEntry, error) {
	d, err := f.dir(e.Hash)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	out := make([]fs.DirEntry, len(d.entries))
	for i, child := range d.entries {
		out[i] = &dirEntry{f: f, e: child}
	}
	return out, nil
}

// Stat implements fs.StatFS. A symbolic link is not followed: Stat of a
// link fails with ErrSymlink (use Lstat to describe the link).
func (f *treeFS) Stat(name string) (fs.FileInfo, error) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	e, err := f.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	if e.Mode == filemode.Symlink {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: ErrSymlink}
	}
	return f.statLocked(name, e)
}

// Lstat implements fs.ReadLinkFS.
func (f *treeFS) Lstat(name string) (fs.FileInfo, error) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	e, err := f.lookup("lstat", name)
	if err != nil {
		return nil, err
	}
	return f.statLocked(name, e)
}

func (f *treeFS) statLocked(name string, e object.TreeEntry) (fs.FileInfo, error) {
	fi, err := f.info(e)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if name == "." {
		fi.name = "."
	}
	return fi, nil
}

// ReadLink implements fs.ReadLinkFS: it returns the target of a symbolic
// link as stored, without resolving it.
func (f *treeFS) ReadLink(name string) (string, error) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	e, err := f.lookup("readlink", name)
	if err != nil {
		return "", err
	}
	if e.Mode != filemode.Symlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	data, err := f.blob(e.Hash)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return string(data), nil
}

// fileInfo implements fs.FileInfo.
type fileInfo struct {
	name    string
	mode    fs.FileMode
	modTime time.Time
	hash    Hash
	// sizeOf, when set, reads size from the object store on the first
	// call of Size.
	sizeOf   *treeFS
	sizeOnce sync.Once
	size     int64
}

func (i *fileInfo) Name() string { return i.name }

// Size is the blob's size, read from the object store when first asked
// (its header only, where the store can). An object the store cannot
// read has size 0: reading the file then fails with the store's error.
func (i *fileInfo) Size() int64 {
	if f := i.sizeOf; f != nil {
		i.sizeOnce.Do(func() {
			f.r.mu.Lock()
			defer f.r.mu.Unlock()
			if s, err := f.blobSize(i.hash.plumbing()); err == nil {
				i.size = s
			}
		})
	}
	return i.size
}

func (i *fileInfo) Mode() fs.FileMode  { return i.mode }
func (i *fileInfo) ModTime() time.Time { return i.modTime }
func (i *fileInfo) IsDir() bool        { return i.mode.IsDir() }
func (i *fileInfo) Sys() any           { return i.hash }

// dirEntry implements fs.DirEntry; Info reads the object size lazily.
type dirEntry struct {
	f *treeFS
	e object.TreeEntry
}

func (d *dirEntry) Name() string { return d.e.Name }
func (d *dirEntry) IsDir() bool  { return d.e.Mode == filemode.Dir }
func (d *dirEntry) Type() fs.FileMode {
	switch d.e.Mode {
	case filemode.Dir:
		return fs.ModeDir
	case filemode.Symlink:
		return fs.ModeSymlink
	case filemode.Submodule:
		return fs.ModeIrregular
	}
	return 0
}
func (d *dirEntry) Info() (fs.FileInfo, error) {
	d.f.r.mu.Lock()
	defer d.f.r.mu.Unlock()
	return d.f.info(d.e)
}
func (d *dirEntry) String() string { return fs.FormatDirEntry(d) }

// file is an open regular file, held in memory.
type file struct {
	*bytes.Reader
	info *fileInfo
}

func (f *file) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *file) Close() error               { return nil }

// dirFile is an open directory.
type dirFile struct {
	info    *fileInfo
	entries []fs.DirEntry
	offset  int
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Close() error               { return nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: errors.New("is a directory")}
}

// ReadDir implements fs.ReadDirFile.
func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.offset:]
	if n <= 0 {
		d.offset = len(d.entries)
		return slices.Clone(rest), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if n > len(rest) {
		n = len(rest)
	}
	d.offset += n
	return slices.Clone(rest[:n]), nil
}
