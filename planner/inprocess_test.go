package planner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
)

// A plan with a Sandbox loads the drivers there when asked to render in
// this process, and plans the same as with every render sandboxed. Each
// input a sandboxed driver is given is evaluated in the child first, once
// (drivers' evalChecked: a deployment's input may cost what its sample did
// not), so the child serves as many evaluations either way: the locked
// side's render, made there when sandboxed, is that input's check when
// rendered here. The renders themselves are this process's: with the
// children's checks kept (Sandbox.KeepChecks), a plan that meets the same
// inputs again sends none to a child when it renders in-process, and the
// locked side's renders when it renders in the sandbox.
func TestPlanRendersInProcessWhenAskedLoadsStaySandboxed(t *testing.T) {
	const envs, perEnv = 2, 3
	repo := generateFanOutRepo(t, envs, perEnv)
	plan := func(inProcess bool, checks string) (string, uint64) {
		t.Helper()
		sb, err := drivers.SelfSandbox(2)
		if err != nil {
			t.Fatal(err)
		}
		sb.Args = []string{"-test.run=^$"}
		defer sb.Close()
		if checks != "" {
			if err := sb.KeepChecks(checks); err != nil {
				t.Skipf("no checks kept here: %v", err)
			}
		}
		p, err := ComputeTrees(Trees{Base: os.DirFS(repo.base), BaseName: "base", Head: os.DirFS(repo.head), HeadName: "head"},
			Options{Sandbox: sb, RenderInProcess: inProcess})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Deployments) != envs*perEnv {
			t.Fatalf("%d deployments planned, want %d", len(p.Deployments), envs*perEnv)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), sb.Requests()
	}
	versions, err := filepath.Glob(filepath.Join(repo.base, "drivers", "*", "*", "driver.cue"))
	if err != nil || len(versions) == 0 {
		t.Fatalf("driver versions: %v, %v", versions, err)
	}
	sandboxed, all := plan(false, "")
	inProcess, served := plan(true, "")
	// The sides' drivers are alike (a fan-out changes the cluster): each
	// version loads once, in the sandbox, for both; then each input is
	// evaluated there once.
	if loads := uint64(len(versions)); served <= loads || served != all {
		t.Errorf("in-process renders: the sandbox served %d evaluations, want the %d loads and each input's check, as many as sandboxed renders (%d)",
			served, loads, all)
	}
	if inProcess != sandboxed {
		t.Errorf("the plans differ:\nsandboxed:  %.400s\nin-process: %.400s", sandboxed, inProcess)
	}

	checks := t.TempDir()
	if _, n := plan(true, checks); n != all {
		t.Errorf("in-process renders, checks kept: the sandbox served %d evaluations, want %d", n, all)
	}
	if again, n := plan(true, checks); n != 0 || again != sandboxed {
		t.Errorf("in-process renders, every load and input checked before: the sandbox served %d evaluations, want none (the plans differ: %v)",
			n, again != sandboxed)
	}
	// Sandboxed, each locked instance is rendered there (a new one was
	// rendered in-process by the resolver's policy check, and that
	// render is shared); a render in the child is not a check.
	if again, n := plan(false, checks); n != envs*perEnv || again != sandboxed {
		t.Errorf("sandboxed renders, every load and input checked before: the sandbox served %d evaluations, want the locked side's %d renders (the plans differ: %v)",
			n, envs*perEnv, again != sandboxed)
	}
}

// With a sandbox the drivers load while the lockfiles and the
// configuration are read; the error a plan reports is still the one of
// the first step that fails, in the order they ran one after the other:
// lockfiles, configuration, limits, then the head's drivers.
func TestPlanReportsTheFirstFailingStepWhileDriversLoadAtOnce(t *testing.T) {
	repo := generateFanOutRepo(t, 1, 2)
	sb, err := drivers.SelfSandbox(2)
	if err != nil {
		t.Fatal(err)
	}
	sb.Args = []string{"-test.run=^$"}
	defer sb.Close()
	lockfile := "locks/bench/e00/app-00.lock.yaml"
	breakers := map[string]func(base, head string){
		"lockfile": func(base, _ string) { writeFile(t, base, lockfile, "sequence: 7\n") },
		"configuration": func(_, head string) {
			writeFile(t, head, "clusters/bench/environments/e00/deployments/app-01.cue", "driver: {\n")
		},
		"limits": func(_, head string) {
			writeFile(t, head, "styrmin.cue", "deletionThreshold: 1\nlimits: timeout: \"soon\"\n")
		},
		"driver": func(_, head string) {
			writeFile(t, head, "drivers/webapp/1.1.0/driver.cue", "name: \"webapp\"\nparameters: {\n")
		},
	}
	want := map[string]string{
		"lockfile":      "lockfiles at the base",
		"configuration": "app-01.cue",
		"limits":        "limits.timeout",
		"driver":        "drivers/webapp/1.1.0/driver.cue",
	}
	order := []string{"lockfile", "configuration", "limits", "driver"}
	for i, first := range order {
		base, head := copyTree(t, repo.base), copyTree(t, repo.head)
		for _, b := range order[i:] {
			breakers[b](base, head)
		}
		_, err := ComputeTrees(Trees{Base: os.DirFS(base), BaseName: "base", Head: os.DirFS(head), HeadName: "head"}, Options{Sandbox: sb})
		if err == nil || !strings.Contains(err.Error(), want[first]) {
			t.Errorf("broken from %s on: err = %v, want the %s's (%q)", first, err, first, want[first])
		}
	}
}
