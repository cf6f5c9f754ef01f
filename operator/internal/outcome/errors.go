package outcome

import (
	"errors"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/styrmin/styrmin/gitsource"
)

// Every error is classified where it happens: a stalled error needs a
// change in git (a missing driver, a render error, an invalid instance)
// and is not retried; a retryable error may go away on its own (the API
// server, a conflict, a driver source being fetched) and is retried with
// backoff. Map turns either into what a controller does, in one place.

// stalledError needs a change in git before a retry can succeed.
type stalledError struct {
	reason string
	err    error
}

func (e *stalledError) Error() string { return e.err.Error() }
func (e *stalledError) Unwrap() error { return e.err }

// retryableError may succeed when retried.
type retryableError struct {
	reason string
	err    error
	// after, when set, is the delay before the retry instead of the
	// rate limiter's backoff.
	after time.Duration
}

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// Stalled classifies err as needing a change in git; reason is the
// condition reason it reports.
func Stalled(reason string, err error) error { return &stalledError{reason: reason, err: err} }

// Retryable classifies err as one that may go away when retried.
func Retryable(reason string, err error) error { return &retryableError{reason: reason, err: err} }

// RetryableAfter is Retryable with a fixed delay before the retry instead
// of the rate limiter's backoff.
func RetryableAfter(reason string, after time.Duration, err error) error {
	return &retryableError{reason: reason, err: err, after: after}
}

// IsStalled reports whether err (or an error it wraps) is stalled.
func IsStalled(err error) bool {
	var s *stalledError
	return errors.As(err, &s)
}

// Classify returns whether err is stalled and its condition reason. A
// stalled error anywhere in the chain wins: no retry can fix it.
// Unclassified errors are retryable with reason fallback.
func Classify(err error, fallback string) (isStalled bool, reason string) {
	var s *stalledError
	if errors.As(err, &s) {
		return true, s.reason
	}
	var r *retryableError
	if errors.As(err, &r) {
		return false, r.reason
	}
	return false, fallback
}

// Kind is what a controller does with an error.
type Kind int

// The kinds of outcome Map gives.
const (
	// None: no error.
	None Kind = iota
	// Stall: the error needs a change in git; do not retry it (a new
	// generation from git triggers the next attempt).
	Stall
	// Conflict: a write on a stale copy; read again and retry at once.
	Conflict
	// Retry: retry with the rate limiter's backoff, or after Outcome.After.
	Retry
)

// Outcome is the mapping of one error.
type Outcome struct {
	Kind Kind
	// Reason is the condition reason (fallback for unclassified errors).
	Reason string
	// After, for Retry, is the fixed delay asked for (0: backoff).
	After time.Duration
}

// ConflictDelay is how soon a write that met a conflict is tried again.
const ConflictDelay = 10 * time.Millisecond

// NotFetchedDelay is how soon a read of a commit the clone could not fetch
// (gitsource.ErrNotFetched) is tried again: the catch-up fetch is made at
// most every 30 s (gitsource.CatchUpOptions.Every) and goes on in the
// background, so a sooner retry meets the same error within milliseconds,
// and the rate limiter's backoff, doubled at each, left the object
// untouched for up to 16 minutes after the remote answered again.
const NotFetchedDelay = 30 * time.Second

// Map classifies err for a controller: the one place where errors become
// stall, conflict or retry.
func Map(err error, fallback string) Outcome {
	if err == nil {
		return Outcome{Kind: None}
	}
	isStalled, reason := Classify(err, fallback)
	if isStalled {
		return Outcome{Kind: Stall, Reason: reason}
	}
	if apierrors.IsConflict(err) {
		return Outcome{Kind: Conflict, Reason: reason, After: ConflictDelay}
	}
	var after time.Duration
	var r *retryableError
	if errors.As(err, &r) {
		after = r.after
	}
	if errors.Is(err, gitsource.ErrNotFetched) {
		after = max(after, NotFetchedDelay)
	}
	return Outcome{Kind: Retry, Reason: reason, After: after}
}

// AdmissionDenied reports whether the API server's refusal err came from
// an admission policy: a validating webhook (Kyverno, Gatekeeper) or a
// ValidatingAdmissionPolicy. They answer 403 as RBAC does (or 400, 422,
// as the policy says), and say who they are only in the message, in the
// API server's words (admission webhook "x" denied the request;
// ValidatingAdmissionPolicy 'x' with binding 'y' denied request).
func AdmissionDenied(err error) bool {
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		return false
	}
	msg := status.Status().Message
	return (strings.Contains(msg, "admission webhook ") && strings.Contains(msg, " denied the request")) ||
		(strings.Contains(msg, "ValidatingAdmissionPolicy '") && strings.Contains(msg, " denied request"))
}
