package drivers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// encodeYAML writes JSON-like data as canonical YAML: block style, keys
// sorted, two-space indentation, sequences indented under their key,
// multi-line strings as literal blocks. Strings are written plain only
// when every YAML 1.1 and 1.2 parser reads them back as the same string;
// otherwise double-quoted. Written by hand because it runs for every
// object of every render: a generic encoder spent a sixth of the render
// in reflection.
func encodeYAML(obj map[string]any) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(1024)
	if len(obj) == 0 {
		b.WriteString("{}\n")
		return b.Bytes(), nil
	}
	if err := writeMap(&b, obj, 0, false); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// maxSimpleKey is the longest key written as an implicit key, with room
// for escapes below YAML's limit of 1024 characters.
const maxSimpleKey = 160

func writeIndent(b *bytes.Buffer, n int) {
	for ; n > 0; n-- {
		b.WriteByte(' ')
	}
}

// writeMap writes a non-empty map at column indent; inline says the first
// key continues a "- " already written.
func writeMap(b *bytes.Buffer, m map[string]any, indent int, inline bool) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 || !inline {
			writeIndent(b, indent)
		}
		if len(k) > maxSimpleKey {
			// YAML limits implicit keys to 1024 characters: write an
			// explicit one.
			b.WriteString("? ")
			writeQuoted(b, k)
			b.WriteByte('\n')
			writeIndent(b, indent)
		} else {
			writeString(b, k, -1)
		}
		b.WriteByte(':')
		if err := writeValue(b, m[k], indent); err != nil {
			return err
		}
	}
	return nil
}

// writeValue writes what follows "key:" for a key at column indent.
func writeValue(b *bytes.Buffer, v any, indent int) error {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 {
			b.WriteString(" {}\n")
			return nil
		}
		b.WriteByte('\n')
		return writeMap(b, t, indent+2, false)
	case []any:
		if len(t) == 0 {
			b.WriteString(" []\n")
			return nil
		}
		b.WriteByte('\n')
		return writeSeq(b, t, indent+2, false)
	}
	b.WriteByte(' ')
	if err := writeScalar(b, v, indent+2); err != nil {
		return err
	}
	b.WriteByte('\n')
	return nil
}

func writeSeq(b *bytes.Buffer, l []any, indent int, inline bool) error {
	for i, item := range l {
		if i > 0 || !inline {
			writeIndent(b, indent)
		}
		b.WriteString("- ")
		switch t := item.(type) {
		case map[string]any:
			if len(t) == 0 {
				b.WriteString("{}\n")
				continue
			}
			if err := writeMap(b, t, indent+2, true); err != nil {
				return err
			}
			continue
		case []any:
			if len(t) == 0 {
				b.WriteString("[]\n")
				continue
			}
			if err := writeSeq(b, t, indent+2, true); err != nil {
				return err
			}
			continue
		}
		if err := writeScalar(b, item, indent+2); err != nil {
			return err
		}
		b.WriteByte('\n')
	}
	return nil
}

// writeScalar writes a scalar; block is the column of a literal block's
// content.
func writeScalar(b *bytes.Buffer, v any, block int) error {
	switch t := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(t))
	case int64:
		b.WriteString(strconv.FormatInt(t, 10))
	case int:
		b.WriteString(strconv.Itoa(t))
	case float64:
		switch {
		case math.IsInf(t, 1):
			b.WriteString(".inf")
		case math.IsInf(t, -1):
			b.WriteString("-.inf")
		case math.IsNaN(t):
			b.WriteString(".nan")
		default:
			s := strconv.FormatFloat(t, 'g', -1, 64)
			if !strings.ContainsAny(s, ".eEn") {
				s += ".0"
			}
			b.WriteString(s)
		}
	case string:
		writeString(b, t, block)
	default:
		j, err := json.Marshal(t)
		if err != nil {
			return err
		}
		b.Write(j)
	}
	return nil
}

// writeString writes s plain when that is unambiguous, as a literal block
// when it has several lines (block >= 0 is the content column), else
// double-quoted.
func writeString(b *bytes.Buffer, s string, block int) {
	switch {
	case plainSafe(s):
		b.WriteString(s)
	case block >= 0 && literalSafe(s):
		trailing := len(s) - len(strings.TrimRight(s, "\n"))
		switch trailing {
		case 0:
			b.WriteString("|-")
		case 1:
			b.WriteString("|")
		default:
			b.WriteString("|+")
		}
		body := s
		if trailing > 0 {
			body = s[:len(s)-trailing]
		}
		for _, line := range strings.Split(body, "\n") {
			b.WriteByte('\n')
			if line != "" {
				writeIndent(b, block)
				b.WriteString(line)
			}
		}
		for i := 1; i < trailing; i++ {
			b.WriteByte('\n')
		}
	default:
		writeQuoted(b, s)
	}
}

// writeQuoted writes a YAML double-quoted scalar, escaping everything a
// YAML parser could read as a line break or drop.
func writeQuoted(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r == utf8.RuneError, r == 0x85, r == 0x2028, r == 0x2029, r == 0xfeff, !unicode.IsPrint(r) && r > 0x7f:
			if r > 0xffff {
				fmt.Fprintf(b, `\U%08x`, r)
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

var (
	// Plain scalars some YAML 1.1 or 1.2 parser reads as something else.
	numberLikeRE = regexp.MustCompile(`^[-+]?(\.[0-9_]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9_]+)?$|` +
		`^[-+]?0[xXoObB][0-9a-fA-F_]+$|` +
		`^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$|` +
		`^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}`)
	specialWords = map[string]bool{}
)

func init() {
	for _, w := range []string{"y", "yes", "n", "no", "true", "false", "on", "off", "null", "~",
		".nan", ".inf", "+.inf", "-.inf", "<<", "="} {
		specialWords[w] = true
	}
}

func plainSafe(s string) bool {
	if s == "" || s[0] == ' ' || s[len(s)-1] == ' ' || s[len(s)-1] == ':' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	switch s[0] {
	case '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		return false
	case '-':
		if len(s) == 1 || s[1] == ' ' || strings.HasPrefix(s, "---") {
			return false
		}
	}
	if strings.Contains(s, ": ") || strings.Contains(s, " #") {
		return false
	}
	if specialWords[strings.ToLower(s)] {
		return false
	}
	c := s[0]
	if (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' {
		return !numberLikeRE.MatchString(s)
	}
	return true
}

// literalSafe says whether s reads back identically from a literal block:
// several lines, printable, no line ending in a space, the first line not
// starting with one (that would need an indentation indicator).
func literalSafe(s string) bool {
	if !strings.Contains(s, "\n") || strings.TrimRight(s, "\n") == "" || s[0] == ' ' || s[0] == '\n' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\n' {
			if i > 0 && (s[i-1] == ' ' || s[i-1] == '\t') {
				return false
			}
			continue
		}
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	last := strings.TrimRight(s, "\n")
	return last[len(last)-1] != ' ' && last[len(last)-1] != '\t'
}
