package planner

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/styrmin/styrmin/resolver"
)

func renderJSON(t *testing.T, p *Plan) string {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, p, FormatJSON, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestComputeTreesIsThePlanOfBothSides pins that the pipeline gives the
// plan Compute gives for the same sides loaded by hand, that the head's
// own lockfiles play no part in it, and that a broken one fails the plan
// (as it would fail the lock after the merge).
func TestComputeTreesIsThePlanOfBothSides(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	writeFile(t, head, devWeb, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 4\n")
	want := computePlan(t, base, head, Options{})

	trees := Trees{Base: os.DirFS(base), BaseName: "base", Head: os.DirFS(head), HeadName: "working tree", HeadCommit: strings.Repeat("1", 40)}
	// (The hub's: nothing runs after it, so without it the head's locks
	// are still whole.)
	writeFile(t, head, "locks/local/dev/hub.lock.yaml", "garbage: [\n")
	if _, err := ComputeTrees(trees, Options{}); err == nil || !strings.Contains(err.Error(), "lockfiles at working tree: locks/local/dev/hub.lock.yaml") {
		t.Fatalf("a broken head lockfile: %v, want an error naming it", err)
	}
	// A head without that lockfile plans as before: the base's count.
	if err := os.Remove(filepath.Join(head, "locks/local/dev/hub.lock.yaml")); err != nil {
		t.Fatal(err)
	}
	got, err := ComputeTrees(trees, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := renderJSON(t, got), renderJSON(t, want); g != w {
		t.Errorf("ComputeTrees differs from Compute on the same sides:\n%s", unifiedDiff("Compute", "ComputeTrees", w, g))
	}
	if got.Summary.Update != 1 || len(got.Deployments) != 1 || got.Deployments[0].ID != "local/dev/web" {
		t.Errorf("summary %+v, deployments %d", got.Summary, len(got.Deployments))
	}

	// Only narrows the resolution and the plan.
	only, err := ComputeTrees(Trees{Base: os.DirFS(base), Head: os.DirFS(head)}, Options{Only: map[resolver.ID]bool{{Cluster: "local", Environment: "staging", Name: "web"}: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(only.Deployments) != 0 || only.Summary.Unchanged != 1 {
		t.Errorf("only local/staging/web: %d deployments, summary %+v", len(only.Deployments), only.Summary)
	}
}

func TestComputeTreesWithoutABaseCreatesEverything(t *testing.T) {
	p, err := ComputeTrees(Trees{Base: fstest.MapFS{}, Head: os.DirFS(copyTree(t, exampleDir)), HeadName: "working tree"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Summary.Create != 4 || p.Base != "" {
		t.Errorf("summary %+v, base %q; want four creates and no base", p.Summary, p.Base)
	}
	// The hub connects to web: its create runs after web's, in every
	// format.
	for _, d := range p.Deployments {
		want := []string(nil)
		if d.ID == "local/dev/hub" {
			want = []string{"local/dev/web@1"}
		}
		if !slices.Equal(d.After, want) {
			t.Errorf("%s runs after %v, want %v", d.ID, d.After, want)
		}
	}
	for format, want := range map[string]string{
		"text":     "runs after: local/dev/web@1 (each Ready first)",
		"markdown": "Runs after `local/dev/web@1` (each Ready first).",
		"json":     `"after": [` + "\n" + `        "local/dev/web@1"`,
	} {
		var buf bytes.Buffer
		if err := Render(&buf, p, Format(format), RenderOptions{}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%s plan lacks %q", format, want)
		}
		if format == "json" {
			var doc any
			if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			if err := planSchema(t).Validate(doc); err != nil {
				t.Errorf("the plan with after does not follow the schema: %v", err)
			}
		}
	}
}

func TestComputeTreesErrors(t *testing.T) {
	base := lockedExample(t)
	broken := copyTree(t, base)
	writeFile(t, broken, "locks/local/dev/web.lock.yaml", "garbage: [\n")
	remote := copyTree(t, exampleDir)
	writeFile(t, remote, "styrmin.cue", `drivers: [{name: "x", version: "1.0.0", url: "https://git.example/x.git", ref: "v1"}]`+"\n")
	badConfig := copyTree(t, exampleDir)
	writeFile(t, badConfig, devWeb, "driver: \"webapp\"\nappVersion: \"1.25\"\n")

	tests := []struct {
		name       string
		base, head string
		wantIs     error
		want       []string
	}{
		{name: "broken base lockfile", base: broken, head: base,
			want: []string{"lockfiles at the base main (0123): ", "locks/local/dev/web.lock.yaml"}},
		{name: "driver sources in other repositories", base: base, head: remote, wantIs: ErrRemoteDrivers,
			want: []string{"styrmin.cue: field drivers: plan works offline and cannot fetch driver sources"}},
		{name: "head configuration that does not load", base: base, head: badConfig,
			want: []string{devWeb, "appVersion"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ComputeTrees(Trees{Base: os.DirFS(tc.base), BaseName: "main (0123)", Head: os.DirFS(tc.head), HeadName: "working tree"}, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v does not wrap %v", err, tc.wantIs)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestPlanOfAFanOutShowsItsWaves: a cluster fan-out with styrmin.cue
// rollout: {waves: 2, pause} is planned as two waves, in all three
// formats: the plan lists them, each deployment says its wave, and the
// second wave's runs-after is the wave (not each instance of it).
func TestPlanOfAFanOutShowsItsWaves(t *testing.T) {
	base := copyTree(t, exampleDir)
	writeFile(t, base, "styrmin.cue", "rollout: {waves: 2, pause: \"30s\"}\n")
	lockInto(t, base)
	head := copyTree(t, base)
	writeFile(t, head, "clusters/local/cluster.cue", "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nconfig: logFormat: \"text\"\nparameters: logLevel: \"info\"\n")
	p := computePlan(t, base, head, Options{})
	if len(p.Waves) != 2 || len(p.Waves[0].Deployments) != 2 || len(p.Waves[1].Deployments) != 2 {
		t.Fatalf("waves %+v, want two of two", p.Waves)
	}
	if got := p.Waves[0].Deployments; !slices.Equal(got, []string{"local/dev/hub", "local/dev/web"}) {
		t.Errorf("wave 1 is %v, want dev's hub and web", got)
	}
	for format, wants := range map[string][]string{
		"text": {
			"Waves (each starts when the one before succeeded and is Ready; a failure stops the rest):",
			"local wave 1 of 2: 2 deployments: local/dev/hub, local/dev/web",
			"local wave 2 of 2: 2 deployments, 30s after the wave before: local/staging/hub, local/staging/web",
			"wave 2 of 2: starts when every deployment of wave 1 succeeded and is Ready, then 30s later",
			"wave 1 of 2: starts at once",
		},
		"markdown": {"**Waves**", "Wave 2 of 2: starts when every deployment of wave 1 succeeded and is Ready, then 30s later."},
		"json":     {`"waves": [`, `"wave": {` + "\n" + `        "wave": 2,` + "\n" + `        "waves": 2,` + "\n" + `        "pause": "30s"`},
	} {
		var buf bytes.Buffer
		if err := Render(&buf, p, Format(format), RenderOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("%s plan lacks %q:\n%s", format, want, buf.String())
			}
		}
		if strings.Contains(buf.String(), "runs after: local/dev") || strings.Contains(buf.String(), "Runs after `local/dev") {
			t.Errorf("%s plan lists the wave before instance by instance", format)
		}
		if format == "json" {
			var doc any
			if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			if err := planSchema(t).Validate(doc); err != nil {
				t.Errorf("the plan with waves does not follow the schema: %v", err)
			}
		}
	}
}
