package blockyaml

import (
	"strconv"

	yamlv2 "go.yaml.in/yaml/v2"
)

// bestWidth is the column past which go-yaml v2 breaks a plain or quoted
// scalar at a space.
const bestWidth = 80

// maxSimpleKey is a conservative bound under go-yaml's 128 characters,
// past which it writes a key as an explicit "? key".
const maxSimpleKey = 100

// Encode writes doc as go-yaml v2's Marshal does, byte for byte, when doc
// is within what it writes without a general emitter: mappings
// (yamlv2.MapSlice, in their order), sequences ([]any) of scalars and
// mappings, strings Decode reads back as strings when plain, strings of
// decimal digits and the empty string (double-quoted), integers, booleans
// and nil. ok is false otherwise (a float, a string with a line break,
// one go-yaml would quote for another reason or fold at 80 columns), and
// the caller marshals doc with go-yaml: a document is never written
// differently, only sooner. FuzzEncode pins the equality.
func Encode(doc yamlv2.MapSlice) (out []byte, ok bool) {
	if len(doc) == 0 {
		return []byte("{}\n"), true
	}
	e := encoder{buf: make([]byte, 0, 4096)}
	if !e.mapping(doc, 0, false) {
		return nil, false
	}
	return e.buf, true
}

type encoder struct {
	buf []byte
}

func (e *encoder) indent(n int) {
	for range n {
		e.buf = append(e.buf, ' ')
	}
}

// mapping writes m's items at indent; inItem says the first one follows
// a sequence item's "- " on the same line.
func (e *encoder) mapping(m yamlv2.MapSlice, indent int, inItem bool) bool {
	for i, it := range m {
		k, ok := it.Key.(string)
		if !ok || len(k) > maxSimpleKey {
			return false
		}
		if i > 0 || !inItem {
			e.indent(indent)
		}
		start := len(e.buf)
		if !e.scalarString(k, 0) {
			return false
		}
		e.buf = append(e.buf, ':')
		col := indent + len(e.buf) - start + 1
		if text, ok := emptyCollection(it.Value); ok {
			e.buf = append(e.buf, text...)
			continue
		}
		switch v := it.Value.(type) {
		case yamlv2.MapSlice:
			e.buf = append(e.buf, '\n')
			if !e.mapping(v, indent+2, false) {
				return false
			}
		case []any:
			// go-yaml v2 does not indent a sequence under its key.
			e.buf = append(e.buf, '\n')
			if !e.sequence(v, indent) {
				return false
			}
		default:
			e.buf = append(e.buf, ' ')
			if !e.scalar(v, col) {
				return false
			}
			e.buf = append(e.buf, '\n')
		}
	}
	return true
}

// sequence writes s's items at indent.
func (e *encoder) sequence(s []any, indent int) bool {
	for _, item := range s {
		e.indent(indent)
		e.buf = append(e.buf, '-')
		if text, ok := emptyCollection(item); ok {
			e.buf = append(e.buf, text...)
			continue
		}
		switch v := item.(type) {
		case yamlv2.MapSlice:
			e.buf = append(e.buf, ' ')
			if !e.mapping(v, indent+2, true) {
				return false
			}
		case []any:
			return false // a sequence in a sequence: rare in what Styrmin writes
		default:
			e.buf = append(e.buf, ' ')
			if !e.scalar(v, indent+2) {
				return false
			}
			e.buf = append(e.buf, '\n')
		}
	}
	return true
}

// emptyCollection is what go-yaml writes after a key's colon or an item's
// dash for an empty mapping or sequence.
func emptyCollection(v any) (string, bool) {
	switch t := v.(type) {
	case yamlv2.MapSlice:
		return " {}\n", len(t) == 0
	case []any:
		return " []\n", len(t) == 0
	}
	return "", false
}

// scalar writes v starting at column col.
func (e *encoder) scalar(v any, col int) bool {
	switch t := v.(type) {
	case nil:
		e.buf = append(e.buf, "null"...)
	case bool:
		e.buf = strconv.AppendBool(e.buf, t)
	case int:
		e.buf = strconv.AppendInt(e.buf, int64(t), 10)
	case int64:
		e.buf = strconv.AppendInt(e.buf, t, 10)
	case uint64:
		e.buf = strconv.AppendUint(e.buf, t, 10)
	case string:
		return e.scalarString(t, col)
	default:
		return false
	}
	return true
}

// scalarString writes s as go-yaml v2 does when that is plain, or double
// quotes around text that needs no escape: "" and decimal digits, which
// it would otherwise read as null or a number.
func (e *encoder) scalarString(s string, col int) bool {
	if s == "" || decimalDigits(s) {
		e.buf = append(e.buf, '"')
		e.buf = append(e.buf, s...)
		e.buf = append(e.buf, '"')
		return true
	}
	if !plainString(s) {
		return false
	}
	spaced := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return false // go-yaml quotes controls; other characters are not worth the rules
		}
		spaced = spaced || c == ' '
	}
	// go-yaml breaks a long scalar at a space past bestWidth.
	if spaced && col+len(s) > bestWidth {
		return false
	}
	e.buf = append(e.buf, s...)
	return true
}

func decimalDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
