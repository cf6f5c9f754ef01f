package drivers

import (
	"io/fs"
	"os"
	"testing"
	"testing/fstest"
)

func copyFS(src fs.FS, dst fstest.MapFS) error {
	return fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(src, p)
		if err == nil {
			dst[p] = &fstest.MapFile{Data: b}
		}
		return err
	})
}

// FuzzLoad feeds arbitrary spec files to the spec loader, as CUE and as
// YAML, next to a valid chart: it must return a driver or an error, never
// panic. It stops before the sample render (the Helm engine makes each
// run ten times slower, and the fuzzer minimizes by re-running); the
// seeds render in TestBadDrivers and the golden tests.
func FuzzLoad(f *testing.F) {
	for _, p := range []string{"webapp/1.0.0", "webapp/1.1.0", "graphhub/1.0.0", "graphhub/2.0.0"} {
		b, err := os.ReadFile(examples + "/" + p + "/driver.cue")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
	}
	f.Add([]byte(minimalSpec), false)
	f.Add([]byte("name: mini\nversion: 1.0.0\nappVersions: '>=1'\ncomponents: {app: {workloads: [{kind: Deployment, name: x}]}}\n"), true)
	f.Add([]byte("context: 1\nvalues: context"), false)
	f.Add([]byte("import \"strings\"\nname: strings.ToUpper(\"x\")"), false)
	f.Add([]byte(`patches: [{target: {kind: "Deployment"}, jsonPatch: "[{\"op\": \"remove\", \"path\": \"/spec\"}]"}]`), false)
	f.Fuzz(func(t *testing.T, spec []byte, asYAML bool) {
		m := minimalFS()
		delete(m, "driver.cue")
		name := "driver.cue"
		if asYAML {
			name = "driver.yaml"
		}
		m[name] = &fstest.MapFile{Data: spec}
		f, err := readFolder(m, "fuzz", 64<<10, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		d, err := loadFolder(f, LoadOptions{})
		if err != nil {
			return
		}
		if c, err := d.SampleContextWith(nil); err == nil {
			_, _ = d.Values(c)
			_, _ = d.Endpoints(c)
			_, _ = d.ResolveComponents(c)
		}
	})
}
