package eventnote

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestANoteIsCutToWhatTheEventsAPIAcceptsOnACharacterBoundary(t *testing.T) {
	for _, tc := range []struct {
		name string
		note string
		cut  bool
	}{
		{"short", "a short note", false},
		{"exactly the limit", strings.Repeat("a", MaxNote), false},
		{"one byte over", strings.Repeat("a", MaxNote+1), true},
		{"multi-byte characters across the cut", strings.Repeat("ø", MaxNote), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Bound(tc.note)
			if len(got) > MaxNote {
				t.Fatalf("%d bytes, want at most %d", len(got), MaxNote)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("not valid UTF-8 after the cut: %q", got[len(got)-8:])
			}
			if cut := got != tc.note; cut != tc.cut {
				t.Fatalf("cut %v, want %v", cut, tc.cut)
			}
			if tc.cut && (!strings.HasSuffix(got, "…") || !strings.HasPrefix(tc.note, strings.TrimSuffix(got, "…"))) {
				t.Fatalf("the cut note %q is not the note's start marked with …", got[len(got)-8:])
			}
		})
	}
}
