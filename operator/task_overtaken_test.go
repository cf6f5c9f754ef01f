package operator_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAPendingUpdateIsNotOvertakenByANewerTaskThatFailed: a pending
// update was superseded by any newer task of its deployment, one that had
// already failed in its checks included ("the newer task writes the whole
// configuration"): nothing wrote it, the deployment stayed behind and its
// commit showed green. A newer task that failed overtakes nothing.
func TestAPendingUpdateIsNotOvertakenByANewerTaskThatFailed(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	e.startAgent(t)
	first := e.waitTask(t, hubNamespace, "hub", 1)
	requireSucceeded(t, first)
	ctx := context.Background()
	// A newer task whose lockfile is not there: it fails in its checks.
	bad := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName("hub", 9), Namespace: hubNamespace, Labels: first.Labels}, Spec: first.Spec}
	bad.Spec.ToSequence, bad.Spec.FromSequence, bad.Spec.Target, bad.Spec.Instance = 9, 1, nil, nil
	bad.Spec.Lock.Path = "locks/local/dev/no-such.lock.yaml"
	if err := e.c.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, agentWaitLimit, "the newer task to fail in its checks", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(bad), bad); err != nil {
			return false, err.Error(), nil
		}
		return bad.Status.Phase == v1alpha1.TaskFailed, string(bad.Status.Phase) + ": " + bad.Status.Message, nil
	})

	seq := e.change(t, "hub", "hub: three workers", hubConfig("1.4.0", 3, "info"))
	task := e.waitTask(t, hubNamespace, "hub", seq)
	requireSucceeded(t, task)
	if task.Status.Workflow != v1alpha1.WorkflowUpdate {
		t.Errorf("hub-%d ran %s, want the update", seq, task.Status.Workflow)
	}
	if sd := e.deployment(t, hubNamespace); sd.Spec.Sequence != seq || sd.Status.ActiveSequence != seq {
		t.Errorf("the StyrminDeployment holds %d (active %d), want the update %d", sd.Spec.Sequence, sd.Status.ActiveSequence, seq)
	}
}
