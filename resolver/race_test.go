package resolver

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// overlayFS replaces the content of some files of a base file system.
type overlayFS struct {
	base  fs.FS
	files map[string][]byte
}

func (o overlayFS) Open(name string) (fs.File, error) {
	if data, ok := o.files[name]; ok {
		return fstest.MapFS{"f": &fstest.MapFile{Data: data, Mode: 0o644}}.Open("f")
	}
	return o.base.Open(name)
}

// TestConcurrentLockersNeverReuseASequence races several lockers, each
// with its own clone, against a bare remote served over HTTP by git
// http-backend. Each commits a change to the same deployment together with
// its lockfile; a locker whose push is rejected resolves again on the new
// head and renumbers. Afterwards the branch's sequences for the deployment
// strictly increase, with no number used twice, one per landed commit.
func TestConcurrentLockersNeverReuseASequence(t *testing.T) {
	srv := gitserver.New(t, gitserver.WithToken("t0ken"))
	seedDir := exampleCopy(t)
	lockDirInto(t, seedDir)
	srv.Seed("state", os.DirFS(seedDir), "initial configuration and locks")
	url := srv.RepoURL("state")

	const lockers = 5
	const web = "clusters/local/environments/dev/deployments/web.cue"
	id := ID{"local", "dev", "web"}
	var wg sync.WaitGroup
	errs := make([]error, lockers)
	landed := make([]bool, lockers)
	for i := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			repo, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: "t0ken"}})
			if err != nil {
				errs[i] = err
				return
			}
			content := []byte(fmt.Sprintf("driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: %d\n", i+3))
			build := func(ctx context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
				ws, err := LoadWorkspace(overlayFS{base: headFS, files: map[string][]byte{web: content}}, WorkspaceOptions{SourceCommit: head.String()})
				if err != nil {
					return gitsource.Change{}, err
				}
				changes, _, err := ws.Lock(LockAllOrNothing)
				if err != nil {
					return gitsource.Change{}, err
				}
				ch := gitsource.Change{Files: map[string][]byte{web: content}, Locks: map[string]int{}}
				for _, c := range changes {
					ch.Files[c.Path()] = c.Data
					ch.Locks[c.ID.String()] = int(c.Next.Sequence)
				}
				return ch, nil
			}
			res, err := repo.CommitLocks(ctx, gitsource.CommitRequest{Build: build, MaxAttempts: 20})
			errs[i] = err
			landed[i] = err == nil && res.Committed
		}()
	}
	wg.Wait()
	nLanded := 0
	for i, err := range errs {
		if err != nil {
			t.Errorf("locker %d: %v", i, err)
		}
		if landed[i] {
			nLanded++
		}
	}

	// Walk the branch: every lock commit of web carries the next number.
	check, err := gitsource.Clone(context.Background(), url, "", gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: "t0ken"}})
	if err != nil {
		t.Fatal(err)
	}
	head, err := check.Head()
	if err != nil {
		t.Fatal(err)
	}
	changes, err := check.LockChanges(gitsource.Hash{}, head, "locks/")
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, c := range changes {
		if c.Path != id.LockPath() {
			continue
		}
		fsys, err := check.FS(c.Commit)
		if err != nil {
			t.Fatal(err)
		}
		data, err := fs.ReadFile(fsys, c.Path)
		if err != nil {
			t.Fatal(err)
		}
		in, err := DecodeLock(c.Path, data)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, in.Sequence)
	}
	if len(seqs) != nLanded+1 {
		t.Fatalf("the branch has %d locks of %s (%v), want %d (seed + %d landed lockers)", len(seqs), id, seqs, nLanded+1, nLanded)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("sequences along the branch: %v, want strictly increasing by one", seqs)
		}
	}
	if nLanded != lockers {
		t.Errorf("%d of %d lockers landed", nLanded, lockers)
	}
}
