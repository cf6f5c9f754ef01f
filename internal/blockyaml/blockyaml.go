// Package blockyaml reads the block-style YAML that Styrmin's own writers
// emit (lockfiles, rendered objects in canonical form) without a general
// YAML parser, and writes lockfiles as go-yaml v2 writes them without its
// emitter; in both directions it declines what is outside its subset.
//
// A general parser spends most of a large plan's or lock's decoding time
// on generality the writers never use. Decode accepts only a subset:
// block mappings and sequences, plain scalars whose type no YAML reader
// disputes, single-line quoted scalars, literal blocks and empty flow
// collections. Within it, go-yaml v2 (YAML 1.1, what sigs.k8s.io/yaml
// reads) and go-yaml v3 (YAML 1.2) give the same data, and so does
// Decode (pinned by a fuzz test against both). Anything else (a float, a
// word such as "yes" or "on", an anchor, a comment after a value, a
// scalar continued on the next line) makes Decode decline, and the
// caller parses the document with the general parser as before: a
// document is never read differently, only sooner. Encode likewise
// writes go-yaml v2's bytes (lockfile checksums are taken over them) or
// declines; FromJSON types JSON data as sigs.k8s.io/yaml's JSONToYAML
// does before go-yaml writes it (lockfiles, Helm's toYaml). A Schema
// fills a Go type from what Decode reads as encoding/json would fill it
// from the JSON form (sigs.k8s.io/yaml's UnmarshalStrict), or declines.
package blockyaml

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Decode returns the document as JSON data: map[string]any, []any,
// string, json.Number (integers only), bool and nil. ok is false when the
// document is outside the subset (it may still be valid YAML) or invalid.
func Decode(data []byte) (v any, ok bool) {
	// A document that does not end its last line leaves a literal block
	// at its end without a line break: not worth the rules.
	if len(data) == 0 || data[len(data)-1] != '\n' || !validText(data) {
		return nil, false
	}
	p := &parser{lines: splitLines(string(data))}
	p.skipInsignificant()
	if p.i == len(p.lines) {
		return nil, false
	}
	l := p.lines[p.i]
	if l.indent != 0 {
		return nil, false
	}
	if l.text == "{}" {
		p.i++
		p.skipInsignificant()
		return map[string]any{}, p.i == len(p.lines)
	}
	m, ok := p.mapping(0)
	if !ok {
		return nil, false
	}
	p.skipInsignificant()
	if p.i != len(p.lines) {
		return nil, false
	}
	return m, true
}

type line struct {
	indent int
	text   string // after the indentation; "" for a blank line
}

type parser struct {
	lines []line
	i     int
	depth int // collections open
}

// maxDepth bounds nesting: "- - - …" on one line of a hostile document
// would otherwise recurse once per two bytes. Deeper documents are left
// to the general parser, which has its own limits.
const maxDepth = 100

func splitLines(s string) []line {
	s = strings.TrimSuffix(s, "\n")
	out := make([]line, 0, strings.Count(s, "\n")+1)
	for {
		raw, rest, more := strings.Cut(s, "\n")
		n := 0
		for n < len(raw) && raw[n] == ' ' {
			n++
		}
		out = append(out, line{indent: n, text: raw[n:]})
		if !more {
			return out
		}
		s = rest
	}
}

// validText refuses what YAML readers treat in ways the subset does not
// follow: characters outside YAML's printable set, tabs and carriage
// returns, a byte order mark, and the Unicode line breaks (NEL, LS, PS)
// that YAML 1.1 readers break lines at.
func validText(b []byte) bool {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\n') || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError || !printable(r) {
			return false
		}
		i += n
	}
	return true
}

func printable(r rune) bool {
	switch {
	case r < 0xa0, r == 0x2028, r == 0x2029, r == 0xfeff:
		return false
	case r <= 0xd7ff:
		return true
	case r >= 0xe000 && r <= 0xfffd:
		return true
	default:
		return r >= 0x10000 && r <= 0x10ffff
	}
}

// skipInsignificant moves past blank lines and comment lines.
func (p *parser) skipInsignificant() {
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.text != "" && l.text[0] != '#' {
			return
		}
		p.i++
	}
}

// next returns the next significant line, if any.
func (p *parser) next() (line, bool) {
	p.skipInsignificant()
	if p.i == len(p.lines) {
		return line{}, false
	}
	return p.lines[p.i], true
}

func isItem(text string) bool {
	return text == "-" || strings.HasPrefix(text, "- ")
}

// mapping reads a block mapping whose keys are at column indent.
func (p *parser) mapping(indent int) (map[string]any, bool) {
	if p.depth++; p.depth > maxDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	m := map[string]any{}
	for {
		l, more := p.next()
		if !more || l.indent < indent {
			return m, true
		}
		if l.indent > indent || isItem(l.text) {
			return nil, false
		}
		key, rest, ok := splitKey(l.text)
		if !ok {
			return nil, false
		}
		if _, dup := m[key]; dup {
			return nil, false
		}
		p.i++
		v, ok := p.value(rest, indent, true)
		if !ok {
			return nil, false
		}
		m[key] = v
	}
}

// sequence reads a block sequence whose dashes are at column indent.
func (p *parser) sequence(indent int) ([]any, bool) {
	if p.depth++; p.depth > maxDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	var s []any
	for {
		l, more := p.next()
		if !more || l.indent < indent || (l.indent == indent && !isItem(l.text)) {
			if s == nil {
				return nil, false
			}
			return s, true
		}
		if l.indent > indent || !strings.HasPrefix(l.text, "- ") {
			return nil, false
		}
		// The item's content continues as if it were a line of its own
		// at its column.
		rest := l.text[2:]
		n := len(rest) - len(strings.TrimLeft(rest, " "))
		col := indent + 2 + n
		rest = rest[n:]
		var v any
		var ok bool
		switch {
		case rest == "" || rest[0] == '#':
			return nil, false
		case isItem(rest):
			p.lines[p.i] = line{indent: col, text: rest}
			v, ok = p.sequence(col)
		default:
			if _, _, isKey := splitKey(rest); isKey {
				p.lines[p.i] = line{indent: col, text: rest}
				v, ok = p.mapping(col)
			} else {
				p.i++
				v, ok = p.value(rest, indent, false)
			}
		}
		if !ok {
			return nil, false
		}
		s = append(s, v)
	}
}

// value reads what follows "key:" (rest, without the colon) of a key at
// column indent, or an item's scalar (inMap false): on the same line, or
// a block node on the lines below.
func (p *parser) value(rest string, indent int, inMap bool) (any, bool) {
	if rest == "" {
		if !inMap {
			return nil, false
		}
		l, more := p.next()
		switch {
		case !more || l.indent < indent || (l.indent == indent && !isItem(l.text)):
			return nil, true // "key:" alone is null
		case isItem(l.text):
			return p.sequence(l.indent)
		default:
			return p.mapping(l.indent)
		}
	}
	if rest[0] != ' ' && inMap {
		return nil, false
	}
	rest = strings.TrimLeft(rest, " ")
	if rest == "" {
		return p.value("", indent, inMap)
	}
	if rest[0] == '|' {
		return p.literal(rest[1:], indent)
	}
	v, ok := scalar(rest)
	if !ok {
		return nil, false
	}
	// A scalar continued on a more indented line is one multi-line
	// scalar (or an error): outside the subset.
	if l, more := p.next(); more && l.indent > indent {
		return nil, false
	}
	return v, true
}

// literal reads a literal block scalar whose header followed "|" (its
// chomping indicator) and whose parent is at column indent.
func (p *parser) literal(header string, indent int) (any, bool) {
	var keep, strip bool
	switch header {
	case "":
	case "-":
		strip = true
	case "+":
		keep = true
	default:
		return nil, false
	}
	var b strings.Builder
	col := -1
	blanks := 0 // blank lines not yet written
	content := false
	for ; p.i < len(p.lines); p.i++ {
		l := p.lines[p.i]
		if l.text == "" {
			if l.indent > 0 {
				return nil, false // a line of spaces only: indentation rules the subset does not follow
			}
			blanks++
			continue
		}
		if col < 0 {
			if l.indent <= indent {
				break
			}
			col = l.indent
		}
		if l.indent < col {
			break
		}
		if content {
			b.WriteByte('\n')
		}
		for ; blanks > 0; blanks-- {
			b.WriteByte('\n')
		}
		b.WriteString(strings.Repeat(" ", l.indent-col))
		b.WriteString(l.text)
		content = true
	}
	if !content {
		return nil, false
	}
	switch {
	case strip:
	case keep:
		b.WriteByte('\n')
		for ; blanks > 0; blanks-- {
			b.WriteByte('\n')
		}
	default:
		b.WriteByte('\n')
	}
	if l, more := p.next(); more && l.indent > indent && l.indent < col {
		return nil, false
	}
	return b.String(), true
}

// splitKey splits "key: rest" or "key:" into the key and what follows
// the colon.
func splitKey(text string) (key, rest string, ok bool) {
	switch text[0] {
	case '"', '\'':
		k, n, ok := quoted(text)
		if !ok || n >= len(text) || text[n] != ':' {
			return "", "", false
		}
		return k, text[n+1:], true
	}
	i := strings.Index(text, ": ")
	if i < 0 {
		if !strings.HasSuffix(text, ":") {
			return "", "", false
		}
		i = len(text) - 1
	}
	k := text[:i]
	if !plainString(k) {
		return "", "", false
	}
	return k, text[i+1:], true
}

// scalar reads a scalar that takes the rest of a line.
func scalar(s string) (any, bool) {
	switch s {
	case "null":
		return nil, true
	case "true":
		return true, true
	case "false":
		return false, true
	case "{}":
		return map[string]any{}, true
	case "[]":
		return []any{}, true
	}
	switch s[0] {
	case '"', '\'':
		v, n, ok := quoted(s)
		if !ok || n != len(s) {
			return nil, false
		}
		return v, true
	case '[':
		return flowSequence(s)
	}
	if integer(s) {
		return json.Number(s), true
	}
	if plainString(s) {
		return s, true
	}
	return nil, false
}

// flowSequence reads a one-line flow sequence of scalars, as charts
// write commands and arguments (["serve", "--port", "8000"]).
func flowSequence(s string) (any, bool) {
	if len(s) < 2 || s[len(s)-1] != ']' {
		return nil, false
	}
	out := []any{}
	rest := s[1 : len(s)-1]
	if strings.TrimLeft(rest, " ") == "" {
		return out, true
	}
	for {
		rest = strings.TrimLeft(rest, " ")
		var item any
		if rest != "" && (rest[0] == '"' || rest[0] == '\'') {
			v, n, ok := quoted(rest)
			if !ok {
				return nil, false
			}
			item, rest = v, rest[n:]
		} else {
			end := strings.IndexByte(rest, ',')
			if end < 0 {
				end = len(rest)
			}
			word := strings.TrimRight(rest[:end], " ")
			// In a flow, a colon or a hash starts structure sooner.
			if word == "" || strings.ContainsAny(word, ":#") || word[0] == '[' {
				return nil, false
			}
			v, ok := scalar(word)
			if !ok {
				return nil, false
			}
			item, rest = v, rest[end:]
		}
		out = append(out, item)
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			return out, true
		}
		if rest[0] != ',' {
			return nil, false
		}
		rest = rest[1:]
		if strings.TrimLeft(rest, " ") == "" {
			return nil, false // a trailing comma
		}
	}
}

// integer says whether s is a decimal integer every reader reads as the
// same int64, written without a sign on zero or leading zeros.
func integer(s string) bool {
	d := strings.TrimPrefix(s, "-")
	if d == "" || len(d) > 19 || (d[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// ambiguous are the plain words some YAML reader (1.1 or 1.2) reads as
// something other than a string, compared without case.
var ambiguous = map[string]bool{
	"y": true, "yes": true, "n": true, "no": true, "on": true, "off": true,
	"true": true, "false": true, "null": true,
}

// plainString says whether s, written plain, is the string s for every
// reader: it starts with a letter, an underscore or a slash (so no
// number, date, special float or indicator), holds nothing a reader
// treats as structure or a comment, and is no ambiguous word.
func plainString(s string) bool {
	if s == "" {
		return false
	}
	c := s[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '/' || versionLike(s) || alnumLike(s) || dashed(s)) {
		return false
	}
	if s[len(s)-1] == ' ' || s[len(s)-1] == ':' {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', ']', '{', '}', ',':
			return false
		case ':', '#':
			if (s[i] == ':' && i+1 < len(s) && s[i+1] == ' ') || (s[i] == '#' && s[i-1] == ' ') {
				return false
			}
		}
	}
	if len(s) <= 5 && ambiguous[strings.ToLower(s)] {
		return false
	}
	return true
}

// versionLike says whether s starts as a version does ("1.25.0"): two
// dots after digits, which no reader's integer, float, date or
// sexagesimal number has.
func versionLike(s string) bool {
	dots := 0
	for i := 0; i < len(s) && dots < 2; i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && i > 0 && s[i-1] != '.':
			dots++
		default:
			return false
		}
	}
	return dots == 2
}

// alnumLike says whether s is letters and digits only, starting with a
// digit, and no number: a Kubernetes quantity ("128Mi", "500m") or a hex
// digest. Of such words readers take only decimal integers, the bases
// ("0x1f", "0o17", "0b1"; refused: a leading 0) and exponents ("1e3")
// for numbers.
func alnumLike(s string) bool {
	if len(s) < 2 || s[0] == '0' {
		return false
	}
	letters, digitsAfterE := 0, true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			letters++
			if letters > 1 || (c != 'e' && c != 'E') {
				digitsAfterE = false
			}
		default:
			return false
		}
	}
	return letters > 0 && !digitsAfterE
}

// dashed says whether s starts with one or two dashes and then a letter,
// as a command-line flag does ("-U", "--port"): not a negative number, a
// sequence item or a document marker.
func dashed(s string) bool {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "-"), "-")
	if len(t) == len(s) || t == "" {
		return false
	}
	c := t[0]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// quoted reads a single- or double-quoted scalar at the start of s (on
// one line): its value and the length it took.
func quoted(s string) (string, int, bool) {
	if s[0] == '\'' {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] != '\'' {
				b.WriteByte(s[i])
				continue
			}
			if i+1 < len(s) && s[i+1] == '\'' {
				b.WriteByte('\'')
				i++
				continue
			}
			return b.String(), i + 1, true
		}
		return "", 0, false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			return b.String(), i + 1, true
		case '\\':
			if i+1 >= len(s) {
				return "", 0, false
			}
			i++
			switch s[i] {
			case '"', '\\', '/':
				b.WriteByte(s[i])
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '0':
				b.WriteByte(0)
			case 'a':
				b.WriteByte(7)
			case 'b':
				b.WriteByte(8)
			case 'e':
				b.WriteByte(0x1b)
			case 'f':
				b.WriteByte(0xc)
			case 'v':
				b.WriteByte(0xb)
			case 'x', 'u', 'U':
				n := 2 // \xXX
				switch s[i] {
				case 'u':
					n = 4
				case 'U':
					n = 8
				}
				if i+n >= len(s) {
					return "", 0, false
				}
				r, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
				if err != nil || !utf8.ValidRune(rune(r)) {
					return "", 0, false
				}
				b.WriteRune(rune(r))
				i += n
			default:
				return "", 0, false
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, false
}
