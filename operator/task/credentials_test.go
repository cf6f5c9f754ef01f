package task

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// TestTheBackupCredentialsAJobWasGivenAreMaskedInWhatItsStepReports
// pins what a backup's or restore's step reports: its jobs get the
// location's credentials as environment variables (a copy of the Secret
// git names), and their logs become the step's output in the task's
// status, which more people read than the Secret. Only the deployment's
// own sensitive values were masked there. The fake nodes run no pods, so
// the job's logs are written here; the Secret, its copy and the job's
// container are the API server's and withOperation's.
func TestTheBackupCredentialsAJobWasGivenAreMaskedInWhatItsStepReports(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"styrmin-system", "data-hub"} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	const (
		keyID  = "AKIAEXAMPLEKEYID0001"
		secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
		short  = "test" // too short to mask: see minCredentialLength
	)
	if err := cl.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "backup-credentials", Labels: map[string]string{LabelBackupCredentials: "true"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": keyID, "AWS_SECRET_ACCESS_KEY": secret + "\n", "AWS_PROFILE": short},
	}); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{opts: Options{Client: cl, APIReader: cl, AgentNamespace: "styrmin-system",
		BackupSettings: func(_ context.Context, cluster, env string) (resolver.EnvironmentBackups, error) {
			return resolver.EnvironmentBackups{Cluster: cluster, Environment: env, Location: "s3://backups/local/data", Secret: "backup-credentials"}, nil
		}}, own: Actor{Writer: cl, Reader: cl}}
	hub := v1alpha1.DeploymentID{Cluster: "local", Environment: "data", Name: "hub"}
	running := &resolver.Instance{ID: resolver.ID{Cluster: "local", Environment: "data", Name: "hub"}, Sequence: 3, Context: &drivers.Context{}}
	// What a job that prints its environment, and its credentials as a
	// tool would encode them, writes to its log.
	logs := "AWS_ACCESS_KEY_ID=" + keyID + "\nAWS_SECRET_ACCESS_KEY=" + secret + "\nAWS_PROFILE=" + short + "\n" +
		"signed with " + base64.StdEncoding.EncodeToString([]byte(secret)) + "\nstyrmin-backup-size=1234\n"

	jobOf := func(run *taskRun, step drivers.Step) {
		t.Helper()
		var pod corev1.PodSpec
		var ctr corev1.Container
		if err := r.withOperation(ctx, run, step, &pod, &ctr); err != nil {
			t.Fatal(err)
		}
		if len(ctr.EnvFrom) != 1 || ctr.EnvFrom[0].SecretRef == nil {
			t.Fatalf("the job of %s gets %+v, want the credentials' copy", run.task.Name, ctr.EnvFrom)
		}
	}
	check := func(what, got string) {
		t.Helper()
		if leaks := secrettest.Find([]byte(got), keyID, secret); len(leaks) > 0 {
			t.Errorf("%s holds the credentials: %s\n%s", what, strings.Join(leaks, "; "), got)
		}
		if !strings.Contains(got, "styrmin-backup-size=1234") || !strings.Contains(got, "AWS_PROFILE="+short+"\n") {
			t.Errorf("%s lost what is no credential (the size line, a value of %d characters): %s", what, len(short), got)
		}
	}

	// A restore's task: its step's output as endStep writes it.
	restore := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: "data-hub", Name: "hub-restore-fix", UID: "u-restore"},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: hub, Namespace: "data-hub", ToSequence: 3,
			Operation: &v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: "fix", BackupID: "monday",
				Artifact: "s3://backups/local/data/monday/hub", Secret: "backup-credentials", Attempt: 1}},
	}
	run := &taskRun{task: restore, instance: running}
	jobOf(run, drivers.Step{Action: drivers.ActionRunJob, Component: "db", Job: "load"})
	var st v1alpha1.TaskStep
	r.endStep(ctx, &taskRun{task: restore, instance: running}, &st, v1alpha1.StepFailed, logs, "job load failed")
	check("the restore step's output", st.Output)

	// An upgrade's backup first: a change's step runs the backup hook.
	now := metav1.Now()
	upgrade := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: "data-hub", Name: "hub-4", UID: "u-upgrade"},
		Spec:       v1alpha1.StyrminTaskSpec{Deployment: hub, Namespace: "data-hub", ToSequence: 4},
		Status: v1alpha1.StyrminTaskStatus{Steps: []v1alpha1.TaskStep{{Name: "upgrade/pre/1:backup/core/1:runJob", StartedAt: &now,
			Args: map[string]string{argOperation: "backup", argBackupID: "data-hub-before-4", argArtifact: "s3://backups/local/data/data-hub-before-4/hub"}}}},
	}
	run = &taskRun{task: upgrade, instance: running}
	step := drivers.Step{Action: drivers.ActionRunJob, Component: "db", Job: "dump", Args: upgrade.Status.Steps[0].Args}
	jobOf(run, step)
	check("the upgrade's backup step's output", r.redact(ctx, &taskRun{task: upgrade, instance: running}, logs))
}
