package operator_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestADeletedSensitiveValuesSecretIsWrittenAgainByTheNextApply pins that
// the Secret of a release's sensitive values, deleted by hand, is written
// again from git: only an apply writes it, and a drift check or
// correction that needs it (to put the values in an object's body) failed
// on every try until git changed. Now the release is applied again, as
// when its record is gone. Both needs are covered: a correction (an edited
// object that holds a value) and a check (the first one after the agent
// restarts dry-runs the applies).
func TestADeletedSensitiveValuesSecretIsWrittenAgainByTheNextApply(t *testing.T) {
	t.Parallel()
	e := startAgentEnvWith(t, sensitiveWebRepo(t))
	first := e.lock(t)["web"]
	flags := []string{"--drift-interval=2s", "--leader-elect=false"}
	e.startAgent(t, flags...)
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", first))
	e.requireLiveValue(t, sensitiveOld)
	ctx := context.Background()
	valuesKey := client.ObjectKey{Namespace: webNamespace, Name: v1alpha1.SensitiveSecretName}
	deleteValues := func() {
		t.Helper()
		if err := e.c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: valuesKey.Namespace, Name: valuesKey.Name}}); err != nil {
			t.Fatal(err)
		}
	}
	waitWritten := func(what string) {
		t.Helper()
		// Read on ctx, not the poll's: the last word is the state, not
		// the poll's deadline.
		agenttest.WaitUntil(t, agentWaitLimit, what, func(context.Context) (bool, string, error) {
			drifted := "none"
			if sd := e.deployment(t, webNamespace); sd != nil {
				if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted); c != nil {
					drifted = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
				}
			}
			var values corev1.Secret
			if err := e.c.Get(ctx, valuesKey, &values); apierrors.IsNotFound(err) {
				return false, "values Secret gone; Drifted " + drifted, nil
			} else if err != nil {
				return false, "", err
			}
			var cm corev1.ConfigMap
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: webNamespace, Name: "web-content"}, &cm); err != nil {
				return false, "", err
			}
			return cm.Data["message"] == sensitiveOld, "web-content message not put back; Drifted " + drifted, nil
		})
	}

	// A correction needs the values: the edited ConfigMap holds one.
	deleteValues()
	var cm corev1.ConfigMap
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: webNamespace, Name: "web-content"}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["message"] = "edited by hand"
	if err := e.c.Update(ctx, &cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	waitWritten("the values Secret written again and the edit put back")
	e.requireLiveValue(t, sensitiveOld)

	// The first check after a restart needs them: it dry-runs the applies
	// to learn the fields Styrmin owns, with the values in place.
	e.agent.Stop()
	deleteValues()
	e.startAgent(t, flags...)
	waitWritten("the values Secret written again after the restart")
	e.requireLiveValue(t, sensitiveOld)
}
