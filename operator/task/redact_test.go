package task

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestBoundOutputKeepsTheTailAndSaysItWasCut(t *testing.T) {
	t.Parallel()
	if got := boundOutput("short", 64); got != "short" {
		t.Errorf("short output changed: %q", got)
	}
	long := strings.Repeat("a", 100) + "THE END"
	got := boundOutput(long, 64)
	if len(got) > 64 || !strings.HasPrefix(got, "[truncated: the last 64 of 107 bytes]") || !strings.HasSuffix(got, "THE END") {
		t.Errorf("boundOutput = %q (%d bytes), want at most 64 bytes, a marker and the tail", got, len(got))
	}
}

// refusingReader answers every read as the API server refuses an account
// without rights on Secrets: the one failure redact must not turn into
// unmasked output.
type refusingReader struct{ client.Reader }

func (refusingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, v1alpha1.SensitiveSecretName, errors.New("no rights"))
}

func TestOutputIsWithheldWhenTheSensitiveValuesCannotBeRead(t *testing.T) {
	t.Parallel()
	r := &Reconciler{own: Actor{Reader: refusingReader{}}}
	run := &taskRun{
		task: &v1alpha1.StyrminTask{Spec: v1alpha1.StyrminTaskSpec{Namespace: "dev-web"}},
		instance: &resolver.Instance{Context: &drivers.Context{Parameters: map[string]any{
			"password": resolver.PlaceholderPrefix + strings.Repeat("ab", 32),
		}}},
	}
	got := r.redact(context.Background(), run, "the password is hunter2")
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "withheld") || !strings.Contains(got, "forbidden") {
		t.Errorf("redact = %q, want the output withheld, saying why", got)
	}
}

// TestAChangesBackupOutputIsMaskedWithTheCredentialsItsJobWasGivenThoughGitNowNamesAnother
// pins where the credentials masked in the output of an upgrade's backup
// (or a clone's restore) come from: the copy its Job was given, named in
// the Job as built. They were read from the Secret git names now; after a
// commit changed backups.secret while the job ran, no copy of that name
// was found, and the job's output reached the step's status unmasked.
// When the copy the job was given is gone, the output is withheld.
func TestAChangesBackupOutputIsMaskedWithTheCredentialsItsJobWasGivenThoughGitNowNamesAnother(t *testing.T) {
	t.Parallel()
	const agent, ns = "styrmin-system", "dev-hub"
	cl := withCRDs(t, agent)
	ctx := context.Background()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	const oldKey, newKey = "the-old-secret-access-key", "the-new-secret-access-key"
	for name, key := range map[string]string{"keys-a": oldKey, "keys-b": newKey} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: agent, Labels: map[string]string{LabelBackupCredentials: "true"}},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": "AKIA-" + name, "AWS_SECRET_ACCESS_KEY": key}}
		if err := cl.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	secret := "keys-a"
	settings := func(context.Context, string, string) (resolver.EnvironmentBackups, error) {
		return resolver.EnvironmentBackups{Cluster: "local", Environment: "dev", Location: "s3://backups/local/dev", Secret: secret}, nil
	}
	r, err := NewReconciler(Options{Client: cl, Drivers: noDrivers{}, AgentNamespace: agent, Registerer: prometheus.NewRegistry(), BackupSettings: settings})
	if err != nil {
		t.Fatal(err)
	}
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "hub"}
	tk := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: "hub-5", Namespace: ns, Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowUpgrade, FromSequence: 4, ToSequence: 5,
			Lock: v1alpha1.LockRef{Commit: "c5", Path: "locks/local/dev/hub.lock.yaml"}}}
	if err := cl.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	args := map[string]string{argOperation: "backup", argJob: "dump", argBackupID: "before-5", argArtifact: "s3://backups/local/dev/before-5/hub"}
	tk.Status.Steps = []v1alpha1.TaskStep{{Name: "upgrade/pre/1:backup/backup/core/1:runJob", Mode: "core", Action: string(drivers.ActionRunJob),
		Args: args, State: v1alpha1.StepRunning, StartedAt: &now}}
	in := &resolver.Instance{Kind: resolver.KindInstance, ID: resolver.ID{Cluster: "local", Environment: "dev", Name: "hub"}, Sequence: 5, Context: &drivers.Context{}}
	newRun := func() *taskRun { return &taskRun{task: tk, log: logr.Discard(), instance: in} }

	// The Job as runJob builds it: given a copy of the Secret git names now.
	pod := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "db", Image: "busybox"}}}
	step := drivers.Step{Action: drivers.ActionRunJob, Component: "db", Job: "dump", Args: args}
	if err := r.withOperation(ctx, newRun(), step, &pod, &pod.Containers[0]); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: retriedJobName(tk, &tk.Status.Steps[0]), Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: pod}}}
	if err := cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}

	// A commit names another Secret before the job's output is read.
	secret = "keys-b"
	out := "uploading with AWS_SECRET_ACCESS_KEY=" + oldKey
	if got := r.redact(ctx, newRun(), out); strings.Contains(got, oldKey) {
		t.Errorf("redact = %q after backups.secret changed; want the key the job was given masked", got)
	}

	// The copy the job was given is gone: nothing tells what to mask.
	copied := pod.Containers[0].EnvFrom[0].SecretRef.Name
	if err := cl.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: copied, Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	if got := r.redact(ctx, newRun(), out); strings.Contains(got, oldKey) || !strings.Contains(got, "withheld") {
		t.Errorf("redact = %q with the job's copy of the credentials gone; want the output withheld, saying why", got)
	}
}
