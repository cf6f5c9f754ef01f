package ui_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/internal/browser"
)

// chromium finds Debian's headless browser; without it the test is
// skipped on a developer's machine and fails in CI (where .ci/run
// installs it).
func chromium(t *testing.T) string {
	t.Helper()
	if p := browser.Find(); p != "" {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed (.ci/run installs Debian's package chromium)")
	}
	t.Skip("chromium is not installed: apt-get install -y chromium (CI installs it)")
	return ""
}

// runChromium runs headless Chromium with args (browser.Run: a run that
// crashes is tried again) and returns its stdout and stderr.
func runChromium(t *testing.T, bin string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, errOut, err := browser.Run(ctx, bin, t.TempDir(), append([]string{"--virtual-time-budget=3000"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out, errOut
}

// TestChromiumLoadsEveryPage loads each page of the UI over the demo's
// state in headless Chromium: the DOM it built holds each page's content,
// the browser reports no Content-Security-Policy violation (the policy
// allows the pages' own script and style sheet), and a screenshot of each
// is saved (in $STYRMIN_UI_SCREENSHOTS when set: `make ui-screenshots`
// writes docs/).
func TestChromiumLoadsEveryPage(t *testing.T) {
	bin := chromium(t)
	w := newDemoWorld(t)
	shots := os.Getenv("STYRMIN_UI_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	lc := w.git.lockCommits
	pages := []struct {
		name, path string
		want       []string
	}{
		{"overview", "/", []string{"Cluster local", "Environment staging", "frozen for the audit", ">failed<", "updates every 5 s"}},
		{"deployment", "/d/local/dev/web", []string{"Active instance", "parameters.replicas", "CrashLoopBackOff", "(sensitive)"}},
		{"timeline", "/d/local/dev/hub/timeline?a=1&b=3", []string{"Timeline of local/dev/hub", "hub: even more workers", "From sequence 1 to 3", "context.parameters.workers"}},
		{"task-failed", "/t/local/dev-web/web-2", []string{"Failed at step 2", "Show output", "<rect"}},
		{"task-superseded", "/t/local/dev-hub/hub-2", []string{"Superseded", "NewerInstanceKept"}},
		{"plan", "/plan?base=" + lc[0].String() + "&head=" + lc[1].String(), []string{"1 to update", "local/dev/web", "Blast radius"}},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			dom, logs := runChromium(t, bin, "--dump-dom", w.srv.URL+p.path)
			for _, want := range p.want {
				if !strings.Contains(dom, want) {
					t.Errorf("the DOM of %s lacks %q:\n%s", p.path, want, dom)
				}
			}
			if strings.Contains(logs, "Content Security Policy") || strings.Contains(logs, "Refused to") {
				t.Errorf("the browser refused part of %s:\n%s", p.path, logs)
			}
			if strings.Contains(dom, secretValue) {
				t.Errorf("%s shows the sensitive value", p.path)
			}
			file := filepath.Join(shots, "ui-"+p.name+".png")
			runChromium(t, bin, "--window-size=1400,1000", "--screenshot="+file, w.srv.URL+p.path)
			st, err := os.Stat(file)
			if err != nil || st.Size() < 10000 {
				t.Errorf("screenshot %s: %v (size %v)", file, err, st)
			}
		})
	}
}
