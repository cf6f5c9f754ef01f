package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/planner"
)

// TestPlanAndLockFailADeploymentWhoseChartFailsWithItsParameters: a
// chart that fails to render only with one deployment's parameters (a
// `fail` its values switch on) fails that deployment in CI, and the one
// connecting to it: plan exits 1 with --detailed-exitcode too, naming it; lock --check exits 1 (does not
// resolve) and --all-or-nothing writes nothing; lock writes the others
// and leaves its lockfile as it was. Before, all of them passed and the
// agent stalled on the deployment after the merge.
func TestPlanAndLockFailADeploymentWhoseChartFailsWithItsParameters(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, "drivers/webapp/1.1.0/chart/templates/certificate.yaml", "{{ if .Values.ingress.enabled }}{{ fail \"ingress needs a certificate\" }}{{ end }}\n")
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: ingress: true\n")
	const lock = "locks/local/dev/web.lock.yaml"
	before, err := os.ReadFile(filepath.Join(dir, lock))
	if err != nil {
		t.Fatal(err)
	}

	out, stderr, code := run(t, "--repo", dir, "plan", "--detailed-exitcode")
	if code != 1 {
		t.Fatalf("plan: exit %d, want 1\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{"local/dev/web", devWebFile, "ingress needs a certificate"} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan does not say %q:\n%s", want, out)
		}
	}
	// dev/hub connects to dev/web: it fails with it.
	if !strings.Contains(stderr, "2 deployment(s) failed to resolve") || !strings.Contains(out, `deployment "web" failed to resolve`) {
		t.Errorf("plan's stderr: %q", stderr)
	}

	if _, stderr, code := run(t, "--repo", dir, "lock", "--check"); code != 1 || !strings.Contains(stderr, "ingress needs a certificate") {
		t.Errorf("lock --check: exit %d, want 1 naming the failure\n%s", code, stderr)
	}
	if _, _, code := run(t, "--repo", dir, "lock", "--all-or-nothing"); code != 1 {
		t.Errorf("lock --all-or-nothing: exit %d, want 1", code)
	}
	if st := planGit(t, dir, "status", "--porcelain", "--", "locks"); st != "" {
		t.Errorf("lock --all-or-nothing wrote lockfiles:\n%s", st)
	}
	if _, stderr, code := run(t, "--repo", dir, "lock"); code != 1 || !strings.Contains(stderr, "local/dev/web") {
		t.Errorf("lock: exit %d, want 1 naming local/dev/web\n%s", code, stderr)
	}
	if after, err := os.ReadFile(filepath.Join(dir, lock)); err != nil || !bytes.Equal(after, before) {
		t.Errorf("lock changed %s (%v)", lock, err)
	}
}

// TestPlanExitsOneWhenANewInstanceCannotBeRendered: a plan holding a
// deployment whose new instance did not render exits 1 naming it and why
// on stderr, with or without --detailed-exitcode: the agent would stall
// on it. One whose locked instance did not render (its driver gone from
// the base) only lacks its diff, and exits as any plan with changes.
func TestPlanExitsOneWhenANewInstanceCannotBeRendered(t *testing.T) {
	t.Parallel()
	plan := func(msg string) *planner.Plan {
		return &planner.Plan{
			Summary: planner.Summary{Update: 1},
			Deployments: []*planner.Deployment{{ID: "local/dev/web", Workflow: planner.WorkflowUpdate,
				From: &planner.InstanceRef{Sequence: 1}, To: &planner.InstanceRef{Sequence: 2},
				Manifests: planner.ManifestDiff{Error: msg}}},
		}
	}
	for _, tc := range []struct {
		msg      string
		detailed bool
		want     int
	}{
		{"rendering the new instance: drivers/webapp/1.1.0/chart/templates/x.yaml: ingress needs a certificate", false, 1},
		{"rendering the new instance: drivers/webapp/1.1.0/chart/templates/x.yaml: ingress needs a certificate", true, 1},
		{"driver webapp@1.1.0 (sha256:00) is not available", false, 1},
		{"driver webapp@1.0.0 (sha256:00) of the locked instance is not available; driver webapp@1.1.0 (sha256:01) is not available", false, 1},
		{"rendering the locked instance: drivers/webapp/1.0.0/chart/templates/x.yaml: it broke", false, 0},
		{"driver webapp@1.0.0 (sha256:00) of the locked instance is not available", true, 2},
		{"", true, 2},
	} {
		var stderr bytes.Buffer
		err := planExit(&stderr, plan(tc.msg), tc.detailed)
		code := 0
		if ec, ok := err.(exitError); ok {
			code = ec.code
		} else if err != nil {
			t.Fatalf("%q: %v", tc.msg, err)
		}
		if code != tc.want {
			t.Errorf("%q (detailed %v): exit %d, want %d", tc.msg, tc.detailed, code, tc.want)
		}
		if want := "error: local/dev/web: the new instance could not be rendered; the agent would stall on it: " + tc.msg + "\n"; tc.want == 1 && !strings.Contains(stderr.String(), want) {
			t.Errorf("%q: stderr %q does not name the deployment and why", tc.msg, stderr.String())
		}
	}
}
