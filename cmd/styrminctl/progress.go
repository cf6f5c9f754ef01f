package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress reports long work (plan and lock over many deployments) on a
// terminal: the stage, done/total and the time elapsed, rewritten in
// place, and a total at the end. On anything else it writes nothing, so
// logs and pipes stay clean.
type progress struct {
	w     io.Writer
	start time.Time

	mu     sync.Mutex
	drawn  time.Time // when the line was last drawn
	shown  bool      // a line is on the screen
	counts map[string][2]int
	order  []string
}

// progressRedraw bounds how often the line is drawn.
const progressRedraw = 100 * time.Millisecond

// newProgress reports on w when terminal (else it is quiet; nil-safe).
func newProgress(w io.Writer, terminal bool) *progress {
	if !terminal {
		return nil
	}
	return &progress{w: w, start: time.Now(), counts: map[string][2]int{}}
}

// step records that done of total are through stage; safe for
// concurrent use (the library calls it from its workers).
func (p *progress) step(stage string, done, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.counts[stage]; !ok {
		p.order = append(p.order, stage)
	}
	c := p.counts[stage]
	c[0], c[1] = max(c[0], done), total
	p.counts[stage] = c
	if now := time.Now(); done == total || now.Sub(p.drawn) >= progressRedraw {
		p.drawn = now
		p.shown = true
		fmt.Fprintf(p.w, "\r\x1b[K%s %d/%d  %s", stage, c[0], total, p.elapsed())
	}
}

// resolved is step for the resolver's callback.
func (p *progress) resolved(done, total int) { p.step("resolved", done, total) }

// planned is step for the planner's callback.
func (p *progress) planned(stage string, done, total int) {
	switch stage {
	case "resolve":
		stage = "resolved"
	case "render":
		stage = "rendered"
	}
	p.step(stage, done, total)
}

// done clears the line and prints the totals of every stage and the time
// it all took: "resolved 200/200, rendered 12/12 in 3.4s".
func (p *progress) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	for i, stage := range p.order {
		if i > 0 {
			fmt.Fprint(p.w, ", ")
		}
		c := p.counts[stage]
		fmt.Fprintf(p.w, "%s %d/%d", stage, c[0], c[1])
	}
	if len(p.order) == 0 {
		fmt.Fprint(p.w, "done")
	}
	fmt.Fprintf(p.w, " in %s\n", p.elapsed())
}

func (p *progress) elapsed() string {
	return time.Since(p.start).Round(100 * time.Millisecond).String()
}

// above returns a writer to w that first clears the progress line, so
// what a command prints while it reports progress (lock's "locked …"
// lines) does not run into it; w itself when p is nil.
func (p *progress) above(w io.Writer) io.Writer {
	if p == nil {
		return w
	}
	return clearingWriter{p: p, w: w}
}

type clearingWriter struct {
	p *progress
	w io.Writer
}

func (c clearingWriter) Write(b []byte) (int, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.p.shown {
		fmt.Fprint(c.p.w, "\r\x1b[K")
		c.p.shown = false
	}
	return c.w.Write(b)
}
