package driversource

import (
	"context"
	"crypto/sha256"
	"sync"

	"github.com/styrmin/styrmin/drivers"
)

// DefaultRenderCacheSize is how many renders Renders keeps.
const DefaultRenderCacheSize = 512

// Renders renders instances for the agent's controllers and keeps the
// latest renders, by what they are made from (the driver's digest, the
// context and the values). A change is rendered by its task (the policy
// check before any step) and again by the StyrminDeployment controller
// when it applies it, and a render runs in the driver sandbox, where only
// a few run at once: sharing the render halves the sandbox's work, which
// bounded how fast a fan-out's tasks started.
// Manifests are shared: callers must not change them. Failures are not
// kept. Bounded: a full cache drops an entry at random, so a
// long-running agent does not grow with its history. Safe for concurrent
// use; the zero value is not usable, and a nil *Renders renders without
// caching.
type Renders struct {
	size int
	mu   sync.Mutex
	m    map[[sha256.Size]byte]*drivers.Manifests
}

// NewRenders returns an empty cache of at most size renders
// (DefaultRenderCacheSize when size ≤ 0).
func NewRenders(size int) *Renders {
	if size <= 0 {
		size = DefaultRenderCacheSize
	}
	return &Renders{size: size, m: make(map[[sha256.Size]byte]*drivers.Manifests, size)}
}

// Render renders d for c and values (d.RenderContext), or returns the
// render of the same input kept from before (drivers.Driver.RenderKey).
func (r *Renders) Render(ctx context.Context, d *drivers.Driver, c drivers.Context, values map[string]any) (*drivers.Manifests, error) {
	if r == nil {
		return d.RenderContext(ctx, c, values)
	}
	key, norm, err := d.RenderKey(c, values)
	if err != nil {
		// What JSON cannot take, a lock cannot hold either: render
		// without the cache and let the render report it.
		return d.RenderContext(ctx, c, values)
	}
	r.mu.Lock()
	m, ok := r.m[key]
	r.mu.Unlock()
	if ok {
		return m, nil
	}
	// The values in the key's form: the key alone decides the output.
	m, err = d.RenderContext(ctx, c, norm)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= r.size {
		for k := range r.m {
			delete(r.m, k)
			break
		}
	}
	r.m[key] = m
	return m, nil
}

// Len is how many renders the cache holds.
func (r *Renders) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
