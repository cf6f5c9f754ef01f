package operator_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
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

	e.requireTaskReportsAndAgentUp(t, "dev-bad", "bad", "exceeded the memory limit of 96 MiB", "drivers/bad/1.0.0")
}

// requireTaskReportsAndAgentUp waits until the first task of deployment
// name says every one of want (in its message or conditions), and checks
// that the agent did not exit.
func (e *agentEnv) requireTaskReportsAndAgentUp(t *testing.T, ns, name string, want ...string) {
	t.Helper()
	key := client.ObjectKey{Namespace: ns, Name: v1alpha1.TaskName(name, 1)}
	var task v1alpha1.StyrminTask
	agenttest.WaitUntil(t, agentWaitLimit, name+"'s task to report "+strings.Join(want, ", "), func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, key, &task); err != nil {
			return false, err.Error(), nil
		}
		msgs := []string{task.Status.Message}
		for _, c := range task.Status.Conditions {
			msgs = append(msgs, c.Reason+": "+c.Message)
		}
		all := strings.Join(msgs, " | ")
		for _, w := range want {
			if !strings.Contains(all, w) {
				return false, string(task.Status.Phase) + " " + all, nil
			}
		}
		return true, "", nil
	})
	t.Logf("%s's task: %s: %s", name, task.Status.Phase, task.Status.Message)
	select {
	case <-e.agent.Done():
		t.Fatalf("the agent exited: %s", e.agent.ExitState())
	default:
	}
}

// TestAgentStaysUpWhenTheRepositorysConfigurationWouldExhaustItsMemory:
// a styrmin.cue of 500 bytes whose evaluation allocates 512 MiB (holding
// 128 MiB at once) reaches the agent, which reads styrmin.cue for the
// limits of every driver it loads. The agent evaluates it in its
// sandbox, under --config-memory, and not itself: the deployments'
// tasks report the limit naming the file, the agent does not exit, and
// its own peak memory stays far below what the file would have cost it.
func TestAgentStaysUpWhenTheRepositorysConfigurationWouldExhaustItsMemory(t *testing.T) {
	t.Parallel()
	var bomb strings.Builder
	bomb.WriteString("deletionThreshold: 1\nlet s0 = \"0123456789abcdef\"\n")
	for i := 1; i <= 22; i++ {
		fmt.Fprintf(&bomb, "let s%d = s%d + s%d\n", i, i-1, i-1)
	}
	bomb.WriteString("if len(s22) < 0 {\n\tlimits: timeout: \"1s\"\n}\n")
	e := startAgentEnvWith(t, fstest.MapFS{"styrmin.cue": {Data: []byte(bomb.String()), Mode: 0o644}})
	locked := e.lock(t) // in this process, which can afford it
	if locked["web"] != 1 {
		t.Fatalf("locked %v, want web=1", locked)
	}
	e.startAgent(t)

	e.requireTaskReportsAndAgentUp(t, "dev-web", "web", "styrmin.cue: evaluating it exceeded the memory limit of 64 MiB")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.agent.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	var peakKiB int64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			peakKiB, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	t.Logf("the agent's peak resident memory: %d MiB", peakKiB>>10)
	if peakKiB == 0 || peakKiB > 128<<10 {
		t.Errorf("the agent's peak resident memory is %d MiB: it evaluated the file itself", peakKiB>>10)
	}
}
