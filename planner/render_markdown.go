package planner

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/styrmin/styrmin/internal/keypath"
)

// maxTableRows bounds the summary table of the markdown output.
const maxTableRows = 200

// RenderMarkdown writes the plan as a pull-request comment: a summary
// table, the blast radius, the deployments left out, and each
// deployment's details in a collapsible section. Output stays under
// RenderOptions.MaxBytes: details that do not fit are left out with a
// note.
func RenderMarkdown(w io.Writer, p *Plan, o RenderOptions) error {
	limit := o.MaxBytes
	if limit <= 0 {
		limit = DefaultMarkdownBytes
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "### Styrmin plan: %s\n\n", summaryLine(p.Summary))
	fmt.Fprintf(&b, "Base %s · head %s · %d unchanged", mdCode(orNone(p.Base)), mdCode(orNone(p.Head)), p.Summary.Unchanged)
	if p.Summary.Errors > 0 {
		fmt.Fprintf(&b, " · **%s**", plural(p.Summary.Errors, "error"))
	}
	b.WriteString("\n\n")
	if line := noChanges(p); line != "" {
		b.WriteString(line + "\n")
		if len(p.LockCommits) > 0 {
			b.WriteString("\n")
		}
	}
	if note := unlockedNote(p); note != "" {
		fmt.Fprintf(&b, "> [!NOTE]\n> %s\n\n", note)
	}
	if showLockCommits(p) {
		b.WriteString(lockCommitsTitle + "\n\n")
		for _, lc := range p.LockCommits {
			fmt.Fprintf(&b, "- %s %s\n", mdCode(shortCommit(lc.Commit)), mdCell(keypath.Line(lc.Subject)))
			for _, li := range lc.Deployments {
				fmt.Fprintf(&b, "  - %s %s %s, %d → %d, %s\n", mdCell(symbol(li.Workflow)), mdCode(li.ID), li.Workflow,
					li.FromSequence, li.ToSequence, mdCell(versions(&Deployment{From: li.From, To: li.To})))
			}
		}
		b.WriteString("\n")
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "> [!WARNING]\n> %s\n\n", mdCell(w))
	}

	r := p.Deletions
	switch {
	case r.Refused:
		fmt.Fprintf(&b, "> [!CAUTION]\n> **Refused:** this plan deletes %d deployments, more than the deletion threshold of %d. "+
			"If that is intended, allow it with `--allow-deletions %d`.\n\n", r.Count, r.Threshold, r.Count)
	case r.Count > r.Threshold:
		fmt.Fprintf(&b, "> [!WARNING]\n> This plan deletes %d deployments, above the threshold of %d, allowed explicitly (up to %d).\n\n", r.Count, r.Threshold, r.Allowed)
	}

	if len(p.Deployments) > 0 {
		b.WriteString("| | Deployment | Workflow | Sequence | Driver, app | Cause | Manifests |\n")
		b.WriteString("|---|---|---|---|---|---|---|\n")
		var unlisted []string
		for i, d := range p.Deployments {
			if i >= maxTableRows {
				if i == maxTableRows {
					fmt.Fprintf(&b, "| | … and %d more | | | | | |\n", len(p.Deployments)-maxTableRows)
				}
				if d.Workflow == WorkflowDelete {
					unlisted = append(unlisted, d.ID)
				}
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n",
				mdCell(symbol(d.Workflow)), mdCode(d.ID)+mdCell(internalMark(d)), d.Workflow, sequence(d), mdCell(versions(d)), mdCell(causeKinds(d)), mdCell(manifestCounts(d.Manifests)))
		}
		b.WriteString("\n")
		if len(unlisted) > 0 {
			// A deletion is never left for a reviewer to guess from a count.
			// Bounded: a whole cluster removed would pass the comment's
			// size; the JSON plan lists them all.
			fmt.Fprintf(&b, "**Also deleted** (beyond the table): %s\n\n", idList(unlisted, maxTableRows, mdCode))
		}
	}

	if len(p.BlastRadius) > 0 {
		b.WriteString("**Blast radius**\n\n")
		for _, e := range p.BlastRadius {
			fmt.Fprintf(&b, "- environment %s: %d of %s redeploy", mdCode(e.Cluster+"/"+e.Environment), e.Redeploy, plural(e.Deployments, "deployment"))
			if e.LeftOut > 0 {
				fmt.Fprintf(&b, " (%d left out: they set the changed value themselves)", e.LeftOut)
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}

	if len(p.LeftOut) > 0 {
		b.WriteString("**Left out** (they set the changed value themselves)\n\n")
		for _, g := range groupLeftOut(p.LeftOut) {
			fmt.Fprintf(&b, "- %s %s %s, set in %s (changed in %s)\n",
				idList(g.IDs, 10, mdCode), keeps(len(g.IDs)), mdCode(g.Path), mdCode(g.OverriddenBy.File), mdCode(g.ChangedIn))
		}
		b.WriteString("\n")
	}

	if len(p.Waves) > 0 {
		b.WriteString("**Waves** (each starts when the one before succeeded and is Ready; a failure stops the rest)\n\n")
		for _, w := range p.Waves {
			fmt.Fprintf(&b, "- %s\n", mdCell(waveSummary(w)))
		}
		b.WriteString("\n")
	}

	if len(p.Held) > 0 {
		b.WriteString("**Held** (they keep their lock until the hold is lifted)\n\n")
		for _, h := range p.Held {
			fmt.Fprintf(&b, "- %s: %s%s\n", mdCode(h.ID), h.Reason, heldWaiting(h))
		}
		b.WriteString("\n")
	}

	if len(p.Errors) > 0 {
		b.WriteString("**Errors** (these deployments are neither planned nor deleted)\n\n")
		for _, e := range p.Errors {
			fmt.Fprintf(&b, "- %s: %s\n", mdCode(e.ID), mdCell(e.Message))
		}
		b.WriteString("\n")
	}

	omitted := 0
	for _, d := range p.Deployments {
		var s bytes.Buffer
		writeMarkdownDeployment(&s, d, o)
		if b.Len()+s.Len() > limit {
			omitted++
			continue
		}
		b.Write(s.Bytes())
	}
	if omitted > 0 {
		fmt.Fprintf(&b, "_Details of %d deployments are left out to keep this comment short; run `styrminctl plan` or `styrminctl diff CLUSTER/ENV/NAME` for them._\n", omitted)
	}
	_, err := w.Write(b.Bytes())
	return err
}

func writeMarkdownDeployment(b *bytes.Buffer, d *Deployment, o RenderOptions) {
	fmt.Fprintf(b, "<details>\n<summary>%s <code>%s</code>%s: %s, sequence %s</summary>\n\n",
		htmlEscape(symbol(d.Workflow)), htmlEscape(d.ID), htmlEscape(internalMark(d)), d.Workflow, sequence(d))
	if v := versions(d); v != "" {
		fmt.Fprintf(b, "%s", mdCell(v))
		if d.Namespace != "" {
			fmt.Fprintf(b, " · namespace %s", mdCode(d.Namespace))
		}
		b.WriteString("\n\n")
	}
	if d.Wave != nil {
		fmt.Fprintf(b, "%s.\n\n", mdCell(upperFirst(waveLine(d.Wave))))
	}
	if d.Restoring != "" {
		fmt.Fprintf(b, "%s.\n\n", mdCell(upperFirst(restoringLine(d.Restoring))))
	}
	if len(d.otherAfter) > 0 {
		parts := make([]string, len(d.otherAfter))
		for i, a := range d.otherAfter {
			parts[i] = mdCode(a)
		}
		fmt.Fprintf(b, "Runs after %s (each Ready first).\n\n", strings.Join(parts, ", "))
	}
	if len(d.Causes) > 0 {
		b.WriteString("**Cause**\n\n")
		for _, c := range d.Causes {
			fmt.Fprintf(b, "- %s\n", mdCauses(c))
		}
		b.WriteString("\n")
	}
	if len(d.Changes) > 0 {
		b.WriteString("**Changes**\n\n| | Path | Old | New |\n|---|---|---|---|\n")
		for _, c := range d.Changes {
			old, nw := "", ""
			if c.Op != OpAdded {
				old = mdCode(changeValue(c, c.Old))
			}
			if c.Op != OpRemoved {
				nw = mdCode(changeValue(c, c.New))
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", changeSymbol(c.Op), mdCode(c.Path), old, nw)
		}
		b.WriteString("\n")
	}
	if len(d.Actions) > 0 {
		b.WriteString("**Actions**\n\n")
		for i, a := range d.Actions {
			fmt.Fprintf(b, "%d. %s: %s\n", i+1, mdCode(a.Name), mdCell(a.Description))
		}
		b.WriteString("\n")
	}
	m := d.Manifests
	switch {
	case m.Error != "":
		fmt.Fprintf(b, "**Manifests**: not rendered: %s\n\n", mdCell(m.Error))
	case m.Added+m.Removed+m.Changed+m.Unchanged > 0:
		fmt.Fprintf(b, "**Manifests**: %s\n\n", manifestCounts(m))
		for _, od := range m.Objects {
			fmt.Fprintf(b, "- %s\n", mdCode(od.Summary()))
		}
		if len(m.Objects) > 0 {
			b.WriteString("\n")
		}
		for _, od := range m.Objects {
			if od.Op != OpChanged && !o.Full {
				continue
			}
			fence := codeFence(od.Diff)
			fmt.Fprintf(b, "%sdiff\n%s%s\n\n", fence, od.Diff, fence)
		}
	}
	b.WriteString("</details>\n\n")
}

func mdCauses(c Cause) string {
	var s string
	switch c.Kind {
	case CauseService:
		s = "service of " + mdCode(c.File)
	case CauseDriver:
		s = "driver"
		if c.File != "" {
			s += " " + mdCode(c.File)
		}
	default:
		s = string(c.Kind) + " " + mdCode(c.File)
	}
	if len(c.Paths) > 0 {
		var ps []string
		for _, p := range c.Paths {
			ps = append(ps, mdCode(p))
		}
		s += ": " + strings.Join(ps, ", ")
	}
	return s
}

// mdCode writes s as a code span, with enough backticks to hold any in s,
// and escapes the pipe so it can sit in a table cell.
func mdCode(s string) string {
	if s == "" {
		return ""
	}
	ticks := "`"
	for strings.Contains(s, ticks) {
		ticks += "`"
	}
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "\n", " ")
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return ticks + s + ticks
}

// mdCell escapes text for a table cell or a list item.
func mdCell(s string) string {
	r := strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;", "*", `\*`, "_", `\_`, "`", "\\`")
	return r.Replace(s)
}

func htmlEscape(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}

// codeFence returns a backtick fence longer than any run of backticks in
// s, so the block cannot be closed early.
func codeFence(s string) string {
	fence := "```"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	return fence
}
