package drivers

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
)

const (
	defaultMaxFileSize  = 1 << 20
	defaultMaxTotalSize = 16 << 20
)

// folder is the content of one driver version folder, read once.
type folder struct {
	source string            // shown in messages
	files  map[string][]byte // slash paths relative to the folder root
	paths  []string          // sorted

	// sum is digest's, computed once (a shared load's key and the Driver
	// both need it).
	sumOnce sync.Once
	sum     string
}

// display is the name of a path inside the folder as shown to users.
func (f *folder) display(p string) string {
	if f.source == "" {
		return p
	}
	return strings.TrimSuffix(f.source, "/") + "/" + p
}

// readFolder reads every file of fsys. Symbolic links are followed only
// when they point to a regular file inside the folder; files larger than
// maxFile and folders larger than maxTotal are refused.
func readFolder(fsys fs.FS, source string, maxFile, maxTotal int64) (*folder, error) {
	f := &folder{source: source, files: map[string][]byte{}}
	var total int64
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &SpecError{File: f.display(p), Msg: "cannot read: " + err.Error(), Err: err}
		}
		if p == "." {
			return nil
		}
		name := p
		switch t := d.Type(); {
		case t.IsDir():
			return nil
		case t&fs.ModeSymlink != 0:
			target, err := resolveLink(fsys, p)
			if err != nil {
				return &SpecError{File: f.display(p), Msg: err.Error(), Err: err}
			}
			name = target
		case !t.IsRegular():
			return &SpecError{File: f.display(p), Msg: fmt.Sprintf("unsupported file type %s", t)}
		}
		info, err := fs.Stat(fsys, name)
		if err != nil {
			return &SpecError{File: f.display(p), Msg: "cannot read: " + err.Error(), Err: err}
		}
		if info.Size() > maxFile {
			return &SpecError{File: f.display(p), Msg: fmt.Sprintf("file is %d bytes, larger than the limit of %d bytes", info.Size(), maxFile)}
		}
		data, err := readLimited(fsys, name, maxFile)
		if err != nil {
			return &SpecError{File: f.display(p), Msg: err.Error(), Err: err}
		}
		total += int64(len(data))
		if total > maxTotal {
			return &SpecError{File: f.display(p), Msg: fmt.Sprintf("driver folder is larger than the limit of %d bytes", maxTotal)}
		}
		f.files[p] = data
		f.paths = append(f.paths, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(f.paths)
	return f, nil
}

func readLimited(fsys fs.FS, name string, max int64) ([]byte, error) {
	r, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("file is larger than the limit of %d bytes", max)
	}
	return data, nil
}

// resolveLink returns the folder path a symbolic link points to. It fails
// when the link leaves the folder, points to another link or to a
// directory, or when fsys cannot read links.
func resolveLink(fsys fs.FS, p string) (string, error) {
	target, err := fs.ReadLink(fsys, p)
	if err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return "", errors.New("symbolic links are not supported by this source")
		}
		return "", fmt.Errorf("cannot read symbolic link: %w", err)
	}
	if path.IsAbs(target) || strings.HasPrefix(target, "/") {
		return "", fmt.Errorf("symbolic link to %q escapes the driver folder", target)
	}
	resolved := path.Join(path.Dir(p), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") || !fs.ValidPath(resolved) {
		return "", fmt.Errorf("symbolic link to %q escapes the driver folder", target)
	}
	info, err := fs.Lstat(fsys, resolved)
	if err != nil {
		return "", fmt.Errorf("symbolic link to %q: %w", target, err)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("symbolic link to %q: only links to regular files inside the folder are supported", target)
	}
	return resolved, nil
}

// digest hashes the paths and contents in sorted order. The framing (path,
// length, bytes) makes it unambiguous; it depends on nothing but content,
// so it is the same on every machine.
func (f *folder) digest() string {
	f.sumOnce.Do(func() { f.sum = f.computeDigest() })
	return f.sum
}

func (f *folder) computeDigest() string {
	h := sha256.New()
	for _, p := range f.paths {
		data := f.files[p]
		io.WriteString(h, p)
		h.Write([]byte{0})
		io.WriteString(h, strconv.Itoa(len(data)))
		h.Write([]byte{0})
		h.Write(data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
