package drivers

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// LoadShare remembers the drivers loaded through it, by their folder's
// source and files and the options that decide a load (its sandbox and
// render cache included): a command that loads two catalogs mostly alike
// (a plan, the drivers of its base and of its head) evaluates each driver
// version once, in its sandbox child and in-process. The Driver is shared
// by both catalogs, as renders of one catalog share it. Loads of the same
// folder at once wait for the first; a failed load is not kept (a time
// limit may not be hit again), so each of them then loads for itself.
// Safe for concurrent use; for a command's run.
type LoadShare struct {
	mu    sync.Mutex
	loads map[string]*sharedLoad
}

type sharedLoad struct {
	done chan struct{}
	d    *Driver
	err  error
}

// NewLoadShare returns an empty share.
func NewLoadShare() *LoadShare { return &LoadShare{loads: map[string]*sharedLoad{}} }

// shareKey is what a load of f with opts depends on.
func (opts LoadOptions) shareKey(f *folder) string {
	return strings.Join([]string{f.source, f.digest(), opts.KubeVersion, strings.Join(opts.APIVersions, ","),
		fmt.Sprintf("%+v %p %p", opts.Limits.WithDefaults(), opts.Sandbox, opts.RenderCache)}, "\x00")
}

// errNoSharedLoad is a shared load that ended without a result (it
// panicked): its waiters load for themselves.
var errNoSharedLoad = errors.New("drivers: the shared load ended without a driver")

// load returns the Driver loaded for key, loading it with fn the first
// time; after a failed load, with fn again.
func (s *LoadShare) load(key string, fn func() (*Driver, error)) (*Driver, error) {
	s.mu.Lock()
	l, ok := s.loads[key]
	if !ok {
		l = &sharedLoad{done: make(chan struct{})}
		s.loads[key] = l
	}
	s.mu.Unlock()
	if ok {
		<-l.done
		if l.err != nil {
			return fn()
		}
		return l.d, nil
	}
	defer func() {
		if l.d == nil && l.err == nil {
			l.err = errNoSharedLoad
		}
		if l.err != nil {
			s.mu.Lock()
			delete(s.loads, key)
			s.mu.Unlock()
		}
		close(l.done)
	}()
	l.d, l.err = fn()
	return l.d, l.err
}
