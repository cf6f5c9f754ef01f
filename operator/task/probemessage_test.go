package task

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// TestAStepTimingOutOnAFailingProbeShowsNoSecretItsOutputHeld pins what a
// runJob step whose pod runs and is never ready says when it times out:
// the pod's last warning, the kubelet's Unhealthy event, which quotes the
// probe's output, and a probe `psql "$DATABASE_URL"` prints the URL,
// password and all. The step's and the task's messages name the event
// with the deployment's sensitive values masked.
func TestAStepTimingOutOnAFailingProbeShowsNoSecretItsOutputHeld(t *testing.T) {
	t.Parallel()
	const ns, value = "dev-probe", "pr0be-Pa55word-4711"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]`)
	const timeout = 2 * time.Minute
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), StepTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	// The deployment's sensitive value, and the Secret its release
	// writes it to.
	placeholder := resolver.Placeholder(resolver.ID{Cluster: "local", Environment: "dev", Name: "jobs"}, "data", value)
	digest, _ := resolver.PlaceholderDigest(placeholder)
	if err := cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.SensitiveSecretName},
		Data: map[string][]byte{digest: []byte(value)}}); err != nil {
		t.Fatal(err)
	}
	req, job := startMigrationOf(t, cl, r, jobsInstanceWith(t, d, ns, 1, "1.0.0", map[string]any{"data": placeholder}))

	// Its pod runs and is not ready, as the kubelet leaves it when the
	// readiness probe fails, with the kubelet's event.
	if err := cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "migrate-probe", Labels: map[string]string{"job-name": job.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "busybox",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	if err := cl.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	probe := `Readiness probe failed: psql: error: connection to server failed: postgres://app:` + value + `@db:5432/app: password authentication failed`
	now := metav1.Now()
	if err := cl.Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: "migrate-probe.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID, APIVersion: "v1", FieldPath: "spec.containers{app}"},
		Type:           corev1.EventTypeWarning, Reason: "Unhealthy", Message: probe,
		FirstTimestamp: now, LastTimestamp: now, Count: 12, Source: corev1.EventSource{Component: "kubelet", Host: "node-1"},
	}); err != nil {
		t.Fatal(err)
	}

	// The step looks at its Job while the pod is not ready, then its
	// deadline passes (its start is moved back).
	tk, st := timeOutFirstStep(t, cl, r, req, timeout)
	want := "pod migrate-probe Running: Unhealthy: Readiness probe failed: psql: error: connection to server failed: postgres://app:" + resolver.Masked + "@db:5432/app"
	if !strings.Contains(st.Message, want) || !strings.Contains(tk.Status.Message, want) {
		t.Errorf("step message %q, task message %q; want both to say %q", st.Message, tk.Status.Message, want)
	}
	status, err := json.Marshal(tk.Status)
	if err != nil {
		t.Fatal(err)
	}
	if found := secrettest.Find(status, value); len(found) > 0 {
		t.Errorf("the task's status holds the sensitive value as %s", strings.Join(found, ", "))
	}
}
