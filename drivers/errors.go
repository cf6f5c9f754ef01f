package drivers

import (
	"errors"
	"fmt"
	"strings"

	"cuelang.org/go/cue"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/token"
)

// ErrUnknownDriver is returned (wrapped) when a catalog has no version of
// the driver asked for.
var ErrUnknownDriver = errors.New("unknown driver")

// SpecError is a problem in a driver folder, located at a file and, where
// it applies, a field of the spec.
type SpecError struct {
	// File is the file as shown to users: the driver's Source joined with
	// the path inside the folder (for example "drivers/webapp/1.0.0/driver.cue").
	File string
	// Line and Column locate the problem in File; 0 when unknown.
	Line, Column int
	// Field is the dotted path of the field ("parameters.replicas"), or "".
	Field string
	// Msg says what is wrong and what was expected.
	Msg string
	// Err is the underlying error, if any.
	Err error
}

func (e *SpecError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *SpecError) Unwrap() error { return e.Err }

// specErrorAt builds a SpecError located at a CUE position when it is
// valid, else at the file.
func specErrorAt(file string, pos token.Pos, field, format string, args ...any) *SpecError {
	e := &SpecError{File: file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if pos.IsValid() && pos.Filename() != schemaFile {
		p := pos.Position()
		if p.Filename != "" {
			e.File = p.Filename
		}
		e.Line, e.Column = p.Line, p.Column
	}
	return e
}

// maxReported bounds how many CUE errors one failure reports.
const maxReported = 8

// cueError converts a CUE error into SpecErrors joined with errors.Join.
// Positions in the spec file are preferred over positions in the schema,
// so the user sees their own line.
func cueError(file string, err error) error {
	if err == nil {
		return nil
	}
	var out []error
	seen := map[string]bool{}
	for _, e := range cueerrors.Errors(err) {
		pos := bestPos(file, e)
		format, args := e.Msg()
		se := &SpecError{File: file, Field: cuePath(e.Path()), Msg: fmt.Sprintf(format, args...), Err: e}
		if pos.IsValid() {
			p := pos.Position()
			if p.Filename != "" {
				se.File = p.Filename
			}
			se.Line, se.Column = p.Line, p.Column
		}
		key := se.Error()
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, se)
		if len(out) == maxReported {
			break
		}
	}
	if len(out) == 0 {
		return &SpecError{File: file, Msg: err.Error(), Err: err}
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

func bestPos(file string, e cueerrors.Error) token.Pos {
	candidates := append([]token.Pos{e.Position()}, e.InputPositions()...)
	for _, p := range candidates {
		if p.IsValid() && p.Filename() == file {
			return p
		}
	}
	for _, p := range candidates {
		if p.IsValid() && p.Filename() != schemaFile {
			return p
		}
	}
	return token.NoPos
}

// cuePath formats a CUE error path: fields joined with dots, list
// indices in brackets.
func cuePath(p []string) string {
	var b strings.Builder
	if len(p) > 0 && p[0] == "#Driver" {
		p = p[1:]
	}
	for _, s := range p {
		if s != "" && strings.Trim(s, "0123456789") == "" {
			fmt.Fprintf(&b, "[%s]", s)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// valuePath formats the path of a value the same way.
func valuePath(v cue.Value) string {
	var parts []string
	for _, s := range v.Path().Selectors() {
		if s.Type() == cue.StringLabel {
			parts = append(parts, s.Unquoted())
		} else {
			parts = append(parts, s.String())
		}
	}
	return cuePath(parts)
}

// locator places errors about values of the unified spec at the spec's
// own lines: the unified value's positions may be the schema's.
type locator struct {
	file string
	raw  cue.Value
}

func (c *compiled) locator() *locator { return &locator{file: c.file, raw: c.raw} }

// pos is the position in the spec of the value at v's path, or of its
// nearest parent written in the spec.
func (l *locator) pos(v cue.Value) token.Pos {
	if p := v.Pos(); p.IsValid() && p.Filename() == l.file {
		return p
	}
	sels := v.Path().Selectors()
	for len(sels) > 0 && sels[0].IsDefinition() {
		sels = sels[1:]
	}
	for n := len(sels); n > 0; n-- {
		if rv := l.raw.LookupPath(cue.MakePath(sels[:n]...)); rv.Exists() {
			if p := rv.Pos(); p.IsValid() && p.Filename() != schemaFile {
				return p
			}
		}
	}
	return token.NoPos
}

func (l *locator) errAt(v cue.Value, field, format string, args ...any) *SpecError {
	return specErrorAt(l.file, l.pos(v), field, format, args...)
}
