package resolver

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestSetFieldsEditsOnlyTheValue pins the upgrade's file edits: the value
// changes (or the driver string becomes a struct), everything else stays.
func TestSetFieldsEditsOnlyTheValue(t *testing.T) {
	tok := fieldSet{under: "driver", field: "upgrade", value: "2026-12-01-1"}
	pin := fieldSet{under: "driver", field: "version", value: "1.1.0"}
	app := fieldSet{field: "appVersion", value: "1.26.0"}
	cases := []struct {
		name, file, in, want string
		sets                 []fieldSet
	}{
		{name: "cue app version keeps the comment", file: "d.cue", sets: []fieldSet{app},
			in:   "// web\ndriver:     \"webapp\"\nappVersion: \"1.25.0\" // nginx\n",
			want: "// web\ndriver:     \"webapp\"\nappVersion: \"1.26.0\" // nginx\n"},
		{name: "cue driver string becomes a struct", file: "d.cue", sets: []fieldSet{tok},
			in:   "driver:     \"webapp\"\nappVersion: \"1.25.0\"\n",
			want: "driver:     {name: \"webapp\", upgrade: \"2026-12-01-1\"}\nappVersion: \"1.25.0\"\n"},
		{name: "cue one-line struct gets the field", file: "d.cue", sets: []fieldSet{tok},
			in:   "driver: {name: \"graphhub\", version: \"1.0.0\"}\n",
			want: "driver: {name: \"graphhub\", version: \"1.0.0\", upgrade: \"2026-12-01-1\"}\n"},
		{name: "cue token replaced in place", file: "d.cue", sets: []fieldSet{tok},
			in:   "driver: {name: \"webapp\", upgrade: \"r1\"}\n",
			want: "driver: {name: \"webapp\", upgrade: \"2026-12-01-1\"}\n"},
		{name: "cue multi-line struct gets a line", file: "d.cue", sets: []fieldSet{pin},
			in:   "driver: {\n\tname: \"webapp\" // the web\n}\nappVersion: \"1.25.0\"\n",
			want: "driver: {\n\tname: \"webapp\" // the web\n\tversion: \"1.1.0\"\n}\nappVersion: \"1.25.0\"\n"},
		{name: "cue unbraced struct gets braces", file: "d.cue", sets: []fieldSet{pin},
			in:   "driver: name: \"webapp\"\n",
			want: "driver: {name: \"webapp\", version: \"1.1.0\"}\n"},
		{name: "cue two edits", file: "d.cue", sets: []fieldSet{app, pin},
			in:   "driver: \"webapp\"\nappVersion: \"1.25.0\"\n",
			want: "driver: {name: \"webapp\", version: \"1.1.0\"}\nappVersion: \"1.26.0\"\n"},
		{name: "yaml app version in place", file: "d.yaml", sets: []fieldSet{app},
			in:   "# staging web\ndriver: webapp\nappVersion: 1.25.0 # nginx\n",
			want: "# staging web\ndriver: webapp\nappVersion: 1.26.0 # nginx\n"},
		{name: "yaml quoted app version in place", file: "d.yaml", sets: []fieldSet{app},
			in:   "driver: webapp\nappVersion: \"1.25.0\"\n",
			want: "driver: webapp\nappVersion: \"1.26.0\"\n"},
		{name: "yaml driver string becomes a mapping", file: "d.yaml", sets: []fieldSet{tok},
			in:   "# staging web\ndriver: webapp\nappVersion: 1.25.0\n",
			want: "# staging web\ndriver:\n  name: webapp\n  upgrade: \"2026-12-01-1\"\nappVersion: 1.25.0\n"},
		{name: "yaml token replaced in place", file: "d.yaml", sets: []fieldSet{tok},
			in:   "driver:\n  name: webapp\n  upgrade: \"r1\"\nappVersion: 1.25.0\n",
			want: "driver:\n  name: webapp\n  upgrade: \"2026-12-01-1\"\nappVersion: 1.25.0\n"},
	}
	bf := fieldSet{field: "backupBeforeUpgrade", value: "true", boolean: true}
	cases = append(cases, []struct {
		name, file, in, want string
		sets                 []fieldSet
	}{
		{name: "cue boolean added", file: "d.cue", sets: []fieldSet{app, bf},
			in:   "driver: \"webapp\"\nappVersion: \"1.25.0\" // nginx\n",
			want: "driver: \"webapp\"\nappVersion: \"1.26.0\" // nginx\nbackupBeforeUpgrade: true\n"},
		{name: "cue boolean added after a last line without newline", file: "d.cue", sets: []fieldSet{bf},
			in:   "driver: \"webapp\"",
			want: "driver: \"webapp\"\nbackupBeforeUpgrade: true\n"},
		{name: "cue boolean replaced", file: "d.cue", sets: []fieldSet{bf},
			in:   "backupBeforeUpgrade: false // not yet\ndriver: \"webapp\"\n",
			want: "backupBeforeUpgrade: true // not yet\ndriver: \"webapp\"\n"},
		{name: "yaml boolean added", file: "d.yaml", sets: []fieldSet{bf},
			in:   "# web\ndriver: webapp\nappVersion: 1.25.0\n",
			want: "# web\ndriver: webapp\nappVersion: 1.25.0\nbackupBeforeUpgrade: true\n"},
		{name: "yaml boolean replaced", file: "d.yaml", sets: []fieldSet{bf},
			in:   "driver: webapp\nbackupBeforeUpgrade: false # later\n",
			want: "driver: webapp\nbackupBeforeUpgrade: true # later\n"},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := setFields(c.file, []byte(c.in), c.sets)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestSetFieldsRefusesShapesItDoesNotEdit(t *testing.T) {
	for _, in := range []string{
		"#v: \"1.25.0\"\ndriver: \"webapp\"\nappVersion: #v\n",
		"driver: \"webapp\"\nappVersion: \"1.25.0\"\nappVersion: string\n",
	} {
		_, err := setFields("d.cue", []byte(in), []fieldSet{{field: "appVersion", value: "1.26.0"}})
		if err == nil || !strings.Contains(err.Error(), "d.cue: field appVersion") || !strings.Contains(err.Error(), "by hand") {
			t.Errorf("%q: error %v; want one naming the file and field and saying to edit by hand", in, err)
		}
	}
}

func upgradeWorkspace(t *testing.T, dir string) *Workspace {
	t.Helper()
	ws, err := LoadWorkspace(os.DirFS(dir), WorkspaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

var upgradeDay = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func TestPlanUpgradeOfAnEnvironmentSkipsPinsAndPredictsTheDriver(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	addDriverBuild(t, dir, "webapp", "1.1.0", "1.2.0")
	plan, err := upgradeWorkspace(t, dir).PlanUpgrade(UpgradeRequest{Target: UpgradeTarget{"local", "staging", ""}, Now: upgradeDay})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Token != "2026-12-01-1" || len(plan.Edits) != 1 || plan.Edits[0].ID != (ID{"local", "staging", "web"}) {
		t.Fatalf("plan %+v; want staging/web edited with 2026-12-01-1", plan)
	}
	if e := plan.Edits[0]; e.From != "webapp@1.1.0" || e.To != "webapp@1.2.0" || !strings.Contains(string(e.Data), `upgrade: "2026-12-01-1"`) {
		t.Errorf("edit %+v\n%s", e, e.Data)
	}
	if len(plan.Skipped) != 1 || plan.Skipped[0].ID != (ID{"local", "staging", "hub"}) || !strings.Contains(plan.Skipped[0].Reason, "pins driver graphhub 1.0.0") {
		t.Errorf("skipped %+v; want staging/hub, pinned", plan.Skipped)
	}
}

func TestPlanUpgradeTokenIsNewToTheLock(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, devWeb, webWith(`{name: "webapp", upgrade: "2026-12-01-1"}`))
	lockDirInto(t, dir)
	writeFile(t, dir, devWeb, webWith(`{name: "webapp", upgrade: "2026-12-01-2"}`))
	plan, err := upgradeWorkspace(t, dir).PlanUpgrade(UpgradeRequest{Target: UpgradeTarget{"local", "dev", "web"}, Now: upgradeDay})
	if err != nil || plan.Token != "2026-12-01-3" {
		t.Fatalf("token %q, %v; want 2026-12-01-3 (1 is locked, 2 is in the file)", plan.Token, err)
	}
}

func TestPlanUpgradeRefusesBadInputNamingTheFileAndField(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	ws := upgradeWorkspace(t, dir)
	web := UpgradeTarget{"local", "dev", "web"}
	cases := []struct {
		name string
		req  UpgradeRequest
		want []string
	}{
		{"unknown deployment", UpgradeRequest{Target: UpgradeTarget{"local", "dev", "nosuch"}}, []string{"clusters/local/environments/dev/deployments/nosuch.cue", `no deployment "nosuch"`, "hub, web"}},
		{"unknown environment", UpgradeRequest{Target: UpgradeTarget{"local", "prod", ""}}, []string{"clusters/local/environments/prod/environment.cue", "dev, staging"}},
		{"unknown cluster", UpgradeRequest{Target: UpgradeTarget{"remote", "dev", ""}}, []string{"clusters/remote/cluster.cue", "local"}},
		{"driver version not loaded", UpgradeRequest{Target: web, DriverVersion: "9.9.9"}, []string{devWeb, "field driver.version", "no version 9.9.9", "1.0.0, 1.1.0"}},
		{"app version no driver supports", UpgradeRequest{Target: web, AppVersion: "3.0.0"}, []string{devWeb, "field driver", "no version supports application version 3.0.0"}},
		{"pinned version does not support the app version", UpgradeRequest{Target: UpgradeTarget{"local", "staging", "hub"}, AppVersion: "1.6.0"}, []string{"clusters/local/environments/staging/deployments/hub.cue", "pinned version 1.0.0"}},
		{"not a version", UpgradeRequest{Target: web, AppVersion: "latest"}, []string{devWeb, "appVersion"}},
		{"newest build of a pinned deployment", UpgradeRequest{Target: UpgradeTarget{"local", "staging", "hub"}}, []string{"staging/deployments/hub.cue", "field driver.version", "pins driver graphhub 1.0.0"}},
		{"new driver version's parameters", UpgradeRequest{Target: UpgradeTarget{"local", "dev", "hub"}, AppVersion: "1.6.0", DriverVersion: "1.0.0"}, []string{"dev/deployments/hub.cue", "pinned version 1.0.0"}},
		{"backup first of a driver that cannot be backed up", UpgradeRequest{Target: web, AppVersion: "1.26.0", BackupFirst: true}, []string{devWeb, "field backupBeforeUpgrade", "driver webapp@", "no backup and restore hooks", "no file changed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.Now = upgradeDay
			plan, err := ws.PlanUpgrade(c.req)
			if err == nil {
				t.Fatalf("accepted: %+v", plan)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestPlanUpgradeBackupFirst: --backup-first adds backupBeforeUpgrade to
// each edited file, and the next lock records backupFirst.
func TestPlanUpgradeBackupFirst(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	plan, err := upgradeWorkspace(t, dir).PlanUpgrade(UpgradeRequest{Target: UpgradeTarget{"local", "dev", "hub"}, AppVersion: "1.4.1", BackupFirst: true, Now: upgradeDay})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Edits) != 1 || !strings.HasSuffix(string(plan.Edits[0].Data), "\nbackupBeforeUpgrade: true\n") {
		t.Fatalf("plan %+v", plan)
	}
	if got := strings.Join(plan.Edits[0].Changes, "; "); !strings.Contains(got, "backupBeforeUpgrade: (unset) → true") {
		t.Errorf("changes %q", got)
	}
	if !strings.HasSuffix(plan.Subject(), ", backup first") {
		t.Errorf("subject %q", plan.Subject())
	}
	for f, data := range plan.Files() {
		writeFile(t, dir, f, string(data))
	}
	res, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := res.Get(ID{"local", "dev", "hub"})
	if !ok || !r.Instance.BackupFirst {
		t.Fatalf("local/dev/hub resolved without backupFirst: %v", res.Err())
	}
}
