package commitstatus

import (
	"errors"
	"time"
)

// The back-off after the host failed to answer: every request would fail
// alike, so the first failure waits 30 s, doubling to 10 minutes while
// the outage lasts.
const (
	MinOutageWait = 30 * time.Second
	MaxOutageWait = 10 * time.Minute
)

// Unanswered says err is a host that did not answer the request (a 5xx, a
// connection refused or timed out: any error but an *HTTPError), not one
// that refused it. The end of the caller's context is no outage: check it
// before.
func Unanswered(err error) bool {
	var he *HTTPError
	return err != nil && (!errors.As(err, &he) || he.Code >= 500)
}

// Outage follows a host that does not answer, for a poller to back off
// rather than ask again every round (every 10 s for as long as the
// outage lasts) and to log the outage when it starts and ends. The zero
// value is a host that answers. It is not safe for concurrent use.
type Outage struct{ failed int }

// Failed records a request the host did not answer (Unanswered): wait is
// how long to send no request, MinOutageWait doubling to MaxOutageWait
// with each failure in a row; started is true at the first.
func (o *Outage) Failed() (wait time.Duration, started bool) {
	wait = min(MinOutageWait<<min(o.failed, 8), MaxOutageWait)
	started = o.failed == 0
	o.failed++
	return wait, started
}

// Answered records a request the host answered (taken or refused): ended
// is true when that ends an outage, and the next starts at MinOutageWait.
func (o *Outage) Answered() (ended bool) {
	ended = o.failed > 0
	o.failed = 0
	return ended
}
