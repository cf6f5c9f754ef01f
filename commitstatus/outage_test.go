package commitstatus_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/styrmin/styrmin/commitstatus"
)

// TestAnOutageBacksOffUntilTheHostAnswers: the pollers of the commit
// statuses (the reporter, the lock mode) share one back-off from a host
// that does not answer: 30 s doubling to 10 minutes, started and ended
// once each, the next outage starting again at 30 s.
func TestAnOutageBacksOffUntilTheHostAnswers(t *testing.T) {
	var o commitstatus.Outage
	if o.Answered() {
		t.Error("a host that answers ended an outage")
	}
	for i, want := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		wait, started := o.Failed()
		if wait != want || started != (i == 0) {
			t.Errorf("failure %d: wait %s started %v, want %s %v", i+1, wait, started, want, i == 0)
		}
	}
	for range 100 { // a long outage does not overflow the doubling
		if wait, _ := o.Failed(); wait != commitstatus.MaxOutageWait {
			t.Fatalf("a long outage waits %s, want %s", wait, commitstatus.MaxOutageWait)
		}
	}
	if !o.Answered() {
		t.Error("the first answer did not end the outage")
	}
	if o.Answered() {
		t.Error("a second answer ended the outage again")
	}
	if wait, started := o.Failed(); wait != commitstatus.MinOutageWait || !started {
		t.Errorf("the next outage: wait %s started %v, want %s and started", wait, started, commitstatus.MinOutageWait)
	}
}

// TestUnansweredTellsAnOutageFromARefusal: a 5xx or no answer at all is
// the host away; a refusal (a bad token, a rate limit, an unknown commit)
// is an answer.
func TestUnansweredTellsAnOutageFromARefusal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("posting: %w", &commitstatus.HTTPError{Code: http.StatusBadGateway}), true},
		{&commitstatus.HTTPError{Code: http.StatusServiceUnavailable}, true},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{context.DeadlineExceeded, true},
		{&commitstatus.HTTPError{Code: http.StatusUnauthorized}, false},
		{&commitstatus.HTTPError{Code: http.StatusTooManyRequests}, false},
		{&commitstatus.HTTPError{Code: http.StatusUnprocessableEntity}, false},
	} {
		if got := commitstatus.Unanswered(tc.err); got != tc.want {
			t.Errorf("Unanswered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
