package keypath

import (
	"slices"
	"strings"
	"testing"
)

func TestKeysAreBareOnlyWhenIdentifiers(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{[]string{"parameters", "replicas"}, "parameters.replicas"},
		{[]string{"config", "a.b"}, `config["a.b"]`},
		{[]string{"config", "a", "b"}, "config.a.b"},
		{[]string{"x\n::error::forged"}, `["x\n::error::forged"]`},
		{[]string{"config", "bad\x1b[2K\rXX"}, `config["bad\x1b[2K\rXX"]`},
		{[]string{"my-key", "_x", "9"}, `my-key._x["9"]`},
		{[]string{""}, `[""]`},
	} {
		got := Join(tc.keys...)
		if got != tc.want {
			t.Errorf("Join(%q) = %s, want %s", tc.keys, got, tc.want)
		}
		if back, ok := Split(got); !ok || !slices.Equal(back, tc.keys) {
			t.Errorf("Split(%s) = %q, %v; want %q", got, back, ok, tc.keys)
		}
	}
	for _, bad := range []string{"", ".a", "a.", "a..b", "a[0]", `a["x"`, `a["x"]b`, "a b", `a['x']`} {
		if keys, ok := Split(bad); ok {
			t.Errorf("Split(%q) = %q; want refused", bad, keys)
		}
	}
}

func TestWithinNeedsAWholeSegment(t *testing.T) {
	for _, tc := range []struct {
		p, prefix string
		want      bool
	}{
		{"config.a", "config", true},
		{`config["a.b"]`, "config", true},
		{"config", "config", true},
		{"configs.a", "config", false},
		{`config["a.b"]`, "config.a", false},
	} {
		if got := Within(tc.p, tc.prefix); got != tc.want {
			t.Errorf("Within(%s, %s) = %v, want %v", tc.p, tc.prefix, got, tc.want)
		}
	}
}

func TestControlsKeepsNewlinesAndEscapesTheRest(t *testing.T) {
	in := "a\x1b[2K\rb\tc\nd\u0085e\x7f\x9bf é"
	if got, want := Controls(in), `a\x1b[2K\rb`+"\tc\nd"+`\u0085e\x7f\x9bf é`; got != want {
		t.Errorf("Controls = %q, want %q", got, want)
	}
	if got, want := Line("subject\nbody\t"), `subject\nbody\t`; got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
	if s := "plain text, ünïcode"; Controls(s) != s {
		t.Errorf("Controls changed %q", s)
	}
}

// FuzzKeyPaths: any keys written by Join read back by Split, and the
// written path holds no control character, a reader's terminal or log
// would act on.
func FuzzKeyPaths(f *testing.F) {
	f.Add("config", "a.b")
	f.Add("x\n::add-mask::hidden", "")
	f.Add("bad\x1b[2K\rXX", "\x9b")
	f.Fuzz(func(t *testing.T, a, b string) {
		keys := []string{a, b}
		p := Join(keys...)
		if back, ok := Split(p); !ok || !slices.Equal(back, keys) {
			t.Fatalf("Split(Join(%q)) = %q, %v", keys, back, ok)
		}
		for _, s := range []string{p, Controls(a), Line(a)} {
			if strings.ContainsFunc(s, func(r rune) bool { return isControl(r) && r != '\n' && r != '\t' }) {
				t.Fatalf("%q holds a control character", s)
			}
		}
		if strings.ContainsAny(p, "\n\t") || strings.ContainsAny(Line(a), "\n\t") {
			t.Fatalf("a path or a line holds a newline or a tab: %q", p)
		}
		if !Within(Child(Join(a), b), Join(a)) {
			t.Fatalf("%s is not within %s", Child(Join(a), b), Join(a))
		}
	})
}
