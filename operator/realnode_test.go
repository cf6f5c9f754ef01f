package operator_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

const (
	schemaNamespace  = "dev-schema"
	schemaDeployment = "clusters/local/environments/dev/deployments/schema.cue"
)

// schemaConfig is the deployment file of dev/schema (driver schemademo,
// whose pods run on the real node).
func schemaConfig(app string, skipMigrations bool) map[string][]byte {
	return map[string][]byte{schemaDeployment: fmt.Appendf(nil, `driver:     "schemademo"
appVersion: %q
parameters: skipMigrations: %t
`, app, skipMigrations)}
}

// stepOutput returns the output of the task's step whose name ends with
// suffix (upgrade/post/2:exec), failing the test if there is none.
func stepOutput(t *testing.T, task *v1alpha1.StyrminTask, suffix string) string {
	t.Helper()
	for _, s := range task.Status.Steps {
		if strings.HasSuffix(s.Name, suffix) {
			return s.Output
		}
	}
	t.Fatalf("task %s has no step %s: %v", task.Name, suffix, stepNames(task))
	return ""
}

// On the real node the driver's actions run real processes: the exec step
// returns the command's output, a migration Job's write to the volume is
// what the next step's exec reads, and a command that exits non-zero fails
// its step with its exit code and output (the task Failed, the previous
// instance active).
func TestAgentExecAndMigrationJobOnTheRealNode(t *testing.T) {
	t.Parallel()
	testcluster.RequireRealNode(t)
	bin := agentBinary(t)
	begin := time.Now()
	repo := exampleRepo(t)
	// dev/schema alone: the example's other deployments would only add
	// work on the fake nodes.
	for p := range repo {
		if strings.HasPrefix(p, "clusters/local/environments/dev/deployments/") {
			delete(repo, p)
		}
	}
	for p, b := range schemaConfig("1.0.0", false) {
		repo[p] = &fstest.MapFile{Data: b, Mode: 0o644}
	}
	w := agenttest.Start(t, agenttest.Options{Repo: repo, RepoName: agentRepoName, Token: agentGitToken, SecretName: agentSecret, Nodes: 1, RealNode: &testcluster.RealNodeOptions{}})
	t.Logf("control plane with the real node up in %s (the real node: %s)", time.Since(begin).Round(time.Millisecond), w.Cluster.RealNodeStartTime.Round(time.Millisecond))
	clone, err := gitsource.Clone(t.Context(), w.URL, "", gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: agentGitToken}})
	if err != nil {
		t.Fatal(err)
	}
	e := &agentEnv{cluster: w.Cluster, c: w.Client, git: w.Git, url: w.URL, clone: clone, kubeconfig: w.Kubeconfig, bin: bin}
	if seq := e.lock(t)["schema"]; seq != 1 {
		t.Fatalf("schema locked at %d, want 1", seq)
	}
	e.startAgent(t)

	// Create: the setup hook's Job migrates the empty volume, the exec
	// in the application's pod reads the version back.
	created := time.Now()
	setup := e.waitTask(t, schemaNamespace, "schema", 1)
	requireSucceeded(t, setup)
	t.Logf("schema-1 (create: wait, migration Job, exec) succeeded in %s", time.Since(created).Round(time.Millisecond))
	if out := stepOutput(t, setup, "setup/post/2:runJob"); !strings.Contains(out, "schema migrated from none to 1.0.0") {
		t.Errorf("the migration Job's output is not in its step: %q", out)
	}
	out := stepOutput(t, setup, "setup/post/3:exec")
	if !strings.Contains(out, "exec in pod schema-") || !strings.Contains(out, "schema 1.0.0, app 1.0.0 (history: none -> 1.0.0 )") {
		t.Errorf("the exec step's output is not the command's: %q", out)
	}

	// Upgrade: the Job of the pre hook migrates the volume the previous
	// Job wrote; the exec after the rollout, in a new pod, sees it.
	upgraded := time.Now()
	seq := e.change(t, "schema", "schema: 1.1.0", schemaConfig("1.1.0", false))
	upgrade := e.waitTask(t, schemaNamespace, "schema", seq)
	requireSucceeded(t, upgrade)
	t.Logf("schema-%d (upgrade: Job, rollout, wait, exec) succeeded in %s", seq, time.Since(upgraded).Round(time.Millisecond))
	if out := stepOutput(t, upgrade, "upgrade/pre/1:runJob"); !strings.Contains(out, "schema migrated from 1.0.0 to 1.1.0") {
		t.Errorf("the upgrade's Job did not find the first Job's schema: %q", out)
	}
	if out := stepOutput(t, upgrade, "upgrade/post/2:exec"); !strings.Contains(out, "schema 1.1.0, app 1.1.0 (history: none -> 1.0.0 1.0.0 -> 1.1.0 )") {
		t.Errorf("the exec after the upgrade does not see the migration: %q", out)
	}

	// A migration that does nothing: the check exits 3, its step fails
	// with the exit code and the command's output, the task fails.
	failedAt := time.Now()
	seq = e.change(t, "schema", "schema: 1.2.0 without its migration", schemaConfig("1.2.0", true))
	failed := e.waitTask(t, schemaNamespace, "schema", seq)
	t.Logf("schema-%d (upgrade whose check fails) ended in %s", seq, time.Since(failedAt).Round(time.Millisecond))
	if failed.Status.Phase != v1alpha1.TaskFailed {
		t.Fatalf("schema-%d: %s (%s), want Failed", seq, failed.Status.Phase, failed.Status.Message)
	}
	msg := failed.Status.Message
	t.Logf("schema-%d: %s", seq, msg)
	if !strings.Contains(msg, "upgrade/post/2:exec") || !strings.Contains(msg, "exit code 3") {
		t.Errorf("the task's message does not name the exec step and its exit code: %q", msg)
	}
	if out := stepOutput(t, failed, "upgrade/pre/1:runJob"); !strings.Contains(out, "migrations skipped (schema stays at 1.1.0)") {
		t.Errorf("the skipped migration's output: %q", out)
	}
	out = stepOutput(t, failed, "upgrade/post/2:exec")
	if !strings.Contains(out, "schema 1.1.0, app 1.2.0") || !strings.Contains(out, "the schema is not at 1.2.0: migrate first") {
		t.Errorf("the failed exec step's output is not the command's stdout and stderr: %q", out)
	}
	if sd := e.deployment(t, schemaNamespace); sd == nil || sd.Status.ActiveSequence != seq-1 {
		t.Errorf("after the failed upgrade the active sequence is not the previous one (%d)", seq-1)
	}
	t.Logf("whole test: %s", time.Since(begin).Round(time.Millisecond))
}
