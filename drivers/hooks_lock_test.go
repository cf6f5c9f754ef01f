package drivers_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
)

const hookJob = `apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-migrate
  annotations:
    helm.sh/hook: pre-upgrade
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: migrate
          image: busybox
`

// hookedExample is the example repository with a pre-upgrade hook Job in
// webapp 1.1.0's chart (template), and dev/web given web.cue.
func hookedExample(t *testing.T, template, web string) string {
	t.Helper()
	dir := t.TempDir()
	if err := examples.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	for p, s := range map[string]string{
		"drivers/webapp/1.1.0/chart/templates/migrate.yaml":   template,
		"clusters/local/environments/dev/deployments/web.cue": web,
	} {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(p)), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const hookTemplate = "drivers/webapp/1.1.0/chart/templates/migrate.yaml"

// TestHelmHookRefusedAtLockAndPlan: a chart that renders a Helm hook with
// its defaults fails the lock (the workspace's drivers load with a sample
// render) and the plan, naming the template and what to do. One that
// renders it only for a deployment's parameters is shown in that
// deployment's plan: the lock's policy render leaves a render error to
// the plan and the agent (resolver.Resolve), so the lock does not refuse
// that one.
func TestHelmHookRefusedAtLockAndPlan(t *testing.T) {
	const web = "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: ingress: true\n"
	says := func(t *testing.T, what, msg string) {
		t.Helper()
		for _, want := range []string{hookTemplate, "webapp@1.1.0", "Job web", `helm.sh/hook: "pre-upgrade"`, drivers.HookAdvice} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %s\ndoes not say %q", what, msg, want)
			}
		}
	}
	t.Run("always", func(t *testing.T) {
		fsys := os.DirFS(hookedExample(t, hookJob, web))
		_, err := resolver.LoadWorkspace(fsys, resolver.WorkspaceOptions{})
		if err == nil {
			t.Fatal("lock: the workspace loaded")
		}
		says(t, "lock", err.Error())
		_, err = planner.ComputeTrees(planner.Trees{Base: fstest.MapFS{}, Head: fsys, HeadName: "working tree"}, planner.Options{})
		if err == nil {
			t.Fatal("plan: computed")
		}
		says(t, "plan", err.Error())
	})
	t.Run("for one deployment", func(t *testing.T) {
		fsys := os.DirFS(hookedExample(t, "{{ if .Values.ingress.enabled }}\n"+hookJob+"{{ end }}\n", web))
		p, err := planner.ComputeTrees(planner.Trees{Base: fstest.MapFS{}, Head: fsys, HeadName: "working tree"}, planner.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, d := range p.Deployments {
			if d.ID == "local/dev/web" {
				found = true
				says(t, "plan", d.Manifests.Error)
			} else if d.Manifests.Error != "" {
				t.Errorf("%s: %s", d.ID, d.Manifests.Error)
			}
		}
		if !found {
			t.Fatal("the plan has no local/dev/web")
		}
	})
}
