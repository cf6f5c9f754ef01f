package drivers

import (
	"encoding/json"
	"fmt"
	"strings"

	"cuelang.org/go/cue"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"sigs.k8s.io/kustomize/api/filters/patchstrategicmerge"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	k8syaml "sigs.k8s.io/yaml"
)

// patchSpec is one entry of the spec's `patches`, evaluated for a context.
type patchSpec struct {
	Target    *patchTarget `json:"target"`
	Patch     any          `json:"patch"`
	JSONPatch any          `json:"jsonPatch"`
}

type patchTarget struct {
	Group         string            `json:"group"`
	Version       string            `json:"version"`
	Kind          string            `json:"kind"`
	Name          string            `json:"name"`
	Namespace     string            `json:"namespace"`
	LabelSelector map[string]string `json:"labelSelector"`
}

// applyPatches applies the spec's patches in order, the way Kustomize's
// `patches` field does, without a Kustomize build: strategic-merge patches
// through kyaml's merge (the same code Kustomize runs), JSON 6902 patches
// through the JSON patch library Kustomize uses. A patch that matches no
// object is an error.
func (d *Driver) applyPatches(v cue.Value, objs []*rendered) ([]*rendered, error) {
	file := d.compiled.file
	pv := v.LookupPath(patchesPath)
	if err := pv.Validate(cue.Concrete(true)); err != nil {
		return nil, cueError(file, err)
	}
	it, err := pv.List()
	if err != nil {
		return nil, cueError(file, err)
	}
	for i := 0; it.Next(); i++ {
		ev := it.Value()
		field := fmt.Sprintf("patches[%d]", i)
		fail := func(format string, args ...any) error {
			return specErrorAt(file, ev.Pos(), field, format, args...)
		}
		var p patchSpec
		if err := ev.Decode(&p); err != nil {
			return nil, cueError(file, err)
		}
		switch {
		case p.Patch != nil && p.JSONPatch != nil:
			return nil, fail("set either patch (strategic merge) or jsonPatch, not both")
		case p.Patch == nil && p.JSONPatch == nil:
			return nil, fail("set patch (strategic merge) or jsonPatch")
		}
		if p.Patch != nil {
			patch, err := asObject(p.Patch)
			if err != nil {
				return nil, fail("patch: %v", err)
			}
			t := p.Target
			if t == nil {
				t = targetOf(patch)
				if t.Kind == "" || t.Name == "" {
					return nil, fail("a patch without target needs kind and metadata.name")
				}
			}
			n := 0
			for _, o := range objs {
				if !t.matches(o) {
					continue
				}
				n++
				if err := mergePatch(o, patch); err != nil {
					return nil, fail("applying to %s %s: %v", o.kind(), o.name(), err)
				}
			}
			if n == 0 {
				return nil, fail("matches no object of the rendered chart (target %s)", t)
			}
			continue
		}
		if p.Target == nil {
			return nil, fail("a jsonPatch needs a target")
		}
		ops, err := asJSON(p.JSONPatch)
		if err != nil {
			return nil, fail("jsonPatch: %v", err)
		}
		jp, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			return nil, fail("jsonPatch: %v", err)
		}
		n := 0
		for _, o := range objs {
			if !p.Target.matches(o) {
				continue
			}
			n++
			b, err := json.Marshal(o.obj)
			if err != nil {
				return nil, fail("%v", err)
			}
			b, err = jp.Apply(b)
			if err != nil {
				return nil, fail("applying to %s %s: %v", o.kind(), o.name(), err)
			}
			if o.obj, err = decodeJSONObject(b); err != nil {
				return nil, fail("applying to %s %s: %v", o.kind(), o.name(), err)
			}
		}
		if n == 0 {
			return nil, fail("matches no object of the rendered chart (target %s)", p.Target)
		}
	}
	return objs, nil
}

// asObject accepts a patch written as an object or as YAML text.
func asObject(x any) (map[string]any, error) {
	if s, ok := x.(string); ok {
		j, err := k8syaml.YAMLToJSON([]byte(s))
		if err != nil {
			return nil, err
		}
		return decodeJSONObject(j)
	}
	m, ok := x.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be an object")
	}
	return m, nil
}

// asJSON accepts JSON patch operations written as a list or as YAML/JSON
// text and returns them as JSON.
func asJSON(x any) ([]byte, error) {
	if s, ok := x.(string); ok {
		return k8syaml.YAMLToJSON([]byte(s))
	}
	return json.Marshal(x)
}

func targetOf(patch map[string]any) *patchTarget {
	t := &patchTarget{}
	if av, _ := patch["apiVersion"].(string); av != "" {
		if i := strings.IndexByte(av, '/'); i >= 0 {
			t.Group, t.Version = av[:i], av[i+1:]
		} else {
			t.Version = av
		}
	}
	t.Kind, _ = patch["kind"].(string)
	if m, ok := patch["metadata"].(map[string]any); ok {
		t.Name, _ = m["name"].(string)
		t.Namespace, _ = m["namespace"].(string)
	}
	return t
}

func (t *patchTarget) matches(o *rendered) bool {
	av := o.apiVersion()
	g, ver := "", av
	if i := strings.IndexByte(av, '/'); i >= 0 {
		g, ver = av[:i], av[i+1:]
	}
	switch {
	case t.Kind != "" && t.Kind != o.kind(),
		t.Name != "" && t.Name != o.name(),
		t.Namespace != "" && t.Namespace != o.namespace(),
		t.Group != "" && t.Group != g,
		t.Version != "" && t.Version != ver:
		return false
	}
	return len(t.LabelSelector) == 0 || subsetStr(t.LabelSelector, o.labels())
}

func (t *patchTarget) String() string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("group", t.Group)
	add("version", t.Version)
	add("kind", t.Kind)
	add("name", t.Name)
	add("namespace", t.Namespace)
	for _, k := range sortedKeys(t.LabelSelector) {
		parts = append(parts, "label:"+k+"="+t.LabelSelector[k])
	}
	return strings.Join(parts, ",")
}

// mergePatch applies a strategic-merge patch to o. As Kustomize does for
// targeted patches, the patch takes the target's identity first, so a
// patch selected by target never renames what it patches.
func mergePatch(o *rendered, patch map[string]any) error {
	p := make(map[string]any, len(patch))
	for k, v := range patch {
		p[k] = v
	}
	meta := map[string]any{}
	if m, ok := patch["metadata"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	meta["name"] = o.name()
	if ns := o.namespace(); ns != "" {
		meta["namespace"] = ns
	} else {
		delete(meta, "namespace")
	}
	p["metadata"] = meta
	p["apiVersion"] = o.apiVersion()
	p["kind"] = o.kind()

	pj, err := json.Marshal(p)
	if err != nil {
		return err
	}
	oj, err := json.Marshal(o.obj)
	if err != nil {
		return err
	}
	pn, err := kyaml.Parse(string(pj))
	if err != nil {
		return err
	}
	on, err := kyaml.Parse(string(oj))
	if err != nil {
		return err
	}
	out, err := patchstrategicmerge.Filter{Patch: pn}.Filter([]*kyaml.RNode{on})
	if err != nil {
		return err
	}
	if len(out) != 1 {
		return fmt.Errorf("the patch deletes the object; remove it from the chart instead")
	}
	b, err := out[0].MarshalJSON()
	if err != nil {
		return err
	}
	obj, err := decodeJSONObject(b)
	if err != nil {
		return err
	}
	o.obj = obj
	return nil
}
