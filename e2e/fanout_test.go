package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestEnvironmentConfigFanOut changes dev's environment parameter logLevel
// through git and `styrminctl lock --push`: only dev/hub (whose driver has
// logLevel) gets a new instance, at its current application and driver
// version; dev/web and staging are untouched. Submitting the same
// configuration again redeploys nothing. A fan-out in which one deployment
// fails to start (hub upgraded to a line whose pre-upgrade exec cannot run
// on fake nodes) still deploys the others.
func TestEnvironmentConfigFanOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clone := e.newClone(t)
	e.deployAll(t, clone)
	before := map[string]*v1alpha1.StyrminDeployment{}
	for _, d := range allDeployments {
		before[d.key] = e.deployment(t, d.ns)
	}

	// dev's logLevel: debug → error.
	e.git.Commit(repoName, "dev: log errors only", devEnvironment(`logLevel: "error"`))
	locked, out := e.lockPush(t, clone)
	if len(locked) != 1 || locked["local/dev/hub"] != 2 {
		t.Fatalf("environment fan-out locked %v, want only local/dev/hub=2:\n%s", locked, out)
	}
	task := e.waitTask(t, "dev-hub", "hub", 2)
	requirePhase(t, task, v1alpha1.TaskSucceeded)
	if task.Spec.Workflow != v1alpha1.WorkflowUpdate {
		t.Errorf("hub-2 workflow %s, want update (configuration only)", task.Spec.Workflow)
	}
	hub := e.deployment(t, "dev-hub")
	was := before["local/dev/hub"]
	if hub.Spec.Sequence != 2 || hub.Spec.AppVersion != was.Spec.AppVersion || hub.Spec.Driver.Version != was.Spec.Driver.Version {
		t.Errorf("dev/hub after the fan-out: sequence %d app %s driver %s; want 2 at app %s driver %s",
			hub.Spec.Sequence, hub.Spec.AppVersion, hub.Spec.Driver.Version, was.Spec.AppVersion, was.Spec.Driver.Version)
	}
	if !strings.Contains(string(hub.Spec.Values.Raw), `"GRAPHHUB_LOG_LEVEL":"error"`) {
		t.Errorf("dev/hub values do not carry the new log level: %s", hub.Spec.Values.Raw)
	}
	e.waitSynced(t)
	for _, d := range allDeployments[1:] {
		if got := e.tasks(t, d.ns); !slices.Equal(got, []string{d.name + "-1"}) {
			t.Errorf("%s: tasks %v, want only its create task", d.key, got)
		}
		if sd := e.deployment(t, d.ns); sd.Spec.Digest != before[d.key].Spec.Digest {
			t.Errorf("%s: instance changed by a fan-out that does not reach it", d.key)
		}
	}

	// The same configuration again: nothing is locked, nothing redeploys.
	e.git.Commit(repoName, "dev: same configuration again", nil)
	if locked, out = e.lockPush(t, clone); len(locked) != 0 || !strings.Contains(out, "nothing to lock") {
		t.Fatalf("resubmitting the same configuration locked %v:\n%s", locked, out)
	}
	e.waitSynced(t)
	if got := e.tasks(t, "dev-hub"); !slices.Equal(got, []string{"hub-1", "hub-2"}) {
		t.Errorf("dev-hub tasks after resubmitting: %v, want hub-1 hub-2", got)
	}

	// A fan-out where one deployment fails: dev's message reaches web,
	// and hub moves to the 1.5 line whose upgrade fails at its first step.
	hubFile := strings.Replace(string(readExample(t, devHubFile)), `"1.4.0"`, `"1.5.0"`, 1)
	files := devEnvironment(`logLevel: "error", message: "fan-out"`)
	files[devHubFile] = []byte(hubFile)
	e.git.Commit(repoName, "dev: a message for web; hub to 1.5.0", files)
	locked, out = e.lockPush(t, clone)
	if len(locked) != 2 || locked["local/dev/web"] != 2 || locked["local/dev/hub"] != 3 {
		t.Fatalf("locked %v, want local/dev/web=2 and local/dev/hub=3:\n%s", locked, out)
	}
	failed := e.waitTask(t, "dev-hub", "hub", 3)
	requirePhase(t, failed, v1alpha1.TaskFailed)
	t.Logf("dev/hub-3 failed as intended: %s", failed.Status.Message)
	requirePhase(t, e.waitTask(t, "dev-web", "web", 2), v1alpha1.TaskSucceeded)
	if web := e.deployment(t, "dev-web"); web.Spec.Sequence != 2 || !strings.Contains(string(web.Spec.Values.Raw), `"message":"fan-out"`) {
		t.Errorf("dev/web: sequence %d values %s; want 2 with the environment's message", web.Spec.Sequence, web.Spec.Values.Raw)
	}
	if hub := e.deployment(t, "dev-hub"); hub.Status.ActiveSequence != 2 || hub.Spec.Sequence != 2 {
		t.Errorf("dev/hub after its failed upgrade: spec %d active %d, want the active instance 2 kept", hub.Spec.Sequence, hub.Status.ActiveSequence)
	}
}

// TestClusterConfigFanOut changes the cluster's config.logFormat and, in
// the same commit, removes staging/web: the three remaining deployments
// of both environments redeploy at their current versions, the removed
// one gets a tombstone whose task deletes it (it is not redeployed).
func TestClusterConfigFanOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clone := e.newClone(t)
	e.deployAll(t, clone)
	before := map[string]*v1alpha1.StyrminDeployment{}
	for _, d := range allDeployments {
		before[d.key] = e.deployment(t, d.ns)
	}

	cluster := strings.Replace(string(readExample(t, clusterFile)), `logFormat: "json"`, `logFormat: "text"`, 1)
	e.git.Commit(repoName, "cluster: text logs; staging: no web", map[string][]byte{
		clusterFile:    []byte(cluster),
		stagingWebFile: nil,
	})
	locked, out := e.lockPush(t, clone)
	want := map[string]int64{"local/dev/hub": 2, "local/dev/web": 2, "local/staging/hub": 2, "local/staging/web": 2}
	if fmt.Sprint(locked) != fmt.Sprint(want) {
		t.Fatalf("cluster fan-out locked %v, want %v:\n%s", locked, want, out)
	}
	if !strings.Contains(out, "local/staging/web=2 (tombstone") {
		t.Errorf("staging/web was not locked as a tombstone:\n%s", out)
	}
	for _, d := range allDeployments {
		task := e.waitTask(t, d.ns, d.name, 2)
		requirePhase(t, task, v1alpha1.TaskSucceeded)
		if d.key == "local/staging/web" {
			if task.Spec.Workflow != v1alpha1.WorkflowDelete {
				t.Errorf("%s-2: workflow %s, want delete", d.name, task.Spec.Workflow)
			}
			continue
		}
		if task.Spec.Workflow != v1alpha1.WorkflowUpdate {
			t.Errorf("%s: workflow %s, want update", d.key, task.Spec.Workflow)
		}
		sd := e.deployment(t, d.ns)
		was := before[d.key]
		if sd.Spec.Sequence != 2 || sd.Spec.AppVersion != was.Spec.AppVersion || sd.Spec.Driver.Version != was.Spec.Driver.Version {
			t.Errorf("%s: sequence %d app %s driver %s; want 2 at app %s driver %s", d.key,
				sd.Spec.Sequence, sd.Spec.AppVersion, sd.Spec.Driver.Version, was.Spec.AppVersion, was.Spec.Driver.Version)
		}
		if !strings.Contains(string(sd.Spec.Context.Raw), `"logFormat":"text"`) {
			t.Errorf("%s: the instance's context lacks the cluster's new logFormat", d.key)
		}
	}
	agenttest.WaitUntil(t, waitLimit, "staging/web to be deleted", func(ctx context.Context) (bool, string, error) {
		err := e.c.Get(ctx, client.ObjectKey{Namespace: "staging-web", Name: "staging-web"}, &v1alpha1.StyrminDeployment{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	})
	if got := e.tasks(t, "staging-web"); !slices.Equal(got, []string{"web-1", "web-2"}) {
		t.Errorf("staging-web tasks %v, want web-1 (create) and web-2 (delete) only", got)
	}

	// Another cluster change skips the deleted deployment: no task for it.
	cluster = strings.Replace(cluster, `logFormat: "text"`, `logFormat: "logfmt"`, 1)
	e.git.Commit(repoName, "cluster: logfmt", map[string][]byte{clusterFile: []byte(cluster)})
	locked, out = e.lockPush(t, clone)
	if _, ok := locked["local/staging/web"]; ok || len(locked) != 3 {
		t.Fatalf("second cluster fan-out locked %v, want the three live deployments only:\n%s", locked, out)
	}
	for _, d := range allDeployments[:3] {
		requirePhase(t, e.waitTask(t, d.ns, d.name, 3), v1alpha1.TaskSucceeded)
	}
	e.waitSynced(t)
	if got := e.tasks(t, "staging-web"); len(got) != 2 {
		t.Errorf("staging-web tasks %v after a fan-out that skips it", got)
	}
}
