package drivers

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

var trickyStrings = []string{
	"", " ", "a", "yes", "Yes", "NO", "on", "Off", "y", "n", "~", "null", "Null", "true", "FALSE",
	"0644", "0x1F", "0o17", "0b101", "1_000", "1:20", "190:20:30.15", "1e3", ".5", "-.5", "+1", "-1", ".inf", "-.Inf", ".NaN",
	"2001-12-14", "2001-12-14t21:59:43.10-05:00", "1.24.0", "50m", "1Gi", "8000", "3.0", "-", "--", "---", "--port", "-U",
	"a: b", "a #b", "a#b", "key:", ":x", "?x", "[x", "{x", "x]", "#x", "&a", "*a", "!tag", "|", ">", "'q'", "\"q\"", "%x", "@x", "`x",
	"tab\there", "trailing ", " leading", "line\n", "two\nlines", "two\nlines\n", "keep\n\n\n", "\nleading newline", "sp \nline",
	"last line sp\nx ", "ünïcödé", "emoji 🙂", "ctrl\x01", "nel\u0085x", "ls\u2028x", "bom\ufeffx", "zw\u200bx", "astral\U0001F600", "cr\r\nlf", "<<", "=", "a,b", "http://x:80/y", "redis://h:6379",
	"${VAR}", "$(cmd)", "a: ", "a\tb: c", "  \n  ", "x\n  indented\n", "=~\"^[a-z]$\"", strings.Repeat("long key ", 200),
}

// TestEncodeYAMLRoundTrips pins that what encodeYAML writes reads back,
// with the Kubernetes YAML rules parseObject applies, as the same data.
func TestEncodeYAMLRoundTrips(t *testing.T) {
	for _, s := range trickyStrings {
		checkRoundTrip(t, s)
	}
	obj := map[string]any{
		"ints": []any{int64(0), int64(-3), int64(1) << 62}, "floats": []any{0.5, -1.25, 1e-7, 1.5e300},
		"bools": []any{true, false}, "null": nil, "empty": map[string]any{}, "none": []any{},
		"nested": []any{[]any{"a", []any{}}, map[string]any{"k": []any{map[string]any{"x": "y\nz"}}}, []any{map[string]any{}}},
	}
	y, err := encodeYAML(obj)
	if err != nil {
		t.Fatal(err)
	}
	back, err := parseObject(y)
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if !reflect.DeepEqual(back, obj) {
		t.Fatalf("round trip differs:\n%s\ngot  %#v\nwant %#v", y, back, obj)
	}
}

func checkRoundTrip(t *testing.T, s string) {
	t.Helper()
	obj := map[string]any{"v": s, "k" + s: "x", "l": []any{s, map[string]any{"m": s}}, "n": map[string]any{s: s}}
	y, err := encodeYAML(obj)
	if err != nil {
		t.Fatal(err)
	}
	back, err := parseObject(y)
	if err != nil {
		t.Fatalf("%.200q: %v\n%.2000s", s, err, y)
	}
	if !reflect.DeepEqual(back, obj) {
		t.Fatalf("%.200q does not round-trip:\n%.2000s\ngot %.2000v", s, y, back)
	}
}

// FuzzEncodeYAML checks the round trip for arbitrary strings.
func FuzzEncodeYAML(f *testing.F) {
	for _, s := range trickyStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // Kubernetes objects are JSON: their strings are UTF-8
		}
		checkRoundTrip(t, s)
	})
}
