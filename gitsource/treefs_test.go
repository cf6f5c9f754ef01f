package gitsource_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/styrmin/styrmin/gitsource"
)

func TestFSReadsEachCommitWithoutCheckout(t *testing.T) {
	lr := newLocalRepo(t, false)
	c1 := lr.commit("first", map[string]string{
		"styrmin.cue":                        "version: 1\n",
		"clusters/c/cluster.cue":             "domain: \"a\"\n",
		"clusters/c/environments/e/env.cue":  "name: \"e\"\n",
		"locks/c/e/app.lock.yaml":            "sequence: 1\n",
		"drivers/d/1.0.0/chart/Chart.yaml":   "name: d\n",
		"drivers/d/1.0.0/chart/a-b/file.txt": "x",
		"drivers/d/1.0.0/chart/a.txt":        "y",
	})
	c2 := lr.commit("second", map[string]string{"locks/c/e/app.lock.yaml": "sequence: 2\n", "clusters/c/cluster.cue": del})
	// The worktree differs from both commits: FS must not read it.
	lr.write(map[string]string{"locks/c/e/app.lock.yaml": "sequence: 99\n"})

	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h1, h2 := mustResolve(t, r, c1), mustResolve(t, r, c2)

	fs1, err := r.FS(h1)
	if err != nil {
		t.Fatal(err)
	}
	fs2, err := r.FS(h2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		fsys fs.FS
		path string
		want string
	}{
		{fs1, "locks/c/e/app.lock.yaml", "sequence: 1\n"},
		{fs2, "locks/c/e/app.lock.yaml", "sequence: 2\n"},
		{fs1, "clusters/c/cluster.cue", "domain: \"a\"\n"},
	} {
		got, err := fs.ReadFile(tt.fsys, tt.path)
		if err != nil || string(got) != tt.want {
			t.Errorf("ReadFile(%s) = %q, %v; want %q", tt.path, got, err, tt.want)
		}
	}
	if _, err := fs.ReadFile(fs2, "clusters/c/cluster.cue"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("deleted file: err = %v, want fs.ErrNotExist", err)
	}
	for _, p := range []string{"missing.cue", "locks/missing/x", "styrmin.cue/below"} {
		if _, err := fs.Stat(fs1, p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat(%s) err = %v, want fs.ErrNotExist", p, err)
		}
	}
	for _, p := range []string{"../x", "/abs", "a//b", "a/./b", ""} {
		var pe *fs.PathError
		if _, err := fs1.Open(p); !errors.Is(err, fs.ErrInvalid) || !errors.As(err, &pe) {
			t.Errorf("Open(%q) err = %v, want *fs.PathError with fs.ErrInvalid", p, err)
		}
	}
	if _, err := fs.ReadFile(fs1, "locks"); err == nil {
		t.Error("ReadFile of a directory succeeded")
	}

	// Entries are in fs order (sorted by name), not git's tree order, which
	// would put "a-b/" before "a.txt" differently.
	entries, err := fs.ReadDir(fs1, "drivers/d/1.0.0/chart")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got, want := names, []string{"Chart.yaml", "a-b", "a.txt"}; !equalStrings(got, want) {
		t.Errorf("ReadDir = %v, want %v", got, want)
	}

	fi, err := fs.Stat(fs1, "locks/c/e/app.lock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != int64(len("sequence: 1\n")) || fi.Mode() != 0o644 || fi.ModTime().Unix() != 1_700_000_060 {
		t.Errorf("Stat = size %d mode %v mtime %v", fi.Size(), fi.Mode(), fi.ModTime())
	}
	if _, ok := fi.Sys().(gitsource.Hash); !ok {
		t.Errorf("Sys() = %T, want gitsource.Hash", fi.Sys())
	}

	if err := fstest.TestFS(fs1, "styrmin.cue", "locks/c/e/app.lock.yaml", "drivers/d/1.0.0/chart/a-b/file.txt"); err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(fs2, "styrmin.cue", "locks/c/e/app.lock.yaml"); err != nil {
		t.Fatal(err)
	}
}

func TestFSReportsSymlinksButNeverFollowsThem(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.write(map[string]string{"real/file.txt": "inside\n"})
	for link, target := range map[string]string{"escape": "../../etc/passwd", "dirlink": "real"} {
		if err := os.Symlink(target, filepath.Join(lr.dir, link)); err != nil {
			t.Skipf("symlinks unsupported: %v", err)
		}
	}
	c := lr.commit("links", nil)
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := r.FS(mustResolve(t, r, c))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"escape", "dirlink", "dirlink/file.txt"} {
		if _, err := fs.ReadFile(fsys, p); !errors.Is(err, gitsource.ErrSymlink) {
			t.Errorf("ReadFile(%s) err = %v, want ErrSymlink", p, err)
		}
		if _, err := fs.Stat(fsys, p); !errors.Is(err, gitsource.ErrSymlink) {
			t.Errorf("Stat(%s) err = %v, want ErrSymlink", p, err)
		}
	}
	fi, err := fs.Lstat(fsys, "escape")
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Lstat(escape) = %v, %v; want a symlink", fi, err)
	}
	if target, err := fs.ReadLink(fsys, "escape"); err != nil || target != "../../etc/passwd" {
		t.Errorf("ReadLink(escape) = %q, %v", target, err)
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]fs.FileMode{}
	for _, e := range entries {
		types[e.Name()] = e.Type()
	}
	if types["escape"] != fs.ModeSymlink || types["dirlink"] != fs.ModeSymlink || types["real"] != fs.ModeDir {
		t.Errorf("ReadDir types = %v", types)
	}
	// WalkDir does not descend into links.
	var walked []string
	if err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		walked = append(walked, p)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{".", "dirlink", "escape", "real", "real/file.txt"}; !equalStrings(walked, want) {
		t.Errorf("WalkDir = %v, want %v", walked, want)
	}
}

func TestFSOfZeroCommitIsEmpty(t *testing.T) {
	lr := newLocalRepo(t, true)
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := r.FS(gitsource.Hash{})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil || len(entries) != 0 {
		t.Fatalf("ReadDir(.) = %v, %v; want empty", entries, err)
	}
	if _, err := fs.ReadFile(fsys, "locks/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
	if _, err := r.Head(); !errors.Is(err, gitsource.ErrBranchNotFound) {
		t.Fatalf("Head of an unborn branch: err = %v, want ErrBranchNotFound", err)
	}
}

func TestFSFileSupportsSeekAndReadAt(t *testing.T) {
	lr := newLocalRepo(t, false)
	c := lr.commit("c", map[string]string{"f.txt": "0123456789"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fsys, _ := r.FS(mustResolve(t, r, c))
	f, err := fsys.Open("f.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 3)
	if _, err := f.(io.ReaderAt).ReadAt(buf, 4); err != nil || string(buf) != "456" {
		t.Fatalf("ReadAt = %q, %v", buf, err)
	}
	if _, err := f.(io.Seeker).Seek(8, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(f)
	if string(rest) != "89" {
		t.Fatalf("after Seek: %q", rest)
	}
}

func mustResolve(t testing.TB, r *gitsource.Repo, rev string) gitsource.Hash {
	t.Helper()
	h, err := r.Resolve(rev)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Stat, Lstat and a directory entry's Info give the size of a blob read
// from its object's header: loose, packed, and packed as a delta of
// another version (git gc deltifies the two versions of the file).
func TestFSSizesOfLooseAndPackedBlobs(t *testing.T) {
	lr := newLocalRepo(t, false)
	big := strings.Repeat("values: line of a lockfile that repeats\n", 200)
	c1 := lr.commit("first", map[string]string{"locks/c/e/app.lock.yaml": big + "sequence: 1\n"})
	c2 := lr.commit("second", map[string]string{"locks/c/e/app.lock.yaml": big + "sequence: 22\n", "small.txt": "x"})
	check := func(stage string) {
		t.Helper()
		r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{c1, c2} {
			fsys, err := r.FS(mustResolve(t, r, c))
			if err != nil {
				t.Fatal(err)
			}
			data, err := fs.ReadFile(fsys, "locks/c/e/app.lock.yaml")
			if err != nil {
				t.Fatal(err)
			}
			fi, err := fs.Stat(fsys, "locks/c/e/app.lock.yaml")
			if err != nil || fi.Size() != int64(len(data)) {
				t.Errorf("%s: Stat size %v, %v; want %d", stage, fi.Size(), err, len(data))
			}
			li, err := fsys.(fs.ReadLinkFS).Lstat("locks/c/e/app.lock.yaml")
			if err != nil || li.Size() != int64(len(data)) {
				t.Errorf("%s: Lstat size %v, %v; want %d", stage, li.Size(), err, len(data))
			}
			entries, err := fs.ReadDir(fsys, "locks/c/e")
			if err != nil || len(entries) != 1 {
				t.Fatalf("%s: ReadDir = %v, %v", stage, entries, err)
			}
			if ei, err := entries[0].Info(); err != nil || ei.Size() != int64(len(data)) {
				t.Errorf("%s: Info size %v, %v; want %d", stage, ei.Size(), err, len(data))
			}
		}
	}
	check("loose")
	lr.git("gc", "--quiet", "--aggressive")
	if loose := lr.git("count-objects"); !strings.HasPrefix(loose, "0 objects") {
		t.Fatalf("after gc: %s", loose)
	}
	check("packed")
}

// A Stat reads no object: with a file's blob gone from the store, Stat,
// Lstat and a directory entry still describe it (its size reads as 0),
// and reading it fails, naming the path. Sizes asked for concurrently
// are read once and agree.
func TestFSDescribesAFileWithoutReadingItsObject(t *testing.T) {
	lr := newLocalRepo(t, false)
	c := lr.commit("first", map[string]string{"gone.txt": "text of a blob that goes", "kept.txt": "kept"})
	blob := strings.TrimSpace(lr.git("rev-parse", c+":gone.txt"))
	// The checked-out copy too: it would be read in the blob's place.
	for _, p := range []string{filepath.Join(".git", "objects", blob[:2], blob[2:]), "gone.txt"} {
		if err := os.Remove(filepath.Join(lr.dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := r.FS(mustResolve(t, r, c))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := fs.Stat(fsys, "gone.txt")
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("Stat of a file whose blob is gone = %v, %v; want a regular file of size 0", fi, err)
	}
	if _, err := fsys.(fs.ReadLinkFS).Lstat("gone.txt"); err != nil {
		t.Errorf("Lstat: %v", err)
	}
	if _, err := fs.ReadFile(fsys, "gone.txt"); err == nil || !strings.Contains(err.Error(), "gone.txt") {
		t.Errorf("ReadFile of a file whose blob is gone: %v; want an error naming it", err)
	}
	ki, err := fs.Stat(fsys, "kept.txt")
	if err != nil {
		t.Fatal(err)
	}
	sizes := make(chan int64, 8)
	for range cap(sizes) {
		go func() { sizes <- ki.Size() }()
	}
	for range cap(sizes) {
		if s := <-sizes; s != int64(len("kept")) {
			t.Errorf("kept.txt: size %d, want %d", s, len("kept"))
		}
	}
}

// ReadFileUpTo reads what ReadFile reads when the file is within the
// limit, and only its size when it is over (loose and packed objects
// alike, from the object store); what ReadFile refuses (a link, a folder, a missing file) it
// refuses the same way, naming the path.
func TestFSReadsAFileUpToALimitAsReadFileReadsIt(t *testing.T) {
	lr := newLocalRepo(t, false)
	text := strings.Repeat("a line of a lockfile\n", 50)
	c := lr.commit("first", map[string]string{"locks/app.lock.yaml": text, "empty.txt": ""})
	lr.git("-c", "core.symlinks=true", "checkout", "-q", c)
	if err := os.Symlink("locks/app.lock.yaml", filepath.Join(lr.dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	lr.git("add", "link.yaml")
	lr.git("commit", "-q", "-m", "link")
	head := strings.TrimSpace(lr.git("rev-parse", "HEAD"))
	// The object store's reads: checked-out copies would be read instead.
	for _, p := range []string{"locks", "empty.txt", "link.yaml"} {
		if err := os.RemoveAll(filepath.Join(lr.dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(stage string) {
		t.Helper()
		r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fsys, err := r.FS(mustResolve(t, r, head))
		if err != nil {
			t.Fatal(err)
		}
		up := fsys.(gitsource.ReadFileUpToFS)
		n := int64(len(text))
		for _, limit := range []int64{n, n + 1, 1 << 20} {
			data, size, err := up.ReadFileUpTo("locks/app.lock.yaml", limit)
			if err != nil || string(data) != text || size != n {
				t.Errorf("%s: limit %d: %d bytes, size %d, %v; want the file, size %d", stage, limit, len(data), size, err, n)
			}
		}
		for _, limit := range []int64{0, n - 1} {
			data, size, err := up.ReadFileUpTo("locks/app.lock.yaml", limit)
			if err != nil || data != nil || size != n {
				t.Errorf("%s: limit %d: %q, size %d, %v; want no bytes and size %d", stage, limit, data, size, err, n)
			}
		}
		if data, size, err := up.ReadFileUpTo("empty.txt", 0); err != nil || data == nil || len(data) != 0 || size != 0 {
			t.Errorf("%s: empty file: %q, size %d, %v; want empty bytes", stage, data, size, err)
		}
		for _, name := range []string{"link.yaml", "locks", "missing.yaml"} {
			_, want := fs.ReadFile(fsys, name)
			_, _, err := up.ReadFileUpTo(name, 1<<20)
			if want == nil || err == nil || err.Error() != want.Error() || !strings.Contains(err.Error(), name) {
				t.Errorf("%s: %s: ReadFileUpTo error %v, ReadFile's %v; want the same, naming it", stage, name, err, want)
			}
		}
	}
	check("loose")
	lr.git("gc", "--quiet", "--aggressive")
	check("packed")
}

// A file of gigabytes is kilobytes in git's compressed form, and a loose
// object is read whole to be opened: ReadFileUpTo of a file over its
// limit, and Blob of one over the bound of a reader of history, size it
// from the object's header and inflate nothing (loose and packed alike).
// The file is 48 MiB; each read allocates far less.
func TestAFileOverTheLimitIsSizedWithoutBeingInflated(t *testing.T) {
	lr := newLocalRepo(t, false)
	const size = 48 << 20
	c := lr.commit("huge", map[string]string{"locks/c/e/huge.lock.yaml": strings.Repeat("x", size)})
	blob, err := gitsource.ParseHash(strings.TrimSpace(lr.git("rev-parse", c+":locks/c/e/huge.lock.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	// The object store's reads: the checked-out copy is sized by its file.
	if err := os.RemoveAll(filepath.Join(lr.dir, "locks")); err != nil {
		t.Fatal(err)
	}
	check := func(stage string) {
		t.Helper()
		// A repository each: one read's object cache must not serve the
		// other.
		open := func() *gitsource.Repo {
			r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		r, fr := open(), open()
		fsys, err := fr.FS(mustResolve(t, fr, c))
		if err != nil {
			t.Fatal(err)
		}
		for name, read := range map[string]func() error{
			"ReadFileUpTo": func() error {
				data, n, err := fsys.(gitsource.ReadFileUpToFS).ReadFileUpTo("locks/c/e/huge.lock.yaml", 1<<20)
				if err != nil || data != nil || n != size {
					return fmt.Errorf("%d bytes, size %d, %v; want no bytes and size %d", len(data), n, err, size)
				}
				return nil
			},
			"Blob": func() error {
				if _, err := r.Blob(blob); err == nil || !strings.Contains(err.Error(), "more than the") {
					return fmt.Errorf("%v; want an error saying it is over the bound", err)
				}
				return nil
			},
		} {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := read()
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Errorf("%s: %s: %v", stage, name, err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > size/8 {
				t.Errorf("%s: %s allocated %d MiB for a file of %d MiB over the limit: it inflated it", stage, name, n>>20, size>>20)
			}
		}
	}
	check("loose")
	lr.git("gc", "--quiet")
	check("packed")
}
