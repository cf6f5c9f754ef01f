package task

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestStopComponentsWaitsForPodsStillShuttingDownAndNamesThem pins what a
// stopComponents step waits for: the workloads' pods to end, not their
// replicas to read zero. A Deployment's replicas count no pod being
// deleted, so it reads 0 while its pods still run their graceful shutdown
// (minutes, for workers that finish their jobs): the step ended at once,
// and the migration after it ran beside workers still writing. A pod
// that never ends (its node gone) fails the step at its timeout, the
// message naming the pod.
func TestStopComponentsWaitsForPodsStillShuttingDownAndNamesThem(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := maintenanceDriver(t)
	workers(t, cl, ns, 2, 0) // scaled down already: no replica counted
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs-7d4f-x2x", Labels: map[string]string{"app": "jobs"},
			Finalizers: []string{"styrmin.io/test-shutting-down"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	if err := cl.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, pod); err != nil { // shutting down, held by its finalizer
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var p corev1.Pod
		if cl.Get(ctx, client.ObjectKeyFromObject(pod), &p) == nil {
			p.Finalizers = nil
			_ = cl.Update(ctx, &p)
		}
	})
	tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	const timeout = 4 * time.Second
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), StepTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	tk = reconcileUntil(t, r, cl, req, "the stop step's end", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State.Terminal()
	})
	st := tk.Status.Steps[0]
	if st.State != v1alpha1.StepFailed || time.Since(started) < timeout-time.Second || tk.Status.Phase != v1alpha1.TaskFailed {
		t.Fatalf("after %s: task %s, step %s %q; want the step failed at its %s timeout (a status time is in seconds), a pod of the workers still shutting down",
			time.Since(started).Round(time.Millisecond), tk.Status.Phase, st.State, st.Message, timeout)
	}
	for _, want := range []string{"timed out after " + timeout.String(), "Deployment/jobs: 1 pod(s) not ended", "pod jobs-7d4f-x2x terminating since", "on node node-1"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("step message %q does not say %q", st.Message, want)
		}
	}
}
