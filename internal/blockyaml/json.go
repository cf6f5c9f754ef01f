package blockyaml

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	yamlv2 "go.yaml.in/yaml/v2"
)

// FromJSON reads one JSON value as sigs.k8s.io/yaml's JSONToYAML reads it
// before writing it with go-yaml v2: each number as the type go-yaml's
// resolver gives its text (int, int64, uint64 or float64), each object
// as a yamlv2.MapSlice in go-yaml's key order (SortedKeys). go-yaml then
// writes the result as JSONToYAML would (Encode does so sooner), without
// its slowest half: JSONToYAML parses the JSON text with go-yaml to learn
// the numbers' types. Where JSONToYAML's own reader got the JSON wrong (a
// character it refuses, a key past 1,024 characters, U+0085 taken for a
// line break), the result holds what the JSON holds.
func FromJSON(j []byte) (any, error) {
	// JSON as encoding/json writes it is read in one pass; the rest
	// (errors included) by encoding/json.
	if v, ok := fromJSONText(j); ok {
		return v, nil
	}
	return fromJSONDecoder(j)
}

// fromJSONDecoder is FromJSON through encoding/json.
func fromJSONDecoder(j []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("invalid JSON: more than one value")
	}
	return yamlTyped(v)
}

// yamlTyped returns v with every json.Number replaced by the value go-yaml
// v2 resolves the same plain scalar to, and every object by a MapSlice in
// go-yaml's key order (SortedKeys).
func yamlTyped(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		out := make(yamlv2.MapSlice, 0, len(t))
		for _, k := range SortedKeys(t) {
			x, err := yamlTyped(t[k])
			if err != nil {
				return nil, err
			}
			out = append(out, yamlv2.MapItem{Key: k, Value: x})
		}
		return out, nil
	case []any:
		for i, e := range t {
			x, err := yamlTyped(e)
			if err != nil {
				return nil, err
			}
			t[i] = x
		}
	case json.Number:
		return yamlNumber(string(t))
	}
	return v, nil
}

// yamlNumber is go-yaml v2's resolve of a plain scalar that is a JSON
// number: an int when it fits, else int64, else uint64, else a float.
// (JSON numbers have no underscores, no 0x or 0b prefix and are never
// timestamps, go-yaml's other cases.)
func yamlNumber(s string) (any, error) {
	if i, err := strconv.ParseInt(s, 0, 64); err == nil {
		if i == int64(int(i)) {
			return int(i), nil
		}
		return i, nil
	}
	if u, err := strconv.ParseUint(s, 0, 64); err == nil {
		return u, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f, nil
	}
	// Out of a float's range: go-yaml keeps the text as a string.
	if strings.TrimLeft(s, "-+0123456789.eE") == "" {
		return s, nil
	}
	return nil, fmt.Errorf("invalid JSON number %q", s)
}

// SortedKeys returns m's keys in go-yaml v2's order (KeyLess), the
// order JSONToYAML wrote them in. That order is not total on every set of
// keys ("0A", "1" and "010" go round in a circle), and go-yaml sorts the
// keys of a map in the random order Go iterates it: on such keys
// JSONToYAML wrote a different file from one run to the next. Sorting
// the keys bytewise first and then stably by KeyLess gives the same
// order as go-yaml wherever its order is total, and always the same.
func SortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sort.SliceStable(keys, func(i, j int) bool { return KeyLess(keys[i], keys[j]) })
	return keys
}

// KeyLess is go-yaml v2's order of two string map keys (keyList.Less
// in its sorter.go): letters before other characters, and runs of digits
// compared as numbers.
func KeyLess(a, b string) bool {
	ar, br := []rune(a), []rune(b)
	for i := 0; i < len(ar) && i < len(br); i++ {
		if ar[i] == br[i] {
			continue
		}
		al, bl := unicode.IsLetter(ar[i]), unicode.IsLetter(br[i])
		if al && bl {
			return ar[i] < br[i]
		}
		if al || bl {
			return bl
		}
		var ai, bi int
		var an, bn int64
		if ar[i] == '0' || br[i] == '0' {
			for j := i - 1; j >= 0 && unicode.IsDigit(ar[j]); j-- {
				if ar[j] != '0' {
					an, bn = 1, 1
					break
				}
			}
		}
		for ai = i; ai < len(ar) && unicode.IsDigit(ar[ai]); ai++ {
			an = an*10 + int64(ar[ai]-'0')
		}
		for bi = i; bi < len(br) && unicode.IsDigit(br[bi]); bi++ {
			bn = bn*10 + int64(br[bi]-'0')
		}
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return ar[i] < br[i]
	}
	return len(ar) < len(br)
}

// KeysInOneOrder reports whether go-yaml v2 orders the keys of every
// object in v (JSON data) the same way on every run: on some keys
// ("0A", "1", "010") KeyLess goes round in a circle, and go-yaml's output
// then follows Go's map iteration. Tests comparing with go-yaml skip such
// values.
func KeysInOneOrder(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		keys := SortedKeys(t)
		for i := range keys {
			for j := i + 1; j < len(keys); j++ {
				if !KeyLess(keys[i], keys[j]) || KeyLess(keys[j], keys[i]) {
					return false
				}
			}
		}
		for _, e := range t {
			if !KeysInOneOrder(e) {
				return false
			}
		}
	case []any:
		for _, e := range t {
			if !KeysInOneOrder(e) {
				return false
			}
		}
	}
	return true
}
