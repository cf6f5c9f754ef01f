package resolver

import (
	"os"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
)

// With a sandbox the drivers load while the configuration and the
// lockfiles are read; the error LoadWorkspace reports is still the one of
// the first step that fails, in the order they ran one after the other:
// configuration, limits, drivers, lockfiles.
func TestLoadWorkspaceReportsTheFirstFailingStepWhileDriversLoadAtOnce(t *testing.T) {
	sb, err := drivers.SelfSandbox(2)
	if err != nil {
		t.Fatal(err)
	}
	sb.Args = []string{"-test.run=^$"}
	defer sb.Close()
	breakers := map[string]func(dir string){
		"configuration": func(dir string) {
			writeFile(t, dir, "clusters/local/environments/dev/deployments/web.cue", "driver: {\n")
		},
		"limits": func(dir string) {
			data, err := os.ReadFile(dir + "/styrmin.cue")
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, dir, "styrmin.cue", string(data)+"\nlimits: timeout: \"soon\"\n")
		},
		"driver": func(dir string) {
			writeFile(t, dir, "drivers/webapp/1.1.0/driver.cue", "name: \"webapp\"\nparameters: {\n")
		},
		"lockfile": func(dir string) { writeFile(t, dir, "locks/local/dev/web.lock.yaml", "sequence: 7\n") },
	}
	want := map[string]string{
		"configuration": "web.cue",
		"limits":        "limits.timeout",
		"driver":        "drivers/webapp/1.1.0/driver.cue",
		"lockfile":      "web.lock.yaml",
	}
	order := []string{"configuration", "limits", "driver", "lockfile"}
	for _, opts := range []WorkspaceOptions{{Sandbox: sb}, {}} {
		for i, first := range order {
			dir := exampleCopy(t)
			for _, b := range order[i:] {
				breakers[b](dir)
			}
			_, err := LoadWorkspace(os.DirFS(dir), opts)
			if err == nil || !strings.Contains(err.Error(), want[first]) {
				t.Errorf("sandboxed %v, broken from %s on: err = %v, want the %s's (%q)", opts.Sandbox != nil, first, err, first, want[first])
			}
		}
	}
}
