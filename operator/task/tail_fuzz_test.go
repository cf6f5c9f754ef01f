package task

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/resolver"
)

// outputForms are the forms of v Mask hides (secrettest.MaskForms).
func outputForms(v string) map[string]string { return secrettest.MaskForms(v) }

// printed is v as a program may print it (which picks the form).
func printed(v string, which uint8) string {
	switch which % 6 {
	case 0:
		return v
	case 1:
		j, _ := json.Marshal(map[string]string{"password": v})
		return string(j)
	case 2:
		return fmt.Sprintf("password=%q\n", v)
	case 3:
		return strings.ToUpper(v)
	case 4:
		return base64.StdEncoding.EncodeToString([]byte(v))
	default:
		return "\n" + v + "\n"
	}
}

// shownForms returns the forms of v that out, a step's output as kept,
// shows. Not counted: where a form runs into text the engine wrote (a
// Masked, the truncation line, the end of a Masked cut at the start of
// what is kept), constant text that shows nothing of the value.
func shownForms(out, v string) []string {
	covered := make([]bool, len(out))
	cover := func(from, to int) {
		for k := from; k < to && k < len(out); k++ {
			covered[k] = true
		}
	}
	rest := 0
	if strings.HasPrefix(out, "[truncated: ") {
		rest = strings.IndexByte(out, '\n') + 1
		cover(0, rest)
	}
	for n := len(resolver.Masked) - 1; n > 0; n-- {
		if strings.HasPrefix(out[rest:], resolver.Masked[len(resolver.Masked)-n:]) {
			cover(rest, rest+n)
			break
		}
	}
	for i := 0; ; i++ {
		j := strings.Index(out[i:], resolver.Masked)
		if j < 0 {
			break
		}
		i += j
		cover(i, i+len(resolver.Masked))
	}
	inConstant := make([]int, len(out)+1)
	for i, c := range covered {
		inConstant[i+1] = inConstant[i]
		if c {
			inConstant[i+1]++
		}
	}
	var shown []string
	for name, f := range outputForms(v) {
		for i := 0; f != "" && i+len(f) <= len(out); i++ {
			j := strings.Index(out[i:], f)
			if j < 0 {
				break
			}
			i += j
			if inConstant[i+len(f)] == inConstant[i] {
				shown = append(shown, fmt.Sprintf("%s %q at %d", name, f, i))
				break
			}
		}
	}
	return shown
}

// FuzzTailBufferKeepsNoValue: whatever a step prints around a sensitive
// value (any bytes, any form Mask knows), however it is cut into writes
// (the value straddling two of them) and wherever the value falls (across
// the edge of what tailBuffer keeps, maxRawOutput, or of what is kept of
// the masked output, maxActionOutput, or the same at small sizes), what
// is kept of the output — tailBuffer's String masked then cut by
// boundOutput, as a step's status gets it — shows no form of the value.
func FuzzTailBufferKeepsNoValue(f *testing.F) {
	for _, s := range []struct {
		secret, filler string
		forms          uint8
		edge           int16
		end            uint16
		writes         string
		small          uint8
	}{
		{"s3cret-cut-at-the-edge", "log line\n", 0x00, 0, 100, "", 0},
		{"s3cret-cut-at-the-edge", "log line\n", 0x10, -5, 4000, "\x00\x05\x01\x02", 0},
		{"-----BEGIN KEY-----\nMIIEabc\n-----END KEY-----", "x", 0x55, -20, 10, "\x00\x10\x00\x30", 0},
		{`Pa ss/w0rd+x&y"z`, "{\"level\":\"info\"}\n", 0x21, 3, 4090, "\x00\x07", 0},
		{"tok\nen", "\n", 0x05, -3, 0, "\x01\x01", 0},
		{"s3cret", "ab\n", 0x00, -2, 40, "\x00\x01\x00\x02\x00\x03", 7},
		{"s3cret", "\xe2\x82\n", 0x34, 1, 70, "\x03\x04", 33},
		{"pässwörd", "é\n", 0x43, 0, 3, "", 99},
		// The cut on a run of continuation bytes: removing the invalid
		// bytes inside the masked text joined "s3" and "cret" again.
		{"s3cret", "\n\x80\x80\x80\x80\x80\x80\x80\x80s3\xffcret", 0x00, 0, 100, "", 0},
		{"s3cret", "\n\x80\x80\x80\x80\x80\x80\x80\x80s3\xffcret", 0x00, 5, 100, "", 0},
		{"s3cret", "\n\x80\x80\x80\x80\x80\x80\x80\x80s3\xffcret", 0x00, 11, 100, "", 0},
		{"s3cret", "\n\x80\x80\x80\x80\x80\x80\x80\x80s3\xffcret", 0x00, 16, 100, "", 0},
	} {
		f.Add(s.secret, s.filler, s.forms, s.edge, s.end, s.writes, s.small)
	}
	f.Fuzz(func(t *testing.T, secret, filler string, forms uint8, edge int16, end uint16, writes string, small uint8) {
		if len(secret) < 4 {
			return // see FuzzMask in resolver: real values are longer
		}
		max, bound := maxRawOutput, maxActionOutput
		if small%2 == 1 {
			max, bound = 16+int(small)%200, 64+int(small)%128
		}
		if filler == "" {
			filler = "\n"
		}
		pad := func(n int) string {
			if n <= 0 {
				return ""
			}
			return strings.Repeat(filler, n/len(filler)+1)[:n]
		}
		// The value twice: once about max bytes from the end (across
		// the edge of what tailBuffer keeps), once about bound bytes
		// from it (across the edge of what boundOutput keeps).
		first, second := printed(secret, forms), printed(secret, forms>>4)
		last := second + pad(int(end)%(2*bound))
		middle := pad(max + int(edge)%64 - len(first) - len(last))
		text := pad(int(edge)&0xff) + first + middle + last
		firstAt := len(text) - len(last) - len(middle) - len(first)
		secondAt := len(text) - len(last)
		// Writes cut near the values, and so across them.
		cuts := []int{0}
		for i := 0; i+1 < len(writes); i += 2 {
			off := int(writes[i])<<8 | int(writes[i+1])
			at := []int{firstAt, secondAt, off}[off%3] + (off/3)%(len(first)+8) - 4
			if at > cuts[len(cuts)-1] && at < len(text) {
				cuts = append(cuts, at)
			}
		}
		cuts = append(cuts, len(text))
		tb := &tailBuffer{max: max}
		for i := 1; i < len(cuts); i++ {
			if n, err := tb.Write([]byte(text[cuts[i-1]:cuts[i]])); err != nil || n != cuts[i]-cuts[i-1] {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		values := resolver.Sensitive{"p": secret}
		out := boundOutput(values.Mask(tb.String()), bound)
		if shown := shownForms(out, secret); len(shown) > 0 {
			t.Fatalf("the output kept (max %d, bound %d, writes cut at %v) shows %s\nout: %q", max, bound, cuts, strings.Join(shown, ", "), out)
		}
	})
}
