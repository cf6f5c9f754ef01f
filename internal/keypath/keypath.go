// Package keypath writes the keys of configuration an author writes as
// errors, plans and logs show them, by one rule: a key that is an
// identifier is written bare after a dot, any other as ["…"], quoted as
// Go quotes a string. A key holding a dot, a newline or a control
// character so reads as one key, never as two keys, a second line (a CI
// log's workflow command) or a terminal's escape sequence.
//
// It imports nothing of Styrmin's, so the resolver and the planner both
// use it.
package keypath

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// IsIdent reports whether key is written bare: a letter or underscore,
// then letters, digits, underscores and hyphens (ASCII only).
func IsIdent(key string) bool {
	if key == "" {
		return false
	}
	for i, r := range key {
		switch {
		case r == '_' || r == '-' && i > 0:
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Append writes key to b after the path b holds: bare, after a dot
// unless b is empty, when it is an identifier, else ["key"].
func Append(b *strings.Builder, key string) {
	if IsIdent(key) {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(key)
		return
	}
	b.WriteString("[")
	b.WriteString(strconv.Quote(key))
	b.WriteString("]")
}

// AppendIndex writes a list index to b: [i].
func AppendIndex(b *strings.Builder, i int) {
	b.WriteByte('[')
	b.WriteString(strconv.Itoa(i))
	b.WriteByte(']')
}

// Join is the path of keys: Join("parameters", "replicas") is
// parameters.replicas, Join("config", "a.b") config["a.b"].
func Join(keys ...string) string {
	var b strings.Builder
	for _, k := range keys {
		Append(&b, k)
	}
	return b.String()
}

// Child is the path of key under the path p ("" for the root).
func Child(p, key string) string {
	var b strings.Builder
	b.WriteString(p)
	Append(&b, key)
	return b.String()
}

// Within reports whether path p is prefix or a path under it (both
// written by this package): a segment starts with '.' or '['.
func Within(p, prefix string) bool {
	if prefix == "" || p == prefix {
		return true
	}
	return strings.HasPrefix(p, prefix) && (p[len(prefix)] == '.' || p[len(prefix)] == '[')
}

// Split returns the keys of a path Join wrote; false when p is not one
// (an index, a quoted key that does not unquote, an empty segment).
func Split(p string) ([]string, bool) {
	var keys []string
	for i := 0; i < len(p); {
		if p[i] == '[' {
			q, err := strconv.QuotedPrefix(p[i+1:])
			if err != nil || q[0] != '"' || !strings.HasPrefix(p[i+1+len(q):], "]") {
				return nil, false
			}
			k, err := strconv.Unquote(q)
			if err != nil {
				return nil, false
			}
			keys = append(keys, k)
			i += len(q) + 2
			continue
		}
		if len(keys) > 0 {
			if p[i] != '.' {
				return nil, false
			}
			i++
		}
		j := i
		for j < len(p) && p[j] != '.' && p[j] != '[' {
			j++
		}
		if !IsIdent(p[i:j]) {
			return nil, false
		}
		keys = append(keys, p[i:j])
		i = j
	}
	return keys, len(keys) > 0
}

// Controls escapes, in text Styrmin did not build (an error's message),
// the C0 control characters other than newline and tab, DEL, the C1
// control characters and bytes that are not UTF-8 (a terminal in 8-bit
// mode takes 0x9b for an escape sequence's start), as Go escapes them in
// a quoted string: \x1b, \r, \u0085. Newlines stay: an error's lines
// are its own (errors joined), and the keys in them are quoted already.
func Controls(s string) string {
	return escape(s, func(r rune) bool { return r == '\n' || r == '\t' })
}

// Line is Controls for text that must stay one line (a commit's
// subject): a newline and a tab are escaped too.
func Line(s string) string {
	return escape(s, func(rune) bool { return false })
}

// escape escapes the control characters and invalid bytes of s that
// keep does not keep.
func escape(s string, keep func(rune) bool) string {
	if !needsEscape(s, keep) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case isControl(r) && !keep(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(s string, keep func(rune) bool) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || (isControl(r) && !keep(r)) {
			return true
		}
		i += n
	}
	return false
}

// isControl reports a C0 control character, DEL or a C1 control character.
func isControl(r rune) bool { return r < 0x20 || r >= 0x7f && r < 0xa0 }
