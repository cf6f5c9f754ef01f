package operator_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// answers counts the agent's requests by verb, resource and the API
// server's answer ("PATCH styrmindeployments/status 409").
type answers struct {
	rt http.RoundTripper
	mu *sync.Mutex
	by map[string]int
}

func (a answers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := a.rt.RoundTrip(r)
	code := 0
	if resp != nil {
		code = resp.StatusCode
	}
	if r.URL.Query().Get("watch") != "true" {
		a.mu.Lock()
		a.by[fmt.Sprintf("%s %s %d", r.Method, resourceOf(r.URL.Path), code)]++
		a.mu.Unlock()
	}
	return resp, err
}

// TestANormalChangesStatusWritesMeetNoConflict pins what the
// StyrminDeployment controller's conflict-checked status writes cost a
// change that goes well: a create and a change, each until Ready, meet no
// conflict on the StyrminDeployment (the create's own write clearing its
// managed fields lands between the controller's read and its first status
// write: that copy differs in nothing decided on, and lends its
// resourceVersion), so they take no request more than blind writes did.
func TestANormalChangesStatusWritesMeetNoConflict(t *testing.T) {
	var mu sync.Mutex
	by := map[string]int{}
	e := startEnvWrapped(t, func(rt http.RoundTripper) http.RoundTripper { return answers{rt: rt, mu: &mu, by: by} },
		func(o *operator.ManagerOptions) { o.DriftInterval = 10 * time.Minute })
	reconciles := deploymentReconciles(t)
	in1 := e.instance(t, "local", "dev", "web", 1)
	ns := in1.Context.Deployment.Namespace
	e.write(t, ns, in1)
	e.waitApplied(t, ns, 1)
	// The rollout's last events: a change written while a reconcile
	// of them writes would be a conflict of two writers, not of the
	// controller with itself.
	time.Sleep(2 * time.Second)
	e.write(t, ns, withMessage(t, in1, 2, "changed"))
	e.waitApplied(t, ns, 2)
	time.Sleep(2 * time.Second) // the rollout's last events

	mu.Lock()
	defer mu.Unlock()
	var lines []string
	total := 0
	for k, n := range by {
		total += n
		if strings.Contains(k, "styrmindeployments") {
			lines = append(lines, fmt.Sprintf("%s: %d", k, n))
		}
	}
	sort.Strings(lines)
	t.Logf("%v reconciles; the agent's requests (%d in all) of StyrminDeployments:\n%s",
		deploymentReconciles(t)-reconciles, total, strings.Join(lines, "\n"))
	for k, n := range by {
		if strings.Contains(k, "styrmindeployments") && strings.HasSuffix(k, " 409") {
			t.Errorf("%s: %d conflicts of a change that went well", k, n)
		}
	}
}

// TestAStatusAnotherWriterPutOverTheControllersIsDecidedAgain pins the
// controller's wake on a status write it did not make: a replica paused
// past its lease wakes and writes the not ready it judged before its pause
// over the copy the next leader, finding nothing to change, left as it
// was (the same copy: no conflict check catches it). The controller
// watched no status write but the active instance's, so the deployment
// stayed not Ready, its next change's task and waves held, until a
// workload's event or the drift interval (minutes).
func TestAStatusAnotherWriterPutOverTheControllersIsDecidedAgain(t *testing.T) {
	e := startEnvWithOptions(t, func(o *operator.ManagerOptions) { o.DriftInterval = 10 * time.Minute })
	in1 := e.instance(t, "local", "dev", "web", 1)
	ns := in1.Context.Deployment.Namespace
	e.write(t, ns, in1)
	sd := e.waitApplied(t, ns, 1)

	ctx := context.Background()
	apimeta.SetStatusCondition(&sd.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonComponentsNotReady, Message: "web: 0/2 ready", ObservedGeneration: sd.Generation})
	if err := e.client.Status().Update(ctx, sd); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 20*time.Second, "the controller to write Ready back", func(ctx context.Context) (bool, string, error) {
		var got v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(sd), &got); err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("Ready %v", c), nil
	})
}

// deploymentReconciles reads the StyrminDeployment controller's count of
// reconciles (process-wide: tests that read it are not parallel).
func deploymentReconciles(t *testing.T) float64 {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "styrmindeployment" {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
