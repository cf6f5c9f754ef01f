package resolver

import (
	"sort"

	"github.com/styrmin/styrmin/internal/keypath"
)

// Origin says which layer and file set a resolved value.
type Origin struct {
	Layer string `json:"layer"`
	File  string `json:"file"`
}

// Provenance maps a path of the resolved settings to its origin, written
// as keypath writes it (parameters.replicas, config["a.b"]): a key is the
// author's, and errors, plans, explain and the web UI show these paths.
// Only leaves (scalars and lists) are recorded: maps merge, so their
// origin is the union of their leaves'.
type Provenance map[string]Origin

// Paths returns the recorded paths in order.
func (p Provenance) Paths() []string {
	out := make([]string, 0, len(p))
	for k := range p {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Under returns the entries at prefix or below it.
func (p Provenance) Under(prefix string) Provenance {
	out := Provenance{}
	for k, v := range p {
		if keypath.Within(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// mergeInto merges src into dst: maps merge deeply, lists and scalars
// replace. Every leaf written is recorded in prov under prefix.
func mergeInto(dst, src map[string]any, prefix string, o Origin, prov Provenance) {
	for k, sv := range src {
		p := keypath.Child(prefix, k)
		if sm, ok := sv.(map[string]any); ok {
			dm, ok := dst[k].(map[string]any)
			if !ok {
				// A map replaces a scalar: forget the scalar's origin.
				if _, had := dst[k]; had {
					forget(prov, p)
				}
				dm = map[string]any{}
				dst[k] = dm
			}
			mergeInto(dm, sm, p, o, prov)
			continue
		}
		if _, had := dst[k].(map[string]any); had {
			forget(prov, p)
		}
		dst[k] = deepCopy(sv)
		prov[p] = o
	}
}

func forget(prov Provenance, p string) {
	for k := range prov {
		if keypath.Within(k, p) {
			delete(prov, k)
		}
	}
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, x := range t {
			l[i] = deepCopy(x)
		}
		return l
	default:
		return v
	}
}

// SettingAt is the value at a path of a settings tree (a Provenance
// path, "parameters.replicas"), nil when there is none: what `styrminctl
// explain` and the web UI show beside each path's origin.
func SettingAt(settings map[string]any, path string) any {
	keys, ok := keypath.Split(path)
	if !ok {
		return nil
	}
	return settingAt(settings, keys)
}

// settingAt is the value at the keys of a settings tree, nil when none.
func settingAt(settings map[string]any, keys []string) any {
	var cur any = settings
	for _, part := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}
