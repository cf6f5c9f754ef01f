package operator

import (
	"errors"
	"time"
)

// The reconciler classifies every error where it happens: a stalled error
// needs a change in git (a missing driver, a render error, an invalid
// instance) and is not retried; a retryable error may go away on its own
// (the API server, a conflict, a driver source being fetched) and is
// retried with backoff. resultFor maps both to a reconcile result in one
// place.

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

func stalled(reason string, err error) error { return &stalledError{reason: reason, err: err} }

func retryable(reason string, err error) error { return &retryableError{reason: reason, err: err} }

// classify returns whether err is stalled and its condition reason.
// Unclassified errors are retryable with reason fallback.
func classify(err error, fallback string) (isStalled bool, reason string) {
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
