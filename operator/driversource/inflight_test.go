package driversource

import (
	"context"
	"io/fs"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/resolver"
)

// blockingFS holds every open under prefix until release is closed, and
// counts the opens of the spec: a driver that is slow to load.
type blockingFS struct {
	fs.FS
	prefix  string
	release chan struct{}
	specs   atomic.Int32
}

func (b *blockingFS) Open(name string) (fs.File, error) {
	if strings.HasPrefix(name, b.prefix) {
		if strings.HasSuffix(name, "/driver.cue") {
			b.specs.Add(1)
		}
		<-b.release
	}
	return b.FS.Open(name)
}

// A driver version that is slow to load holds back only the requests for
// it, and is loaded once for all of them; another version loads
// meanwhile.
func TestSlowDriverLoadHoldsBackOnlyItsOwnRequestsAndLoadsOnce(t *testing.T) {
	good, digest := webapp(t, "drivers/webapp/1.1.0/")
	slowFiles, _ := webapp(t, "drivers/webapp/1.0.9/")
	files := fstest.MapFS{}
	maps.Copy(files, good)
	maps.Copy(files, slowFiles)
	head := hash('1')
	slow := &blockingFS{FS: files, prefix: "drivers/webapp/1.0.9/", release: make(chan struct{})}
	s := NewRepoDrivers(&fakeRepo{head: head, commits: map[gitsource.Hash]fs.FS{head: slow}}, nil, LoadOptions{})

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			_, err := s.Driver(context.Background(), Request{Ref: resolver.DriverRef{Name: "webapp", Version: "1.0.9"}, Commit: head.String()})
			errs <- err
		})
	}
	start := time.Now()
	d, err := s.Driver(context.Background(), Request{Ref: resolver.DriverRef{Name: "webapp", Version: "1.1.0", Digest: digest}, Commit: head.String()})
	if err != nil || d.Digest != digest {
		t.Fatalf("the other version: %v, %v", d, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the other version took %s behind the slow one", took)
	}
	// A waiter whose context ends stops waiting; the load goes on.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Driver(ctx, Request{Ref: resolver.DriverRef{Name: "webapp", Version: "1.0.9"}, Commit: head.String()}); err == nil {
		t.Fatal("a waiter with an ended context got a driver")
	}
	close(slow.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		// The folder holds 1.1.0 under the 1.0.9 name: every waiter gets
		// the one load's answer.
		if err == nil || !strings.Contains(err.Error(), "holds webapp@1.1.0") {
			t.Errorf("slow version: %v", err)
		}
	}
	// One load opens the spec twice (to stat it, to read it); four
	// requests loading on their own would open it eight times.
	if n := slow.specs.Load(); n != 2 {
		t.Errorf("the slow version's spec was opened %d times, want 2: one load for all requests", n)
	}
}
