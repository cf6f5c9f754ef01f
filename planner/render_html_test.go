package planner

import (
	"bytes"
	"strings"
	"testing"
)

// TestHTMLPlanEscapesWhatTheConfigurationSays renders a plan whose
// values hold markup: the HTML fragment shows them as text, carries no
// script or inline style (a page with a strict Content-Security-Policy
// embeds it), and says what the text output says of each deployment.
func TestHTMLPlanEscapesWhatTheConfigurationSays(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	writeFile(t, head, devWeb, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 4, message: \"<script>alert(1)</script>\"}\n")
	p := computePlan(t, base, head, Options{})
	var buf bytes.Buffer
	if err := Render(&buf, p, FormatHTML, RenderOptions{Full: true}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, bad := range []string{"<script", "style=", "onload", "javascript:"} {
		if strings.Contains(out, bad) {
			t.Errorf("the HTML plan holds %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{
		`<h2>Plan: 0 to create, 1 to update, 0 to upgrade, 0 to delete</h2>`,
		`<code>local/dev/web</code>`,
		`&lt;script&gt;alert(1)&lt;/script&gt;`,
		`context.parameters.replicas`,
		`class="diff-add"`,
		`Blast radius`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the HTML plan lacks %q:\n%s", want, out)
		}
	}
}
