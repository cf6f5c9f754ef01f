//go:build unix

package gitsource_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
)

// A file of a commit is read from the working tree when the copy there is
// the same blob: with the object gone from the store it still reads,
// through the whole tree and through a folder's (TreeAt), by ReadFile,
// ReadFileUpTo and Open. A copy that differs, a link in its place, a pipe
// (which would block) or a folder are never read for it: the store's
// object is, and without it the read fails naming the file.
func TestFSReadsAFileFromItsCheckoutOnlyWhenItIsTheSameBlob(t *testing.T) {
	lr := newLocalRepo(t, false)
	files := map[string]string{
		"cfg/same.yaml": "kept as committed\n", "cfg/edited.yaml": "committed\n", "cfg/linked.yaml": "linked\n",
		"cfg/piped.yaml": "piped\n", "cfg/folder.yaml": "a folder now\n", "cfg/empty.yaml": "",
	}
	c := lr.commit("first", files)
	for name := range files {
		blob := strings.TrimSpace(lr.git("rev-parse", c+":"+name))
		if err := os.Remove(filepath.Join(lr.dir, ".git", "objects", blob[:2], blob[2:])); err != nil {
			t.Fatal(err)
		}
	}
	dir := func(name string) string { return filepath.Join(lr.dir, filepath.FromSlash(name)) }
	if err := os.WriteFile(dir("cfg/edited.yaml"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir("elsewhere.yaml"), []byte("linked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cfg/linked.yaml", "cfg/piped.yaml", "cfg/folder.yaml"} {
		if err := os.Remove(dir(name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../elsewhere.yaml", dir("cfg/linked.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(dir("cfg/piped.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir("cfg/folder.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := r.TreeAt(mustResolve(t, r, c), ".")
	if err != nil {
		t.Fatal(err)
	}
	folder, err := r.TreeAt(mustResolve(t, r, c), "cfg")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fsys   fs.FS
		prefix string
	}{{whole, "cfg/"}, {folder, ""}} {
		up, ok := tc.fsys.(gitsource.ReadFileUpToFS)
		if !ok {
			t.Fatalf("%q: %T does not read up to a limit", tc.prefix, tc.fsys)
		}
		reads := map[string]func(string) ([]byte, error){
			"ReadFile": func(n string) ([]byte, error) { return fs.ReadFile(tc.fsys, n) },
			"ReadFileUpTo": func(n string) ([]byte, error) {
				b, _, err := up.ReadFileUpTo(n, 1<<20)
				return b, err
			},
			"Open": func(n string) ([]byte, error) {
				f, err := tc.fsys.Open(n)
				if err != nil {
					return nil, err
				}
				defer f.Close()
				return io.ReadAll(f)
			},
		}
		for how, read := range reads {
			for _, name := range []string{"same.yaml", "empty.yaml"} {
				if got, err := read(tc.prefix + name); err != nil || string(got) != files["cfg/"+name] {
					t.Errorf("%s %s%s: %q, %v; want the checked-out copy of the blob", how, tc.prefix, name, got, err)
				}
			}
			for _, name := range []string{"edited.yaml", "linked.yaml", "piped.yaml", "folder.yaml"} {
				got, err := read(tc.prefix + name)
				if err == nil || !strings.Contains(err.Error(), tc.prefix+name) {
					t.Errorf("%s %s%s: %q, %v; want the object store's error naming it", how, tc.prefix, name, got, err)
				}
			}
		}
	}
	if _, err := r.TreeAt(mustResolve(t, r, c), "missing"); err != nil {
		t.Fatal(err)
	} else if sub, _ := r.TreeAt(mustResolve(t, r, c), "missing"); sub != nil {
		if _, err := fs.ReadFile(sub, "same.yaml"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a file of a missing folder: %v; want it not to exist", err)
		}
	}
}
