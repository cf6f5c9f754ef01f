package planner

import (
	"bytes"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
)

// TestStepsForBackupFirst: an instance with BackupFirst upgrades with a
// backup step first; other workflows, and a driver whose pre mode backs
// up itself, are unchanged.
func TestStepsForBackupFirst(t *testing.T) {
	d := &drivers.Driver{Hooks: map[drivers.Hook]drivers.Modes{
		drivers.HookSetup:   {Core: []drivers.Step{{Action: drivers.ActionUpgradeDeploymentVersion}}},
		drivers.HookUpgrade: {Pre: []drivers.Step{{Action: drivers.ActionStopComponents, Components: []string{"worker"}}}, Core: []drivers.Step{{Action: drivers.ActionUpgradeDeploymentVersion}}},
	}}
	names := func(w Workflow, d *drivers.Driver, backupFirst bool) []string {
		steps, err := StepsFor(w, d, backupFirst)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range steps {
			out = append(out, s.Name)
		}
		return out
	}
	got := names(WorkflowUpgrade, d, true)
	want := []string{"upgrade/pre/1:backup", "upgrade/pre/2:stopComponents", "upgrade/core/1:upgradeDeploymentVersion"}
	if len(got) != len(want) {
		t.Fatalf("upgrade steps %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("upgrade steps %v, want %v", got, want)
		}
	}
	if got := names(WorkflowUpgrade, d, false); len(got) != 2 {
		t.Errorf("without backupFirst: %v", got)
	}
	for _, w := range []Workflow{WorkflowCreate, WorkflowUpdate} {
		if got := names(w, d, true); len(got) != 1 {
			t.Errorf("%s with backupFirst: %v", w, got)
		}
	}
	up := d.Hooks[drivers.HookUpgrade]
	up.Pre = append([]drivers.Step{{Action: drivers.ActionBackup}}, up.Pre...)
	d.Hooks[drivers.HookUpgrade] = up
	if got := names(WorkflowUpgrade, d, true); len(got) != 3 || got[0] != "upgrade/pre/1:backup" {
		t.Errorf("a driver that backs up itself: %v", got)
	}
	if a := ActionsFor(WorkflowUpgrade, d, true); a[0].Description != "take a backup of the deployment (the driver's backup hook)" {
		t.Errorf("described as %q", a[0].Description)
	}
}

// TestAnUpgradeTakingABackupFirstShowsTheBackupHooksStepsInAValidPlan: an
// upgrade with backupBeforeUpgrade runs the driver's backup hook where
// its backup step is, and the plan shows those steps as the task names
// them; the JSON schema refused such names and hooks.
func TestAnUpgradeTakingABackupFirstShowsTheBackupHooksStepsInAValidPlan(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	writeFile(t, head, "clusters/local/environments/staging/deployments/hub.cue",
		"driver: {name: \"graphhub\", version: \"1.0.0\"}\nappVersion: \"1.4.1\"\nbackupBeforeUpgrade: true\nparameters: {\n\tlogLevel: \"warning\"\n\tdatabasePassword: {name: \"hub-db\", key: \"password\"}\n}\nconfig: logLevel: \"warn\"\n")
	p := computePlan(t, base, head, Options{})
	var hub *Deployment
	for _, d := range p.Deployments {
		if d.ID == "local/staging/hub" {
			hub = d
		}
	}
	if hub == nil || hub.Workflow != WorkflowUpgrade {
		t.Fatalf("staging/hub: %+v; want an upgrade", hub)
	}
	var backup []string
	for _, a := range hub.Actions {
		if strings.HasPrefix(a.Name, "upgrade/pre/1:backup/backup/") && a.Hook == "backup" {
			backup = append(backup, a.Name)
		}
	}
	if len(backup) == 0 {
		t.Fatalf("the upgrade's actions do not show the backup hook's steps: %+v", hub.Actions)
	}
	var buf bytes.Buffer
	if err := Render(&buf, p, FormatJSON, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	validatePlanJSON(t, buf.Bytes())
}
