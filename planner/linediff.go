package planner

import (
	"fmt"
	"strings"
)

// opKind is one step of an edit script between two line slices.
type opKind byte

const (
	opEqual opKind = iota
	opDelete
	opInsert
)

// edit is a run of lines of one kind: for opEqual and opDelete, a[A:A+N];
// for opInsert, b[B:B+N]. A and B are both kept so hunks know where they
// are in each file.
type edit struct {
	Kind opKind
	A, B int
	N    int
}

// maxEditDistance bounds the Myers search. Beyond it the two texts have
// little in common and a replace-all script is as readable as a minimal
// one, at a fraction of the memory (the trace is O(D²)).
const maxEditDistance = 4000

// diffLines returns a minimal edit script turning a into b (Myers' O(ND)
// greedy algorithm, "An O(ND) Difference Algorithm and Its Variations",
// 1986). The common prefix and suffix are stripped first, which makes the
// usual case (a few changed lines in a manifest) linear.
func diffLines(a, b []string) []edit {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var out []edit
	add := func(k opKind, ai, bi, n int) {
		if n == 0 {
			return
		}
		if l := len(out) - 1; l >= 0 && out[l].Kind == k {
			out[l].N += n
			return
		}
		out = append(out, edit{Kind: k, A: ai, B: bi, N: n})
	}
	add(opEqual, 0, 0, pre)
	for _, e := range myers(a[pre:len(a)-suf], b[pre:len(b)-suf]) {
		add(e.Kind, e.A+pre, e.B+pre, e.N)
	}
	add(opEqual, len(a)-suf, len(b)-suf, suf)
	return out
}

// myers computes the edit script of the middle part. Within a run of
// changes, deletions come before insertions, as diff(1) prints them.
func myers(a, b []string) []edit {
	n, m := len(a), len(b)
	switch {
	case n == 0 && m == 0:
		return nil
	case n == 0:
		return []edit{{Kind: opInsert, B: 0, N: m}}
	case m == 0:
		return []edit{{Kind: opDelete, A: 0, N: n}}
	}
	max := n + m
	if max > maxEditDistance {
		max = maxEditDistance
	}
	off := max + 1
	v := make([]int, 2*max+3)
	// trace[d] is v restricted to diagonals -d..d before step d, enough to
	// walk back.
	var trace [][]int
	found := -1
	for d := 0; d <= max && found < 0; d++ {
		snap := make([]int, 2*d+1)
		copy(snap, v[off-d:off+d+1])
		trace = append(trace, snap)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1] // down: insertion
			} else {
				x = v[off+k-1] + 1 // right: deletion
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = d
				break
			}
		}
	}
	if found < 0 {
		return []edit{{Kind: opDelete, A: 0, N: n}, {Kind: opInsert, A: n, B: 0, N: m}}
	}
	// Walk back from (n, m), collecting single-line steps in reverse.
	type step struct {
		kind opKind
		a, b int
	}
	var rev []step
	x, y := n, m
	for d := found; d > 0; d-- {
		vd := trace[d] // diagonals -d..d, index k+d
		at := func(k int) int { return vd[k+d] }
		k := x - y
		var prevK int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := at(prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x--
			y--
			rev = append(rev, step{opEqual, x, y})
		}
		if prevK == k+1 {
			y--
			rev = append(rev, step{opInsert, x, y})
		} else {
			x--
			rev = append(rev, step{opDelete, x, y})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, step{opEqual, x, y})
	}
	// Reverse and coalesce; within a change block put deletions first.
	var out []edit
	for i := len(rev) - 1; i >= 0; {
		s := rev[i]
		if s.kind == opEqual {
			j := i
			for j >= 0 && rev[j].kind == opEqual {
				j--
			}
			out = append(out, edit{Kind: opEqual, A: s.a, B: s.b, N: i - j})
			i = j
			continue
		}
		j := i
		var dels, inss int
		firstA, firstB := -1, -1
		for j >= 0 && rev[j].kind != opEqual {
			if rev[j].kind == opDelete {
				if firstA < 0 {
					firstA = rev[j].a
				}
				dels++
			} else {
				if firstB < 0 {
					firstB = rev[j].b
				}
				inss++
			}
			j--
		}
		if dels > 0 {
			out = append(out, edit{Kind: opDelete, A: firstA, B: s.b, N: dels})
		}
		if inss > 0 {
			a := s.a + dels
			if firstA >= 0 {
				a = firstA + dels
			}
			out = append(out, edit{Kind: opInsert, A: a, B: firstB, N: inss})
		}
		i = j
	}
	return out
}

// splitLines splits text into lines without their newline. A final line
// without a newline is kept.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\n")
	}
	return lines
}

// unifiedContext is how many unchanged lines surround a change.
const unifiedContext = 3

// unifiedDiff returns a unified diff (diff -u, GNU hunk headers) of two
// texts, "" when they are equal.
func unifiedDiff(oldName, newName, oldText, newText string) string {
	a, b := splitLines(oldText), splitLines(newText)
	script := diffLines(a, b)
	changed := false
	for _, e := range script {
		if e.Kind != opEqual {
			changed = true
			break
		}
	}
	if !changed {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", oldName, newName)
	for _, h := range hunks(script) {
		writeHunk(&sb, h, a, b)
	}
	return sb.String()
}

// hunks groups the script into runs of changes with their context; runs
// closer than twice the context are merged, as diff -u does.
func hunks(script []edit) [][]edit {
	var out [][]edit
	var cur []edit
	for i, e := range script {
		if e.Kind != opEqual {
			cur = append(cur, e)
			continue
		}
		first, last := i == 0, i == len(script)-1
		switch {
		case first && last:
			// Only equal lines: no hunk.
		case first:
			cur = append(cur, trimEqual(e, e.N-unifiedContext, unifiedContext))
		case last:
			cur = append(cur, trimEqual(e, 0, unifiedContext))
			out = append(out, cur)
			cur = nil
		case e.N <= 2*unifiedContext:
			cur = append(cur, e)
		default:
			cur = append(cur, trimEqual(e, 0, unifiedContext))
			out = append(out, cur)
			cur = []edit{trimEqual(e, e.N-unifiedContext, unifiedContext)}
		}
	}
	if hasChange(cur) {
		out = append(out, cur)
	}
	return out
}

func hasChange(es []edit) bool {
	for _, e := range es {
		if e.Kind != opEqual {
			return true
		}
	}
	return false
}

// trimEqual keeps lines [from, from+n) of an equal run, clamped.
func trimEqual(e edit, from, n int) edit {
	if from < 0 {
		from = 0
	}
	if from+n > e.N {
		n = e.N - from
	}
	return edit{Kind: opEqual, A: e.A + from, B: e.B + from, N: n}
}

func writeHunk(sb *strings.Builder, h []edit, a, b []string) {
	aStart, bStart := h[0].A, h[0].B
	var aLen, bLen int
	for _, e := range h {
		switch e.Kind {
		case opEqual:
			aLen += e.N
			bLen += e.N
		case opDelete:
			aLen += e.N
		case opInsert:
			bLen += e.N
		}
	}
	fmt.Fprintf(sb, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
	for _, e := range h {
		for i := 0; i < e.N; i++ {
			switch e.Kind {
			case opEqual:
				sb.WriteString(" ")
				sb.WriteString(a[e.A+i])
			case opDelete:
				sb.WriteString("-")
				sb.WriteString(a[e.A+i])
			case opInsert:
				sb.WriteString("+")
				sb.WriteString(b[e.B+i])
			}
			sb.WriteByte('\n')
		}
	}
}

// hunkRange formats one side of a hunk header the way GNU diff does: the
// count is left out when it is 1; an empty range names the line before it.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	default:
		return fmt.Sprintf("%d,%d", start+1, n)
	}
}
