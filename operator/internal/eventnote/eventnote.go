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
func Bound(note string) string {
	if len(note) <= MaxNote {
		return note
	}
	cut := MaxNote - len("…")
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + "…"
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
