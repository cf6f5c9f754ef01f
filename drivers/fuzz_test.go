package drivers

import (
	"io/fs"
	"os"
	"strings"
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
	// Step args: the ones a driver may declare, and keys the agent keeps
	// for itself (refused), odd keys and values in both forms.
	withArgs := func(args string) []byte {
		return []byte(strings.Replace(minimalSpec, `{action: "waitReady", components: ["app"]}]`,
			`{action: "waitReady", components: ["app"]}]
actions: upgrade: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"], args: {`+args+`}}]`, 1))
	}
	f.Add(withArgs(`container: "app", backoffLimit: "3"`), false)
	f.Add(withArgs(`operation: "backup", backupID: "prod-nightly", artifact: "s3://x/y", retryAttempts: "500", retryBackoff: "1ns", backoffLimit: "three"`), false)
	f.Add(withArgs(`"a.b\n": "", container: "Web_1", backoffLimit: "99999999999999999999"`), false)
	f.Add([]byte("name: mini\nversion: 1.0.0\nappVersions: '>=1'\ncomponents: {app: {workloads: [{kind: Deployment, name: x}]}}\nactions: {upgrade: {pre: [{action: exec, component: app, command: [x], args: {container: app, job: j, '': ''}}]}}\n"), true)
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
