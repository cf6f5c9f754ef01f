package blockyaml

import (
	"bytes"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	yamlv2 "go.yaml.in/yaml/v2"
)

// fromJSONText is FromJSON of JSON as encoding/json writes it, read in
// one pass without building maps first: objects become MapSlices in
// SortedKeys' order, numbers yamlNumber's types. ok is false for what it
// leaves to FromJSON: invalid or unusual JSON (a duplicate key, a
// surrogate escape, text that is not valid UTF-8, more than one value).
func fromJSONText(j []byte) (v any, ok bool) {
	p := &jsonText{s: j}
	p.space()
	v, ok = p.value()
	if !ok {
		return nil, false
	}
	p.space()
	return v, p.i == len(p.s)
}

type jsonText struct {
	s     []byte
	i     int
	depth int
}

// maxJSONDepth bounds the nesting read here; deeper is encoding/json's
// (which refuses past 10,000).
const maxJSONDepth = 1000

func (p *jsonText) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonText) value() (any, bool) {
	if p.i >= len(p.s) {
		return nil, false
	}
	switch c := p.s[p.i]; {
	case c == '{' || c == '[':
		if p.depth++; p.depth > maxJSONDepth {
			return nil, false
		}
		defer func() { p.depth-- }()
		if c == '{' {
			return p.object()
		}
		return p.array()
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return true, p.word("true")
	case c == 'f':
		return false, p.word("false")
	case c == 'n':
		return nil, p.word("null")
	}
	return nil, false
}

func (p *jsonText) word(w string) bool {
	if !bytes.HasPrefix(p.s[p.i:], []byte(w)) {
		return false
	}
	p.i += len(w)
	return true
}

func (p *jsonText) object() (any, bool) {
	p.i++ // {
	out := yamlv2.MapSlice{}
	p.space()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return out, true
	}
	for {
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return nil, false
		}
		k, ok := p.str()
		if !ok {
			return nil, false
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, false
		}
		p.i++
		p.space()
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		out = append(out, yamlv2.MapItem{Key: k, Value: v})
		p.space()
		if p.i >= len(p.s) {
			return nil, false
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			continue
		case '}':
			p.i++
			return sortItems(out)
		}
		return nil, false
	}
}

// sortItems orders an object's items as SortedKeys orders its keys,
// declining one with a key twice (encoding/json keeps the last).
func sortItems(items yamlv2.MapSlice) (any, bool) {
	key := func(it yamlv2.MapItem) string { return it.Key.(string) }
	slices.SortFunc(items, func(a, b yamlv2.MapItem) int { return strings.Compare(key(a), key(b)) })
	for i := 1; i < len(items); i++ {
		if key(items[i]) == key(items[i-1]) {
			return nil, false
		}
	}
	sort.SliceStable(items, func(i, j int) bool { return KeyLess(key(items[i]), key(items[j])) })
	return items, true
}

func (p *jsonText) array() (any, bool) {
	p.i++ // [
	out := []any{}
	p.space()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return out, true
	}
	for {
		p.space()
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		p.space()
		if p.i >= len(p.s) {
			return nil, false
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			continue
		case ']':
			p.i++
			return out, true
		}
		return nil, false
	}
}

// str reads a string whose text is valid UTF-8 without control
// characters, and whose escapes are JSON's, \u ones outside the
// surrogates.
func (p *jsonText) str() (string, bool) {
	p.i++ // "
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '"' {
			s := p.s[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		}
		if c == '\\' {
			return p.escaped(start)
		}
		if c < 0x20 {
			return "", false
		}
		p.i++
	}
	return "", false
}

// escaped continues str from its first backslash.
func (p *jsonText) escaped(start int) (string, bool) {
	b := append([]byte(nil), p.s[start:p.i]...)
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(b) {
				return "", false
			}
			return string(b), true
		case c < 0x20:
			return "", false
		case c != '\\':
			b = append(b, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			return "", false
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			if p.i+4 > len(p.s) {
				return "", false
			}
			r, err := strconv.ParseUint(string(p.s[p.i:p.i+4]), 16, 32)
			if err != nil || utf16.IsSurrogate(rune(r)) {
				return "", false
			}
			p.i += 4
			b = utf8.AppendRune(b, rune(r))
		default:
			return "", false
		}
	}
	return "", false
}

// number reads a number by JSON's grammar and types it as go-yaml would.
func (p *jsonText) number() (any, bool) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	first := p.i
	n := digits()
	if n == 0 || (n > 1 && p.s[first] == '0') {
		return nil, false
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, false
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	v, err := yamlNumber(string(p.s[start:p.i]))
	return v, err == nil
}
