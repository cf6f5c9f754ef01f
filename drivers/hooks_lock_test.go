package drivers_test

import (
	"io/fs"
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
// renders it only for a deployment's parameters fails that deployment at
// lock and plan (resolver.Resolve's policy render): the lock leaves it
// out (--all-or-nothing locks nothing) and the plan lists it among its
// errors, so the agent never stalls on it after the merge.
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
		says(t, "lock", refusedForOneDeployment(t, fsys, "local/dev/web"))
	})
}

// TestAChartFailingForOneDeploymentsParametersFailsItAtLockAndPlan: a
// template's `fail` that only a deployment's parameters reach fails that
// deployment at lock and plan, with the template's message and the
// deployment's file; the others lock.
func TestAChartFailingForOneDeploymentsParametersFailsItAtLockAndPlan(t *testing.T) {
	const web = "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: ingress: true\n"
	fsys := os.DirFS(hookedExample(t, "{{ if .Values.ingress.enabled }}{{ fail \"ingress needs a certificate\" }}{{ end }}\n", web))
	msg := refusedForOneDeployment(t, fsys, "local/dev/web")
	for _, want := range []string{"clusters/local/environments/dev/deployments/web.cue", "webapp@1.1.0", hookTemplate, "ingress needs a certificate"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s\ndoes not say %q", msg, want)
		}
	}
}

// refusedForOneDeployment checks that the repository fsys fails deployment
// id alone: a lock keeping going locks the others and not id, one all or
// nothing locks nothing, and the plan lists id among its errors (not as a
// change) and renders the others. It returns the lock's error of id.
func refusedForOneDeployment(t *testing.T, fsys fs.FS, id string) string {
	t.Helper()
	ws, err := resolver.LoadWorkspace(fsys, resolver.WorkspaceOptions{})
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	out, err := ws.LockFor(resolver.LockRequest{Policy: resolver.LockKeepGoing})
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	if out.Skipped == nil || !strings.Contains(out.Skipped.Error(), id+": ") {
		t.Fatalf("lock: skipped %v, want %s", out.Skipped, id)
	}
	if len(out.Changes) == 0 {
		t.Error("lock: the other deployments are not locked")
	}
	for _, c := range out.Changes {
		if c.ID.String() == id {
			t.Errorf("lock: %s is locked", id)
		}
	}
	if out, err := ws.LockFor(resolver.LockRequest{Policy: resolver.LockAllOrNothing}); err == nil || len(out.All()) > 0 {
		t.Errorf("lock --all-or-nothing: %d changes, error %v; want none and an error", len(out.All()), err)
	}

	p, err := planner.ComputeTrees(planner.Trees{Base: fstest.MapFS{}, Head: fsys, HeadName: "working tree"}, planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range p.Errors {
		if e.ID == id {
			found = true
			if !strings.Contains(out.Skipped.Error(), e.Message) {
				t.Errorf("plan: %s's error %q is not the lock's", id, e.Message)
			}
		}
	}
	if !found {
		t.Errorf("plan: %s is not among the errors %v", id, p.Errors)
	}
	for _, d := range p.Deployments {
		if d.ID == id {
			t.Errorf("plan: %s is planned", id)
		} else if d.Manifests.Error != "" {
			t.Errorf("%s: %s", d.ID, d.Manifests.Error)
		}
	}
	return out.Skipped.Error()
}
