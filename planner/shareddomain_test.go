package planner

import (
	"bytes"
	"strings"
	"testing"
)

// TestAPlanWarnsOfTwoClustersRenderingTheSameHosts: a second cluster
// whose cluster.cue kept the first's domain, with an environment of the
// same name, renders the same external hosts; the plan said nothing. It
// now warns in every format (the JSON as plan.schema.json says), naming
// both files, and says nothing once both clusters say sharedDomain: true.
func TestAPlanWarnsOfTwoClustersRenderingTheSameHosts(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	writeFile(t, head, "clusters/other/cluster.cue", "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\n")
	writeFile(t, head, "clusters/other/environments/dev/environment.cue", "namespacePrefix: \"dev\"\n")
	p := computePlan(t, base, head, Options{})
	if len(p.Warnings) != 1 {
		t.Fatalf("warnings %q, want one", p.Warnings)
	}
	want := []string{"clusters/local/cluster.cue, clusters/other/cluster.cue", "environment dev", "the domain", "local.styrmin.dev", "sharedDomain: true"}
	for _, f := range []Format{FormatText, FormatMarkdown, FormatHTML, FormatJSON} {
		var b bytes.Buffer
		if err := Render(&b, p, f, RenderOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if f == FormatMarkdown {
				w = mdCell(w)
			}
			if !strings.Contains(b.String(), w) {
				t.Errorf("plan -o %s lacks %q:\n%s", f, w, b.String())
			}
		}
		if f == FormatJSON {
			validatePlanJSON(t, b.Bytes())
		}
	}

	for _, c := range []string{"local", "other"} {
		writeFile(t, head, "clusters/"+c+"/cluster.cue", "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nsharedDomain: true\n")
	}
	if p := computePlan(t, base, head, Options{}); len(p.Warnings) != 0 {
		t.Errorf("both clusters say sharedDomain: warnings %q, want none", p.Warnings)
	}
}
