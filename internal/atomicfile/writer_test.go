//go:build unix

package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

const prefix = ".test-tmp-"

// temps lists the Writer's temporary files left under root.
func temps(t testing.TB, root string) []string {
	t.Helper()
	var left []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), prefix) {
			left = append(left, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return left
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestWritesReplaceFilesKeepTheirModesAndLeaveNoTemporaryFile writes new
// files and replaces them, in two folders, one Writer for all: each file
// holds its last text, a replaced file keeps its permissions, a new one is
// readable by all, and Close leaves no temporary file.
func TestWritesReplaceFilesKeepTheirModesAndLeaveNoTemporaryFile(t *testing.T) {
	root := t.TempDir()
	w := New(prefix)
	path := func(i int) string { return filepath.Join(root, fmt.Sprintf("d%d", i%2), fmt.Sprintf("f%02d", i)) }
	for round := range 3 {
		for i := range 10 {
			if err := w.Write(path(i), fmt.Appendf(nil, "round %d file %d\n", round, i)); err != nil {
				t.Fatal(err)
			}
		}
		if round == 0 {
			if err := os.Chmod(path(3), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if got, want := readFile(t, path(i)), fmt.Sprintf("round 2 file %d\n", i); got != want {
			t.Errorf("%s = %q, want %q", path(i), got, want)
		}
		fi, err := os.Stat(path(i))
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o644)
		if i == 3 {
			want = 0o600
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path(i), fi.Mode().Perm(), want)
		}
	}
	if left := temps(t, root); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestReplacingFilesReusesTheReplacedOnesOnLinux pins what the exchange is
// for: replacing files makes one new file in all, the rest of the new
// texts going into the files they replaced.
func TestReplacingFilesReusesTheReplacedOnesOnLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the exchange is Linux's renameat2")
	}
	root := t.TempDir()
	inodes := map[uint64]bool{}
	for i := range 20 {
		p := filepath.Join(root, fmt.Sprintf("f%02d", i))
		if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		inodes[inode(t, p)] = true
	}
	w := New(prefix)
	for i := range 20 {
		if err := w.Write(filepath.Join(root, fmt.Sprintf("f%02d", i)), []byte("new\n")); err != nil {
			t.Fatal(err)
		}
	}
	if w.noExchange {
		t.Skip("this file system does not exchange names")
	}
	fresh := 0
	for i := range 20 {
		p := filepath.Join(root, fmt.Sprintf("f%02d", i))
		if readFile(t, p) != "new\n" {
			t.Fatalf("%s not replaced", p)
		}
		if !inodes[inode(t, p)] {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d of 20 replaced files are new files, want 1 (the rest reusing those they replaced)", fresh)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func inode(t testing.TB, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Skip("no inode numbers here")
	}
	return st.Ino
}

// TestAReplacedFileWithAnotherNameIsNeverWrittenThrough: a file linked
// elsewhere (a hard link) or a symbolic link at the path is replaced, and
// what the other name shows never changes, however many writes follow.
func TestAReplacedFileWithAnotherNameIsNeverWrittenThrough(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	hard, soft := filepath.Join(outside, "hard"), filepath.Join(outside, "soft")
	for _, p := range []string{hard, soft} {
		if err := os.WriteFile(p, []byte("outside\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(hard, filepath.Join(root, "a")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	if err := os.Symlink(soft, filepath.Join(root, "b")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	w := New(prefix)
	for round := range 3 {
		for _, name := range []string{"a", "b", "c", "d"} {
			if err := w.Write(filepath.Join(root, name), fmt.Appendf(nil, "%s %d\n", name, round)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{hard, soft} {
		if got := readFile(t, p); got != "outside\n" {
			t.Errorf("%s = %q: written through another name", p, got)
		}
	}
	fi, err := os.Lstat(filepath.Join(root, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() {
		t.Errorf("b is %v, want a plain file in place of the link", fi.Mode())
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("b: mode %v, want the linked file's 0600", fi.Mode().Perm())
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if got, want := readFile(t, filepath.Join(root, name)), name+" 2\n"; got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

// TestASpareRemovedByAnotherRunIsMadeAgain: a run beside this one removes
// temporary files it takes for a killed run's leftovers (the spare carries
// the replaced file's modification time); the next write makes a new one.
func TestASpareRemovedByAnotherRunIsMadeAgain(t *testing.T) {
	root := t.TempDir()
	w := New(prefix)
	for i := range 6 {
		p := filepath.Join(root, fmt.Sprintf("f%d", i%2))
		if err := w.Write(p, fmt.Appendf(nil, "%d\n", i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		for _, left := range temps(t, root) {
			if err := os.Remove(left); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "f0")) + readFile(t, filepath.Join(root, "f1")); got != "4\n5\n" {
		t.Errorf("files hold %q, want the last writes", got)
	}
}

// TestAWriteThatCannotPlaceItsFileLeavesNoTemporaryFile: a folder where
// the file goes fails the write, naming the path, and leaves nothing.
func TestAWriteThatCannotPlaceItsFileLeavesNoTemporaryFile(t *testing.T) {
	root := t.TempDir()
	w := New(prefix)
	if err := w.Write(filepath.Join(root, "ok"), []byte("1\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(filepath.Join(root, "ok"), []byte("2\n")); err != nil {
		t.Fatal(err)
	}
	blocked := filepath.Join(root, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := w.Write(blocked, []byte("3\n"))
	if err == nil || !strings.Contains(err.Error(), blocked) {
		t.Fatalf("err = %v, want one naming %s", err, blocked)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if left := temps(t, root); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if got := readFile(t, filepath.Join(root, "ok")); got != "2\n" {
		t.Errorf("ok = %q", got)
	}
}

// TestAShorterTextLeavesNothingOfTheReusedFile: the spare holds the
// longer text of the file it replaced; the next file written through it
// holds its own text only.
func TestAShorterTextLeavesNothingOfTheReusedFile(t *testing.T) {
	root := t.TempDir()
	long := strings.Repeat("long line\n", 100)
	for _, name := range []string{"f0", "f1"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(long), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w := New(prefix)
	for _, name := range []string{"f0", "f1"} {
		if err := w.Write(filepath.Join(root, name), []byte(name+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"f0", "f1"} {
		if got := readFile(t, filepath.Join(root, name)); got != name+"\n" {
			t.Errorf("%s holds %d bytes, want only %q", name, len(got), name+"\n")
		}
	}
}

// TestTwoWritersOnTheSameFilesLeaveOneWholeTextEach: two locks writing
// the same files at once (two processes in one working tree), each file
// ends up holding one writer's whole text, and no temporary file stays.
func TestTwoWritersOnTheSameFilesLeaveOneWholeTextEach(t *testing.T) {
	root := t.TempDir()
	paths := make([]string, 40)
	for i := range paths {
		paths[i] = filepath.Join(root, fmt.Sprintf("d%d", i%4), fmt.Sprintf("f%02d", i))
		if err := os.MkdirAll(filepath.Dir(paths[i]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(paths[i], []byte("old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	texts := []string{strings.Repeat("a", 5000) + "\n", strings.Repeat("b", 3000) + "\n"}
	errs := make(chan error, len(texts))
	for _, text := range texts {
		go func() {
			w := New(prefix)
			for round := range 5 {
				for _, p := range paths {
					if err := w.Write(p, []byte(text)); err != nil {
						errs <- fmt.Errorf("round %d, %s: %w", round, p, err)
						return
					}
				}
			}
			errs <- w.Close()
		}()
	}
	for range texts {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range paths {
		if got := readFile(t, p); got != texts[0] && got != texts[1] {
			t.Errorf("%s holds %d bytes that are neither writer's whole text", p, len(got))
		}
	}
	if left := temps(t, root); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// BenchmarkReplace1000 replaces 1,000 files in 20 folders, four Writers at
// a time as a lock writes them: by exchange, and by rename alone (the
// reference, every replaced file freed). Run it with -benchtime 5x or so:
// the figures grow with the inodes freed in the last minute.
func BenchmarkReplace1000(b *testing.B) {
	for _, mode := range []string{"exchange", "rename"} {
		b.Run(mode, func(b *testing.B) {
			root := b.TempDir()
			paths := make([]string, 1000)
			data := []byte(strings.Repeat("x", 3000))
			for i := range paths {
				paths[i] = filepath.Join(root, fmt.Sprintf("e%02d", i%20), fmt.Sprintf("app-%02d.lock.yaml", i/20))
				if err := os.MkdirAll(filepath.Dir(paths[i]), 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(paths[i], data, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			var r0, r1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
			for b.Loop() {
				work := make(chan string)
				done := make(chan error, 4)
				for range 4 {
					go func() {
						w := New(prefix)
						w.noExchange = mode == "rename"
						for p := range work {
							if err := w.Write(p, data); err != nil {
								done <- err
								for range work {
								}
								return
							}
						}
						done <- w.Close()
					}()
				}
				for _, p := range paths {
					work <- p
				}
				close(work)
				for range 4 {
					if err := <-done; err != nil {
						b.Fatal(err)
					}
				}
			}
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
			b.ReportMetric(float64(r1.Stime.Nano()-r0.Stime.Nano())/1e9/float64(b.N), "sys-s/op")
		})
	}
}
