package task

import (
	"strings"
	"testing"
)

// TestTheEndOfAnOutputKeptStartsAtALine: output is kept to its last bytes
// before it is masked; a value cut in two at that edge was in no form the
// mask could find, and half of it stayed. The kept output starts at a
// line, and a line longer than what is kept is not kept at all.
func TestTheEndOfAnOutputKeptStartsAtALine(t *testing.T) {
	t.Parallel()
	const value = "s3cret-cut-at-the-edge"
	t.Run("a value on the line cut", func(t *testing.T) {
		b := &tailBuffer{max: 64}
		_, _ = b.Write([]byte(strings.Repeat("x", 40) + " password=" + value + "\n"))
		_, _ = b.Write([]byte("connected\nready\n"))
		got := b.String()
		if strings.Contains(got, value[len(value)/2:]) || got != "connected\nready\n" {
			t.Fatalf("kept %q, want the whole lines after the cut only", got)
		}
	})
	t.Run("one line longer than kept", func(t *testing.T) {
		b := &tailBuffer{max: 16}
		_, _ = b.Write([]byte("token=" + value + value))
		if got := b.String(); got != "" {
			t.Fatalf("kept %q of a line longer than 16 bytes, want none", got)
		}
	})
	t.Run("short output whole", func(t *testing.T) {
		b := &tailBuffer{max: 64}
		_, _ = b.Write([]byte("done\n"))
		if got := b.String(); got != "done\n" {
			t.Fatalf("kept %q", got)
		}
	})
}
