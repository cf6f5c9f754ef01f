package task

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAPendingTaskNamesTheEarlierTaskItWaitsForAndWhatHoldsIt pins what a
// change waiting behind an earlier change of its deployment says, on a
// real API server: which task, and what that one waits for. It said only
// "waiting to run": a hotfix behind an upgrade held by a failed wave
// before it waited for days without saying why. The wait is written once
// per change of what it says, not at every look.
func TestAPendingTaskNamesTheEarlierTaskItWaitsForAndWhatHoldsIt(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := maintenanceDriver(t)
	first := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	const held = "wave 2 of 3: waiting for wave 1 to succeed and be Ready"
	first.Status.Phase = v1alpha1.TaskPending
	apimeta.SetStatusCondition(&first.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonWaitingForOrder, Message: held})
	if err := cl.Status().Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := createJobsTask(t, cl, jobsInstance(t, d, ns, 2, "1.0.0"), v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(second)}
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	tk := reconcileUntil(t, r, cl, req, "the later change planned and waiting", func(tk *v1alpha1.StyrminTask) bool {
		return tk.Status.Phase == v1alpha1.TaskPending
	})
	c := apimeta.FindStatusCondition(tk.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil {
		t.Fatal("no Ready condition")
	}
	for _, want := range []string{"waiting for task " + first.Name + " (sequence 1)", "it is Pending: " + held} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the later change says %q; want it to say %q", c.Message, want)
		}
	}
	if len(tk.Status.Steps) == 0 || tk.Status.Steps[0].State != v1alpha1.StepPending {
		t.Fatalf("steps %+v; want them planned, none started", tk.Status.Steps)
	}
	version := tk.ResourceVersion
	for range 2 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if got := getTask(t, cl, req.NamespacedName).ResourceVersion; got != version {
		t.Errorf("two later looks wrote the unchanged wait again (resourceVersion %s, was %s)", got, version)
	}
}
