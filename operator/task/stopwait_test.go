package task

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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
// message naming the pod and, past its grace period, what a person does:
// confirm the node is down, then force its deletion or taint the node
// out-of-service.
func TestStopComponentsWaitsForPodsStillShuttingDownAndNamesThem(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := maintenanceDriver(t)
	workers(t, cl, ns, 2, 0) // scaled down already: no replica counted
	rs := replicaSetOf(t, cl, ns, "jobs", "7d4f")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs-7d4f-x2x", Labels: rs.Spec.Template.Labels,
			Finalizers:      []string{"styrmin.io/test-shutting-down"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	if err := cl.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// Shutting down, held by its finalizer past its grace period, as by a
	// kubelet that does not answer.
	if err := cl.Delete(ctx, pod, client.GracePeriodSeconds(1)); err != nil {
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
	for _, want := range []string{"timed out after " + timeout.String(), "Deployment/jobs: 1 pod(s) not ended", "pod jobs-7d4f-x2x terminating, past its grace period since", "on node node-1",
		"confirm the node is down, then kubectl delete pod --force --grace-period=0", "node.kubernetes.io/out-of-service"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("step message %q does not say %q", st.Message, want)
		}
	}
}

// TestStopComponentsWaitsOnlyForItsWorkloadsPodsNotThoseOfAnotherSharingItsSelector
// pins that a stopComponents step waits for the pods of the workloads it
// stopped, not every pod its selector matches. A chart's scaffold
// selector (name and instance) is often shared by a web Deployment and a
// worker Deployment whose pods add a component label, and a CronJob's
// pods may carry it too: stopping web waited for the worker's and the
// cron Job's pods, which nothing stopped, and the step failed at its
// timeout, and at every retry.
func TestStopComponentsWaitsOnlyForItsWorkloadsPodsNotThoseOfAnotherSharingItsSelector(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := maintenanceDriver(t)
	workers(t, cl, ns, 2, 0) // Deployment jobs, selector app=jobs, scaled down already
	other := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs-worker"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "jobs", "component": "worker"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "jobs", "component": "worker"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}},
	}
	if err := cl.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	rs := replicaSetOf(t, cl, ns, "jobs-worker", "5c9b")
	cron := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs-cleanup-2911"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "jobs"}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}},
	}
	if err := cl.Create(ctx, cron); err != nil {
		t.Fatal(err)
	}
	for name, owner := range map[string]*metav1.OwnerReference{
		"jobs-worker-5c9b-k8p":  metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet")),
		"jobs-cleanup-2911-q7w": metav1.NewControllerRef(cron, batchv1.SchemeGroupVersion.WithKind("Job")),
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "jobs", "component": "worker"},
				OwnerReferences: []metav1.OwnerReference{*owner}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
		}
		if err := cl.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.Phase = corev1.PodRunning
		if err := cl.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), StepTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tk = reconcileUntil(t, r, cl, req, "the stop step's end", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State.Terminal()
	})
	if st := tk.Status.Steps[0]; st.State != v1alpha1.StepSucceeded || !strings.Contains(st.Output, "stopped Deployment/jobs") {
		t.Fatalf("step %s %q output %q; want Deployment/jobs stopped, the worker's and the cron Job's pods not waited for", st.State, st.Message, st.Output)
	}
}

// replicaSetOf makes a ReplicaSet controlled by Deployment name of ns, as
// the Deployment controller does (named and labelled with the template
// hash): the API server of these tests runs no controller.
func replicaSetOf(t *testing.T, cl client.Client, ns, name, hash string) *appsv1.ReplicaSet {
	t.Helper()
	ctx := context.Background()
	var dep appsv1.Deployment
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &dep); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"pod-template-hash": hash}
	for k, v := range dep.Spec.Template.Labels {
		labels[k] = v
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + hash, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: dep.Spec.Template.Spec}},
	}
	if err := cl.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	return rs
}
