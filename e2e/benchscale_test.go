package e2e

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The series BenchmarkAgentThroughGit draws over -agent-sizes: pure
// functions of its results (no cluster), so that the table and the plot
// are tested on their own (benchscale_unit_test.go).

// agentPhase is what one phase of the agent's run took: the time until
// every deployment was Ready by both its workloads and its
// StyrminDeployment's condition, each of the two alone, and the API
// server's CPU seconds over the phase.
type agentPhase struct {
	ready, workloads, condition time.Duration
	apiserverCPU                float64
}

// baselinePhase is what a baseline phase took: the time until every
// Deployment rolled out, and the API server's CPU seconds.
type baselinePhase struct {
	time         time.Duration
	apiserverCPU float64
}

// scalePoint is one run of BenchmarkAgentThroughGit at n deployments.
type scalePoint struct {
	n              int
	create, fanout agentPhase
	// hasBaseline: the run applied the same objects directly
	// (-agent-baseline) and baseCreate, baseFanout hold what that took.
	hasBaseline            bool
	baseCreate, baseFanout baselinePhase
	// changes are the times of the one-deployment changes
	// (-agent-changes), from the webhook delivery until Ready.
	changes []time.Duration
	// peakRSS and peakHeap are the agent's peak resident set and peak
	// heap in use over create and fan-out, in MiB.
	peakRSS, peakHeap float64
}

// perDeployMS is a phase's time per deployment in milliseconds.
func perDeployMS(d time.Duration, n int) float64 {
	return d.Seconds() * 1000 / float64(n)
}

// percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of xs: the
// smallest value at least p % of them do not exceed, so always one of the
// values (the 99th of 20 is their maximum); 0 for none.
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// scaleTable is the series as a markdown table, one row per run, smallest
// size first: the agent's times (both, workloads alone, condition alone),
// its API-server CPU per deployment, the baseline's, the agent's figures
// as multiples of the baseline's, the changes' percentiles and the
// agent's peak memory; "–" where a run has no baseline or no changes.
func scaleTable(points []scalePoint) string {
	points = sortedPoints(points)
	var sb strings.Builder
	sb.WriteString("| deployments | create s (workloads / condition) | fan-out s (workloads / condition) | create API CPU s/dep | fan-out API CPU s/dep | baseline create s | baseline fan-out s | baseline create API CPU s/dep | baseline fan-out API CPU s/dep | create time ×base | fan-out time ×base | create API CPU ×base | fan-out API CPU ×base | change p50 / p99 / max ms (from webhook) | agent peak RSS MiB | agent peak heap KiB/dep |\n")
	sb.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	const none = "–"
	for _, p := range points {
		n := float64(p.n)
		cells := []string{
			strconv.Itoa(p.n),
			fmt.Sprintf("%.1f (%.1f / %.1f)", p.create.ready.Seconds(), p.create.workloads.Seconds(), p.create.condition.Seconds()),
			fmt.Sprintf("%.1f (%.1f / %.1f)", p.fanout.ready.Seconds(), p.fanout.workloads.Seconds(), p.fanout.condition.Seconds()),
			fmt.Sprintf("%.3f", p.create.apiserverCPU/n),
			fmt.Sprintf("%.3f", p.fanout.apiserverCPU/n),
		}
		if p.hasBaseline {
			cells = append(cells,
				fmt.Sprintf("%.1f", p.baseCreate.time.Seconds()),
				fmt.Sprintf("%.1f", p.baseFanout.time.Seconds()),
				fmt.Sprintf("%.3f", p.baseCreate.apiserverCPU/n),
				fmt.Sprintf("%.3f", p.baseFanout.apiserverCPU/n),
				ratio(p.create.ready.Seconds(), p.baseCreate.time.Seconds()),
				ratio(p.fanout.ready.Seconds(), p.baseFanout.time.Seconds()),
				ratio(p.create.apiserverCPU, p.baseCreate.apiserverCPU),
				ratio(p.fanout.apiserverCPU, p.baseFanout.apiserverCPU))
		} else {
			for range 8 {
				cells = append(cells, none)
			}
		}
		if len(p.changes) > 0 {
			cells = append(cells, fmt.Sprintf("%d / %d / %d",
				percentile(p.changes, 50).Milliseconds(), percentile(p.changes, 99).Milliseconds(), percentile(p.changes, 100).Milliseconds()))
		} else {
			cells = append(cells, none)
		}
		cells = append(cells, fmt.Sprintf("%.0f", p.peakRSS), fmt.Sprintf("%.0f", p.peakHeap*1024/n))
		sb.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return sb.String()
}

// ratio is a/b as "1.23×", or "–" when b is not positive.
func ratio(a, b float64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// sortedPoints is points by size (stable: runs of one size keep their
// order).
func sortedPoints(points []scalePoint) []scalePoint {
	s := slices.Clone(points)
	slices.SortStableFunc(s, func(a, b scalePoint) int { return a.n - b.n })
	return s
}

// plotSeries is one line of a panel: a value per run.
type plotSeries struct {
	name  string
	color string
	dash  bool
	value func(scalePoint) float64
	// baseline: only runs with a baseline have this value.
	baseline bool
}

// scaleSeries are the four lines of both panels, the agent's and the
// baseline's create and fan-out; cost is a phase's per-deployment figure.
func scaleSeries(agentCost func(agentPhase, int) float64, baseCost func(baselinePhase, int) float64) []plotSeries {
	return []plotSeries{
		{name: "agent create", color: "#1f77b4", value: func(p scalePoint) float64 { return agentCost(p.create, p.n) }},
		{name: "agent fan-out", color: "#1f77b4", dash: true, value: func(p scalePoint) float64 { return agentCost(p.fanout, p.n) }},
		{name: "baseline create", color: "#ff7f0e", baseline: true, value: func(p scalePoint) float64 { return baseCost(p.baseCreate, p.n) }},
		{name: "baseline fan-out", color: "#ff7f0e", dash: true, baseline: true, value: func(p scalePoint) float64 { return baseCost(p.baseFanout, p.n) }},
	}
}

// The plot's geometry: two panels side by side, each with its plot area
// inset by the margins, and the legend below them.
const (
	plotPanelW   = 460
	plotPanelH   = 340
	plotMarginL  = 70
	plotMarginR  = 20
	plotMarginT  = 40
	plotMarginB  = 50
	plotLegendH  = 40
	plotTickMark = 5
)

// writeScaleSVG draws the series as an SVG of cost per deployment against
// deployments: the API server's CPU seconds per deployment on the left,
// the time per deployment (ms) on the right, each with the agent's and
// the baseline's create and fan-out (a line through the median of each
// size's runs, a dot per run). Plain text, so that two runs of one
// series give the same bytes (the golden test compares them).
func writeScaleSVG(w io.Writer, points []scalePoint) error {
	if len(points) == 0 {
		return fmt.Errorf("no runs to plot")
	}
	points = sortedPoints(points)
	panels := []struct {
		title, unit string
		series      []plotSeries
	}{
		{"API-server CPU per deployment", "CPU s / deployment", scaleSeries(
			func(a agentPhase, n int) float64 { return a.apiserverCPU / float64(n) },
			func(b baselinePhase, n int) float64 { return b.apiserverCPU / float64(n) })},
		{"Time per deployment", "ms / deployment", scaleSeries(
			func(a agentPhase, n int) float64 { return perDeployMS(a.ready, n) },
			func(b baselinePhase, n int) float64 { return perDeployMS(b.time, n) })},
	}
	width, height := 2*plotPanelW, plotPanelH+plotLegendH
	var sb strings.Builder
	fmt.Fprintf(&sb, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n", width, height, width, height)
	fmt.Fprintf(&sb, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", width, height)
	maxN := float64(points[len(points)-1].n)
	xTicks := niceTicks(maxN)
	for i, panel := range panels {
		ox := float64(i * plotPanelW)
		x0, x1 := ox+plotMarginL, ox+plotPanelW-plotMarginR
		y0, y1 := float64(plotPanelH-plotMarginB), float64(plotMarginT)
		maxY := 0.0
		for _, s := range panel.series {
			for _, p := range points {
				if !s.baseline || p.hasBaseline {
					maxY = max(maxY, s.value(p))
				}
			}
		}
		yTicks := niceTicks(maxY)
		xs := func(v float64) float64 { return x0 + v/xTicks[len(xTicks)-1]*(x1-x0) }
		ys := func(v float64) float64 { return y0 - v/yTicks[len(yTicks)-1]*(y0-y1) }
		fmt.Fprintf(&sb, "<g>\n<text x=\"%s\" y=\"%d\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", num((x0+x1)/2), plotMarginT-18, html.EscapeString(panel.title))
		// Grid and ticks first, so the lines are drawn over them.
		for _, t := range yTicks {
			y := ys(t)
			fmt.Fprintf(&sb, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#e0e0e0\"/>\n", num(x0), num(y), num(x1), num(y))
			fmt.Fprintf(&sb, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"black\"/>\n", num(x0-plotTickMark), num(y), num(x0), num(y))
			fmt.Fprintf(&sb, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n", num(x0-plotTickMark-3), num(y), tickLabel(t, yTicks))
		}
		for _, t := range xTicks {
			x := xs(t)
			fmt.Fprintf(&sb, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"black\"/>\n", num(x), num(y0), num(x), num(y0+plotTickMark))
			fmt.Fprintf(&sb, "<text x=\"%s\" y=\"%s\" text-anchor=\"middle\">%s</text>\n", num(x), num(y0+plotTickMark+14), tickLabel(t, xTicks))
		}
		fmt.Fprintf(&sb, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"black\"/>\n", num(x0), num(y0), num(x1), num(y0))
		fmt.Fprintf(&sb, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"black\"/>\n", num(x0), num(y0), num(x0), num(y1))
		fmt.Fprintf(&sb, "<text x=\"%s\" y=\"%s\" text-anchor=\"middle\">deployments</text>\n", num((x0+x1)/2), num(y0+40))
		fmt.Fprintf(&sb, "<text transform=\"translate(%s %s) rotate(-90)\" text-anchor=\"middle\">%s</text>\n", num(ox+16), num((y0+y1)/2), html.EscapeString(panel.unit))
		for _, s := range panel.series {
			var path []string
			for _, g := range groupBySize(points, s) {
				path = append(path, num(xs(float64(g.n)))+","+num(ys(g.median)))
				for _, v := range g.values {
					fmt.Fprintf(&sb, "<circle cx=\"%s\" cy=\"%s\" r=\"3\" fill=\"%s\"/>\n", num(xs(float64(g.n))), num(ys(v)), s.color)
				}
			}
			if len(path) > 1 {
				fmt.Fprintf(&sb, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", strings.Join(path, " "), s.color, dashAttr(s.dash))
			}
		}
		sb.WriteString("</g>\n")
	}
	// One legend for both panels: the same four lines.
	ly := float64(plotPanelH + plotLegendH/2)
	for i, s := range panels[0].series {
		lx := float64(plotMarginL + i*200)
		fmt.Fprintf(&sb, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", num(lx), num(ly), num(lx+30), num(ly), s.color, dashAttr(s.dash))
		fmt.Fprintf(&sb, "<text x=\"%s\" y=\"%s\" dominant-baseline=\"middle\">%s</text>\n", num(lx+36), num(ly), html.EscapeString(s.name))
	}
	sb.WriteString("</svg>\n")
	_, err := io.WriteString(w, sb.String())
	return err
}

// sizeGroup is one series' values at one size.
type sizeGroup struct {
	n      int
	values []float64
	median float64
}

// groupBySize gathers a series' values of sorted points by size, leaving
// out runs without the value (a baseline line's runs without a baseline).
func groupBySize(points []scalePoint, s plotSeries) []sizeGroup {
	var out []sizeGroup
	for _, p := range points {
		if s.baseline && !p.hasBaseline {
			continue
		}
		if len(out) == 0 || out[len(out)-1].n != p.n {
			out = append(out, sizeGroup{n: p.n})
		}
		g := &out[len(out)-1]
		g.values = append(g.values, s.value(p))
	}
	for i := range out {
		v := slices.Sorted(slices.Values(out[i].values))
		m := len(v) / 2
		out[i].median = v[m]
		if len(v)%2 == 0 {
			out[i].median = (v[m-1] + v[m]) / 2
		}
	}
	return out
}

// niceTicks are axis ticks from 0 to at least hi, 3 to 7 of them, a step
// of 1, 2 or 5 times a power of ten; 0 and 1 for a hi of 0 or less.
func niceTicks(hi float64) []float64 {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		return []float64{0, 1}
	}
	raw := hi / 5
	exp := math.Floor(math.Log10(raw))
	mag := math.Pow(10, exp)
	m := 10.0
	for _, c := range []float64{1, 2, 5} {
		if c*mag >= raw {
			m = c
			break
		}
	}
	var ticks []float64
	for i := 0; ; i++ {
		// i·m over a power of ten rather than a sum of steps: the tick is
		// the double nearest the round number (0.3, not
		// 0.30000000000000004).
		t := float64(i) * m * mag
		if exp < 0 {
			t = float64(i) * m / math.Pow(10, -exp)
		}
		ticks = append(ticks, t)
		if t >= hi*(1-1e-9) {
			return ticks
		}
	}
}

// tickLabel writes a tick with as many decimals as the ticks' step needs.
func tickLabel(v float64, ticks []float64) string {
	step := ticks[1] - ticks[0]
	decimals := max(0, int(math.Ceil(-math.Log10(step)-1e-9)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// num writes a coordinate with one decimal: enough for a plot, and the
// same bytes on every machine.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func dashAttr(dash bool) string {
	if dash {
		return ` stroke-dasharray="6 4"`
	}
	return ""
}
