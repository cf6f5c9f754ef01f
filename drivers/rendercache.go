package drivers

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"sync"
)

// RenderCache remembers renders by what they are made from: the driver
// (its digest and declared Kubernetes version), the context and the
// values. A command that renders an instance twice (a plan resolves the
// head, which renders it for the policy check, then renders it again for
// the manifest diff) renders it once. Values are taken through their
// JSON form, the form a lockfile holds and the agent renders, so the key
// alone decides the output. Failures are not kept (a timeout may not
// recur). Manifests from the cache are shared: callers must not change
// them. Safe for concurrent use; it grows with what is rendered, so it
// is for one command's run, not a long-lived process.
type RenderCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*Manifests
}

// NewRenderCache returns an empty cache.
func NewRenderCache() *RenderCache {
	return &RenderCache{m: map[[sha256.Size]byte]*Manifests{}}
}

// Len is how many renders the cache holds.
func (rc *RenderCache) Len() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.m)
}

// renderKey is what a render's output depends on.
type renderKey struct {
	Driver      string          `json:"driver"`
	KubeVersion string          `json:"kubeVersion"`
	Context     Context         `json:"context"`
	Values      json.RawMessage `json:"values"`
}

// cachedRender renders through the driver's cache, if it has one.
func (d *Driver) cachedRender(ctx context.Context, c Context, values map[string]any, render func(context.Context, Context, map[string]any) (*Manifests, error)) (*Manifests, error) {
	rc := d.compiled.opts.RenderCache
	if rc == nil {
		return render(ctx, c, values)
	}
	vj, err := json.Marshal(values)
	if err != nil {
		return render(ctx, c, values)
	}
	kj, err := json.Marshal(renderKey{Driver: d.Digest, KubeVersion: d.compiled.kubeVersion, Context: c, Values: vj})
	if err != nil {
		return render(ctx, c, values)
	}
	key := sha256.Sum256(kj)
	rc.mu.Lock()
	m, ok := rc.m[key]
	rc.mu.Unlock()
	if ok {
		return m, nil
	}
	var norm map[string]any
	if err := json.Unmarshal(vj, &norm); err != nil {
		return render(ctx, c, values)
	}
	m, err = render(ctx, c, norm)
	if err != nil {
		return nil, err
	}
	rc.mu.Lock()
	rc.m[key] = m
	rc.mu.Unlock()
	return m, nil
}
