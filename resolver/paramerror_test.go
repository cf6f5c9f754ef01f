package resolver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
)

// TestAStructParameterErrorNamesTheFieldThatFailsAndTheFileThatSetIt pins
// that the error of a struct parameter whose fields two layers set names,
// every time, the field that fails and the file of the layer that set it
// (not whichever file the provenance map yields first): the deployment's
// memory when it is the wrong one, the environment's cpu when that is.
func TestAStructParameterErrorNamesTheFieldThatFailsAndTheFileThatSetIt(t *testing.T) {
	const (
		envFile = "clusters/local/environments/dev/environment.cue"
		webFile = "clusters/local/environments/dev/deployments/web.cue"
	)
	dir := exampleCopy(t)
	// webapp with a struct parameter, as driver "sized".
	dst := filepath.Join(dir, "drivers/sized/1.0.0")
	must(t, os.CopyFS(dst, os.DirFS(filepath.Join(dir, "drivers/webapp/1.0.0"))))
	spec, err := os.ReadFile(filepath.Join(dst, "driver.cue"))
	must(t, err)
	s := strings.Replace(string(spec), `name:        "webapp"`, `name:        "sized"`, 1)
	s = strings.Replace(s, "parameters: {\n", "parameters: {\n\tresources: {cpu: *\"100m\" | string, memory: *\"128Mi\" | =~\"^[0-9]+(Mi|Gi)$\"}\n", 1)
	if !strings.Contains(s, "resources:") || !strings.Contains(s, `"sized"`) {
		t.Fatal("webapp's driver.cue changed: the test cannot derive its driver")
	}
	writeFile(t, dir, "drivers/sized/1.0.0/driver.cue", s)
	cat, err := drivers.LoadCatalog(os.DirFS(dir), "drivers", drivers.LoadOptions{})
	must(t, err)
	web := ID{"local", "dev", "web"}

	for _, tc := range []struct {
		name, env, web string
		runs           int
		want           string
	}{
		{"the deployment's memory fails", "parameters: resources: cpu: \"200m\"\n", "parameters: resources: memory: \"lots\"\n", 50,
			webFile + ":3:32: field parameters.resources.memory: the value set here fails parameter resources: "},
		{"the environment's cpu fails", "parameters: resources: cpu: 2\n", "parameters: resources: memory: \"256Mi\"\n", 10,
			envFile + ":2:29: field parameters.resources.cpu: the value set here fails parameter resources: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, dir, envFile, "namespacePrefix: \"dev\"\n"+tc.env)
			writeFile(t, dir, webFile, "driver: \"sized\"\nappVersion: \"1.25.0\"\n"+tc.web)
			repo, err := NewLoader(0).Load(os.DirFS(dir))
			must(t, err)
			var first string
			for i := range tc.runs {
				res := Resolve(repo, Options{Catalog: cat, Only: map[ID]bool{web: true}})
				var got error
				for _, e := range res.Errors {
					if e.ID == web {
						got = e.Err
					}
				}
				var ce *ConfigError
				if !errors.As(got, &ce) {
					t.Fatalf("run %d: %v, want a ConfigError", i, got)
				}
				if i == 0 {
					first = ce.Error()
					if !strings.HasPrefix(first, tc.want) {
						t.Fatalf("error %q, want it to start %q", first, tc.want)
					}
				} else if ce.Error() != first {
					t.Fatalf("run %d: error %q, run 0 said %q", i, ce, first)
				}
			}
		})
	}
}
