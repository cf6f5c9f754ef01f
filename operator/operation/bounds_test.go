package operation_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
)

// TestABackupOfAWholeEnvironmentThatFailedEverywhereEnds pins the bound on
// an operation's message. A nightly backup of an environment of 80
// deployments whose jobs all failed alike (the registry refused the backup
// image) named each deployment's failure in its message, some 50 KiB, and
// the API server refuses a condition's message past 32 KiB: its end was
// never written, the backup stayed Running for ever and the schedule
// superseded it night after night. It ends Failed, naming the first
// deployments' failures and counting the others, which its parts name.
func TestABackupOfAWholeEnvironmentThatFailedEverywhereEnds(t *testing.T) {
	t.Parallel()
	b := failedEverywhere(t, 80, "")
	if b.Status.Phase != v1alpha1.OperationFailed || !strings.HasPrefix(b.Status.Message, "failed for app0000: step backup") ||
		!strings.Contains(b.Status.Message, "more (status.deployments names each)") {
		t.Fatalf("the backup: %s %.200q; want it failed, naming the first deployments' failures and counting the others", b.Status.Phase, b.Status.Message)
	}
	for _, c := range b.Status.Conditions {
		if len(c.Message) > 32<<10 {
			t.Errorf("condition %s: a message of %d bytes", c.Type, len(c.Message))
		}
	}
	for _, d := range b.Status.Deployments {
		if d.Phase != v1alpha1.OperationFailed || !strings.Contains(d.Message, "401 Unauthorized") {
			t.Fatalf("part %s: %s %q; want it failed with its task's message", d.Name, d.Phase, d.Message)
		}
	}
}

// TestABackupOfAThousandDeploymentsThatFailedEverywhereEnds pins the
// bound on each part's message. The parts of a whole environment are one
// object, which etcd bounds (about 1.5 MiB): a thousand deployments whose
// tasks failed saying a kilobyte or two each (a job's pods and how each
// ended) could not be recorded, and the backup stayed Running for ever.
func TestABackupOfAThousandDeploymentsThatFailedEverywhereEnds(t *testing.T) {
	t.Parallel()
	// What each task said of its job's pods.
	var pods strings.Builder
	for i := range 8 {
		fmt.Fprintf(&pods, "; pod %d of the job: Error exit code 1: backup-tools: connecting to the store at https://objects.example.com: TLS handshake timeout after 10s", i)
	}
	b := failedEverywhere(t, 1000, pods.String())
	if b.Status.Phase != v1alpha1.OperationFailed || len(b.Status.Deployments) != 1000 {
		t.Fatalf("the backup: %s with %d parts %.200q; want it failed with its thousand parts", b.Status.Phase, len(b.Status.Deployments), b.Status.Message)
	}
	for _, d := range b.Status.Deployments {
		if d.Phase != v1alpha1.OperationFailed || !strings.HasPrefix(d.Message, "step backup") || !strings.HasSuffix(d.Message, "…") {
			t.Fatalf("part %s: %s %q; want it failed with its task's message, cut", d.Name, d.Phase, d.Message)
		}
	}
}

// failedEverywhere reconciles a nightly backup of an environment of n
// deployments, each of whose tasks failed alike (the registry refused the
// backup image; detail added to each message), and returns it.
func failedEverywhere(t *testing.T, n int, detail string) *v1alpha1.StyrminBackup {
	t.Helper()
	ctx, cl := operations(t)
	started := metav1.Now()
	status := v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationRunning, Location: "s3://backups/local/data", StartedAt: &started}
	for i := range n {
		name := fmt.Sprintf("app%04d", i)
		ns := "data-" + name
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		task := name + "-backup-nightly-1"
		status.Deployments = append(status.Deployments, v1alpha1.OperationDeployment{Name: name, Namespace: ns, Task: task,
			Phase: v1alpha1.OperationRunning, Artifact: "s3://backups/local/data/nightly/" + name, Sequence: 3, StartedAt: &started,
			Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0", Digest: "sha256:" + strings.Repeat("ab", 32)}})
		id := v1alpha1.DeploymentID{Cluster: "local", Environment: "data", Name: name}
		labels := id.Labels()
		labels[v1alpha1.LabelOperation] = "nightly"
		tk := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: task, Labels: labels},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowBackup, FromSequence: 3, ToSequence: 3,
				Lock: v1alpha1.LockRef{Commit: "unknown", Path: "locks/local/data/" + name + ".lock.yaml"},
				Operation: &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: "nightly", BackupID: "nightly",
					Artifact: "s3://backups/local/data/nightly/" + name, Attempt: 1}},
		}
		if err := cl.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		job := fmt.Sprintf("%s-dump-2f9c1a-3", name)
		finished := metav1.Now()
		tk.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskFailed, Workflow: v1alpha1.WorkflowBackup, FromSequence: 3, StartedAt: &started, FinishedAt: &finished,
			Message: fmt.Sprintf(`step backup/core/1:runJob (StepTimedOut) failed: timed out after 30m0s: pod %s/%s-7kq2x of job %s (task %s): ImagePullBackOff: Back-off pulling image "registry.example.com/platform/backup-tools:2.3.1": ErrImagePull: failed to pull and unpack image "registry.example.com/platform/backup-tools:2.3.1": failed to resolve reference: pulling from host registry.example.com failed with status code [manifests 2.3.1]: 401 Unauthorized%s`,
				ns, job, job, task, detail)}
		if err := cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := newBackup(ctx, t, cl, "nightly", status)
	r, err := operation.NewBackupReconciler(options(cl, cl))
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, b)
	return b
}
