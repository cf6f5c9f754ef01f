package e2e

import (
	"strings"
	"testing"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestTwoUpgradesMergedBeforeOneLockBothRunTheirHooks merges two upgrades
// of dev/hub (1.4.0 → 1.4.1 → 1.4.2, on graphhub 1.0.0 whose upgrade hook
// stops the workers and runs a migration job) before one `lock --push`: each gets its own lock commit and sequence,
// both upgrade workflows run their hooks (the migration job included), in
// order, and the deployment ends at the second.
func TestTwoUpgradesMergedBeforeOneLockBothRunTheirHooks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clone := e.newClone(t)
	e.deployAll(t, clone)

	hub := string(readExample(t, devHubFile))
	at := func(v string) map[string][]byte {
		return map[string][]byte{devHubFile: []byte(strings.Replace(hub, `appVersion: "1.4.0"`, `appVersion: "`+v+`"`, 1))}
	}
	e.git.Commit(repoName, "hub 1.4.1", at("1.4.1"))
	e.git.Commit(repoName, "hub 1.4.2", at("1.4.2"))

	_, out := e.lockPush(t, clone)
	for _, want := range []string{"locked local/dev/hub=2 ", "locked local/dev/hub=3 ", "pushed 2 lock commits"} {
		if !strings.Contains(out, want) {
			t.Fatalf("lock --push output lacks %q:\n%s", want, out)
		}
	}

	first := e.waitTask(t, "dev-hub", "hub", 2)
	second := e.waitTask(t, "dev-hub", "hub", 3)
	for _, task := range []*v1alpha1.StyrminTask{first, second} {
		requirePhase(t, task, v1alpha1.TaskSucceeded)
		if task.Status.Workflow != v1alpha1.WorkflowUpgrade {
			t.Errorf("%s: workflow %s, want upgrade", task.Name, task.Status.Workflow)
		}
		ran := map[string]bool{}
		for _, s := range task.Status.Steps {
			if s.Hook == "upgrade" && s.State == v1alpha1.StepSucceeded {
				ran[s.Action] = true
			}
		}
		for _, a := range []string{"runJob", "stopComponents", "upgradeDeploymentVersion", "startComponents"} {
			if !ran[a] {
				t.Errorf("%s: the upgrade hook's %s step did not succeed: %+v", task.Name, a, task.Status.Steps)
			}
		}
	}
	if first.Status.FromSequence != 1 || second.Status.FromSequence != 2 {
		t.Errorf("from sequences %d and %d, want 1 and 2 (each upgrade from the one before)", first.Status.FromSequence, second.Status.FromSequence)
	}
	if first.Status.FinishedAt == nil || second.Status.StartedAt == nil || second.Status.StartedAt.Before(first.Status.FinishedAt) {
		t.Errorf("the second upgrade started (%v) before the first finished (%v)", second.Status.StartedAt, first.Status.FinishedAt)
	}
	e.waitSynced(t)
	sd := e.deployment(t, "dev-hub")
	if sd.Spec.Sequence != 3 || sd.Status.ActiveSequence != 3 || sd.Spec.AppVersion != "1.4.2" {
		t.Errorf("dev/hub: spec %d (%s), active %d; want 3 at 1.4.2", sd.Spec.Sequence, sd.Spec.AppVersion, sd.Status.ActiveSequence)
	}
}
