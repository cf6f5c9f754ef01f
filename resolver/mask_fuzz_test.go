package resolver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/styrmin/styrmin/internal/secrettest"
)

// maskForms are the forms of v Mask hides (secrettest.MaskForms).
func maskForms(v string) map[string]string { return secrettest.MaskForms(v) }

// embedForm writes v into text the way a program may print it: which
// picks raw, json.Marshal'ed (quotes included), strconv.Quote'd or
// fmt's %q, or another form of maskForms.
func embedForm(v string, which byte) string {
	switch which % 8 {
	case 0:
		return v
	case 1:
		j, _ := json.Marshal(v)
		return string(j)
	case 2:
		return strconv.Quote(v)
	case 3:
		return fmt.Sprintf("password=%q", v)
	case 4:
		j, _ := json.Marshal(map[string]string{"password": v})
		return string(j)
	case 5:
		return strings.ToUpper(v)
	case 6:
		return base64.StdEncoding.EncodeToString([]byte(v))
	default:
		return url.QueryEscape(v)
	}
}

// leakedForms returns the names of the forms of v that out holds other
// than where they overlap a Masked that Mask wrote: Masked is constant
// text, so a value that shares bytes with it ("ve)q" after "(sensitive)"
// and a "q" the text had after the value) is found across it without
// anything of the value being shown.
func leakedForms(out, v string) []string {
	// masked[i] is how many bytes of out[:i] are in a Masked.
	masked := make([]int, len(out)+1)
	covered := make([]bool, len(out))
	for i := 0; ; i++ {
		j := strings.Index(out[i:], Masked)
		if j < 0 {
			break
		}
		i += j
		for k := i; k < i+len(Masked); k++ {
			covered[k] = true
		}
	}
	for i, c := range covered {
		masked[i+1] = masked[i]
		if c {
			masked[i+1]++
		}
	}
	var leaks []string
	for name, f := range maskForms(v) {
		if f == "" {
			continue
		}
		for i := 0; i+len(f) <= len(out); i++ {
			j := strings.Index(out[i:], f)
			if j < 0 {
				break
			}
			i += j
			if masked[i+len(f)] == masked[i] {
				leaks = append(leaks, fmt.Sprintf("%s %q at %d", name, f, i))
				break
			}
		}
	}
	return leaks
}

// minFuzzedValue is the shortest value FuzzMask masks.
const minFuzzedValue = 4

// FuzzMask: whatever the values (any bytes, one containing the other or
// not) and whatever the text around them, Mask's output holds no form of
// either value (as is, JSON, Go-quoted, upper-case, base64, URL-encoded…)
// that the text held, wherever and however often it was written, save
// where it runs into the constant Masked that Mask wrote.
func FuzzMask(f *testing.F) {
	type seed struct {
		secret, other, a, b, c string
		forms                  uint16
	}
	for _, s := range []seed{
		{"s3cret", "", "password=", " and ", "\n", 0x0100},
		{`Pa ss/w0rd+x&y"z` + "\nline two", "", `{"a":`, `,"b":`, "}", 0x0201},
		{`back\slash"quote`, `\slash"`, "x", "y", "z", 0x0302},
		{"aaaa", "", "a", "aa", "aaa", 0x0000},
		{"abab", "", "ab", "aba", "bab", 0x0000},
		{"secretXYZ", "cret", "", "", "", 0x0304},
		{"cret", "secretXYZ", "se", "XYZ", "", 0x0000},
		{"pässwörd-日本", "", "é", "\u2028", "", 0x0203},
		{"ve)q", "", "", "q", "", 0x0505},
		{"tab\there<&>", "", "\t", "", "", 0x0104},
		{"\xff\xfeinvalid", "", "\xe2", "\x82", "", 0x0102},
		{"e)xy", "ve)xy", "(sensitive", "", "", 0x0607},
		{"ſecret", "K-kelvin", "", "", "", 0x0505},
	} {
		f.Add(s.secret, s.other, s.a, s.b, s.c, s.forms)
	}
	f.Fuzz(func(t *testing.T, secret, other, a, b, c string, forms uint16) {
		// Mask's doc sets no shortest value, but a value of one byte
		// Masked holds twice ("s", "e", "i") grows the text by a
		// power of its forms' number: real values are longer.
		if len(secret) < minFuzzedValue || (other != "" && len(other) < minFuzzedValue) {
			return
		}
		values := Sensitive{"p1": secret}
		if other != "" {
			values["p2"] = other
		}
		text := a + embedForm(secret, byte(forms)) + b + embedForm(secret, byte(forms>>8)) + c
		if other != "" {
			text = embedForm(other, byte(forms>>4)) + text + embedForm(other, byte(forms>>12))
		}
		// A whole line encoded, the value inside it: JSON and %q escape
		// rune by rune, so a valid UTF-8 value is in its form in it.
		if utf8.ValidString(secret) {
			j, _ := json.Marshal(a + secret + b)
			text += "\n" + string(j) + "\n" + strconv.Quote(b+secret+c)
		}
		out := values.Mask(text)
		for _, v := range []string{secret, other} {
			if v == "" {
				continue
			}
			if leaks := leakedForms(out, v); len(leaks) > 0 {
				t.Fatalf("Mask left %s of %q\ntext: %q\nout:  %q", strings.Join(leaks, ", "), v, text, out)
			}
		}
	})
}
