package planner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/blockyaml"
)

// Redacted is what a plan shows instead of a value of a Secret object's
// data; RedactedChanged marks one that differs from the old value.
const (
	Redacted        = "(redacted)"
	RedactedChanged = "(redacted, changed)"
)

// objectKey identifies an object across two renders: API group (not
// version: a version bump of the same object is a change), kind,
// namespace and name.
type objectKey struct {
	group, kind, namespace, name string
}

func keyOf(o drivers.Object) objectKey {
	group := ""
	if i := strings.LastIndex(o.APIVersion, "/"); i >= 0 {
		group = o.APIVersion[:i]
	}
	return objectKey{group: group, kind: o.Kind, namespace: o.Namespace, name: o.Name}
}

func lessObject(a, b drivers.Object) bool {
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.APIVersion < b.APIVersion
}

// sideMaskers mask the old and the new render.
type sideMaskers struct {
	old, new *masker
}

func (s sideMaskers) active() bool { return !s.old.empty() || !s.new.empty() }

// diffManifests compares two renders object by object. Either side may be
// nil (create, delete). Sensitive values are masked and the data of Secret
// objects redacted before anything is compared as text.
func diffManifests(oldM, newM *drivers.Manifests, masks sideMaskers) (ManifestDiff, error) {
	var out ManifestDiff
	olds := map[objectKey]drivers.Object{}
	var keys []drivers.Object
	if oldM != nil {
		for _, o := range oldM.Objects {
			k := keyOf(o)
			if _, dup := olds[k]; dup {
				return out, fmt.Errorf("old render has %s twice", refOf(o))
			}
			olds[k] = o
			keys = append(keys, o)
		}
	}
	news := map[objectKey]drivers.Object{}
	if newM != nil {
		for _, o := range newM.Objects {
			k := keyOf(o)
			if _, dup := news[k]; dup {
				return out, fmt.Errorf("new render has %s twice", refOf(o))
			}
			news[k] = o
			if _, inOld := olds[k]; !inOld {
				keys = append(keys, o)
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool { return lessObject(keys[i], keys[j]) })
	for _, ko := range keys {
		k := keyOf(ko)
		o, inOld := olds[k]
		n, inNew := news[k]
		switch {
		case inOld && inNew:
			if bytes.Equal(o.YAML, n.YAML) {
				out.Unchanged++
				continue
			}
			od, err := diffObject(o, n, masks)
			if err != nil {
				return out, err
			}
			if od.Fields == 0 {
				// Same content, different spelling: nothing changes.
				out.Unchanged++
				continue
			}
			out.Changed++
			out.Objects = append(out.Objects, od)
		case inNew:
			od, err := addedOrRemoved(n, OpAdded, masks.new)
			if err != nil {
				return out, err
			}
			out.Added++
			out.Objects = append(out.Objects, od)
		default:
			od, err := addedOrRemoved(o, OpRemoved, masks.old)
			if err != nil {
				return out, err
			}
			out.Removed++
			out.Objects = append(out.Objects, od)
		}
	}
	return out, nil
}

func refOf(o drivers.Object) string {
	if o.Namespace == "" {
		return o.Kind + "/" + o.Name
	}
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

// parseObject decodes an object's YAML into a normalized JSON tree. It
// reads with the YAML library that wrote it (drivers encode with yaml.v3),
// so a string such as "y" stays a string.
func parseObject(o drivers.Object) (map[string]any, error) {
	// The drivers' canonical form is block YAML the fast reader reads
	// as go-yaml v3 then normalize would, numbers included.
	if v, ok := blockyaml.Decode(o.YAML); ok {
		if m, ok := v.(map[string]any); ok {
			return m, nil
		}
	}
	var v any
	if err := yamlv3.Unmarshal(o.YAML, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", refOf(o), err)
	}
	n, err := normalize(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", refOf(o), err)
	}
	m, ok := n.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not an object", refOf(o))
	}
	return m, nil
}

func diffObject(o, n drivers.Object, masks sideMaskers) (ObjectDiff, error) {
	od := ObjectDiff{APIVersion: n.APIVersion, Kind: n.Kind, Namespace: n.Namespace, Name: n.Name, Component: n.Component, Op: OpChanged}
	ot, err := parseObject(o)
	if err != nil {
		return od, err
	}
	nt, err := parseObject(n)
	if err != nil {
		return od, err
	}
	d := &treeDiff{}
	d.diff(nil, ot, nt, true, true)
	od.Fields = len(d.out)
	if od.Fields == 0 {
		return od, nil
	}
	oldText, newText := string(o.YAML), string(n.YAML)
	secret := n.Kind == "Secret" && (n.APIVersion == "v1")
	if masks.active() || secret {
		if secret {
			redactSecretData(ot, nt)
		}
		mo, _ := masks.old.maskValue(ot)
		mn, _ := masks.new.maskValue(nt)
		if oldText, err = marshalYAML(mo); err != nil {
			return od, err
		}
		if newText, err = marshalYAML(mn); err != nil {
			return od, err
		}
	}
	ref := refOf(n)
	od.Diff = unifiedDiff("a/"+ref, "b/"+ref, oldText, newText)
	if od.Diff == "" {
		// Only masked values changed: say so rather than show nothing.
		od.Diff = fmt.Sprintf("--- a/%s\n+++ b/%s\n@@ masked values changed @@\n", ref, ref)
	}
	return od, nil
}

func addedOrRemoved(o drivers.Object, op ChangeOp, m *masker) (ObjectDiff, error) {
	od := ObjectDiff{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Component: o.Component, Op: op}
	t, err := parseObject(o)
	if err != nil {
		return od, err
	}
	od.Fields = countLeaves(t)
	text := string(o.YAML)
	if !m.empty() || (o.Kind == "Secret" && o.APIVersion == "v1") {
		redactSecretData(t, nil)
		mt, _ := m.maskValue(t)
		if text, err = marshalYAML(mt); err != nil {
			return od, err
		}
	}
	ref := refOf(o)
	if op == OpAdded {
		od.Diff = unifiedDiff("/dev/null", "b/"+ref, "", text)
	} else {
		od.Diff = unifiedDiff("a/"+ref, "/dev/null", text, "")
	}
	return od, nil
}

// redactSecretData replaces the values of a Secret's data and stringData
// (in place): Redacted where both sides agree, RedactedChanged on the new
// side where they differ. Either side may be nil.
func redactSecretData(old, new map[string]any) {
	if !isSecret(old) && !isSecret(new) {
		return
	}
	for _, field := range []string{"data", "stringData"} {
		om, _ := fieldMap(old, field)
		nm, _ := fieldMap(new, field)
		for k, v := range nm {
			if ov, ok := om[k]; ok && jsonEqual(ov, v) {
				nm[k] = Redacted
			} else if om != nil {
				nm[k] = RedactedChanged
			} else {
				nm[k] = Redacted
			}
		}
		for k := range om {
			om[k] = Redacted
		}
	}
}

func isSecret(m map[string]any) bool {
	return m != nil && m["kind"] == "Secret" && m["apiVersion"] == "v1"
}

func fieldMap(m map[string]any, field string) (map[string]any, bool) {
	if m == nil {
		return nil, false
	}
	f, ok := m[field].(map[string]any)
	return f, ok
}

// marshalYAML encodes a JSON tree the way drivers.Object.YAML is encoded
// (sorted keys, two-space indentation), so a masked object differs from
// its rendering only where values were masked.
func marshalYAML(v any) (string, error) {
	var buf bytes.Buffer
	enc := yamlv3.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(yamlNumbers(v)); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// yamlNumbers turns json.Number into int64 or float64, which YAML writes
// as numbers (a json.Number would be written as a string).
func yamlNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = yamlNumbers(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = yamlNumbers(x)
		}
		return out
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		if f, err := t.Float64(); err == nil {
			return f
		}
		return t.String()
	}
	return v
}
