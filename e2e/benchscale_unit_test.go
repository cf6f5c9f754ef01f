package e2e

import (
	"bytes"
	"encoding/xml"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the tests that have them (testdata/*.golden*)")

func TestPercentileIsNearestRank(t *testing.T) {
	t.Parallel()
	ms := func(vs ...int) []time.Duration {
		var out []time.Duration
		for _, v := range vs {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	twenty := ms(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
	for _, tc := range []struct {
		name string
		xs   []time.Duration
		p    float64
		want time.Duration
	}{
		{"none", nil, 50, 0},
		{"one value is every percentile", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 20 is the 10th smallest", twenty, 50, 10 * time.Millisecond},
		{"p99 of 20 is the maximum", twenty, 99, 20 * time.Millisecond},
		{"p95 of 20 is the 19th", twenty, 95, 19 * time.Millisecond},
		{"p100 is the maximum", ms(3, 1, 2), 100, 3 * time.Millisecond},
		{"a tiny p is the minimum", ms(3, 1, 2), 0.1, time.Millisecond},
		{"p50 of an even count is the lower middle", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.xs)
			if got := percentile(tc.xs, tc.p); got != tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
			}
			if !slices.Equal(in, tc.xs) {
				t.Errorf("percentile reordered its input: %v, was %v", tc.xs, in)
			}
		})
	}
}

func TestNiceTicksCoverTheRangeInRoundSteps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		hi   float64
		want []float64
	}{
		{0, []float64{0, 1}},
		{-3, []float64{0, 1}},
		{2000, []float64{0, 500, 1000, 1500, 2000}},
		{1999, []float64{0, 500, 1000, 1500, 2000}},
		{20, []float64{0, 5, 10, 15, 20}},
		{0.11, []float64{0, 0.05, 0.1, 0.15}},
		{0.3, []float64{0, 0.1, 0.2, 0.3}},
		{73, []float64{0, 20, 40, 60, 80}},
	} {
		got := niceTicks(tc.hi)
		if !slices.Equal(got, tc.want) {
			t.Errorf("niceTicks(%v) = %v, want %v", tc.hi, got, tc.want)
		}
	}
}

func TestTickLabelsHaveTheDecimalsOfTheStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v     float64
		ticks []float64
		want  string
	}{
		{1500, []float64{0, 500}, "1500"},
		{0.15, []float64{0, 0.05}, "0.15"},
		{0.30000000000000004, []float64{0, 0.1}, "0.3"},
		{4, []float64{0, 1}, "4"},
		{40, []float64{0, 20}, "40"},
	} {
		if got := tickLabel(tc.v, tc.ticks); got != tc.want {
			t.Errorf("tickLabel(%v, step %v) = %q, want %q", tc.v, tc.ticks[1], got, tc.want)
		}
	}
}

// testSeries is a series over three sizes, 500 run twice, the smallest
// without a baseline, given out of order.
func testSeries() []scalePoint {
	s := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	point := func(n int, create, fanout, cpu float64, baseline bool) scalePoint {
		p := scalePoint{
			n:      n,
			create: agentPhase{ready: s(create), workloads: s(create - 1), condition: s(create - 0.5), apiserverCPU: cpu * float64(n)},
			fanout: agentPhase{ready: s(fanout), workloads: s(fanout), condition: s(fanout - 2), apiserverCPU: 1.2 * cpu * float64(n)},
		}
		p.peakRSS, p.peakHeap = 100+float64(n)/20, float64(n)/8
		if baseline {
			p.hasBaseline = true
			p.baseCreate = baselinePhase{time: s(create / 2), apiserverCPU: cpu / 2 * float64(n)}
			p.baseFanout = baselinePhase{time: s(fanout / 1.5), apiserverCPU: cpu / 1.6 * float64(n)}
		}
		return p
	}
	withChanges := point(2000, 160, 180, 0.09, true)
	for i := range 20 {
		withChanges.changes = append(withChanges.changes, time.Duration(300+10*i)*time.Millisecond)
	}
	return []scalePoint{
		point(500, 36, 42, 0.1, true),
		withChanges,
		point(100, 8, 9, 0.12, false),
		point(500, 38, 44, 0.11, true),
	}
}

func TestScaleTableHasARowPerRunBySize(t *testing.T) {
	t.Parallel()
	table := scaleTable(testSeries())
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2+4 {
		t.Fatalf("table has %d lines, want a header, a rule and 4 rows:\n%s", len(lines), table)
	}
	cols := strings.Count(lines[0], "|")
	for i, l := range lines {
		if c := strings.Count(l, "|"); c != cols {
			t.Errorf("line %d has %d |, the header %d: %s", i, c, cols, l)
		}
	}
	var sizes []string
	for _, l := range lines[2:] {
		sizes = append(sizes, strings.TrimSpace(strings.Split(l, "|")[1]))
	}
	if want := []string{"100", "500", "500", "2000"}; !slices.Equal(sizes, want) {
		t.Errorf("rows are for sizes %v, want %v", sizes, want)
	}
	for _, want := range []string{
		"| 100 | 8.0 (7.0 / 7.5) | 9.0 (9.0 / 7.0) | 0.120 | 0.144 | – | – | – | – | – | – | – | – | – | 105 | 128 |",
		"| 500 | 36.0 (35.0 / 35.5) | 42.0 (42.0 / 40.0) | 0.100 | 0.120 | 18.0 | 28.0 | 0.050 | 0.062 | 2.00× | 1.50× | 2.00× | 1.92× | – | 125 | 128 |",
		"| 390 / 490 / 490 | 200 | 128 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestScaleSVGIsWellFormedAndMatchesTheGoldenFile(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := writeScaleSVG(&buf, testSeries()); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	elements := map[string]int{}
	var texts []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, buf.String())
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			elements[tok.Name.Local]++
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	// Two panels of four lines: the agent's through three sizes, the
	// baseline's through the two that have one.
	if elements["polyline"] != 8 {
		t.Errorf("%d polylines, want 4 lines in each of 2 panels", elements["polyline"])
	}
	// A dot per run and line in each panel: 4 agent runs on 2 lines, 3
	// baseline runs on 2.
	if want := 2 * (4*2 + 3*2); elements["circle"] != want {
		t.Errorf("%d dots, want %d", elements["circle"], want)
	}
	for _, want := range []string{"API-server CPU per deployment", "Time per deployment", "deployments", "CPU s / deployment", "ms / deployment",
		"agent create", "agent fan-out", "baseline create", "baseline fan-out", "2000", "0"} {
		if !slices.Contains(texts, want) {
			t.Errorf("the SVG has no text %q (has %q)", want, texts)
		}
	}

	golden := filepath.Join("testdata", "agent-scale.golden.svg")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./e2e -run %s -update writes it)", err, t.Name())
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("the SVG differs from %s (go test ./e2e -run %s -update rewrites it, then look at it):\n%s", golden, t.Name(), buf.String())
	}
}

func TestScaleSVGRefusesAnEmptySeries(t *testing.T) {
	t.Parallel()
	if err := writeScaleSVG(io.Discard, nil); err == nil {
		t.Error("writeScaleSVG of no runs: no error")
	}
}

func TestParseSizesReadsACommaListOrFallsBackToOneSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		list string
		want []int
		err  bool
	}{
		{"", []int{500}, false},
		{"  ", []int{500}, false},
		{"100,500,1000,2000", []int{100, 500, 1000, 2000}, false},
		{" 10 , 20 ", []int{10, 20}, false},
		{"10,,20", nil, true},
		{"10,0", nil, true},
		{"ten", nil, true},
	} {
		got, err := parseSizes(tc.list, 500)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v, error %v", tc.list, got, err, tc.want, tc.err)
		}
	}
}

// deployment is a webapp Deployment of 1 replica at generation gen whose
// status has observed observed, with updated and available replicas.
func deployment(ns string, gen, observed int64, updated, available int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Generation: gen, Labels: map[string]string{webappLabel: "webapp"}},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1)},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: updated, UpdatedReplicas: updated, AvailableReplicas: available},
	}
}

func TestRolledOutNeedsANewerGenerationObservedUpdatedAndAvailable(t *testing.T) {
	t.Parallel()
	surge := deployment("ns", 3, 3, 1, 1)
	surge.Status.Replicas = 2 // an old pod still beside the new one
	for _, tc := range []struct {
		name  string
		d     *appsv1.Deployment
		since int64
		want  bool
	}{
		{"new and available", deployment("ns", 1, 1, 1, 1), 0, true},
		{"changed and available at the new generation", deployment("ns", 3, 3, 1, 1), 2, true},
		{"available at the generation of before the change", deployment("ns", 2, 2, 1, 1), 2, false},
		{"the new generation not yet observed", deployment("ns", 3, 2, 1, 1), 2, false},
		{"not yet updated", deployment("ns", 3, 3, 0, 1), 2, false},
		{"updated, not yet available", deployment("ns", 3, 3, 1, 0), 2, false},
		{"an old replica left", surge, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rolledOut(tc.d, tc.since); got != tc.want {
				t.Errorf("rolledOut(generation %d, status %+v, since %d) = %v, want %v", tc.d.Generation, tc.d.Status, tc.since, got, tc.want)
			}
		})
	}
	noReplicas := deployment("ns", 1, 1, 1, 1)
	noReplicas.Spec.Replicas = nil
	if !rolledOut(noReplicas, 0) {
		t.Error("a Deployment without spec.replicas (1 by default) with 1 available: not rolled out")
	}
}

func TestCountReadyCountsADeploymentReadyOnlyByWorkloadsAndCondition(t *testing.T) {
	t.Parallel()
	sd := func(ns string, spec, active int64, ready metav1.ConditionStatus) *v1alpha1.StyrminDeployment {
		d := &v1alpha1.StyrminDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns, Labels: map[string]string{v1alpha1.LabelEnvironment: "bench"}},
			Spec:       v1alpha1.StyrminDeploymentSpec{Sequence: spec},
			Status:     v1alpha1.StyrminDeploymentStatus{ActiveSequence: active},
		}
		if ready != "" {
			d.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: ready, Reason: "Waiting"}}
		}
		return d
	}
	sds := []v1alpha1.StyrminDeployment{
		// Ready by both.
		*sd("bench-a", 2, 2, metav1.ConditionTrue),
		// Condition Ready, Deployment Available at its generation of before.
		*sd("bench-b", 2, 2, metav1.ConditionTrue),
		// Deployment rolled out, condition not at the sequence.
		*sd("bench-c", 2, 1, metav1.ConditionTrue),
		// The instance not written yet (no task started), nothing rolled out.
		*sd("bench-d", 1, 1, metav1.ConditionTrue),
		// Applied, not Ready; no Deployment at all.
		*sd("bench-e", 2, 2, metav1.ConditionFalse),
	}
	deps := []appsv1.Deployment{
		*deployment("bench-a", 5, 5, 1, 1), *deployment("bench-b", 4, 4, 1, 1),
		*deployment("bench-c", 5, 5, 1, 1), *deployment("bench-d", 4, 4, 1, 1),
		// A baseline Deployment, not of the bench: never counted.
		*deployment("base0000", 9, 9, 1, 1),
	}
	since := map[string]int64{"bench-a/app": 4, "bench-b/app": 4, "bench-c/app": 4, "bench-d/app": 4}
	want := readiness{condition: 2, workloads: 2, both: 1, waiting: "Waiting=1,instance not written=1,not active=1,workloads rolling out=1"}
	if r := countReady(sds, deps, 2, since); r != want {
		t.Errorf("countReady = %+v, want %+v", r, want)
	}
	// One namespace alone (how a single change is watched).
	if r, want := countReady(sds[1:2], deps[1:2], 2, since), (readiness{condition: 1, waiting: "workloads rolling out=1"}); r != want {
		t.Errorf("countReady in bench-b = %+v, want %+v", r, want)
	}
}
