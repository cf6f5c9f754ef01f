package resolver

import (
	"errors"
	"io/fs"
	"sort"
	"strings"
	"testing/fstest"
)

// folderOverlay is a repository tree with some files added or replaced and
// one folder hidden: what a planned edit of whole folders (env clone, env
// delete) leaves, loaded and resolved before anything is written.
type folderOverlay struct {
	base   fs.FS
	files  fstest.MapFS
	hidden string // a folder removed ("": none)
}

func newFolderOverlay(base fs.FS, files map[string][]byte, hidden string) *folderOverlay {
	m := fstest.MapFS{}
	for p, data := range files {
		if data != nil {
			m[p] = &fstest.MapFile{Data: data, Mode: 0o644}
		}
	}
	return &folderOverlay{base: base, files: m, hidden: hidden}
}

func (o *folderOverlay) isHidden(name string) bool {
	return o.hidden != "" && (name == o.hidden || strings.HasPrefix(name, o.hidden+"/"))
}

// inOverlay reports whether name is a file of the overlay or a folder
// above one.
func (o *folderOverlay) inOverlay(name string) bool {
	if _, ok := o.files[name]; ok {
		return true
	}
	for p := range o.files {
		if name == "." || strings.HasPrefix(p, name+"/") {
			return true
		}
	}
	return false
}

func (o *folderOverlay) Open(name string) (fs.File, error) {
	if _, ok := o.files[name]; ok {
		return o.files.Open(name)
	}
	if o.isHidden(name) {
		if o.inOverlay(name) {
			return o.files.Open(name)
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	f, err := o.base.Open(name)
	if err != nil && o.inOverlay(name) {
		return o.files.Open(name)
	}
	return f, err
}

// ReadDir merges the folder's entries of both trees (the overlay's win).
func (o *folderOverlay) ReadDir(name string) ([]fs.DirEntry, error) {
	byName := map[string]fs.DirEntry{}
	var errBase error
	if !o.isHidden(name) {
		entries, err := fs.ReadDir(o.base, name)
		errBase = err
		for _, e := range entries {
			if !o.isHidden(joinPath(name, e.Name())) {
				byName[e.Name()] = e
			}
		}
	} else {
		errBase = fs.ErrNotExist
	}
	if o.inOverlay(name) {
		entries, err := fs.ReadDir(o.files, name)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			byName[e.Name()] = e
		}
	} else if errBase != nil {
		if errors.Is(errBase, fs.ErrNotExist) {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
		}
		return nil, errBase
	}
	out := make([]fs.DirEntry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

func joinPath(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}
