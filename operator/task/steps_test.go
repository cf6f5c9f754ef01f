package task_test

import (
	"os"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
)

func exampleCatalog(t *testing.T) *drivers.Catalog {
	t.Helper()
	cat, err := drivers.LoadCatalog(os.DirFS("../../examples"), "drivers", drivers.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// TestTaskStepsFollowTheDriversHooks pins which declared actions each
// workflow runs, in order: setup for create, upgrade for upgrade, the
// upgrade hook's core only for update, one tombstone write for delete.
func TestTaskStepsFollowTheDriversHooks(t *testing.T) {
	t.Parallel()
	cat := exampleCatalog(t)
	hub1, ok := cat.Get("graphhub", "1.0.0")
	if !ok {
		t.Fatal("graphhub 1.0.0 not in the examples")
	}
	web, _ := cat.Get("webapp", "1.1.0")
	for _, tc := range []struct {
		name string
		wf   v1alpha1.Workflow
		d    *drivers.Driver
		want []string
	}{
		{"graphhub create runs setup", v1alpha1.WorkflowCreate, hub1, []string{
			"setup/core/1:upgradeDeploymentVersion",
			"setup/post/1:waitReady",
			"setup/post/2:restoreBackup",
			"setup/post/3:runJob",
			"setup/post/4:waitReady",
		}},
		{"graphhub backup runs the backup hook", v1alpha1.WorkflowBackup, hub1, []string{
			"backup/core/1:runJob",
		}},
		{"graphhub restore runs the restore hook in mode order", v1alpha1.WorkflowRestore, hub1, []string{
			"restore/pre/1:stopComponents",
			"restore/core/1:runJob",
			"restore/post/1:startComponents",
			"restore/post/2:waitReady",
		}},
		{"graphhub upgrade runs the upgrade hook in mode order", v1alpha1.WorkflowUpgrade, hub1, []string{
			"upgrade/pre/1:stopComponents",
			"upgrade/pre/2:runJob",
			"upgrade/core/1:upgradeDeploymentVersion",
			"upgrade/post/1:startComponents",
			"upgrade/post/2:waitReady",
		}},
		{"graphhub update runs core only", v1alpha1.WorkflowUpdate, hub1, []string{
			"update/core/1:upgradeDeploymentVersion",
		}},
		{"webapp create without a setup hook writes the instance", v1alpha1.WorkflowCreate, web, []string{
			"setup/core/1:upgradeDeploymentVersion",
		}},
		{"delete writes the tombstone", v1alpha1.WorkflowDelete, nil, []string{
			"delete/core/1:upgradeDeploymentVersion",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, err := task.Steps(tc.wf, tc.d)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range steps {
				got = append(got, s.Name)
				if s.State != v1alpha1.StepPending {
					t.Errorf("step %s starts %s, want Pending", s.Name, s.State)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestTaskStepsKeepTheDeclaredArguments pins that a step's command, job,
// component and timeout survive into the task's status (a restarted
// agent runs what was planned, not what the driver source says now).
func TestTaskStepsKeepTheDeclaredArguments(t *testing.T) {
	t.Parallel()
	hub1, _ := exampleCatalog(t).Get("graphhub", "1.0.0")
	steps, err := task.Steps(v1alpha1.WorkflowUpgrade, hub1)
	if err != nil {
		t.Fatal(err)
	}
	job := steps[1]
	if job.Args["job"] != "migrate" || job.Args["component"] != "server" || job.Args["command"] != `["graphhub","db","migrate"]` {
		t.Errorf("runJob args = %v", job.Args)
	}
	if job.Timeout == nil || job.Timeout.Duration.String() != "15m0s" {
		t.Errorf("runJob timeout = %v, want 15m", job.Timeout)
	}
	if job.Hook != "upgrade" || job.Mode != "pre" {
		t.Errorf("runJob hook/mode = %s/%s", job.Hook, job.Mode)
	}
	if stop := steps[0]; len(stop.Components) != 1 || stop.Components[0] != "worker" {
		t.Errorf("stopComponents components = %v", stop.Components)
	}
}

func TestTaskStepsRejectAnUnknownWorkflow(t *testing.T) {
	t.Parallel()
	hub1, _ := exampleCatalog(t).Get("graphhub", "1.0.0")
	if _, err := task.Steps("rollback", hub1); err == nil || !strings.Contains(err.Error(), `unknown workflow "rollback"`) {
		t.Fatalf("err = %v", err)
	}
	web, _ := exampleCatalog(t).Get("webapp", "1.1.0")
	if _, err := task.Steps(v1alpha1.WorkflowBackup, web); err == nil || !strings.Contains(err.Error(), "declares no backup hook") {
		t.Fatalf("a backup with a driver without the hook: err = %v", err)
	}
	if _, err := task.Steps(v1alpha1.WorkflowCreate, nil); err == nil {
		t.Fatal("create without a driver: no error")
	}
}

// TestPlanAndTaskRunTheSameSteps pins the one step plan: for every
// workflow of every example driver version, the plan a reviewer reads
// (planner.Actions) and the steps the agent's task runs (task.Steps) are
// the same steps, with the same names, hooks, modes and actions, in the
// same order.
func TestPlanAndTaskRunTheSameSteps(t *testing.T) {
	t.Parallel()
	cat := exampleCatalog(t)
	workflows := []planner.Workflow{planner.WorkflowCreate, planner.WorkflowUpdate, planner.WorkflowUpgrade, planner.WorkflowDelete}
	checked := 0
	for _, name := range cat.Names() {
		for _, d := range cat.Versions(name) {
			for _, w := range workflows {
				t.Run(d.Name+"@"+d.Version+"/"+string(w), func(t *testing.T) {
					plan := planner.Actions(w, d)
					steps, err := task.Steps(v1alpha1.Workflow(w), d)
					if err != nil {
						t.Fatal(err)
					}
					if len(plan) != len(steps) || len(steps) == 0 {
						t.Fatalf("the plan shows %d steps, the task runs %d", len(plan), len(steps))
					}
					for i := range steps {
						p, s := plan[i], steps[i]
						if p.Name != s.Name || p.Hook != s.Hook || p.Mode != s.Mode || p.Action != s.Action {
							t.Errorf("step %d: plan %s (%s/%s %s), task %s (%s/%s %s)", i, p.Name, p.Hook, p.Mode, p.Action, s.Name, s.Hook, s.Mode, s.Action)
						}
					}
				})
				checked++
			}
		}
	}
	if checked < 4*3 {
		t.Fatalf("checked %d workflows: the examples should hold at least three driver versions", checked)
	}
}

// TestPlanAndTaskExpandTheBackupAndRestoreHooksAlike extends the one step
// plan to the hooks the agent puts in place: an upgrade's backup step
// (backupFirst) runs the backup hook's steps and a clone's create its
// restore hook's, and the plan showed each as one step under another
// name. For every example driver that can back up, the plan's actions
// and the task's steps are the same, for a clone and not.
func TestPlanAndTaskExpandTheBackupAndRestoreHooksAlike(t *testing.T) {
	t.Parallel()
	cat := exampleCatalog(t)
	clone := &drivers.CloneSource{Cluster: "local", Environment: "dev", Backup: "dev-nightly", Location: "s3://backups/dev"}
	checked := 0
	for _, name := range cat.Names() {
		for _, d := range cat.Versions(name) {
			if !d.CanBackup() {
				continue
			}
			for _, tc := range []struct {
				name     string
				w        planner.Workflow
				in       *resolver.Instance
				expanded string // a step name only the expansion has
			}{
				{"create in a clone", planner.WorkflowCreate, instanceIn(clone, false), ":restoreBackup/restore/"},
				{"create elsewhere", planner.WorkflowCreate, instanceIn(nil, false), ""},
				{"upgrade taking a backup first", planner.WorkflowUpgrade, instanceIn(nil, true), ":backup/backup/"},
			} {
				t.Run(d.Name+"@"+d.Version+"/"+tc.name, func(t *testing.T) {
					plan := planner.ActionsForInstance(tc.w, d, nil, tc.in)
					steps, err := task.StepsForInstance(v1alpha1.Workflow(tc.w), d, nil, tc.in)
					if err != nil {
						t.Fatal(err)
					}
					if len(plan) != len(steps) {
						t.Fatalf("the plan shows %d steps, the task runs %d", len(plan), len(steps))
					}
					found := tc.expanded == ""
					for i := range steps {
						p, s := plan[i], steps[i]
						if p.Name != s.Name || p.Hook != s.Hook || p.Mode != s.Mode || p.Action != s.Action {
							t.Errorf("step %d: plan %s (%s/%s %s), task %s (%s/%s %s)", i, p.Name, p.Hook, p.Mode, p.Action, s.Name, s.Hook, s.Mode, s.Action)
						}
						if s.State == v1alpha1.StepSkipped && !strings.Contains(p.Description, "skipped") {
							t.Errorf("step %s: the task skips it, the plan says %q", s.Name, p.Description)
						}
						found = found || strings.Contains(s.Name, tc.expanded)
					}
					if !found {
						t.Errorf("no step is named %q…: the hook was not put in place", tc.expanded)
					}
				})
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no example driver can back up")
	}
}

// instanceIn is an instance of an environment cloned from clone (nil: no
// clone), taking a backup before an upgrade when backupFirst.
func instanceIn(clone *drivers.CloneSource, backupFirst bool) *resolver.Instance {
	return &resolver.Instance{ID: resolver.ID{Cluster: "local", Environment: "preview", Name: "hub"}, Sequence: 3, BackupFirst: backupFirst,
		Context: &drivers.Context{Environment: drivers.EnvironmentContext{Name: "preview", BackupLocation: "s3://backups/preview", ClonedFrom: clone}}}
}
