package task

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/outcome"
)

// TestDecideMapsEachActionResultToOneNextStep pins what a task does
// after one call of a step's action, without a cluster or a clock.
func TestDecideMapsEachActionResultToOneNextStep(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	started := func(ago time.Duration) *v1alpha1.TaskStep {
		at := metav1.NewTime(now.Add(-ago))
		return &v1alpha1.TaskStep{Name: "upgrade/pre/2:runJob", StartedAt: &at}
	}
	withTimeout := func(st *v1alpha1.TaskStep, d time.Duration) *v1alpha1.TaskStep {
		st.Timeout = &metav1.Duration{Duration: d}
		return st
	}
	withRetry := func(st *v1alpha1.TaskStep, attempts int32, max int, backoff time.Duration) *v1alpha1.TaskStep {
		st.Attempts = attempts
		st.Args = map[string]string{argRetryAttempts: strconv.Itoa(max)}
		if backoff > 0 {
			st.Args[argRetryBackoff] = backoff.String()
		}
		return st
	}
	transient := errors.New("the API server is busy")
	broken := outcome.Stalled(v1alpha1.ReasonStepFailed, errors.New("job migrate failed: exit 3"))
	for _, tc := range []struct {
		name string
		call stepCall
		want stepDecision
		// message, when set, must be contained in the decision's message.
		message string
	}{
		{"done", stepCall{step: started(time.Second), out: actionOutcome{done: true, output: "migrated"}},
			stepDecision{next: stepDone, output: "migrated"}, ""},
		{"waiting, with the delay it asks for", stepCall{step: started(time.Second), out: actionOutcome{after: 2 * time.Second}},
			stepDecision{next: stepWait, after: 2 * time.Second}, ""},
		{"waiting, at the poll interval when it names no delay", stepCall{step: started(time.Second)},
			stepDecision{next: stepWait, after: time.Second}, ""},
		{"a wait is cut at the step's deadline", stepCall{step: started(14*time.Minute + 59*time.Second), out: actionOutcome{after: 30 * time.Second}},
			stepDecision{next: stepWait, after: time.Second + 10*time.Millisecond}, ""},
		{"waiting past the deadline fails, naming what it waited for", stepCall{step: started(16 * time.Minute), waiting: "worker Deployment/hub-worker: 0 of 2 replicas ready"},
			stepDecision{next: stepFail, reason: v1alpha1.ReasonStepTimedOut}, "timed out after 15m0s: worker Deployment/hub-worker"},
		{"a call cut short by the step's deadline fails naming what the step waited for", stepCall{step: started(16 * time.Minute),
			err: fmt.Errorf("reading job dev/hub-migrate-4: %w", context.DeadlineExceeded), waiting: "job dev/hub-migrate-4 has no pod running: pod hub-migrate-4-x Pending: ImagePullBackOff"},
			stepDecision{next: stepFail, reason: v1alpha1.ReasonStepTimedOut}, "timed out after 15m0s: job dev/hub-migrate-4 has no pod running: pod hub-migrate-4-x Pending: ImagePullBackOff"},
		{"a declared timeout wins over the default", stepCall{step: withTimeout(started(2*time.Minute), time.Minute)},
			stepDecision{next: stepFail, reason: v1alpha1.ReasonStepTimedOut}, "timed out after 1m0s"},
		{"a record is persisted before the action runs again", stepCall{step: started(time.Second), out: actionOutcome{record: map[string]string{"Deployment/hub-worker": "2"}}},
			stepDecision{next: stepRecord, record: map[string]string{"Deployment/hub-worker": "2"}}, ""},
		{"a newer instance supersedes the task", stepCall{step: started(time.Second), out: actionOutcome{newer: 7, output: "kept sequence 7"}},
			stepDecision{next: stepSuperseded, newer: 7, output: "kept sequence 7"}, ""},
		{"a stalled error fails the step at once", stepCall{step: started(time.Second), err: broken},
			stepDecision{next: stepFail, reason: v1alpha1.ReasonStepFailed}, "exit 3"},
		{"a transient error is retried", stepCall{step: started(time.Second), err: transient},
			stepDecision{next: stepRetry, err: transient}, ""},
		{"a transient error past the deadline fails", stepCall{step: started(20 * time.Minute), err: transient},
			stepDecision{next: stepFail, reason: v1alpha1.ReasonStepTimedOut}, "the API server is busy"},
		{"a failure the driver retries runs the step again after its back-off", stepCall{step: withRetry(started(time.Second), 1, 3, 5*time.Second), err: broken},
			stepDecision{next: stepAgain, after: 5 * time.Second, reason: v1alpha1.ReasonStepFailed}, "attempt 1 of 3 failed"},
		{"the back-off doubles", stepCall{step: withRetry(started(time.Second), 2, 3, 5*time.Second), err: broken},
			stepDecision{next: stepAgain, after: 10 * time.Second, reason: v1alpha1.ReasonStepFailed}, "attempt 2 of 3"},
		{"a timeout the driver retries runs again too", stepCall{step: withRetry(started(16*time.Minute), 1, 2, 0)},
			stepDecision{next: stepAgain, after: 10 * time.Second, reason: v1alpha1.ReasonStepTimedOut}, "timed out"},
		{"the last attempt fails the step", stepCall{step: withRetry(started(time.Second), 3, 3, 5*time.Second), err: broken},
			stepDecision{next: stepFail, reason: v1alpha1.ReasonStepFailed}, "exit 3"},
		{"a transient error is not a failure to retry", stepCall{step: withRetry(started(time.Second), 1, 3, time.Second), err: transient},
			stepDecision{next: stepRetry, err: transient}, ""},
		{"waiting for a person has no deadline, and says why", stepCall{step: started(time.Hour), out: actionOutcome{blocked: true, after: 30 * time.Second, output: "remove the annotation"}},
			stepDecision{next: stepWait, after: 30 * time.Second, reason: v1alpha1.ReasonSequenceAhead}, "remove the annotation"},
		{"a step not started yet never times out", stepCall{step: &v1alpha1.TaskStep{}, err: transient},
			stepDecision{next: stepRetry, err: transient}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.call
			c.now, c.defaultTimeout, c.poll = now, 15*time.Minute, time.Second
			got := decide(c)
			if tc.message != "" && !strings.Contains(got.message, tc.message) {
				t.Errorf("message %q, want it to contain %q", got.message, tc.message)
			}
			got.message = ""
			if got.next != tc.want.next || got.after != tc.want.after || got.output != tc.want.output ||
				got.newer != tc.want.newer || got.reason != tc.want.reason || !errors.Is(got.err, tc.want.err) ||
				len(got.record) != len(tc.want.record) {
				t.Errorf("decide = %+v, want %+v", got, tc.want)
			}
			for k, v := range tc.want.record {
				if got.record[k] != v {
					t.Errorf("record[%s] = %q, want %q", k, got.record[k], v)
				}
			}
		})
	}
}

// TestAFailedRunsOutputGoesToTheStepNotToTheMessage pins that what a
// failed command or Job printed is the step's output, kept apart from the
// message (which becomes the task's message and may reach an event).
func TestAFailedRunsOutputGoesToTheStepNotToTheMessage(t *testing.T) {
	t.Parallel()
	at := metav1.NewTime(time.Now())
	failed := outcome.Stalled(v1alpha1.ReasonStepFailed, errors.New("job migrate failed: BackoffLimitExceeded"))
	out := actionOutcome{output: "connecting with password hunter2\nerror"}
	d := decide(stepCall{step: &v1alpha1.TaskStep{Name: "upgrade/pre/0:runJob", StartedAt: &at}, out: out, err: failed, now: time.Now(), defaultTimeout: time.Minute})
	if d.next != stepFail || d.output != out.output || strings.Contains(d.message, "hunter2") {
		t.Errorf("decide = next %v, output %q, message %q; want a failure with the output apart from the message", d.next, d.output, d.message)
	}
	st := &v1alpha1.TaskStep{Name: "upgrade/pre/0:runJob", StartedAt: &at, Args: map[string]string{argRetryAttempts: "3"}, Attempts: 1}
	if d := decide(stepCall{step: st, out: out, err: failed, now: time.Now(), defaultTimeout: time.Minute}); d.next != stepAgain || d.output != out.output || strings.Contains(d.message, "hunter2") {
		t.Errorf("decide with retries = next %v, output %q, message %q; want another run with the output apart", d.next, d.output, d.message)
	}
}
