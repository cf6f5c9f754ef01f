package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/hostile"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAgentBadDriverFailsWithItsLimitAndTheGoodDeploymentBecomesReady: a
// driver that the lock's limits allow but the agent's memory limit does
// not (hostile.OverAgentMemory) fails its deployment's task with the
// limit error, in the agent's sandbox child; the agent does not crash and
// the other deployment (web) becomes Ready.
func TestAgentBadDriverFailsWithItsLimitAndTheGoodDeploymentBecomesReady(t *testing.T) {
	t.Parallel()
	const badFile = "clusters/local/environments/dev/deployments/bad.cue"
	extra := fstest.MapFS{
		// Two deployments: web and bad.
		"clusters/local/environments/dev/deployments/hub.cue": nil,
		badFile: {Data: []byte("driver:     \"bad\"\nappVersion: \"1.0.0\"\n"), Mode: 0o644},
	}
	for p, b := range hostile.OverAgentMemory().Files("bad", "1.0.0") {
		extra["drivers/bad/1.0.0/"+p] = &fstest.MapFile{Data: b, Mode: 0o644}
	}
	e := startAgentEnvWith(t, extra)
	locked := e.lock(t)
	if locked["bad"] != 1 || locked["web"] != 1 || len(locked) != 2 {
		t.Fatalf("locked %v, want web=1 and bad=1", locked)
	}
	e.startAgent(t, "--driver-memory=96Mi")

	requireSucceeded(t, e.waitTask(t, "dev-web", "web", 1))
	agenttest.WaitUntil(t, agentWaitLimit, "web to be Ready", func(ctx context.Context) (bool, string, error) {
		sd := e.deployment(t, "dev-web")
		if sd == nil {
			return false, "no StyrminDeployment", nil
		}
		c := meta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == "True", fmt.Sprintf("%+v", c), nil
	})

	key := client.ObjectKey{Namespace: "dev-bad", Name: v1alpha1.TaskName("bad", 1)}
	var task v1alpha1.StyrminTask
	agenttest.WaitUntil(t, agentWaitLimit, "the bad deployment's task to report the limit", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, key, &task); err != nil {
			return false, err.Error(), nil
		}
		msgs := []string{task.Status.Message}
		for _, c := range task.Status.Conditions {
			msgs = append(msgs, c.Reason+": "+c.Message)
		}
		all := strings.Join(msgs, " | ")
		return strings.Contains(all, "exceeded the memory limit of 96 MiB") && strings.Contains(all, "drivers/bad/1.0.0"), string(task.Status.Phase) + " " + all, nil
	})
	t.Logf("bad task: %s: %s", task.Status.Phase, task.Status.Message)
	select {
	case <-e.agent.Done():
		t.Fatalf("the agent exited: %s", e.agent.ExitState())
	default:
	}
}
