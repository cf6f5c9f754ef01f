package task

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// manyWorkloadsDriver is the jobs driver whose chart also renders n
// Deployments of component app, named long (as a chart may: up to 253
// characters), and whose setup's first step waits for them.
func manyWorkloadsDriver(t *testing.T, n int) *drivers.Driver {
	t.Helper()
	spec := `name:        "jobs"
version:     "1.0.0"
appVersions: ">=1.0.0"
chart:       "chart"
components: app: workloads: [{kind: "Deployment", name: context.deployment.name}]
values: {}
actions: setup: pre: [{action: "waitReady", components: ["app"]}]
`
	workers := `{{- range $i := until ` + strconv.Itoa(n) + ` }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: worker-{{ $i }}-` + strings.Repeat("x", 180) + `
  labels: {styrmin.io/component: app}
spec:
  selector: {matchLabels: {app: w}}
  template:
    metadata: {labels: {app: w}}
    spec: {containers: [{name: w, image: busybox}]}
{{- end }}
`
	d, err := drivers.Load(fstest.MapFS{
		"driver.cue":                   {Data: []byte(spec)},
		"chart/Chart.yaml":             {Data: []byte("apiVersion: v2\nname: jobs\nversion: 1.0.0\n")},
		"chart/templates/workers.yaml": {Data: []byte(workers)},
	}, drivers.LoadOptions{Source: "drivers/jobs/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestATaskWhoseFailureNamesHundredsOfWorkloadsStillEnds pins the bound
// on a task's messages. A waitReady step over a component of 200
// workloads that timed out said what it waited for, each workload by name:
// some 45 KiB, and the API server refuses a condition's message past 32
// KiB. The task could not write its end: it stayed Running for ever, its
// step failing again at every reconcile, and every later change of the
// deployment waited behind it. Its end is written, the messages cut,
// saying so.
func TestATaskWhoseFailureNamesHundredsOfWorkloadsStillEnds(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := manyWorkloadsDriver(t, 200)
	const timeout = 2 * time.Minute
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), StepTimeout: timeout,
		PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	tk = reconcileUntil(t, r, cl, req, "the step waiting for the workers", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State == v1alpha1.StepRunning
	})
	// A poll of what the step waits for, then its timeout passes.
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	base := tk.DeepCopy()
	tk.Status.Steps[0].StartedAt = &metav1.Time{Time: time.Now().Add(-timeout - time.Minute)}
	if err := cl.Status().Patch(ctx, tk, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	tk = reconcileUntil(t, r, cl, req, "the task's end written", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() })
	st := tk.Status.Steps[0]
	if tk.Status.Phase != v1alpha1.TaskFailed || st.State != v1alpha1.StepFailed || !strings.HasPrefix(st.Message, "timed out after") ||
		!strings.Contains(st.Message, "worker-0-xxx") {
		t.Fatalf("task %s, step %s %q; want it failed on its timeout, naming the workloads it waited for", tk.Status.Phase, st.State, st.Message)
	}
	for _, m := range append([]string{st.Message, tk.Status.Message}, conditionMessages(tk)...) {
		if len(m) > maxMessage || !strings.HasSuffix(m, "…") {
			t.Errorf("a message of %d bytes (at most %d, cut): %.80q…", len(m), maxMessage, m)
		}
	}
}

// conditionMessages are the messages of tk's conditions.
func conditionMessages(tk *v1alpha1.StyrminTask) []string {
	var out []string
	for _, c := range tk.Status.Conditions {
		out = append(out, c.Message)
	}
	return out
}
