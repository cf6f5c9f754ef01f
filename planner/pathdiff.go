package planner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/styrmin/styrmin/internal/keypath"
)

// normalize turns any JSON-encodable value into the generic JSON tree
// (map[string]any, []any, string, json.Number, bool, nil), so values read
// from a lockfile and values computed by CUE compare by meaning.
func normalize(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// pathSegment is one step of a path: a map key or a list index.
type pathSegment struct {
	key   string
	index int
	isIdx bool
}

// formatPath renders segments as keypath writes them: identifier keys
// joined with dots, other keys as ["key"], indices as [i].
func formatPath(segs []pathSegment) string {
	var b strings.Builder
	for _, s := range segs {
		if s.isIdx {
			keypath.AppendIndex(&b, s.index)
			continue
		}
		keypath.Append(&b, s.key)
	}
	return b.String()
}

// leafRule decides how one path of the tree is shown: as a leaf (not
// descended into) and whether it is masked or a secret reference.
type leafRule func(segs []pathSegment) (leaf, sensitive, secretRef bool)

// treeDiff compares two normalized JSON trees. Maps are compared key by
// key and lists index by index; a subtree that exists on one side only is
// expanded into its leaves, so every changed value has its own line.
type treeDiff struct {
	rule  leafRule
	masks sideMaskers
	out   []Change
	segs  [][]pathSegment // the raw path of each change in out
}

func (d *treeDiff) diff(segs []pathSegment, a, b any, hasA, hasB bool) {
	// null is no value (Helm, too, drops keys set to null).
	hasA = hasA && a != nil
	hasB = hasB && b != nil
	leaf, sensitive, secret := false, false, false
	if d.rule != nil {
		leaf, sensitive, secret = d.rule(segs)
	}
	if !leaf {
		am, aIsMap := a.(map[string]any)
		bm, bIsMap := b.(map[string]any)
		al, aIsList := a.([]any)
		bl, bIsList := b.([]any)
		switch {
		case (aIsMap || !hasA) && (bIsMap || !hasB) && (aIsMap || bIsMap) && (len(am) > 0 || len(bm) > 0):
			keys := make([]string, 0, len(am)+len(bm))
			for k := range am {
				keys = append(keys, k)
			}
			for k := range bm {
				if _, ok := am[k]; !ok {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				av, inA := am[k]
				bv, inB := bm[k]
				d.diff(append(segs, pathSegment{key: k}), av, bv, inA, inB)
			}
			return
		case (aIsList || !hasA) && (bIsList || !hasB) && (aIsList || bIsList) && (len(al) > 0 || len(bl) > 0):
			n := max(len(al), len(bl))
			for i := 0; i < n; i++ {
				var av, bv any
				inA, inB := i < len(al), i < len(bl)
				if inA {
					av = al[i]
				}
				if inB {
					bv = bl[i]
				}
				d.diff(append(segs, pathSegment{index: i, isIdx: true}), av, bv, inA, inB)
			}
			return
		}
	}
	if hasA && hasB && jsonEqual(a, b) {
		return
	}
	c := Change{Path: formatPath(segs), SecretRef: secret}
	switch {
	case hasA && hasB:
		c.Op = OpChanged
	case hasB:
		c.Op = OpAdded
	case hasA:
		c.Op = OpRemoved
	default:
		return
	}
	if hasA {
		c.Old = a
	}
	if hasB {
		c.New = b
	}
	if sensitive {
		c.Sensitive = true
		if hasA {
			c.Old = Masked
		}
		if hasB {
			c.New = Masked
			if hasA {
				c.New = MaskedChanged // the values differ: say so, not what they are
			}
		}
	} else if d.masks.active() && !secret {
		var ma, mb bool
		c.Old, ma = d.masks.old.maskValue(c.Old)
		c.New, mb = d.masks.new.maskValue(c.New)
		c.Sensitive = ma || mb
	}
	d.out = append(d.out, c)
	d.segs = append(d.segs, append([]pathSegment(nil), segs...))
}

// jsonEqual compares normalized JSON trees.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		fx, errX := x.Float64()
		fy, errY := y.Float64()
		return errX == nil && errY == nil && fx == fy
	default:
		return a == b
	}
}

// countLeaves counts the leaf values of a normalized tree (an empty map
// or list counts as one).
func countLeaves(v any) int {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 {
			return 1
		}
		n := 0
		for _, x := range t {
			n += countLeaves(x)
		}
		return n
	case []any:
		if len(t) == 0 {
			return 1
		}
		n := 0
		for _, x := range t {
			n += countLeaves(x)
		}
		return n
	default:
		return 1
	}
}

// formatValue renders a JSON value compactly for text output.
func formatValue(v any) string {
	if m, ok := v.(map[string]any); ok && len(m) == 2 {
		if name, ok := m["name"].(string); ok {
			if key, ok := m["key"].(string); ok {
				return "secret " + name + "/" + key
			}
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
