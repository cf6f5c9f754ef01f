package drivers

import (
	"cmp"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// withUpgradePre replaces the minimal spec's actions with an upgrade
// whose pre mode stops the app and then runs a migration job with args,
// all on line 11 (the step at fault is actions.upgrade.pre[1]).
func withUpgradePre(args string) func(fstest.MapFS) {
	return replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`,
		`actions: upgrade: pre: [{action: "stopComponents", components: ["app"]}, {action: "runJob", component: "app", job: "migrate", command: ["migrate"], args: {`+args+`}}]`)
}

// withStep replaces the minimal spec's actions with one upgrade post
// step, on line 11.
func withStep(step string) func(fstest.MapFS) {
	return replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: upgrade: post: [`+step+`]`)
}

// TestStepArgsTheAgentKeepsOrDoesNotReadAreRefused pins that a driver
// cannot set the keys the agent keeps in a task step's args itself (a
// backup's identity and artefact, which give the step's Job the
// environment's backup credentials; the retry policy, past the bound of
// retry.attempts), nor keys the agent does not read, nor a value the
// agent would refuse only half-way through a task.
func TestStepArgsTheAgentKeepsOrDoesNotReadAreRefused(t *testing.T) {
	const file = "drivers/mini/1.0.0/driver.cue:11:"
	const pre1 = "actions.upgrade.pre[1].args."
	tests := []struct {
		name      string
		change    func(fstest.MapFS)
		wantFile  string // when not at line 11
		wantField string
		wantMsg   string
	}{
		{name: "operation", change: withUpgradePre(`operation: "backup"`),
			wantField: pre1 + "operation", wantMsg: "reserved for the agent (the agent sets it on the steps of the backup and restore hooks it runs, whose jobs get the environment's backup credentials"},
		{name: "backupID", change: withUpgradePre(`backupID: "prod-nightly"`),
			wantField: pre1 + "backupID", wantMsg: "reserved for the agent (the agent sets it on the steps of the backup and restore hooks it runs, and records the backup under it"},
		{name: "artifact", change: withUpgradePre(`artifact: "s3://attacker/dump"`),
			wantField: pre1 + "artifact", wantMsg: "reserved for the agent"},
		{name: "retryAttempts", change: withUpgradePre(`retryAttempts: "500"`),
			wantField: pre1 + "retryAttempts", wantMsg: "reserved for the agent (the agent records the step's retry policy there: declare retry"},
		{name: "retryBackoff", change: withUpgradePre(`retryBackoff: "1ns"`),
			wantField: pre1 + "retryBackoff", wantMsg: "reserved for the agent (the agent records the step's retry policy there"},
		{name: "command", change: withUpgradePre(`command: "[\"sh\"]"`),
			wantField: pre1 + "command", wantMsg: "declare it as the step's command"},
		{name: "component", change: withUpgradePre(`component: "db"`),
			wantField: pre1 + "component", wantMsg: "declare it as the step's component"},
		{name: "job", change: withUpgradePre(`job: "other"`),
			wantField: pre1 + "job", wantMsg: "declare it as the step's job"},
		{name: "reserved key on an action that takes no args", change: withStep(`{action: "waitReady", components: ["app"], args: backupID: "x"}`),
			wantField: "actions.upgrade.post[0].args.backupID", wantMsg: "reserved for the agent"},
		{name: "unknown key", change: withUpgradePre(`image: "evil"`),
			wantField: pre1 + "image", wantMsg: "unknown argument of runJob (expected container or backoffLimit)"},
		{name: "a reserved key in another case is unknown", change: withUpgradePre(`Operation: "backup"`),
			wantField: pre1 + "Operation", wantMsg: "unknown argument of runJob"},
		{name: "backoffLimit on exec", change: withStep(`{action: "exec", component: "app", command: ["true"], args: backoffLimit: "1"}`),
			wantField: "actions.upgrade.post[0].args.backoffLimit", wantMsg: "unknown argument of exec (expected container)"},
		{name: "args on waitReady", change: withStep(`{action: "waitReady", components: ["app"], args: container: "app"}`),
			wantField: "actions.upgrade.post[0].args.container", wantMsg: "unknown argument: waitReady takes no args"},
		{name: "args on upgradeDeploymentVersion", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: upgrade: core: [{action: "upgradeDeploymentVersion", args: wait: "false"}]`),
			wantField: "actions.upgrade.core[0].args.wait", wantMsg: "upgradeDeploymentVersion takes no args"},
		{name: "args on a backup step", change: replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, withBackupHooks(`upgrade: pre: [{action: "backup", args: backupID: "mine"}]`)),
			wantFile: "drivers/mini/1.0.0/driver.cue:12:", wantField: "actions.upgrade.pre[0].args.backupID", wantMsg: "reserved for the agent"},
		{name: "a key that is no plain name is quoted", change: withUpgradePre(`"args.operation": "backup"`),
			wantField: `actions.upgrade.pre[1].args["args.operation"]`, wantMsg: "unknown argument of runJob"},
		{name: "backoffLimit not a number", change: withUpgradePre(`backoffLimit: "three"`),
			wantField: pre1 + "backoffLimit", wantMsg: `expected a whole number from 0 to 10 (the retries of the Job's pod before the step fails), got "three"`},
		{name: "backoffLimit negative", change: withUpgradePre(`backoffLimit: "-1"`),
			wantField: pre1 + "backoffLimit", wantMsg: `got "-1"`},
		{name: "backoffLimit with a sign", change: withUpgradePre(`backoffLimit: "+3"`),
			wantField: pre1 + "backoffLimit", wantMsg: `got "+3"`},
		{name: "backoffLimit with a leading zero", change: withUpgradePre(`backoffLimit: "03"`),
			wantField: pre1 + "backoffLimit", wantMsg: `got "03"`},
		{name: "backoffLimit empty", change: withUpgradePre(`backoffLimit: ""`),
			wantField: pre1 + "backoffLimit", wantMsg: `got ""`},
		{name: "backoffLimit above the bound", change: withUpgradePre(`backoffLimit: "11"`),
			wantField: pre1 + "backoffLimit", wantMsg: `got "11"`},
		{name: "backoffLimit past an int32", change: withUpgradePre(`backoffLimit: "4294967297"`),
			wantField: pre1 + "backoffLimit", wantMsg: `got "4294967297"`},
		{name: "container not a DNS label", change: withUpgradePre(`container: "App_1"`),
			wantField: pre1 + "container", wantMsg: `expected the name of a container of the component's pod (lower-case letters, digits and '-', at most 63), got "App_1"`},
		{name: "container empty", change: withUpgradePre(`container: ""`),
			wantField: pre1 + "container", wantMsg: `got ""`},
		{name: "container too long", change: withUpgradePre(`container: "` + strings.Repeat("a", 64) + `"`),
			wantField: pre1 + "container", wantMsg: "at most 63"},
		{name: "container on exec", change: withStep(`{action: "exec", component: "app", command: ["true"], args: container: "-app"}`),
			wantField: "actions.upgrade.post[0].args.container", wantMsg: `got "-app"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := minimalFS()
			tc.change(m)
			d, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
			if err == nil {
				t.Fatalf("loaded %s@%s with args %v, want an error", d.Name, d.Version, d.Hooks[HookUpgrade])
			}
			msg, file := err.Error(), cmp.Or(tc.wantFile, file)
			if !strings.HasPrefix(msg, file) || !strings.Contains(msg, ": "+tc.wantField+": ") || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("error %q\nwant %s…: %s: %s", msg, file, tc.wantField, tc.wantMsg)
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Errorf("error is %T, want a *SpecError", err)
			}
		})
	}
}

// TestStepArgsErrorsLocateEachKeyAtItsLine pins that a step with several
// bad args reports each one, at the line of the key, in key order (sorted,
// so that the error is the same on every load).
func TestStepArgsErrorsLocateEachKeyAtItsLine(t *testing.T) {
	m := minimalFS()
	replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: upgrade: pre: [
	{action: "stopComponents", components: ["app"]},
	{action: "runJob", component: "app", job: "migrate", command: ["migrate"], args: {
		backoffLimit:  "three"
		retryAttempts: "500"
		retryBackoff:  "1ns"
		operation:     "backup"
		backupID:      "prod-nightly"
	}},
]`)(m)
	_, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
	if err == nil {
		t.Fatal("loaded, want an error")
	}
	var got []string
	for _, line := range strings.Split(err.Error(), "\n") {
		file, rest, _ := strings.Cut(line, ": ")
		field, _, _ := strings.Cut(rest, ": ")
		file = file[:strings.LastIndex(file, ":")] // drop the column
		got = append(got, file+" "+field)
	}
	const f = "drivers/mini/1.0.0/driver.cue:"
	const at = " actions.upgrade.pre[1].args."
	want := []string{
		f + "14" + at + "backoffLimit",
		f + "18" + at + "backupID",
		f + "17" + at + "operation",
		f + "15" + at + "retryAttempts",
		f + "16" + at + "retryBackoff",
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors located at\n%s\nwant\n%s\n(error: %v)", strings.Join(got, "\n"), strings.Join(want, "\n"), err)
	}
}

// TestStepArgsInYAMLAreLocated: a driver.yaml's bad arg names its line.
func TestStepArgsInYAMLAreLocated(t *testing.T) {
	m := minimalFS()
	delete(m, "driver.cue")
	m["driver.yaml"] = &fstest.MapFile{Data: []byte(`name: mini
version: 1.0.0
appVersions: '>=1.0.0 <2.0.0'
components:
  app:
    workloads: [{kind: Deployment, name: mini}]
actions:
  upgrade:
    pre:
      - action: runJob
        component: app
        job: migrate
        command: [migrate]
        args:
          artifact: s3://elsewhere/dump
`)}
	_, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
	want := "drivers/mini/1.0.0/driver.yaml:15:"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "actions.upgrade.pre[0].args.artifact: reserved for the agent") {
		t.Fatalf("error %v, want one at %s naming actions.upgrade.pre[0].args.artifact", err, want)
	}
}

// TestStepArgsDriversMayDeclareLoad pins the args a driver may declare,
// kept on the step as declared.
func TestStepArgsDriversMayDeclareLoad(t *testing.T) {
	m := minimalFS()
	replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, `actions: upgrade: {
	pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"], args: {container: "app", backoffLimit: "0"}},
		{action: "runJob", component: "app", job: "seed", command: ["seed"], args: backoffLimit: "10"}]
	post: [{action: "exec", component: "app", command: ["true"], args: container: "sidecar-2"}]
}`)(m)
	d, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	u := d.Hooks[HookUpgrade]
	if a := u.Pre[0].Args; a["container"] != "app" || a["backoffLimit"] != "0" || len(a) != 2 {
		t.Errorf("pre[0] args %v", a)
	}
	if a := u.Pre[1].Args; a["backoffLimit"] != "10" || len(a) != 1 {
		t.Errorf("pre[1] args %v", a)
	}
	if a := u.Post[0].Args; a["container"] != "sidecar-2" || len(a) != 1 {
		t.Errorf("post[0] args %v", a)
	}
	for _, k := range []ActionKind{ActionStopComponents, ActionStartComponents, ActionWaitReady, ActionUpgradeDeploymentVersion, ActionBackup, ActionRestoreBackup} {
		if a := StepArgs(k); len(a) != 0 {
			t.Errorf("%s takes args %v, want none", k, a)
		}
	}
	if !IsStepArg(ActionRunJob, ArgBackoffLimit) || IsStepArg(ActionExec, ArgBackoffLimit) || !IsStepArg(ActionExec, ArgContainer) {
		t.Error("IsStepArg disagrees with StepArgs")
	}
}

// TestStepArgsCoverEveryKeyTheAgentReads pins the list against the
// agent's code: every key operator/task reads from a step's args, as a
// constant named arg…, a literal index or this package's Arg… constant,
// is either one a driver may declare or reserved. A key the agent starts
// to read must be placed in one of the two, or a driver could set it
// unchecked.
func TestStepArgsCoverEveryKeyTheAgentReads(t *testing.T) {
	const dir = "../operator/task"
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	read := map[string]string{} // key -> where
	exported := map[string]string{"ArgContainer": ArgContainer, "ArgBackoffLimit": ArgBackoffLimit}
	fset := token.NewFileSet()
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, p, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if !strings.HasPrefix(name.Name, "arg") || len(name.Name) < 4 || !isUpper(name.Name[3]) || i >= len(n.Values) {
						continue
					}
					if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						k, _ := strconv.Unquote(lit.Value)
						read[k] = fset.Position(lit.Pos()).String()
					}
				}
			case *ast.IndexExpr:
				sel, ok := n.X.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Args" {
					return true
				}
				switch ix := n.Index.(type) {
				case *ast.BasicLit:
					if ix.Kind == token.STRING {
						k, _ := strconv.Unquote(ix.Value)
						read[k] = fset.Position(ix.Pos()).String()
					}
				case *ast.SelectorExpr: // drivers.ArgContainer
					if pkg, ok := ix.X.(*ast.Ident); ok && pkg.Name == "drivers" && strings.HasPrefix(ix.Sel.Name, "Arg") {
						k, ok := exported[ix.Sel.Name]
						if !ok {
							t.Errorf("%s: drivers.%s: add it to this test", fset.Position(ix.Pos()), ix.Sel.Name)
						}
						read[k] = fset.Position(ix.Pos()).String()
					}
				}
			}
			return true
		})
	}
	for _, k := range []string{"operation", "backupID", "artifact", "retryAttempts", "retryBackoff", "container", "backoffLimit"} {
		if _, ok := read[k]; !ok {
			t.Errorf("found no read of args key %q in %s: the scan misses it", k, dir)
		}
	}
	for k, where := range read {
		_, reserved := reservedStepArgs[k]
		declarable := false
		for _, keys := range stepArgs {
			declarable = declarable || slices.Contains(keys, k)
		}
		if reserved == declarable {
			t.Errorf("args key %q (read at %s): reserved %v, declarable by a driver %v: want exactly one", k, where, reserved, declarable)
		}
	}
}

func isUpper(b byte) bool { return b >= 'A' && b <= 'Z' }
