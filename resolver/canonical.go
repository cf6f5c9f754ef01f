package resolver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	yamlv2 "go.yaml.in/yaml/v2"

	"github.com/styrmin/styrmin/internal/blockyaml"
)

// jsonToYAML is sigs.k8s.io/yaml's JSONToYAML, byte for byte (lockfile
// checksums depend on it), without its slowest half: JSONToYAML parses
// the JSON text with go-yaml to learn each number's type, which cost a
// sixth of a lock's CPU. Here encoding/json parses it, and each number
// gets the type go-yaml's resolver gives its text (int, int64, uint64 or
// float64); go-yaml then encodes the same values. TestJSONToYAMLIsSigsYAML
// and FuzzJSONToYAML pin the equality. Where JSONToYAML's own YAML reader
// got the JSON wrong, this writes what the JSON holds instead: a value
// holding a character the reader refuses (DEL, C1 controls) failed and is
// written escaped; a key longer than 1,024 characters failed and is
// written as an explicit key; U+0085 (NEL), which the reader took for a
// line break, came out as a space and is written escaped.
func jsonToYAML(j []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("invalid JSON: more than one value")
	}
	v, err := yamlTyped(v)
	if err != nil {
		return nil, err
	}
	// Most documents (lockfiles of usual values) are within what
	// blockyaml writes as go-yaml does, at a fifth of its cost.
	if m, ok := v.(yamlv2.MapSlice); ok {
		if b, ok := blockyaml.Encode(m); ok {
			return b, nil
		}
	}
	return yamlv2.Marshal(v)
}

// yamlTyped returns v with every json.Number replaced by the value go-yaml
// v2 resolves the same plain scalar to, and every object by a MapSlice in
// go-yaml's key order (sortedKeysYAML).
func yamlTyped(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		out := make(yamlv2.MapSlice, 0, len(t))
		for _, k := range sortedKeysYAML(t) {
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

// sortedKeysYAML returns m's keys in go-yaml v2's order (yamlKeyLess), the
// order JSONToYAML wrote them in. That order is not total on every set of
// keys ("0A", "1" and "010" go round in a circle), and go-yaml sorts the
// keys of a map in the random order Go iterates it: on such keys
// JSONToYAML wrote a different file from one run to the next. Sorting
// the keys bytewise first and then stably by yamlKeyLess gives the same
// order as go-yaml wherever its order is total, and always the same.
func sortedKeysYAML(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sort.SliceStable(keys, func(i, j int) bool { return yamlKeyLess(keys[i], keys[j]) })
	return keys
}

// yamlKeyLess is go-yaml v2's order of two string map keys (keyList.Less
// in its sorter.go): letters before other characters, and runs of digits
// compared as numbers.
func yamlKeyLess(a, b string) bool {
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
