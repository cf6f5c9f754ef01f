package task

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/outcome"
)

// stepNext is what the task does after one call of a step's action.
type stepNext int

const (
	// stepDone: the step succeeded; the next one starts.
	stepDone stepNext = iota
	// stepWait: not done yet; look again after a delay.
	stepWait
	// stepRecord: persist entries in the step's record, then call the
	// action again.
	stepRecord
	// stepSuperseded: the guard kept a newer instance; the task ends
	// Superseded.
	stepSuperseded
	// stepFail: the step failed; the task ends Failed.
	stepFail
	// stepRetry: a transient error; the controller retries with backoff.
	stepRetry
	// stepAgain: the step failed and its retry policy allows another
	// run: it runs again from its start after a delay.
	stepAgain
)

// stepDecision is the typed outcome of one call of a step's action.
type stepDecision struct {
	next stepNext
	// after, for stepWait, is the delay, capped at the step's deadline.
	after time.Duration
	// output, for stepDone and stepSuperseded, is what the step did; for
	// stepFail and stepAgain what the failed run printed.
	output string
	// record, for stepRecord, holds the entries to persist.
	record map[string]string
	// newer, for stepSuperseded, is the sequence the guard kept.
	newer int64
	// reason and message, for stepFail, and for a stepWait that waits for
	// a person (message is then shown on the step).
	reason, message string
	// err, for stepRetry.
	err error
}

// stepCall is one call of a step's action and what decides its outcome:
// the step's start and timeout, the time, and what a waiting action is
// waiting for.
type stepCall struct {
	step *v1alpha1.TaskStep
	out  actionOutcome
	err  error
	// now is the time of the decision; defaultTimeout bounds a step that
	// declares none; poll is the delay of a wait that names none.
	now            time.Time
	defaultTimeout time.Duration
	poll           time.Duration
	// waiting says what a step is waiting for, for the timeout message.
	waiting string
}

// decide maps one call of a step's action to what happens next. It reads
// no cluster and no clock, so its table tests need neither: a stalled
// error fails the step, other errors retry until the step's deadline,
// a record is persisted before the action runs again, a newer instance
// supersedes the task, and a wait past the deadline fails the step.
func decide(c stepCall) stepDecision {
	d := decideOnce(c)
	if d.next == stepFail && d.output == "" {
		// What a failed command or Job printed: for the step's status.
		d.output = c.out.output
	}
	if d.next == stepFail {
		// A failure the driver asked to retry (a Job or a command that
		// failed, a timeout) runs the step again, a bounded number of
		// times: runs counts every run (the restarts bounded apart,
		// MaxStepResumes).
		if p, n := retryPolicy(c.step), runs(c.step); n < p.Attempts {
			delay := p.Delay(n)
			return stepDecision{next: stepAgain, after: delay, reason: d.reason, output: d.output,
				message: fmt.Sprintf("attempt %d of %d failed (%s): %s; running it again in %s", n, p.Attempts, d.reason, d.message, delay)}
		}
	}
	return d
}

// runs is how many times a step's action ran: every start, restarts
// included (a resumed command or action runs again), but for a runJob
// step's resumes, which wait for the Job the interrupted run made and
// run nothing: they used up the driver's retries of a Job that had not
// failed (one agent restart while a migration ran, and its first
// transient failure ended the task).
func runs(st *v1alpha1.TaskStep) int {
	n := int(st.Attempts)
	if st.Action == string(drivers.ActionRunJob) {
		n -= int(st.Resumes)
	}
	return max(n, 1)
}

// decideOnce is decide without the step's retry policy.
func decideOnce(c stepCall) stepDecision {
	timeout := stepTimeout(c.step, c.defaultTimeout)
	timedOut := c.step.StartedAt != nil && c.now.Sub(c.step.StartedAt.Time) > timeout
	switch {
	case c.err != nil && outcome.IsStalled(c.err):
		return stepDecision{next: stepFail, reason: v1alpha1.ReasonStepFailed, message: c.err.Error()}
	case c.err != nil && timedOut && c.waiting != "" && errors.Is(c.err, context.DeadlineExceeded):
		// The call was cut short by the step's own deadline: what the step
		// waited for until then is why it timed out.
		return stepDecision{next: stepFail, reason: v1alpha1.ReasonStepTimedOut, message: fmt.Sprintf("timed out after %s: %s", timeout, c.waiting)}
	case c.err != nil && timedOut:
		return stepDecision{next: stepFail, reason: v1alpha1.ReasonStepTimedOut, message: fmt.Sprintf("timed out after %s: %v", timeout, c.err)}
	case c.err != nil:
		return stepDecision{next: stepRetry, err: c.err}
	case c.out.blocked:
		// Waiting for a person (a hand-set annotation): no deadline.
		after := c.out.after
		if after <= 0 {
			after = c.poll
		}
		return stepDecision{next: stepWait, after: after, reason: v1alpha1.ReasonSequenceAhead, message: c.out.output}
	case len(c.out.record) > 0:
		return stepDecision{next: stepRecord, record: c.out.record}
	case c.out.newer > 0:
		return stepDecision{next: stepSuperseded, newer: c.out.newer, output: c.out.output}
	case !c.out.done && timedOut:
		msg := fmt.Sprintf("timed out after %s", timeout)
		if c.waiting != "" {
			msg += ": " + c.waiting
		}
		return stepDecision{next: stepFail, reason: v1alpha1.ReasonStepTimedOut, message: msg}
	case !c.out.done:
		return stepDecision{next: stepWait, after: waitWithin(c.step, c.out.after, c.poll, timeout, c.now)}
	default:
		return stepDecision{next: stepDone, output: c.out.output}
	}
}

// waitWithin is the delay of a wait (poll when the action names none),
// capped at the step's deadline so its timeout is noticed in time.
func waitWithin(st *v1alpha1.TaskStep, after, poll, timeout time.Duration, now time.Time) time.Duration {
	if after <= 0 {
		after = poll
	}
	if st.StartedAt != nil {
		left := st.StartedAt.Add(timeout).Sub(now) + 10*time.Millisecond
		if left < after {
			return max(left, 10*time.Millisecond)
		}
	}
	return after
}
