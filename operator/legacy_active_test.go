package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestRetryOfAnUpgradeThatFailedUnderALegacyAgentRunsTheUpgradeHook: an
// agent before status.active wrote activeSequence when it applied the
// release, whether or not the task's post steps then failed. An upgrade
// (app 1.5.0, driver faulty 2.0.0) fails in its post exec; its
// StyrminDeployment is given the status such an agent left (active unset,
// activeSequence the failed sequence, the applied digest under
// activeDigest) while the agent is down, and the upgraded agent starts.
// The retry of that upgrade is still an upgrade from sequence 1, the
// migration Job included: a failed upgrade's hooks are never skipped.
func TestRetryOfAnUpgradeThatFailedUnderALegacyAgentRunsTheUpgradeHook(t *testing.T) {
	t.Parallel()
	e := startFaultyEnv(t)
	failed := e.change(t, "app", "app: 1.5.0", map[string][]byte{appDeployment: appConfig("1.5.0", "")})
	ft := e.waitTask(t, appNamespace, "app", failed)
	if ft.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(ft.Status.Message, "upgrade/post/3:exec") {
		t.Fatalf("app-%d: %s (%s), want Failed in its post exec", failed, ft.Status.Phase, ft.Status.Message)
	}
	sd := e.deployment(t, appNamespace)
	if sd.Spec.Sequence != failed || sd.Status.AppliedSequence != failed || sd.Status.ActiveSequence != 1 {
		t.Fatalf("spec %d applied %d active %d; want %d applied, 1 active", sd.Spec.Sequence, sd.Status.AppliedSequence, sd.Status.ActiveSequence, failed)
	}

	// What the agent before status.active left: the applied sequence as
	// the active one, no summary, the digest under activeDigest.
	e.agent.Stop()
	patch := fmt.Appendf(nil, `{"status":{"active":null,"activeSequence":%d,"appliedSequence":null,"appliedDigest":null,"activeDigest":%q}}`,
		failed, sd.Status.AppliedDigest)
	if err := e.c.Status().Patch(context.Background(), sd, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	if sd = e.deployment(t, appNamespace); sd.Status.Active != nil || sd.Status.ActiveSequence != failed || sd.Status.AppliedSequence != 0 {
		t.Fatalf("the legacy status did not take: active %+v activeSequence %d applied %d", sd.Status.Active, sd.Status.ActiveSequence, sd.Status.AppliedSequence)
	}
	e.startAgent(t)

	out := e.ctl(t, "retry", "local/dev/app", "--push")
	retry := failed + 1
	if !strings.Contains(out, fmt.Sprintf("retry locked local/dev/app=%d", retry)) {
		t.Fatalf("styrminctl retry:\n%s", out)
	}
	rt := e.waitTask(t, appNamespace, "app", retry)
	if rt.Status.Workflow != v1alpha1.WorkflowUpgrade || rt.Status.FromSequence != 1 {
		t.Fatalf("the retry ran %s from %d (steps %v); want the upgrade from the active 1, not an update from the failed %d",
			rt.Status.Workflow, rt.Status.FromSequence, stepNames(rt), failed)
	}
	if got := strings.Join(stepNames(rt), " "); !strings.HasPrefix(got, "1:waitReady=Succeeded 2:stopComponents=Succeeded 3:runJob=Succeeded") {
		t.Errorf("the retry's steps: %s; want the upgrade's pre steps, migration included, run again", got)
	}
}

// TestANewDeploymentDoesNotGoOnAfterAPeerWhoseUpgradeFailedUnderALegacyAgent:
// app's upgrade fails in its post exec, and its StyrminDeployment is given
// the status an agent before status.active left (activeSequence the failed
// sequence, no summary) while the agent is down; the rollout itself is
// Ready. A new deployment (consumer) connecting to app is locked after app's failed
// instance: its task waits, naming app's failed task, rather than taking
// the legacy activeSequence for a task that succeeded.
func TestANewDeploymentDoesNotGoOnAfterAPeerWhoseUpgradeFailedUnderALegacyAgent(t *testing.T) {
	t.Parallel()
	e := startFaultyEnv(t)
	failed := e.change(t, "app", "app: 1.5.0", map[string][]byte{appDeployment: appConfig("1.5.0", "")})
	ft := e.waitTask(t, appNamespace, "app", failed)
	if ft.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(ft.Status.Message, "upgrade/post/3:exec") {
		t.Fatalf("app-%d: %s (%s), want Failed in its post exec", failed, ft.Status.Phase, ft.Status.Message)
	}
	sd := e.deployment(t, appNamespace)
	if !apimeta.IsStatusConditionTrue(sd.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("app is not Ready after its post exec failed: %+v", sd.Status.Conditions)
	}
	e.agent.Stop()
	patch := fmt.Appendf(nil, `{"status":{"active":null,"activeSequence":%d}}`, failed)
	if err := e.c.Status().Patch(context.Background(), sd, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	e.startAgent(t)

	const consumerDeployment = "clusters/local/environments/dev/deployments/consumer.cue"
	consumer := e.change(t, "consumer", "consumer, connecting to app", map[string][]byte{
		consumerDeployment: []byte("driver: \"faulty\"\nappVersion: \"1.0.0\"\nconnects: [\"app\"]\n"),
	})
	key := client.ObjectKey{Namespace: "dev-consumer", Name: v1alpha1.TaskName("consumer", consumer)}
	agenttest.WaitUntil(t, agentWaitLimit, "consumer to wait for app's failed upgrade", func(ctx context.Context) (bool, string, error) {
		var task v1alpha1.StyrminTask
		if err := e.c.Get(ctx, key, &task); err != nil {
			return false, err.Error(), nil
		}
		if task.Status.Phase != "" && task.Status.Phase != v1alpha1.TaskPending {
			t.Fatalf("consumer-%d is %s (steps %v): it went on after app, whose upgrade failed", consumer, task.Status.Phase, stepNames(&task))
		}
		c := apimeta.FindStatusCondition(task.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Reason != v1alpha1.ReasonWaitingForOrder {
			return false, string(task.Status.Phase), nil
		}
		want := fmt.Sprintf("its task %s failed", v1alpha1.TaskName("app", failed))
		return strings.Contains(c.Message, want), c.Message, nil
	})
}
