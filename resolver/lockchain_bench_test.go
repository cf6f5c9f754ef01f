package resolver

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/styrmin/styrmin/gitsource"
)

// commitFiles commits files onto the branch of repo (a plain commit made
// through the same compare-and-swap path, with no lock trailers).
func commitFiles(tb testing.TB, repo *gitsource.Repo, subject string, files map[string][]byte) gitsource.Hash {
	tb.Helper()
	res, err := repo.CommitLocks(context.Background(), gitsource.CommitRequest{
		Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
			return gitsource.Change{Files: files, Subject: subject}, nil
		},
	})
	if err != nil || !res.Committed {
		tb.Fatalf("commit %s: %+v, %v", subject, res, err)
	}
	return res.Commit
}

// chainRepo is a bare repository holding a generated desired-state
// repository of n deployments, locked once, then `changes` cluster
// configuration commits (each a fan-out to every deployment) not yet
// locked. It returns the repository's folder and its head.
func chainRepo(tb testing.TB, n, changes int) (string, gitsource.Hash) {
	tb.Helper()
	src := generateRepo(tb, n, 20)
	files := map[string][]byte{}
	err := fs.WalkDir(os.DirFS(src), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(src + "/" + p)
		files[p] = data
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	if _, err := git.PlainInit(dir, true); err != nil {
		tb.Fatal(err)
	}
	repo, err := gitsource.Open(dir, gitsource.OpenOptions{Branch: "main"})
	if err != nil {
		tb.Fatal(err)
	}
	commitFiles(tb, repo, "configuration", files)
	if _, err := CommitLocksWith(context.Background(), repo, WorkspaceOptions{}, LockRequest{}, CommitOptions{History: repo}); err != nil {
		tb.Fatal(err)
	}
	var head gitsource.Hash
	for i := 1; i <= changes; i++ {
		cluster := fmt.Sprintf("domain: \"bench.example.com\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nconfig: logFormat: \"json-%d\"\n", i)
		head = commitFiles(tb, repo, fmt.Sprintf("cluster change %d", i), map[string][]byte{"clusters/bench/cluster.cue": []byte(cluster)})
	}
	return dir, head
}

// BenchmarkLockChain locks a 1,000-deployment cluster fan-out made of 10
// configuration commits: walking them (one lock commit per commit, 10,000
// lockfiles) against the head-only lock (--squash, 1,000 lockfiles) of the
// same repository, in the same run. Each iteration opens the repository
// afresh (as a CLI run does) and puts the branch back at the unlocked
// head. Besides -benchmem's figures it reports the CPU seconds per lock
// (both cores' work, the GC's included).
func BenchmarkLockChain(b *testing.B) {
	const n, changes = 1000, 10
	dir, head := chainRepo(b, n, changes)
	for _, tc := range []struct {
		name   string
		squash bool
		want   int
	}{{"walk-10-commits", false, changes}, {"head-only", true, 1}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			stop := samplePeakHeap()
			locked := 0
			// CPU time of the timed part only (resetting the branch is not).
			var cpu int64
			for b.Loop() {
				b.StopTimer()
				gr, err := git.PlainOpen(dir)
				if err != nil {
					b.Fatal(err)
				}
				if err := gr.Storer.SetReference(plumbing.NewHashReference("refs/heads/main", plumbing.Hash(head))); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := cpuTime()
				repo, err := gitsource.Open(dir, gitsource.OpenOptions{Branch: "main"})
				if err != nil {
					b.Fatal(err)
				}
				out, err := CommitLocksWith(context.Background(), repo, WorkspaceOptions{}, LockRequest{}, CommitOptions{History: repo, Squash: tc.squash})
				if err != nil {
					b.Fatal(err)
				}
				if len(out.Commits) != tc.want || len(out.Changes) != tc.want*n {
					b.Fatalf("%d commits, %d lockfiles; want %d, %d", len(out.Commits), len(out.Changes), tc.want, tc.want*n)
				}
				locked = len(out.Changes)
				cpu += cpuTime() - start
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(locked), "ns/lockfile")
			b.ReportMetric(float64(cpu)/1e6/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(stop())/(1<<20), "peak-heap-MiB")
		})
	}
}

// samplePeakHeap samples the live heap every 5 ms until the returned
// function is called, which returns the highest value seen in bytes.
func samplePeakHeap() func() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak
	}
}
