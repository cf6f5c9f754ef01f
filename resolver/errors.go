package resolver

import (
	"fmt"
	"strings"

	cueerrors "cuelang.org/go/cue/errors"
)

// ConfigError is bad input in one file of the desired-state repository. It
// names the file, the line when known, the field and what was expected.
type ConfigError struct {
	File  string
	Line  int
	Field string
	Msg   string
	// Err is the cause when there is one (a driver source that could not
	// be fetched), so callers can tell a network failure from bad input.
	Err error
}

// Unwrap returns the cause.
func (e *ConfigError) Unwrap() error { return e.Err }

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %s", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// DeploymentError is a failure to resolve one deployment; the others still
// resolve.
type DeploymentError struct {
	ID  ID
	Err error
}

func (e *DeploymentError) Error() string { return e.ID.String() + ": " + e.Err.Error() }

func (e *DeploymentError) Unwrap() error { return e.Err }

// fromCUE turns a CUE error into a ConfigError for file, preferring a
// position inside that file over one in the schema.
func fromCUE(file string, err error) *ConfigError {
	errs := cueerrors.Errors(err)
	if len(errs) == 0 {
		return &ConfigError{File: file, Msg: err.Error()}
	}
	e := errs[0]
	path := e.Path()
	// The schema definition (#Deployment…) is ours, not the user's field.
	if len(path) > 0 && strings.HasPrefix(path[0], "#") {
		path = path[1:]
	}
	ce := &ConfigError{File: file, Field: strings.Join(path, ".")}
	format, args := e.Msg()
	ce.Msg = fmt.Sprintf(format, args...)
	for _, p := range cueerrors.Positions(e) {
		if p.Filename() == file && p.Line() > 0 {
			ce.Line = p.Line()
			break
		}
	}
	if len(errs) > 1 {
		ce.Msg += fmt.Sprintf(" (and %d more errors)", len(errs)-1)
	}
	return ce
}
