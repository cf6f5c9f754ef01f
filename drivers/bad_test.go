package drivers

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// minimalSpec is a valid driver; bad cases change one thing in it.
const minimalSpec = `name:        "mini"
version:     "1.0.0"
appVersions: ">=1.0.0 <2.0.0"
parameters: {
	// Pods.
	replicas: *1 | int & >=1 & <=3
}
components: app: workloads: [{kind: "Deployment", name: context.deployment.name}]
services: http: {component: "app", port: 80}
values: replicas: context.parameters.replicas
actions: upgrade: post: [{action: "waitReady", components: ["app"]}]
`

const minimalDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels: {app: mini}
  template:
    metadata:
      labels: {app: mini}
    spec:
      containers:
        - name: app
          image: nginx
`

func minimalFS() fstest.MapFS {
	return fstest.MapFS{
		"driver.cue":                      {Data: []byte(minimalSpec)},
		"chart/Chart.yaml":                {Data: []byte("apiVersion: v2\nname: mini\nversion: 1.0.0\n")},
		"chart/values.yaml":               {Data: []byte("replicas: 1\n")},
		"chart/templates/deployment.yaml": {Data: []byte(minimalDeployment)},
	}
}

func TestMinimalDriverLoads(t *testing.T) {
	d, err := Load(minimalFS(), LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "mini" || d.Version != "1.0.0" || len(d.Parameters) != 1 || d.Parameters[0].Doc != "Pods." {
		t.Fatalf("unexpected driver: %+v", d)
	}
}

// replaceSpec returns a change that rewrites part of the minimal spec.
func replaceSpec(old, new string) func(fstest.MapFS) {
	return func(m fstest.MapFS) {
		s := string(m["driver.cue"].Data)
		if !strings.Contains(s, old) {
			panic("test spec does not contain " + old)
		}
		m["driver.cue"] = &fstest.MapFile{Data: []byte(strings.Replace(s, old, new, 1))}
	}
}

// TestBadDrivers pins that every kind of broken driver folder is refused
// with an error naming the file (with line where there is one) and the
// field at fault.
func TestBadDrivers(t *testing.T) {
	const src = "drivers/mini/1.0.0/"
	tests := []struct {
		name      string
		change    func(fstest.MapFS)
		opts      LoadOptions
		wantFile  string // substring naming the file (and line)
		wantField string
		wantMsg   string
	}{
		{name: "syntax error", change: replaceSpec(`version:     "1.0.0"`, `version:     "1.0.0`),
			wantFile: src + "driver.cue:2:", wantMsg: "string literal not terminated"},
		{name: "unknown field", change: replaceSpec(`version:     "1.0.0"`, "version:     \"1.0.0\"\ncolour: \"red\""),
			wantFile: src + "driver.cue:3:", wantField: "colour", wantMsg: "not allowed"},
		{name: "wrong type", change: replaceSpec(`version:     "1.0.0"`, `version:     1`),
			wantFile: src + "driver.cue:2:", wantField: "version", wantMsg: "conflicting values"},
		{name: "bad driver version", change: replaceSpec(`version:     "1.0.0"`, `version:     "1.0"`),
			wantFile: src + "driver.cue:2:", wantField: "version", wantMsg: "not a semantic version"},
		{name: "bad semver range", change: replaceSpec(`">=1.0.0 <2.0.0"`, `">=1.0.0 <<2"`),
			wantFile: src + "driver.cue:3:", wantField: "appVersions", wantMsg: "not a semver range"},
		{name: "parameter name that is not an identifier", change: replaceSpec(`replicas: *1`, `"max-replicas": *3 | int
	replicas: *1`),
			wantFile: src + "driver.cue:6:", wantField: "parameters.max-replicas", wantMsg: "parameter names must match"},
		{name: "chart missing", change: func(m fstest.MapFS) {
			for p := range m {
				if strings.HasPrefix(p, "chart/") {
					delete(m, p)
				}
			}
		}, wantFile: src + "driver.cue", wantField: "chart", wantMsg: `chart folder "chart" not found`},
		{name: "chart without Chart.yaml", change: func(m fstest.MapFS) { delete(m, "chart/Chart.yaml") },
			wantFile: src + "driver.cue", wantField: "chart", wantMsg: "has no Chart.yaml"},
		{name: "remote chart", change: replaceSpec(`appVersions:`, "chart: \"oci://registry.example/mini\"\nappVersions:"),
			wantFile: src + "driver.cue:3:", wantField: "chart", wantMsg: "remote charts are not supported"},
		{name: "chart path escaping through ..", change: replaceSpec(`appVersions:`, "chart: \"../other/chart\"\nappVersions:"),
			wantFile: src + "driver.cue:3:", wantField: "chart", wantMsg: "escapes the driver folder"},
		{name: "template error", change: func(m fstest.MapFS) {
			m["chart/templates/broken.yaml"] = &fstest.MapFile{Data: []byte("kind: {{ .Values.replicas | nosuchfunc }}\n")}
		}, wantFile: src + "chart/templates/broken.yaml", wantMsg: `function "nosuchfunc" not defined`},
		{name: "template fails at execution", change: func(m fstest.MapFS) {
			m["chart/templates/fail.yaml"] = &fstest.MapFile{Data: []byte(`{{ fail "replicas must be set" }}`)}
		}, wantFile: src + "chart/templates/fail.yaml", wantMsg: "replicas must be set"},
		{name: "template renders invalid YAML", change: func(m fstest.MapFS) {
			m["chart/templates/cm.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: [oops\n")}
		}, wantFile: src + "chart/templates/cm.yaml", wantMsg: "invalid YAML"},
		{name: "template renders an object without a name", change: func(m fstest.MapFS) {
			m["chart/templates/cm.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: v1\nkind: ConfigMap\ndata: {a: b}\n")}
		}, wantFile: src + "chart/templates/cm.yaml", wantMsg: "without apiVersion, kind or metadata.name"},
		{name: "component matching no workload", change: replaceSpec(`components: app:`, `components: ghost: workloads: [{kind: "StatefulSet", name: "db"}]
components: app:`), wantFile: src + "driver.cue:8:", wantField: "components.ghost", wantMsg: "matches no workload"},
		{name: "component of a non-workload kind", change: replaceSpec(`kind: "Deployment"`, `kind: "ConfigMap"`),
			wantFile: src + "driver.cue:8:", wantField: "components.app.workloads[0].kind", wantMsg: "not a workload kind"},
		{name: "service naming an unknown component", change: replaceSpec(`{component: "app", port: 80}`, `{component: "web", port: 80}`),
			wantFile: src + "driver.cue:9:", wantField: "services.http.component", wantMsg: `unknown component "web"`},
		{name: "service port out of range", change: replaceSpec(`port: 80}`, `port: 80000}`),
			wantFile: src + "driver.cue:9:", wantField: "services.http.port", wantMsg: "invalid value 80000"},
		{name: "action naming an unknown component", change: replaceSpec(`components: ["app"]}]`, `components: ["worker"]}]`),
			wantFile: src + "driver.cue:11:", wantField: "actions.upgrade.post[0].components", wantMsg: `unknown component "worker"`},
		{name: "unknown action", change: replaceSpec(`action: "waitReady"`, `action: "reboot"`),
			wantFile: src + "driver.cue:11:", wantField: "actions.upgrade.post[0].action", wantMsg: `unknown action "reboot"`},
		{name: "runJob without a command", change: replaceSpec(`{action: "waitReady", components: ["app"]}`, `{action: "runJob", component: "app", job: "migrate"}`),
			wantFile: src + "driver.cue:11:", wantField: "actions.upgrade.post[0].command", wantMsg: "runJob needs a command"},
		{name: "bad timeout", change: replaceSpec(`components: ["app"]}]`, `components: ["app"], timeout: "soon"}]`),
			wantFile: src + "driver.cue:11:", wantField: "actions.upgrade.post[0].timeout", wantMsg: `"soon" is not a positive duration`},
		{name: "retry with one attempt", change: replaceSpec(`{action: "waitReady", components: ["app"]}`, `{action: "waitReady", components: ["app"], retry: attempts: 1}`),
			wantFile: src + "driver.cue:11:", wantField: "attempts", wantMsg: "invalid value 1"},
		{name: "retry with a bad backoff", change: replaceSpec(`{action: "waitReady", components: ["app"]}`, `{action: "waitReady", components: ["app"], retry: {attempts: 3, backoff: "later"}}`),
			wantFile: src + "driver.cue:11:", wantField: "actions.upgrade.post[0].retry.backoff", wantMsg: `"later" is not a positive duration`},
		{name: "retry of the core step", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: upgrade: core: [{action: "upgradeDeploymentVersion", retry: attempts: 2}]`),
			wantFile: src + "driver.cue:11:", wantField: "actions.upgrade.core[0].retry", wantMsg: "is not retried"},
		{name: "upgradeDeploymentVersion outside core", change: replaceSpec(`{action: "waitReady", components: ["app"]}`, `{action: "upgradeDeploymentVersion"}`),
			wantFile: src + "driver.cue:11:", wantField: "actions.upgrade.post[0].action", wantMsg: "belongs in core"},
		{name: "backup without restore", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`,
			`actions: backup: core: [{action: "runJob", component: "app", job: "dump", command: ["dump"]}]`),
			wantFile: src + "driver.cue", wantField: "actions.restore", wantMsg: "a driver that declares backup declares restore too"},
		{name: "restore without backup", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`,
			`actions: restore: core: [{action: "runJob", component: "app", job: "load", command: ["load"]}]`),
			wantFile: src + "driver.cue", wantField: "actions.backup", wantMsg: "a driver that declares restore declares backup too"},
		{name: "backup without a core step", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`,
			`actions: {
	backup: pre: [{action: "stopComponents", components: ["app"]}]
	restore: core: [{action: "runJob", component: "app", job: "load", command: ["load"]}]
}`),
			wantFile: src + "driver.cue:12:", wantField: "actions.backup.core", wantMsg: "a backup needs at least one core step"},
		{name: "deleteBackup without backup hooks", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`,
			`actions: deleteBackup: core: [{action: "runJob", component: "app", job: "rm", command: ["rm"]}]`),
			wantFile: src + "driver.cue:11:", wantField: "actions.deleteBackup", wantMsg: "deleteBackup deletes a backup's artefact: it needs actions.backup and actions.restore"},
		{name: "deleteBackup without a core step", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`,
			withBackupHooks(`deleteBackup: pre: [{action: "runJob", component: "app", job: "rm", command: ["rm"]}]`)),
			wantFile: src + "driver.cue:12:", wantField: "actions.deleteBackup.core", wantMsg: "a deleteBackup needs at least one core step"},
		{name: "a backup that upgrades", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`,
			`actions: {
	backup: core: [{action: "upgradeDeploymentVersion"}]
	restore: core: [{action: "runJob", component: "app", job: "load", command: ["load"]}]
}`),
			wantFile: src + "driver.cue:12:", wantField: "actions.backup.core[0].action", wantMsg: "a backup applies no new version"},
		{name: "backup step outside the upgrade hook's pre mode", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, withBackupHooks(`upgrade: post: [{action: "backup"}]`)),
			wantFile: src + "driver.cue:12:", wantField: "actions.upgrade.post[0].action", wantMsg: "backup belongs in the upgrade hook's pre mode"},
		{name: "backup step in setup", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, withBackupHooks(`setup: pre: [{action: "backup"}]`)),
			wantFile: src + "driver.cue:12:", wantField: "actions.setup.pre[0].action", wantMsg: "not setup.pre"},
		{name: "backup step of a driver without backup hooks", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: upgrade: pre: [{action: "backup"}]`),
			wantFile: src + "driver.cue:11:", wantField: "actions.upgrade.pre[0].action", wantMsg: "backup runs the driver's backup and restore hooks, which it does not declare"},
		{name: "backup step with a command", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, withBackupHooks(`upgrade: pre: [{action: "backup", command: ["dump"]}]`)),
			wantFile: src + "driver.cue:12:", wantField: "actions.upgrade.pre[0].command", wantMsg: "not an argument of backup"},
		{name: "restoreBackup outside setup", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, withBackupHooks(`upgrade: pre: [{action: "restoreBackup"}]`)),
			wantFile: src + "driver.cue:12:", wantField: "actions.upgrade.pre[0].action", wantMsg: "restoreBackup belongs in the setup hook"},
		{name: "restoreBackup in the restore hook", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: {
	backup: core: [{action: "runJob", component: "app", job: "dump", command: ["dump"]}]
	restore: core: [{action: "restoreBackup"}]
}`), wantFile: src + "driver.cue:13:", wantField: "actions.restore.core[0].action", wantMsg: "restoreBackup belongs in the setup hook"},
		{name: "restoreBackup twice", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, withBackupHooks(`setup: {
		pre: [{action: "restoreBackup"}]
		post: [{action: "restoreBackup"}]
	}`)), wantFile: src + "driver.cue:12:", wantField: "actions.setup.post[0]", wantMsg: "a second restoreBackup (the first is actions.setup.pre[0])"},
		{name: "one job name in two runJob steps of a hook", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: setup: {
	pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]
	post: [{action: "waitReady", components: ["app"]}, {action: "runJob", component: "app", job: "migrate", command: ["check"]}]
}`), wantFile: src + "driver.cue:13:", wantField: "actions.setup.post[1].job", wantMsg: `job "migrate" is the job of actions.setup.pre[0] too: each runJob step of a hook needs a job name of its own`},
		{name: "a hook of more steps than a task's status holds", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`,
			`actions: upgrade: {pre: [`+strings.Repeat(`{action: "waitReady", components: ["app"]}, `, 20)+`], post: [`+strings.Repeat(`{action: "waitReady", components: ["app"]}, `, 13)+`]}`),
			wantFile: src + "driver.cue:11:", wantField: "actions.upgrade", wantMsg: "34 steps: expected at most 32 in a hook"},
		{name: "one job name in two runJob steps of the backup hook", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: {
	backup: core: [{action: "runJob", component: "app", job: "dump", command: ["dump"]},
		{action: "runJob", component: "app", job: "dump", command: ["verify"]}]
	restore: core: [{action: "runJob", component: "app", job: "load", command: ["load"]}]
}`), wantFile: src + "driver.cue:13:", wantField: "actions.backup.core[1].job", wantMsg: `job "dump" is the job of actions.backup.core[0] too`},
		{name: "restoreBackup of a driver without restore hooks", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: setup: post: [{action: "restoreBackup"}]`),
			wantFile: src + "driver.cue:11:", wantField: "actions.setup.post[0].action", wantMsg: "restoreBackup runs the driver's backup and restore hooks, which it does not declare"},
		{name: "restoreBackup naming components", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, withBackupHooks(`setup: post: [{action: "restoreBackup", components: ["app"]}]`)),
			wantFile: src + "driver.cue:12:", wantField: "actions.setup.post[0].components", wantMsg: "not an argument of restoreBackup"},
		{name: "unknown hook", change: replaceSpec(`actions: upgrade:`, `actions: rollback:`),
			wantFile: src + "driver.cue:11:", wantField: "actions.rollback", wantMsg: "not allowed"},
		{name: "values referring to an unknown context field", change: replaceSpec(`values: replicas: context.parameters.replicas`, `values: zone: context.cluster.zone`),
			wantFile: src + "driver.cue:10:", wantField: "values.zone", wantMsg: "undefined field: zone"},
		{name: "patch matching no object", change: replaceSpec(`values:`, "patches: [{target: {kind: \"Service\"}, patch: metadata: labels: a: \"b\"}]\nvalues:"),
			wantFile: src + "driver.cue:10:", wantField: "patches[0]", wantMsg: "matches no object"},
		{name: "both driver.cue and driver.yaml", change: func(m fstest.MapFS) {
			m["driver.yaml"] = &fstest.MapFile{Data: []byte("name: mini\n")}
		}, wantFile: src + "driver.cue", wantMsg: "both driver.cue and driver.yaml"},
		{name: "no spec", change: func(m fstest.MapFS) { delete(m, "driver.cue") },
			wantFile: src + "driver.cue", wantMsg: "no driver spec"},
		{name: "yaml spec with a wrong type", change: func(m fstest.MapFS) {
			delete(m, "driver.cue")
			m["driver.yaml"] = &fstest.MapFile{Data: []byte("name: mini\nversion: 1.0.0\nappVersions: '>=1.0.0'\ncomponents:\n  app:\n    workloads: [{kind: Deployment, name: mini}]\nservices:\n  http: {component: app, port: \"80\"}\n")}
		}, wantFile: src + "driver.yaml:8:", wantField: "services.http.port", wantMsg: "conflicting values"},
		{name: "oversized file", change: func(m fstest.MapFS) {
			m["chart/files/big.bin"] = &fstest.MapFile{Data: make([]byte, 2048)}
		}, opts: LoadOptions{MaxFileSize: 1024}, wantFile: src + "chart/files/big.bin", wantMsg: "larger than the limit of 1024 bytes"},
		{name: "oversized folder", change: func(m fstest.MapFS) {
			for _, n := range []string{"a", "b", "c"} {
				m["chart/files/"+n] = &fstest.MapFile{Data: make([]byte, 900)}
			}
		}, opts: LoadOptions{MaxTotalSize: 2500}, wantFile: src + "chart/files/", wantMsg: "driver folder is larger than the limit"},
		{name: "chart symlink escaping the folder", change: func(m fstest.MapFS) {
			m["chart/templates/secret.yaml"] = &fstest.MapFile{Mode: fs.ModeSymlink, Data: []byte("../../../other/secret.yaml")}
		}, wantFile: src + "chart/templates/secret.yaml", wantMsg: "escapes the driver folder"},
		{name: "absolute symlink", change: func(m fstest.MapFS) {
			m["chart/templates/passwd.yaml"] = &fstest.MapFile{Mode: fs.ModeSymlink, Data: []byte("/etc/passwd")}
		}, wantFile: src + "chart/templates/passwd.yaml", wantMsg: "escapes the driver folder"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := minimalFS()
			tc.change(m)
			opts := tc.opts
			opts.Source = "drivers/mini/1.0.0"
			d, err := Load(m, opts)
			if err == nil {
				t.Fatalf("loaded %s@%s, want an error", d.Name, d.Version)
			}
			msg := err.Error()
			for _, want := range []string{tc.wantFile, tc.wantField, tc.wantMsg} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Errorf("error is %T, want a *SpecError", err)
			}
		})
	}
}

// TestSymlinkInOSFolder pins the same rules on a real folder: a link
// inside the folder is followed, one leaving it is refused.
func TestSymlinkInOSFolder(t *testing.T) {
	root := t.TempDir()
	for p, f := range minimalFS() {
		path := filepath.Join(root, "mini", filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "outside.yaml"), []byte("kind: Secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "mini")
	inside := filepath.Join(dir, "chart", "values-link.yaml")
	if err := os.Symlink("values.yaml", inside); err != nil {
		t.Skip("symlinks not available:", err)
	}
	if _, err := Load(os.DirFS(dir), LoadOptions{Source: "drivers/mini/1.0.0"}); err != nil {
		t.Fatalf("a link inside the folder: %v", err)
	}
	if err := os.Symlink("../../../outside.yaml", filepath.Join(dir, "chart", "templates", "leak.yaml")); err != nil {
		t.Fatal(err)
	}
	_, err := Load(os.DirFS(dir), LoadOptions{Source: "drivers/mini/1.0.0"})
	if err == nil || !strings.Contains(err.Error(), "drivers/mini/1.0.0/chart/templates/leak.yaml") || !strings.Contains(err.Error(), "escapes the driver folder") {
		t.Fatalf("err = %v, want the escaping link named", err)
	}
}

func TestCatalogRejectsDuplicateVersionWithOtherContent(t *testing.T) {
	a, err := Load(minimalFS(), LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	m := minimalFS()
	replaceSpec(`*1 | int`, `*2 | int`)(m)
	b, err := Load(m, LoadOptions{Source: "git/other@main/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	cat := NewCatalog()
	if err := cat.Add(a); err != nil {
		t.Fatal(err)
	}
	err = cat.Add(b)
	var dup *DuplicateError
	if !errors.As(err, &dup) {
		t.Fatalf("err = %v, want *DuplicateError", err)
	}
	for _, want := range []string{"mini@1.0.0", "drivers/mini/1.0.0", "git/other@main/mini/1.0.0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestLoadCatalogChecksFolderNames(t *testing.T) {
	m := fstest.MapFS{}
	for p, f := range minimalFS() {
		m["drivers/mini/1.0.1/"+p] = f
	}
	_, err := LoadCatalog(m, "drivers", LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "drivers/mini/1.0.1/driver.cue") || !strings.Contains(err.Error(), `version: "1.0.0" does not match the folder name "1.0.1"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadCatalogWithoutDriversFolderIsEmpty(t *testing.T) {
	cat, err := LoadCatalog(fstest.MapFS{}, "drivers", LoadOptions{})
	if err != nil || len(cat.Names()) != 0 {
		t.Fatalf("cat = %v, err = %v", cat.Names(), err)
	}
}

// withBackupHooks is an actions block with hooks (one line, the line
// after "actions: {") and the backup and restore hooks.
func withBackupHooks(hooks string) string {
	return "actions: {\n\t" + hooks + `
	backup: core: [{action: "runJob", component: "app", job: "dump", command: ["dump"]}]
	restore: core: [{action: "runJob", component: "app", job: "load", command: ["load"]}]
}`
}

// TestBackupAndRestoreBackupSteps: the two steps load where they belong,
// with no arguments.
func TestBackupAndRestoreBackupSteps(t *testing.T) {
	fsys := minimalFS()
	replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, withBackupHooks(`setup: post: [{action: "waitReady", components: ["app"]}, {action: "restoreBackup"}]
	upgrade: pre: [{action: "backup"}]`))(fsys)
	d, err := Load(fsys, LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Hooks[HookSetup].Post; len(s) != 2 || s[1].Action != ActionRestoreBackup {
		t.Errorf("setup post %+v", s)
	}
	if s := d.Hooks[HookUpgrade].Pre; len(s) != 1 || s[0].Action != ActionBackup {
		t.Errorf("upgrade pre %+v", s)
	}
}

// TestADriverWithBackupAndRestoreCanBeBackedUp: the backup and restore
// hooks decode in mode order with no default step; a driver without
// them cannot be backed up.
func TestADriverWithBackupAndRestoreCanBeBackedUp(t *testing.T) {
	plain, err := Load(minimalFS(), LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.CanBackup() {
		t.Error("a driver without backup and restore hooks can be backed up")
	}
	fsys := minimalFS()
	replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: {
	backup: {
		pre: [{action: "stopComponents", components: ["app"]}]
		core: [{action: "runJob", component: "app", job: "dump", command: ["dump"]}]
		post: [{action: "startComponents", components: ["app"]}]
	}
	restore: core: [{action: "runJob", component: "app", job: "load", command: ["load"]}]
}`)(fsys)
	d, err := Load(fsys, LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if !d.CanBackup() {
		t.Fatal("a driver with backup and restore hooks cannot be backed up")
	}
	b := d.Hooks[HookBackup]
	if len(b.Pre) != 1 || b.Core[0].Job != "dump" || len(b.Post) != 1 || b.Post[0].Action != ActionStartComponents {
		t.Errorf("backup hook %+v", b)
	}
	if r := d.Hooks[HookRestore]; len(r.Pre) != 0 || len(r.Core) != 1 || r.Core[0].Job != "load" {
		t.Errorf("restore hook %+v", r)
	}
}

// The error of a catalog is the first broken folder's in the folders'
// order, whichever load failed first, and a good catalog has every
// version.
func TestLoadCatalogReportsTheFirstBrokenFolderInOrder(t *testing.T) {
	catalog := func(broken ...string) fstest.MapFS {
		m := fstest.MapFS{}
		for _, name := range []string{"mini", "minj", "mink", "minl"} {
			for p, f := range minimalFS() {
				data := f.Data
				if p == "driver.cue" {
					data = []byte(strings.Replace(string(data), `"mini"`, `"`+name+`"`, 1))
					if slices.Contains(broken, name) {
						data = []byte("name: \"" + name + "\"\nversion: \"1.0.0\"\nparameters: {\n")
					}
				}
				m["drivers/"+name+"/1.0.0/"+p] = &fstest.MapFile{Data: data}
			}
		}
		return m
	}
	// In a sandbox the versions load at once; in-process one after the
	// other.
	for _, opts := range []LoadOptions{{Sandbox: newSandbox(t, 2)}, {}} {
		good, err := LoadCatalog(catalog(), "drivers", opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := good.Names(); !slices.Equal(got, []string{"mini", "minj", "mink", "minl"}) {
			t.Fatalf("names %v", got)
		}
		for range 10 {
			_, err := LoadCatalog(catalog("minl", "minj"), "drivers", opts)
			if err == nil || !strings.Contains(err.Error(), "drivers/minj/1.0.0/driver.cue") {
				t.Fatalf("sandboxed %v: err = %v, want the one of drivers/minj/1.0.0/driver.cue", opts.Sandbox != nil, err)
			}
		}
	}
}

// A keep-going load keeps the folders that load and records, by folder,
// those that do not, with the error naming the file; a strict load of
// the same folders fails with that error.
func TestAKeepGoingCatalogRecordsTheFoldersThatDoNotLoad(t *testing.T) {
	m := fstest.MapFS{}
	for p, f := range minimalFS() {
		m["drivers/mini/1.0.0/"+p] = f
		m["drivers/mini/1.0.1/"+p] = f // names itself 1.0.0
	}
	m["drivers/broken/1.0.0/driver.cue"] = &fstest.MapFile{Data: []byte("name: \"broken\"\nversion: \"1.0.0\"\nparameters: {\n")}
	if _, err := LoadCatalog(m, "drivers", LoadOptions{}); err == nil {
		t.Fatal("a strict load of broken folders succeeded")
	}
	cat, err := LoadCatalogKeepGoing(m, "drivers", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cat.Get("mini", "1.0.0"); !ok || len(cat.Versions("mini")) != 1 {
		t.Fatalf("the folder that loads: %v", cat.Versions("mini"))
	}
	var got []string
	for _, b := range cat.Broken() {
		got = append(got, b.Name+"@"+b.Version+": "+b.Err.Error())
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "broken@1.0.0: ") || !strings.Contains(got[0], "drivers/broken/1.0.0/driver.cue") ||
		!strings.HasPrefix(got[1], "mini@1.0.1: ") || !strings.Contains(got[1], `does not match the folder name "1.0.1"`) {
		t.Fatalf("broken: %q", got)
	}
}
