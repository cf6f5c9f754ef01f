package eventnote

import (
	"fmt"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// MaxNote is the longest note the events API accepts, in bytes.
const MaxNote = 1024

// Bound cuts note to MaxNote bytes on a character boundary, marking the
// cut with "…".
func Bound(note string) string { return Cut(note, MaxNote) }

// Cut cuts s to n bytes on a character boundary, marking the cut with "…"
// (a condition's message is bounded the same way, at its own length).
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Recorder is an events.EventRecorder whose notes are bounded.
type Recorder struct {
	events.EventRecorder
}

var _ events.EventRecorder = Recorder{}

// Wrap bounds the notes of r (nil stays nil).
func Wrap(r events.EventRecorder) events.EventRecorder {
	if r == nil {
		return nil
	}
	return Recorder{EventRecorder: r}
}

// Eventf records the event with its note formatted, then bounded.
func (r Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", Bound(fmt.Sprintf(note, args...)))
}
