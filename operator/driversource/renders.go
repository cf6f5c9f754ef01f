package driversource

import (
	"container/list"
	"context"
	"crypto/sha256"
	"sync"

	"github.com/styrmin/styrmin/drivers"
)

// Defaults of Renders.
const (
	// DefaultRenderCacheSize is how many renders Renders keeps.
	DefaultRenderCacheSize = 512
	// DefaultRenderCacheBytes is how many bytes of renders Renders keeps
	// (renderBytes): an eighth of the agent's default memory (256 Mi). A
	// render may be as large as the rendered-bytes limit (64 Mi by
	// default), and a count alone let 15 renders of 17 MB each (one
	// deployment locked with 15 parameter sets of a chart of 20
	// ConfigMaps of 900 KB) exhaust the agent. A render of the example
	// webapp weighs under 6 KB (TestTheByteBudgetKeepsAsManyExampleRendersAsTheCount),
	// so the budget holds DefaultRenderCacheSize of them ten times over:
	// the count still bounds a fleet of ordinary charts, the bytes a few
	// large ones.
	DefaultRenderCacheBytes = 32 << 20
)

// Renders renders instances for the agent's controllers and keeps the
// latest renders, by what they are made from (the driver's digest, the
// context and the values). A change is rendered by its task (the policy
// check before any step) and again by the StyrminDeployment controller
// when it applies it, and a render runs in the driver sandbox, where only
// a few run at once: sharing the render halves the sandbox's work, which
// bounded how fast a fan-out's tasks started.
// Manifests are shared: callers must not change them. Failures are not
// kept. Bounded in count and in bytes: beyond either bound the least
// recently used renders are dropped, and a render larger than the byte
// bound is returned but not kept, so a long-running agent does not grow
// with its history nor with a chart that renders large. Safe for
// concurrent use; the zero value is not usable, and a nil *Renders
// renders without caching.
type Renders struct {
	size     int
	maxBytes int64

	mu    sync.Mutex
	m     map[[sha256.Size]byte]*list.Element // of *keptRender
	lru   *list.List                          // most recently used first
	bytes int64                               // renderBytes of what lru holds
}

// keptRender is one render the cache holds.
type keptRender struct {
	key   [sha256.Size]byte
	m     *drivers.Manifests
	bytes int64
}

// RendersOptions configures NewRendersWith.
type RendersOptions struct {
	// MaxRenders bounds the renders kept (DefaultRenderCacheSize when ≤ 0).
	MaxRenders int
	// MaxBytes bounds the bytes of the renders kept
	// (DefaultRenderCacheBytes when ≤ 0); see renderBytes.
	MaxBytes int64
}

// NewRenders returns an empty cache of at most size renders
// (DefaultRenderCacheSize when size ≤ 0) and DefaultRenderCacheBytes.
func NewRenders(size int) *Renders {
	return NewRendersWith(RendersOptions{MaxRenders: size})
}

// NewRendersWith returns an empty cache bounded by opts.
func NewRendersWith(opts RendersOptions) *Renders {
	if opts.MaxRenders <= 0 {
		opts.MaxRenders = DefaultRenderCacheSize
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultRenderCacheBytes
	}
	return &Renders{size: opts.MaxRenders, maxBytes: opts.MaxBytes,
		m: make(map[[sha256.Size]byte]*list.Element), lru: list.New()}
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
	el, ok := r.m[key]
	if ok {
		r.lru.MoveToFront(el)
	}
	r.mu.Unlock()
	if ok {
		return el.Value.(*keptRender).m, nil
	}
	// The values in the key's form: the key alone decides the output.
	m, err := d.RenderContext(ctx, c, norm)
	if err != nil {
		return nil, err
	}
	r.keep(key, m)
	return m, nil
}

// keep adds m under key, then drops the least recently used renders
// beyond the bounds. A render over the byte bound alone is not kept: it
// would drop every other render and then itself.
func (r *Renders) keep(key [sha256.Size]byte, m *drivers.Manifests) {
	n := renderBytes(m)
	if n > r.maxBytes {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[key]; ok {
		return // rendered meanwhile by another caller
	}
	r.m[key] = r.lru.PushFront(&keptRender{key: key, m: m, bytes: n})
	r.bytes += n
	for r.lru.Len() > r.size || r.bytes > r.maxBytes {
		old := r.lru.Remove(r.lru.Back()).(*keptRender)
		delete(r.m, old.key)
		r.bytes -= old.bytes
	}
}

// Len is how many renders the cache holds.
func (r *Renders) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Len()
}

// Bytes is how many bytes of renders the cache holds (see renderBytes).
func (r *Renders) Bytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}

// objectHeaderBytes is what a drivers.Object costs besides its text and
// names: its five string headers and its slice header (104 bytes on a
// 64-bit machine), rounded up for the allocator.
const objectHeaderBytes = 128

// renderBytes is about what m holds on the heap: the capacity of each
// object's text, its names and its header. The names may be shared with
// other renders (interned kinds and API versions); counting them anyway
// errs on the side of keeping less.
func renderBytes(m *drivers.Manifests) int64 {
	n := int64(objectHeaderBytes)
	for _, o := range m.Objects {
		n += objectHeaderBytes + int64(cap(o.YAML)) +
			int64(len(o.APIVersion)+len(o.Kind)+len(o.Namespace)+len(o.Name)+len(o.Component))
	}
	return n
}
