package drivers

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"sync"

	"github.com/styrmin/styrmin/internal/jsonform"
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
	// docs are rendered YAML documents parsed, by their text: the two
	// sides of a plan mostly render the same objects (a cluster change
	// reaches the Ingress of a deployment, not its Deployment), and
	// parsing is the largest part of a render. Renders share them and
	// copy what they change (rendered.own).
	docMu sync.Mutex
	docs  map[string]map[string]any
	// texts are the canonical YAML of documents no patch changed, by
	// their text and the namespace the render gave them.
	texts map[renderedDoc][]byte
}

// renderedDoc is a document as rendered, with the namespace its render filled
// in ("" when it had one, or is cluster-scoped).
type renderedDoc struct {
	doc, namespace string
}

// renderSpec is what a render takes from the spec besides the values.
type renderSpec struct {
	comps   []Component
	patches []patchEntry
}

// NewRenderCache returns an empty cache.
func NewRenderCache() *RenderCache {
	return &RenderCache{m: map[[sha256.Size]byte]*Manifests{}, docs: map[string]map[string]any{}, texts: map[renderedDoc][]byte{}}
}

// parseDoc is parseObject through the cache, if there is one; shared
// reports an object the cache holds, which the caller must not change
// (rendered.own copies it).
func (rc *RenderCache) parseDoc(doc string) (obj map[string]any, shared bool, err error) {
	if rc == nil {
		obj, err = parseObject([]byte(doc))
		return obj, false, err
	}
	rc.docMu.Lock()
	obj, ok := rc.docs[doc]
	rc.docMu.Unlock()
	if !ok {
		if obj, err = parseObject([]byte(doc)); err != nil {
			return nil, false, err
		}
		rc.docMu.Lock()
		rc.docs[doc] = obj
		rc.docMu.Unlock()
	}
	return obj, obj != nil, nil
}

// encode is encodeYAML of o, through the cache for an object that is its
// document's as parsed (its namespace filled in): the two sides of a plan
// encode the same objects too.
func (rc *RenderCache) encode(o *rendered) ([]byte, error) {
	if rc == nil || o.doc == nil {
		return encodeYAML(o.obj)
	}
	rc.docMu.Lock()
	y, ok := rc.texts[*o.doc]
	rc.docMu.Unlock()
	if ok {
		return y, nil
	}
	y, err := encodeYAML(o.obj)
	if err != nil {
		return nil, err
	}
	rc.docMu.Lock()
	rc.texts[*o.doc] = y
	rc.docMu.Unlock()
	return y, nil
}

// Len is how many renders the cache holds.
func (rc *RenderCache) Len() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.m)
}

// renderKey is what a render's output depends on, but the values
// (hashed after it).
type renderKey struct {
	Driver      string  `json:"driver"`
	KubeVersion string  `json:"kubeVersion"`
	Context     Context `json:"context"`
}

// RenderKey is what a render of d for c and values depends on, as a
// digest (the driver's digest and declared Kubernetes version, the
// context, the values in their JSON form), and the values in that form:
// render those, so that the key alone decides the output (an integer and
// a float that print the same render the same). For the caches of
// renders: this one, and the agent's.
func (d *Driver) RenderKey(c Context, values map[string]any) (key [sha256.Size]byte, norm map[string]any, err error) {
	h := sha256.New()
	// Two JSON texts, one after the other: each ends where its value
	// does, so no two inputs hash the same text.
	enc := json.NewEncoder(h)
	if err := enc.Encode(renderKey{Driver: d.Digest, KubeVersion: d.compiled.kubeVersion, Context: c}); err != nil {
		return key, nil, err
	}
	if err := enc.Encode(values); err != nil {
		return key, nil, err
	}
	h.Sum(key[:0])
	norm, ok := jsonform.RoundTripMap(values)
	if !ok {
		vj, err := json.Marshal(values)
		if err != nil {
			return key, nil, err
		}
		if err := json.Unmarshal(vj, &norm); err != nil {
			return key, nil, err
		}
	}
	return key, norm, nil
}

// cachedRender renders through the driver's cache, if it has one.
func (d *Driver) cachedRender(ctx context.Context, c Context, values map[string]any, render func(context.Context, Context, map[string]any) (*Manifests, error)) (*Manifests, error) {
	rc := d.compiled.opts.RenderCache
	if rc == nil {
		return render(ctx, c, values)
	}
	key, norm, err := d.RenderKey(c, values)
	if err != nil {
		return render(ctx, c, values)
	}
	rc.mu.Lock()
	m, ok := rc.m[key]
	rc.mu.Unlock()
	if ok {
		return m, nil
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

// renderSpecFor evaluates the driver's components and patches for c, once
// per value of the parts of the context they use: a fleet's deployments
// of one name in many environments, and the two sides of a plan, mostly
// give the same (the deployment's and the cluster's names, not the
// domain). The result is shared, as a driver's static ones are: callers
// must not change it.
func (d *Driver) renderSpecFor(c Context) (renderSpec, error) {
	p := d.compiled.renderProj
	kj, keyErr := json.Marshal(p.keys.evalData(c))
	key := sha256.Sum256(kj)
	if keyErr == nil {
		if s, ok := d.compiled.renderSpecs.Load(key); ok {
			return s.(renderSpec), nil
		}
	}
	v := p.eval(c)
	comps, err := d.resolveComponents(v)
	if err != nil {
		return renderSpec{}, err
	}
	patches, err := d.decodePatches(v)
	if err != nil {
		return renderSpec{}, err
	}
	s := renderSpec{comps, patches}
	if keyErr == nil && d.compiled.renderSpecCount.Add(1) <= maxRenderSpecs {
		d.compiled.renderSpecs.Store(key, s)
	}
	return s, nil
}

// maxRenderSpecs bounds the evaluations of components and patches a driver
// remembers.
const maxRenderSpecs = 4096
