package planner

import (
	_ "embed"
	"html/template"
	"io"
	"strings"
)

// FormatHTML is the plan as an HTML fragment (RenderHTML): for pages that
// embed it, such as the web UI. It is not among Formats: a command line
// prints text, markdown, JSON or YAML.
const FormatHTML Format = "html"

//go:embed render_html.tmpl
var htmlSource string

// htmlPlan is parsed once: html/template escapes every value it prints
// for where it prints it, so nothing in a plan (a path, a value, a diff)
// can become markup.
var htmlPlan = template.Must(template.New("plan").Funcs(template.FuncMap{
	"summaryLine":    summaryLine,
	"noChanges":      noChanges,
	"symbol":         symbol,
	"versions":       versions,
	"causeKinds":     causeKinds,
	"describeCause":  describeCause,
	"manifestCounts": manifestCounts,
	"changeValue":    changeValue,
	"changeSymbol":   changeSymbol,
	"sequence":       sequence,
	"waveSummary":    waveSummary,
	"waveLine":       func(w *WaveRef) string { return upperFirst(waveLine(w)) },
	"restoringLine":  func(r string) string { return upperFirst(restoringLine(r)) },
	"heldWaiting":    heldWaiting,
	"groupLeftOut":   groupLeftOut,
	"idList":         func(ids []string) string { return idList(ids, 10, func(s string) string { return s }) },
	"keeps":          keeps,
	"otherAfter":     func(d *Deployment) []string { return d.otherAfter },
	"internalMark":   internalMark,
	"diffLines":      diffLineClasses,
	"showDiff":       func(od ObjectDiff, full bool) bool { return full || od.Op == OpChanged },
}).Parse(htmlSource))

// RenderHTML writes the plan as an HTML fragment (a <section> with the
// summary, blast radius, left-out, waves, held, errors and each
// deployment's details in a <details> element), escaped by html/template.
// Classes name the parts (plan-create, diff-add, …) for a style sheet;
// the fragment holds no script and no inline style, so it fits a page
// with a strict Content-Security-Policy. RenderOptions.Full shows the
// content of added and removed objects too.
func RenderHTML(w io.Writer, p *Plan, o RenderOptions) error {
	return htmlPlan.Execute(w, struct {
		*Plan
		Full bool
	}{p, o.Full})
}

// diffLine is one line of a unified diff and its class.
type diffLine struct {
	Class, Text string
}

// diffLineClasses splits a unified diff into lines classed diff-add,
// diff-del, diff-hunk or diff-ctx.
func diffLineClasses(diff string) []diffLine {
	lines := strings.Split(strings.TrimSuffix(diff, "\n"), "\n")
	out := make([]diffLine, 0, len(lines))
	for _, l := range lines {
		c := "diff-ctx"
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			c = "diff-file"
		case strings.HasPrefix(l, "+"):
			c = "diff-add"
		case strings.HasPrefix(l, "-"):
			c = "diff-del"
		case strings.HasPrefix(l, "@@"):
			c = "diff-hunk"
		}
		out = append(out, diffLine{c, l})
	}
	return out
}
