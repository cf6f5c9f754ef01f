package testcluster_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/testcluster"
)

// faultTimeout bounds each wait of the fault tests; measured times are
// logged (all but the progress deadline well under a second).
const faultTimeout = 30 * time.Second

// TestFaultAnnotation pins each value of testcluster.FaultAnnotation on the
// real control plane, and that pods without it keep kwok's default lifecycle.
func TestFaultAnnotation(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{Workloads: true, Nodes: 1})
	requireFaultStages(t, c)
	cl := newClient(t, c)

	// Parallel subtests: the waits overlap (the progress deadline is the longest).
	t.Run("group", func(t *testing.T) {
		t.Run("fail: Job with backoffLimit 0 fails", func(t *testing.T) {
			t.Parallel()
			testFaultFailJob(t, cl)
		})
		t.Run("fail: bare pod ends Failed and can be deleted", func(t *testing.T) {
			t.Parallel()
			testFaultFailPod(t, cl)
		})
		t.Run("crashloop: Deployment pods in CrashLoopBackOff, 0 ready", func(t *testing.T) {
			t.Parallel()
			testFaultCrashLoopDeployment(t, cl)
		})
		t.Run("crashloop: Job pod neither succeeds nor fails", func(t *testing.T) {
			t.Parallel()
			testFaultCrashLoopJob(t, cl)
		})
		t.Run("unready: Deployment exceeds its progress deadline", func(t *testing.T) {
			t.Parallel()
			testFaultUnreadyDeployment(t, cl)
		})
		t.Run("no fault: pods Ready and Job Complete", func(t *testing.T) {
			t.Parallel()
			testNoFault(t, cl)
		})
	})
}

// requireFaultStages fails at once when the cluster's stage file predates
// hack/testcluster/fault-stages.yaml (the waits below would only time out).
func requireFaultStages(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	built, err := os.ReadFile(filepath.Join(c.BinDir, testcluster.StagesFile))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("..", "hack", "testcluster", "fault-stages.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(built, src) {
		t.Fatalf("%s lacks the current hack/testcluster/fault-stages.yaml: run `make testcluster`", filepath.Join(c.BinDir, testcluster.StagesFile))
	}
}

// waitFor polls cond every 50 ms until it returns true and returns the time
// it took, failing the test with the last observation after faultTimeout.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	for {
		ok, last := cond(ctx)
		if ok {
			took := time.Since(start).Round(time.Millisecond)
			t.Logf("%s: %s", what, took)
			return took
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not reached after %s; last seen: %s", what, faultTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// faultTemplate is a pod template of one container (two with two set),
// annotated with fault unless fault is empty.
func faultTemplate(labels map[string]string, fault string, two bool) corev1.PodTemplateSpec {
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "main", Image: "registry.example/main:1"},
		}},
	}
	if two {
		tpl.Spec.Containers = append(tpl.Spec.Containers, corev1.Container{Name: "sidecar", Image: "registry.example/sidecar:1"})
	}
	if fault != "" {
		tpl.Annotations = map[string]string{testcluster.FaultAnnotation: fault}
	}
	return tpl
}

func listPods(ctx context.Context, cl client.Client, ns string, labels map[string]string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	err := cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels))
	return pods.Items, err
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func jobCondition(j *batchv1.Job, typ batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if c := &j.Status.Conditions[i]; c.Type == typ && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// checkFailed reports what keeps p from being a FaultFail pod ("" if nothing).
func checkFailed(p *corev1.Pod) string {
	if p.Status.Phase != corev1.PodFailed {
		return fmt.Sprintf("pod %s phase %s", p.Name, p.Status.Phase)
	}
	if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return fmt.Sprintf("pod %s: %d container statuses for %d containers", p.Name, len(p.Status.ContainerStatuses), len(p.Spec.Containers))
	}
	for _, cs := range p.Status.ContainerStatuses {
		term := cs.State.Terminated
		if term == nil || term.ExitCode != 1 || term.Reason != "Error" || term.Message != testcluster.FaultMessage || cs.Ready {
			return fmt.Sprintf("pod %s container %s: state %+v ready %t", p.Name, cs.Name, cs.State, cs.Ready)
		}
	}
	if got := podCondition(p, corev1.PodReady); got != corev1.ConditionFalse {
		return fmt.Sprintf("pod %s Ready %q", p.Name, got)
	}
	return ""
}

func deletePodAndWait(t *testing.T, cl client.Client, p *corev1.Pod) {
	t.Helper()
	if err := cl.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod "+p.Name+" deleted", func(ctx context.Context) (bool, string) {
		var got corev1.Pod
		err := cl.Get(ctx, client.ObjectKeyFromObject(p), &got)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return got.UID != p.UID, fmt.Sprintf("phase %s, deletionTimestamp %v", got.Status.Phase, got.DeletionTimestamp)
	})
}

func testFaultFailJob(t *testing.T, cl client.Client) {
	ctx := context.Background()
	createNamespace(t, cl, "fault-fail")
	labels := map[string]string{"app": "fail"}
	tpl := faultTemplate(labels, testcluster.FaultFail, true)
	tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fault-fail", Name: "migrate"},
		Spec:       batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: tpl},
	}
	if err := cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Job with a failing pod Failed", func(ctx context.Context) (bool, string) {
		var got batchv1.Job
		if err := cl.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
			return false, err.Error()
		}
		if c := jobCondition(&got, batchv1.JobComplete); c != nil {
			t.Fatalf("Job completed: %+v", got.Status)
		}
		c := jobCondition(&got, batchv1.JobFailed)
		if c == nil {
			return false, fmt.Sprintf("failed=%d conditions=%v", got.Status.Failed, got.Status.Conditions)
		}
		if c.Reason != batchv1.JobReasonBackoffLimitExceeded || got.Status.Failed != 1 {
			t.Errorf("Job Failed with reason %q, %d failed pods; want %s, 1", c.Reason, got.Status.Failed, batchv1.JobReasonBackoffLimitExceeded)
		}
		return true, ""
	})
	pods, err := listPods(ctx, cl, "fault-fail", labels)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1", len(pods))
	}
	if msg := checkFailed(&pods[0]); msg != "" {
		t.Error(msg)
	}
}

func testFaultFailPod(t *testing.T, cl client.Client) {
	ctx := context.Background()
	createNamespace(t, cl, "fault-pod")
	tpl := faultTemplate(nil, testcluster.FaultFail, false)
	pod := &corev1.Pod{ObjectMeta: tpl.ObjectMeta, Spec: tpl.Spec}
	pod.Namespace, pod.Name = "fault-pod", "bare"
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bare pod Failed", func(ctx context.Context) (bool, string) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		msg := checkFailed(pod)
		return msg == "", msg
	})
	deletePodAndWait(t, cl, pod)
}

func testFaultCrashLoopDeployment(t *testing.T, cl client.Client) {
	ctx := context.Background()
	createNamespace(t, cl, "fault-crashloop")
	labels := map[string]string{"app": "crashloop"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fault-crashloop", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: faultTemplate(labels, testcluster.FaultCrashLoop, true),
		},
	}
	if err := cl.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	waitFor(t, "2 pods in CrashLoopBackOff", func(ctx context.Context) (bool, string) {
		var err error
		if pods, err = listPods(ctx, cl, "fault-crashloop", labels); err != nil {
			return false, err.Error()
		}
		if len(pods) != 2 {
			return false, fmt.Sprintf("%d pods", len(pods))
		}
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 2 {
				return false, fmt.Sprintf("pod %s phase %s, %d container statuses", p.Name, p.Status.Phase, len(p.Status.ContainerStatuses))
			}
		}
		return true, ""
	})
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			w := cs.State.Waiting
			if w == nil || w.Reason != "CrashLoopBackOff" || w.Message != testcluster.CrashLoopMessage {
				t.Errorf("pod %s container %s: state %+v, want waiting CrashLoopBackOff", p.Name, cs.Name, cs.State)
			}
			if cs.RestartCount != testcluster.CrashLoopRestarts || cs.Ready || ptr.Deref(cs.Started, false) {
				t.Errorf("pod %s container %s: restartCount %d ready %t started %v, want %d, false, false",
					p.Name, cs.Name, cs.RestartCount, cs.Ready, cs.Started, testcluster.CrashLoopRestarts)
			}
			if term := cs.LastTerminationState.Terminated; term == nil || term.ExitCode != 1 {
				t.Errorf("pod %s container %s: last state %+v, want terminated with exit code 1", p.Name, cs.Name, cs.LastTerminationState)
			}
		}
		for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
			if got := podCondition(&p, typ); got != corev1.ConditionFalse {
				t.Errorf("pod %s condition %s = %q, want False", p.Name, typ, got)
			}
		}
		if p.Status.PodIP == "" {
			t.Errorf("pod %s has no IP", p.Name)
		}
	}
	waitFor(t, "Deployment status counts 2 pods, 0 ready", func(ctx context.Context) (bool, string) {
		var got appsv1.Deployment
		if err := cl.Get(ctx, client.ObjectKeyFromObject(dep), &got); err != nil {
			return false, err.Error()
		}
		s := got.Status
		obs := fmt.Sprintf("observed %d/%d replicas=%d updated=%d ready=%d available=%d unavailable=%d",
			s.ObservedGeneration, got.Generation, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, s.UnavailableReplicas)
		if s.ReadyReplicas != 0 || s.AvailableReplicas != 0 {
			t.Fatalf("crashlooping pods counted ready: %s", obs)
		}
		return s.ObservedGeneration == got.Generation && s.Replicas == 2 && s.UpdatedReplicas == 2 && s.UnavailableReplicas == 2, obs
	})
	deletePodAndWait(t, cl, &pods[0])
}

func testFaultCrashLoopJob(t *testing.T, cl client.Client) {
	ctx := context.Background()
	createNamespace(t, cl, "fault-crashloop-job")
	tpl := faultTemplate(nil, testcluster.FaultCrashLoop, false)
	tpl.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	// Had kwok's pod-complete won, the Job would be Complete within
	// milliseconds; held in CrashLoopBackOff it reaches its deadline (2 s,
	// as the Job's start time is truncated to the second).
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fault-crashloop-job", Name: "stuck"},
		Spec:       batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To[int64](2), Template: tpl},
	}
	if err := cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "crashlooping Job past its deadline", func(ctx context.Context) (bool, string) {
		var got batchv1.Job
		if err := cl.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
			return false, err.Error()
		}
		if c := jobCondition(&got, batchv1.JobComplete); c != nil {
			t.Fatalf("crashlooping Job completed: %+v", got.Status)
		}
		c := jobCondition(&got, batchv1.JobFailed)
		if c == nil {
			return false, fmt.Sprintf("active=%d conditions=%v", got.Status.Active, got.Status.Conditions)
		}
		if c.Reason != batchv1.JobReasonDeadlineExceeded || got.Status.Succeeded != 0 {
			t.Errorf("Job Failed with reason %q, %d succeeded; want %s, 0", c.Reason, got.Status.Succeeded, batchv1.JobReasonDeadlineExceeded)
		}
		return true, ""
	})
}

func testFaultUnreadyDeployment(t *testing.T, cl client.Client) {
	ctx := context.Background()
	createNamespace(t, cl, "fault-unready")
	labels := map[string]string{"app": "unready"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fault-unready", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas:                ptr.To[int32](2),
			ProgressDeadlineSeconds: ptr.To[int32](1),
			Selector:                &metav1.LabelSelector{MatchLabels: labels},
			Template:                faultTemplate(labels, testcluster.FaultUnready, false),
		},
	}
	if err := cl.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Deployment Progressing=False ProgressDeadlineExceeded (deadline 1 s)", func(ctx context.Context) (bool, string) {
		var got appsv1.Deployment
		if err := cl.Get(ctx, client.ObjectKeyFromObject(dep), &got); err != nil {
			return false, err.Error()
		}
		if got.Status.ReadyReplicas != 0 {
			t.Fatalf("unready pods counted ready: %+v", got.Status)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("ready=%d conditions=%v", got.Status.ReadyReplicas, got.Status.Conditions)
	})
	// The deadline can pass before kwok has started the pods (the
	// Deployment's start time is truncated to the second), so their state is
	// awaited; a pod counted ready or restarted fails at once.
	var pods []corev1.Pod
	waitFor(t, "both pods Running, started and not Ready", func(ctx context.Context) (bool, string) {
		var err error
		if pods, err = listPods(ctx, cl, "fault-unready", labels); err != nil {
			return false, err.Error()
		}
		if len(pods) != 2 {
			return false, fmt.Sprintf("%d pods, want 2", len(pods))
		}
		for _, p := range pods {
			if podCondition(&p, corev1.PodReady) == corev1.ConditionTrue {
				t.Fatalf("pod %s Ready, want not ready", p.Name)
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Ready || cs.RestartCount != 0 {
					t.Fatalf("pod %s container %s: ready %t restarts %d, want not ready, 0", p.Name, cs.Name, cs.Ready, cs.RestartCount)
				}
			}
			if p.Status.Phase != corev1.PodRunning || podCondition(&p, corev1.PodReady) != corev1.ConditionFalse {
				return false, fmt.Sprintf("pod %s: phase %s Ready %q", p.Name, p.Status.Phase, podCondition(&p, corev1.PodReady))
			}
			if len(p.Status.ContainerStatuses) == 0 {
				return false, fmt.Sprintf("pod %s: no container status yet", p.Name)
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running == nil || !ptr.Deref(cs.Started, false) {
					return false, fmt.Sprintf("pod %s container %s: state %+v started %v", p.Name, cs.Name, cs.State, cs.Started)
				}
			}
		}
		return true, ""
	})
	deletePodAndWait(t, cl, &pods[0])
}

// testNoFault runs pods without the annotation and with a value that names
// no fault: both keep kwok's default lifecycle.
func testNoFault(t *testing.T, cl client.Client) {
	ctx := context.Background()
	createNamespace(t, cl, "no-fault")
	for _, tc := range []struct{ name, fault string }{{"plain", ""}, {"unknown", "unknown"}} {
		tpl := faultTemplate(map[string]string{"app": tc.name}, tc.fault, false)
		pod := &corev1.Pod{ObjectMeta: tpl.ObjectMeta, Spec: tpl.Spec}
		pod.Namespace, pod.Name = "no-fault", tc.name
		if err := cl.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: "no-fault", Name: tc.name},
			Spec:       batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: tpl},
		}
		if err := cl.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "pod "+tc.name+" Ready", func(ctx context.Context) (bool, string) {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return false, err.Error()
			}
			ready := podCondition(pod, corev1.PodReady) == corev1.ConditionTrue
			return ready && pod.Status.Phase == corev1.PodRunning, fmt.Sprintf("phase %s conditions %v", pod.Status.Phase, pod.Status.Conditions)
		})
		waitFor(t, "Job "+tc.name+" Complete", func(ctx context.Context) (bool, string) {
			var got batchv1.Job
			if err := cl.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
				return false, err.Error()
			}
			if c := jobCondition(&got, batchv1.JobFailed); c != nil {
				t.Fatalf("Job %s failed: %s", tc.name, c.Message)
			}
			return jobCondition(&got, batchv1.JobComplete) != nil, fmt.Sprintf("conditions %v", got.Status.Conditions)
		})
		deletePodAndWait(t, cl, pod)
	}
}
