package gitsource_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
)

// TestCloneOnDiskKeepsNoMoreDecodedObjectsThanItsBound pins what a
// long-running reader keeps of the objects it read: the agent reads each
// lock commit's new lockfiles once, and with go-git's default cache
// (96 MiB) they stayed in its heap. A clone, and the same folder opened
// again (an agent restarted), keep at most ObjectCacheSize of them; the
// default keeps them all (the check that the measure can fail).
func TestCloneOnDiskKeepsNoMoreDecodedObjectsThanItsBound(t *testing.T) {
	const files, size = 400, 16 << 10 // 6.25 MiB of blobs that do not compress
	lr := newLocalRepo(t, false)
	content := map[string]string{}
	for i := range files {
		b := make([]byte, size/2)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		content[fmt.Sprintf("locks/d%03d.yaml", i)] = hex.EncodeToString(b)
	}
	lr.commit("lockfiles", content)
	ctx := context.Background()
	const bound = 1 << 20

	// retained is the heap still in use after reading every file of the
	// repository open returns, with the repository kept.
	retained := func(t *testing.T, open func() (*gitsource.Repo, error)) int64 {
		t.Helper()
		base := heapInUse()
		r, err := open()
		if err != nil {
			t.Fatal(err)
		}
		head, err := r.Head()
		if err != nil {
			t.Fatal(err)
		}
		fsys, err := r.FS(head)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range content {
			got, err := fs.ReadFile(fsys, name)
			if err != nil || string(got) != want {
				t.Fatalf("%s: %d bytes, %v; want %d bytes", name, len(got), err, len(want))
			}
		}
		fsys = nil
		n := heapInUse() - base
		runtime.KeepAlive(r)
		return n
	}

	for _, tc := range []struct {
		name  string
		cache int64
		// atMost and atLeast bound what is retained.
		atMost, atLeast int64
	}{
		{"bounded", bound, 3 << 20, 0},
		{"default", 0, 1 << 62, 5 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "clone")
			clone := retained(t, func() (*gitsource.Repo, error) {
				return gitsource.Clone(ctx, lr.dir, dir, gitsource.CloneOptions{ObjectCacheSize: tc.cache})
			})
			reopened := retained(t, func() (*gitsource.Repo, error) {
				return gitsource.Open(dir, gitsource.OpenOptions{Remote: "origin", ObjectCacheSize: tc.cache})
			})
			t.Logf("retained after reading %.1f MiB: clone %.1f MiB, reopened %.1f MiB", mib(files*size), mib(clone), mib(reopened))
			for _, got := range []struct {
				what string
				n    int64
			}{{"clone", clone}, {"reopened", reopened}} {
				if got.n > tc.atMost || got.n < tc.atLeast {
					t.Errorf("%s retains %.1f MiB after reading %.1f MiB; want between %.1f and %.1f MiB",
						got.what, mib(got.n), mib(files*size), mib(tc.atLeast), mib(min(tc.atMost, 1<<40)))
				}
			}
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
