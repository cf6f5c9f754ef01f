package main

import "errors"

// exitCoder is an error that carries the process exit code (for example
// `plan --detailed-exitcode` returns 2 when there are changes) and has
// already printed what the user needs.
type exitCoder interface {
	error
	ExitCode() int
}

// exitError is the concrete exitCoder the commands return.
type exitError struct{ code int }

func (e exitError) Error() string { return "exit status" }

// ExitCode returns the process exit code.
func (e exitError) ExitCode() int { return e.code }

func asExitCoder(err error, target *exitCoder) bool {
	return errors.As(err, target)
}
