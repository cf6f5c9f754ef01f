package drivers

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limits bound one driver's loading, CUE evaluation and chart rendering.
// A driver is code its authors control, so a repository's reviewers must
// not be able to stall every deployment (or the agent) by merging one:
// each evaluation is bounded in time, memory and output, and a driver over
// a limit fails with a *LimitError naming the driver, the file and the
// limit. The defaults are far above what a real chart needs (the example
// drivers load in milliseconds and a few MiB).
type Limits struct {
	// Timeout bounds one load (CUE compile, chart load, sample render) or
	// one evaluation (values, render). Default 30s.
	Timeout time.Duration
	// Memory bounds the memory one evaluation may use, in bytes. It holds
	// only where the evaluation runs in a Sandbox (an in-process
	// evaluation cannot be stopped without stopping the process).
	// Default 1 GiB.
	Memory int64
	// RenderedBytes bounds the text a chart renders to, in bytes.
	// Default 64 MiB.
	RenderedBytes int64
	// ChartBytes bounds the unpacked size of the subchart archives
	// (charts/*.tgz, nested ones included), in bytes. Default 64 MiB.
	ChartBytes int64
}

// Default limits; see Limits.
const (
	DefaultTimeout       = 30 * time.Second
	DefaultMemory        = 1 << 30
	DefaultRenderedBytes = 64 << 20
	DefaultChartBytes    = 64 << 20
)

// WithDefaults returns l with every unset (zero or negative) limit set to
// its default.
func (l Limits) WithDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.Memory <= 0 {
		l.Memory = DefaultMemory
	}
	if l.RenderedBytes <= 0 {
		l.RenderedBytes = DefaultRenderedBytes
	}
	if l.ChartBytes <= 0 {
		l.ChartBytes = DefaultChartBytes
	}
	return l
}

// Merge returns l with the limits o sets (non-zero) taking precedence:
// a command's flags over the repository's settings.
func (l Limits) Merge(o Limits) Limits {
	if o.Timeout > 0 {
		l.Timeout = o.Timeout
	}
	if o.Memory > 0 {
		l.Memory = o.Memory
	}
	if o.RenderedBytes > 0 {
		l.RenderedBytes = o.RenderedBytes
	}
	if o.ChartBytes > 0 {
		l.ChartBytes = o.ChartBytes
	}
	return l
}

// Cap returns l lowered to the limits o sets (non-zero) where they are
// lower: a repository may tighten the agent's limits, never loosen them.
func (l Limits) Cap(o Limits) Limits {
	if o.Timeout > 0 && o.Timeout < l.Timeout {
		l.Timeout = o.Timeout
	}
	if o.Memory > 0 && o.Memory < l.Memory {
		l.Memory = o.Memory
	}
	if o.RenderedBytes > 0 && o.RenderedBytes < l.RenderedBytes {
		l.RenderedBytes = o.RenderedBytes
	}
	if o.ChartBytes > 0 && o.ChartBytes < l.ChartBytes {
		l.ChartBytes = o.ChartBytes
	}
	return l
}

// Limit names one of Limits' bounds in a LimitError.
type Limit string

// The limits a driver can exceed.
const (
	LimitTime     Limit = "time"
	LimitMemory   Limit = "memory"
	LimitRendered Limit = "rendered bytes"
	LimitChart    Limit = "unpacked chart bytes"
)

// ErrLimit is matched (errors.Is) by every *LimitError.
var ErrLimit = errors.New("driver limit exceeded")

// LimitError reports a driver that exceeded one of its Limits. It needs a
// change in git (a smaller driver or a higher limit), like a SpecError.
type LimitError struct {
	// Driver is the driver folder as shown to users (Driver.Source).
	Driver string
	// File is the file being evaluated when the limit was hit: the spec
	// for CUE, the chart folder or the template for Helm, the archive for
	// an unpacked subchart.
	File  string
	Limit Limit
	// Max is the limit, in its unit (a duration or bytes).
	Max string
	// Detail says what was measured, when known ("rendered 80 MiB").
	Detail string
	// Input names what the driver was given, when one deployment's input
	// hit the limit ("the values of deployment web (namespace dev-web)",
	// "the parameters given (replicas)"): the driver is within its limits
	// for others.
	Input string
}

func (e *LimitError) Error() string {
	msg := fmt.Sprintf("driver %s: %s: ", e.Driver, e.File)
	if e.Input != "" {
		msg += e.Input + ": "
	}
	msg += fmt.Sprintf("exceeded the %s limit of %s", e.Limit, e.Max)
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg + "; make the driver smaller or raise limits in styrmin.cue"
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

func sizeText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// bounded runs fn with the time limit and ctx's deadline. CUE and Helm's
// template engine cannot be interrupted, so on timeout fn's goroutine is
// abandoned (it ends when fn does, its result dropped); a Sandbox is what
// stops the work itself. file names what fn evaluates, for the error.
func bounded[T any](ctx context.Context, l Limits, source, file string, fn func() (T, error)) (T, error) {
	l = l.WithDefaults()
	max := deadlineText(ctx, l.Timeout)
	ctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return zero, &LimitError{Driver: source, File: file, Limit: LimitTime, Max: max}
		}
		return zero, fmt.Errorf("driver %s: %s: %w", source, file, ctx.Err())
	}
}

// deadlineText names the time limit that will end an evaluation: the
// limit, or the caller's deadline when that comes first (a task step's).
func deadlineText(ctx context.Context, limit time.Duration) string {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < limit {
		return time.Until(dl).Round(time.Millisecond).String() + " (the caller's deadline)"
	}
	return limit.String()
}
