package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// Writer replaces files through a temporary file and a rename. Where the
// system exchanges two names in one step (Linux's renameat2), the replaced
// file becomes the next write's temporary file instead of being freed:
// replacing a thousand files then creates and frees one file, not a
// thousand. On ext4 without a journal each create scans past the inodes
// freed in the last minute, so a thousand renames over existing lockfiles
// cost a second of system CPU, most of a large lock's writing.
//
// A Writer is not safe for concurrent use: give each goroutine its own,
// and Close each.
type Writer struct {
	prefix string
	// spare is a temporary file of this Writer's holding the text of the
	// file the last write replaced, to be truncated and reused.
	spare string
	// noExchange is set once the file system refused an exchange, and by
	// the benchmark for its reference.
	noExchange bool
}

// New returns a Writer whose temporary files' names start with prefix.
func New(prefix string) *Writer { return &Writer{prefix: prefix} }

// Write replaces the file at path with data, making its folder when
// missing. The file keeps the permissions of the one it replaces; a new
// one is readable by all (0644), as git checks files out. A symbolic link
// at path is replaced by the file, never written through.
func (w *Writer) Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mode, exchangeable := os.FileMode(0o644), false
	if fi, err := os.Lstat(path); err == nil {
		mode = fi.Mode().Perm()
		// Only a plain file with no other name is kept for reuse: a
		// file linked elsewhere would be written through that name.
		exchangeable = fi.Mode().IsRegular() && soleLink(fi)
		if fi.Mode()&os.ModeSymlink != 0 {
			if target, err := os.Stat(path); err == nil {
				mode = target.Mode().Perm()
			}
		}
	}
	tmp, err := w.temp(dir)
	if err != nil {
		return err
	}
	err = w.place(tmp, path, data, mode, exchangeable)
	if errors.Is(err, syscall.EXDEV) && filepath.Dir(tmp.Name()) != dir {
		// The spare came from a folder on another mount: one of this
		// folder's own.
		if tmp, err = os.CreateTemp(dir, w.prefix+"*"); err != nil {
			return err
		}
		err = w.place(tmp, path, data, mode, exchangeable)
	}
	return err
}

// place fills tmp and puts it at path: by an exchange, keeping the
// replaced file as the spare, or by a rename.
func (w *Writer) place(tmp *os.File, path string, data []byte, mode os.FileMode, exchangeable bool) error {
	name := tmp.Name()
	if err := fill(tmp, data, mode); err != nil {
		_ = os.Remove(name)
		return err
	}
	if exchangeable && !w.noExchange {
		err := exchange(name, path)
		if err == nil {
			w.spare = name
			return nil
		}
		if errors.Is(err, errors.ErrUnsupported) {
			w.noExchange = true
		}
		// Otherwise a rename, as where exchanging is not supported.
	}
	if err := os.Rename(name, path); err != nil {
		_ = os.Remove(name)
		return err
	}
	return nil
}

// Close removes the Writer's temporary file, if it holds one.
func (w *Writer) Close() error {
	if w.spare == "" {
		return nil
	}
	err := os.Remove(w.spare)
	w.spare = ""
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// temp is the spare file, emptied, or a new temporary file in dir. The
// spare may be gone (another run beside this one removed it as a killed
// run's leftover, its modification time being the replaced file's) or no
// longer a plain file of this Writer's alone: then a new one is made.
func (w *Writer) temp(dir string) (*os.File, error) {
	if spare := w.spare; spare != "" {
		w.spare = ""
		if f, err := reopen(spare); err == nil {
			return f, nil
		}
		_ = os.Remove(spare)
	}
	return os.CreateTemp(dir, w.prefix+"*")
}

// fill writes data into f with the given permissions and closes it.
func fill(f *os.File, data []byte, mode os.FileMode) error {
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
