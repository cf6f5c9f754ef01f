package planner

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/styrmin/styrmin/internal/keypath"
)

// ANSI colours of the text output.
const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
	ansiDim    = "\x1b[2m"
)

type textWriter struct {
	w     *bufio.Writer
	color bool
}

func (t *textWriter) paint(code, s string) string {
	if !t.color || s == "" {
		return s
	}
	return code + s + ansiReset
}

func (t *textWriter) printf(format string, args ...any) { fmt.Fprintf(t.w, format, args...) }

func workflowColor(w Workflow) string {
	switch w {
	case WorkflowCreate:
		return ansiGreen
	case WorkflowUpdate:
		return ansiYellow
	case WorkflowUpgrade:
		return ansiCyan
	case WorkflowDelete:
		return ansiRed
	}
	return ""
}

// RenderText writes the plan for a terminal: the summary, one line per
// deployment, the blast radius, the deployments left out, then the
// details of each deployment.
func RenderText(w io.Writer, p *Plan, o RenderOptions) error {
	t := &textWriter{w: bufio.NewWriter(w), color: o.Color}
	t.printf("%s\n", t.paint(ansiBold, "Styrmin plan: "+summaryLine(p.Summary)))
	t.printf("base: %s · head: %s · %d unchanged", orNone(p.Base), orNone(p.Head), p.Summary.Unchanged)
	if p.Summary.Errors > 0 {
		t.printf(" · %s", t.paint(ansiRed, plural(p.Summary.Errors, "error")))
	}
	t.printf("\n")
	if line := noChanges(p); line != "" {
		t.printf("\n%s\n", line)
	}
	if note := unlockedNote(p); note != "" {
		t.printf("\n%s\n", note)
	}
	if showLockCommits(p) {
		t.printf("\n%s\n", t.paint(ansiBold, lockCommitsTitle))
		for _, lc := range p.LockCommits {
			t.printf("  %s %s\n", shortCommit(lc.Commit), keypath.Line(lc.Subject))
			for _, li := range lc.Deployments {
				t.printf("    %s\n", lockedLine(li))
			}
		}
	}
	for _, w := range p.Warnings {
		t.printf("\n%s %s\n", t.paint(ansiYellow+ansiBold, "Warning:"), w)
	}

	if len(p.Deployments) > 0 {
		t.printf("\n")
		rows := make([][]string, len(p.Deployments))
		for i, d := range p.Deployments {
			rows[i] = []string{symbol(d.Workflow), d.ID + internalMark(d), string(d.Workflow), sequence(d), versions(d), "cause: " + causeKinds(d)}
		}
		widths := columnWidths(rows)
		for i, r := range rows {
			d := p.Deployments[i]
			line := "  " + t.paint(workflowColor(d.Workflow), r[0]) + " " + pad(r[1], widths[1]) + "  " +
				t.paint(workflowColor(d.Workflow), pad(r[2], widths[2])) + "  " + pad(r[3], widths[3]) + "  " +
				pad(r[4], widths[4]) + "  " + r[5]
			t.printf("%s\n", strings.TrimRight(line, " "))
		}
	}

	if len(p.BlastRadius) > 0 {
		t.printf("\n%s\n", t.paint(ansiBold, "Blast radius:"))
		for _, e := range p.BlastRadius {
			t.printf("  %s", e.String())
			if e.LeftOut > 0 {
				t.printf(" (%d left out: they set the changed value themselves)", e.LeftOut)
			}
			t.printf("\n")
		}
	}

	if len(p.LeftOut) > 0 {
		t.printf("\n%s\n", t.paint(ansiBold, "Left out (they set the changed value themselves):"))
		for _, g := range groupLeftOut(p.LeftOut) {
			t.printf("  %s %s %s, set in %s (changed in %s)\n",
				idList(g.IDs, 10, func(s string) string { return s }), keeps(len(g.IDs)), g.Path, g.OverriddenBy.File, g.ChangedIn)
		}
	}

	if len(p.Waves) > 0 {
		t.printf("\n%s\n", t.paint(ansiBold, "Waves (each starts when the one before succeeded and is Ready; a failure stops the rest):"))
		for _, w := range p.Waves {
			t.printf("  %s\n", waveSummary(w))
		}
	}

	if len(p.Held) > 0 {
		t.printf("\n%s\n", t.paint(ansiBold, "Held (they keep their lock until the hold is lifted):"))
		for _, h := range p.Held {
			t.printf("  %s: %s%s\n", h.ID, h.Reason, heldWaiting(h))
		}
	}

	writeTextRail(t, p)

	if len(p.Errors) > 0 {
		t.printf("\n%s\n", t.paint(ansiRed+ansiBold, "Errors (these deployments are neither planned nor deleted):"))
		for _, e := range p.Errors {
			t.printf("  %s: %s\n", e.ID, indentRest(e.Message, "    "))
		}
	}

	for _, d := range p.Deployments {
		t.printf("\n")
		writeTextDeployment(t, d, o)
	}
	return t.w.Flush()
}

func writeTextRail(t *textWriter, p *Plan) {
	r := p.Deletions
	switch {
	case r.Refused:
		t.printf("\n%s\n", t.paint(ansiRed+ansiBold, fmt.Sprintf(
			"REFUSED: this plan deletes %d deployments, more than the deletion threshold of %d. "+
				"If that is intended, allow it: --allow-deletions %d", r.Count, r.Threshold, r.Count)))
	case r.Count > r.Threshold:
		t.printf("\nDeletions: %d, above the threshold of %d, allowed explicitly (up to %d).\n", r.Count, r.Threshold, r.Allowed)
	}
}

// writeTextDeployment writes the details of one deployment.
func writeTextDeployment(t *textWriter, d *Deployment, o RenderOptions) {
	head := fmt.Sprintf("%s %s%s: %s, sequence %s", symbol(d.Workflow), d.ID, internalMark(d), d.Workflow, sequence(d))
	t.printf("%s\n", t.paint(ansiBold+workflowColor(d.Workflow), head))
	if v := versions(d); v != "" {
		t.printf("  %s", v)
		if d.Namespace != "" {
			t.printf(" · namespace %s", d.Namespace)
		}
		t.printf("\n")
	}
	if d.Wave != nil {
		t.printf("  %s\n", waveLine(d.Wave))
	}
	if d.Restoring != "" {
		t.printf("  %s\n", restoringLine(d.Restoring))
	}
	if len(d.otherAfter) > 0 {
		t.printf("  runs after: %s (each Ready first)\n", strings.Join(d.otherAfter, ", "))
	}
	if len(d.Causes) > 0 {
		t.printf("  cause:\n")
		for _, c := range d.Causes {
			t.printf("    %s\n", describeCause(c))
		}
	}
	if len(d.Changes) > 0 {
		t.printf("  changes:\n")
		for _, c := range d.Changes {
			t.printf("    %s %s\n", t.paint(opColor(c.Op), changeSymbol(c.Op)), describeChange(c))
		}
	}
	if len(d.Actions) > 0 {
		t.printf("  actions:\n")
		for i, a := range d.Actions {
			t.printf("    %d. %s  %s\n", i+1, a.Name, t.paint(ansiDim, a.Description))
		}
	}
	m := d.Manifests
	if m.Error != "" {
		t.printf("  manifests: %s\n", t.paint(ansiRed, "not rendered: "+m.Error))
		return
	}
	if d.Manifests.Objects == nil && m.Unchanged == 0 && m.Added == 0 && m.Removed == 0 && m.Changed == 0 {
		return
	}
	t.printf("  manifests: %s\n", manifestCounts(m))
	for _, od := range m.Objects {
		t.printf("    %s %s\n", t.paint(opColor(od.Op), changeSymbol(od.Op)), od.Summary())
	}
	for _, od := range m.Objects {
		if od.Op != OpChanged && !o.Full {
			continue
		}
		t.printf("\n")
		for _, line := range splitLines(od.Diff) {
			t.printf("      %s\n", paintDiffLine(t, line))
		}
	}
}

func opColor(op ChangeOp) string {
	switch op {
	case OpAdded:
		return ansiGreen
	case OpRemoved:
		return ansiRed
	}
	return ansiYellow
}

func paintDiffLine(t *textWriter, line string) string {
	switch {
	case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
		return t.paint(ansiBold, line)
	case strings.HasPrefix(line, "@@"):
		return t.paint(ansiCyan, line)
	case strings.HasPrefix(line, "+"):
		return t.paint(ansiGreen, line)
	case strings.HasPrefix(line, "-"):
		return t.paint(ansiRed, line)
	}
	return line
}

func columnWidths(rows [][]string) []int {
	var w []int
	for _, r := range rows {
		for i, c := range r {
			for len(w) <= i {
				w = append(w, 0)
			}
			if n := len([]rune(c)); n > w[i] {
				w[i] = n
			}
		}
	}
	return w
}

func pad(s string, n int) string {
	if k := len([]rune(s)); k < n {
		return s + strings.Repeat(" ", n-k)
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func indentRest(s, indent string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+indent)
}

// internalMark is what follows an internal deployment's ID in a plan:
// " (internal: ingress)"; "" for an application.
func internalMark(d *Deployment) string {
	if d.Internal == "" {
		return ""
	}
	return " (internal: " + d.Internal + ")"
}
