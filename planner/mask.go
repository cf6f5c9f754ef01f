package planner

import (
	"encoding/base64"
	"encoding/json"
	"sort"
	"strings"

	"github.com/styrmin/styrmin/drivers"
)

// minMaskLen is the shortest sensitive value masked where it appears
// outside its own parameter (in chart values and manifests). Shorter
// values would mask unrelated text ("1", "on"); at their own path they are
// always masked.
const minMaskLen = 4

// masker hides the values of sensitive parameters wherever they appear:
// as whole values, inside longer strings and, in manifests, base64-encoded
// (the form a Secret's data takes). The values are placeholders (see
// Compute): the masker is what shows them as Masked or MaskedChanged, not
// what keeps a secret out of a plan.
type masker struct {
	needles []needle // longest first, so a value containing another is masked whole
}

type needle struct {
	s, repl string
}

// newMaskers builds the maskers of the old and the new side from the
// values of the parameters marked sensitive. On the new side a value that
// replaced another one of the same parameter shows as MaskedChanged, so a
// reviewer sees that it changed without seeing it.
func newMaskers(sensitive map[string]bool, oldParams, newParams map[string]any) sideMaskers {
	oldSet, newSet, changed := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for name := range sensitive {
		o, n := map[string]bool{}, map[string]bool{}
		if v, ok := oldParams[name]; ok {
			collectStrings(v, o)
		}
		if v, ok := newParams[name]; ok {
			collectStrings(v, n)
		}
		for s := range o {
			oldSet[s] = true
		}
		for s := range n {
			newSet[s] = true
			if len(o) > 0 && !o[s] {
				changed[s] = true
			}
		}
	}
	var om, nm masker
	for s := range oldSet {
		om.add(s, Masked)
		nm.add(s, Masked) // an old value showing up on the new side is masked too
	}
	for s := range newSet {
		repl := Masked
		if changed[s] {
			repl = MaskedChanged
		}
		nm.add(s, repl)
		if !oldSet[s] {
			om.add(s, Masked)
		}
	}
	om.sort()
	nm.sort()
	return sideMaskers{old: &om, new: &nm}
}

func (m *masker) add(s, repl string) {
	if len(s) < minMaskLen {
		return
	}
	for _, n := range m.needles {
		if n.s == s {
			return
		}
	}
	m.needles = append(m.needles, needle{s, repl}, needle{base64.StdEncoding.EncodeToString([]byte(s)), repl})
}

func (m *masker) sort() {
	sort.Slice(m.needles, func(i, j int) bool {
		if len(m.needles[i].s) != len(m.needles[j].s) {
			return len(m.needles[i].s) > len(m.needles[j].s)
		}
		return m.needles[i].s < m.needles[j].s
	})
}

func collectStrings(v any, set map[string]bool) {
	switch t := v.(type) {
	case string:
		set[t] = true
	case json.Number:
		set[t.String()] = true
	case map[string]any:
		for _, x := range t {
			collectStrings(x, set)
		}
	case []any:
		for _, x := range t {
			collectStrings(x, set)
		}
	default:
		if t != nil {
			if b, err := json.Marshal(t); err == nil {
				set[strings.Trim(string(b), `"`)] = true
			}
		}
	}
}

func (m *masker) empty() bool { return m == nil || len(m.needles) == 0 }

// maskString replaces every sensitive value inside s.
func (m *masker) maskString(s string) (string, bool) {
	if m.empty() {
		return s, false
	}
	masked := false
	for _, n := range m.needles {
		if strings.Contains(s, n.s) {
			s = strings.ReplaceAll(s, n.s, n.repl)
			masked = true
		}
	}
	return s, masked
}

// maskValue masks a normalized JSON value; a number equal to a sensitive
// value becomes the Masked string.
func (m *masker) maskValue(v any) (any, bool) {
	if m.empty() {
		return v, false
	}
	switch t := v.(type) {
	case string:
		return m.maskString(t)
	case json.Number:
		for _, n := range m.needles {
			if t.String() == n.s {
				return n.repl, true
			}
		}
		return t, false
	case map[string]any:
		out := make(map[string]any, len(t))
		hit := false
		for k, x := range t {
			mx, ok := m.maskValue(x)
			out[k] = mx
			hit = hit || ok
		}
		return out, hit
	case []any:
		out := make([]any, len(t))
		hit := false
		for i, x := range t {
			mx, ok := m.maskValue(x)
			out[i] = mx
			hit = hit || ok
		}
		return out, hit
	}
	return v, false
}

// sensitiveParams returns the names of the parameters a driver marks
// sensitive (secret references are not masked: they are references).
func sensitiveParams(ds ...*drivers.Driver) map[string]bool {
	out := map[string]bool{}
	for _, d := range ds {
		if d == nil {
			continue
		}
		for _, p := range d.Parameters {
			if p.Sensitive && !p.Secret {
				out[p.Name] = true
			}
		}
	}
	return out
}

// secretParams returns the names of the parameters that are secret
// references.
func secretParams(ds ...*drivers.Driver) map[string]bool {
	out := map[string]bool{}
	for _, d := range ds {
		if d == nil {
			continue
		}
		for _, p := range d.Parameters {
			if p.Secret {
				out[p.Name] = true
			}
		}
	}
	return out
}
