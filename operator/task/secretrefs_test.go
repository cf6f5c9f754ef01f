package task

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// TestWhatAStepReportsHasTheValuesOfTheSecretsItsSecretParametersNameMasked
// pins that a step's output (a Job's logs, an exec's output, an error)
// has the values of the Secrets the deployment's #SecretRef parameters
// name masked, as the sensitive values and the backup credentials are.
// A job takes its pod template from the component's workload, which reads
// them (a migration's DATABASE_URL), and printed them unmasked into the
// task's status. A value too short to be told from text is left, and a
// struct parameter shaped like a reference is not one.
func TestWhatAStepReportsHasTheValuesOfTheSecretsItsSecretParametersNameMasked(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d, err := drivers.Load(fstest.MapFS{
		"driver.cue": {Data: []byte(`name:        "refs"
version:     "1.0.0"
appVersions: ">=1.0.0"
chart:       "chart"
parameters: {
	// The database's password.
	password: #SecretRef
	// A short token.
	pin: #SecretRef
	// Not a reference, though shaped like one.
	lookalike: *{name: "plain", key: "text"} | {name: string, key: string}
}
components: app: workloads: [{kind: "Deployment", name: context.deployment.name}]
values: {}
actions: {
	backup: core: [{action: "runJob", component: "app", job: "dump", command: ["dump"]}]
	restore: core: [{action: "runJob", component: "app", job: "load", command: ["load"]}]
}
`)},
		"chart/Chart.yaml": {Data: []byte("apiVersion: v2\nname: refs\nversion: 1.0.0\n")},
		"chart/templates/deployment.yaml": {Data: []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  selector:
    matchLabels: {app: refs}
  template:
    metadata:
      labels: {app: refs}
    spec:
      containers: [{name: app, image: busybox}]
`)},
	}, drivers.LoadOptions{Source: "drivers/refs/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]map[string][]byte{
		"db":    {"password": []byte("s3cr3t-Pa55\n"), "user": []byte("not-named-by-any-parameter")},
		"pins":  {"pin": []byte("1234")},
		"plain": {"text": []byte("shown-as-it-is")},
	} {
		if err := cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	r := driverReconciler(t, cl, d)
	in := jobsInstanceWith(t, d, ns, 1, "1.0.0", map[string]any{
		"password": map[string]any{"name": "db", "key": "password"},
		"pin":      map[string]any{"name": "pins", "key": "pin"},
	})
	run := &taskRun{task: &v1alpha1.StyrminTask{Spec: v1alpha1.StyrminTaskSpec{Namespace: ns}}, log: logr.Discard(), instance: in}

	got := r.redact(ctx, run, "migrate: connecting to postgres://app:s3cr3t-Pa55@db/app failed (pin 1234, user not-named-by-any-parameter, shown-as-it-is)")
	if strings.Contains(got, "s3cr3t-Pa55") || !strings.Contains(got, "postgres://app:"+resolver.Masked+"@db") {
		t.Errorf("redact = %q; want the password masked", got)
	}
	for _, kept := range []string{"pin 1234", "not-named-by-any-parameter", "shown-as-it-is"} {
		if !strings.Contains(got, kept) {
			t.Errorf("redact = %q; want %q kept (too short, or no secret parameter names it)", got, kept)
		}
	}

	// An upgrade's backup first runs the running instance's pod, whose
	// references name another Secret: its values are masked too.
	if err := cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "olddb", Namespace: ns}, Data: map[string][]byte{"password": []byte("0ld-Pa55word")}}); err != nil {
		t.Fatal(err)
	}
	running := jobsInstanceWith(t, d, ns, 1, "1.0.0", map[string]any{
		"password": map[string]any{"name": "olddb", "key": "password"},
		"pin":      map[string]any{"name": "pins", "key": "pin"},
	})
	spec, err := instance.SpecFromInstance(running)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Name: instance.Key(ns).Name, Namespace: ns}, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	in.Sequence = 2
	upgrade := &taskRun{task: &v1alpha1.StyrminTask{Spec: v1alpha1.StyrminTaskSpec{Namespace: ns}, Status: v1alpha1.StyrminTaskStatus{Steps: []v1alpha1.TaskStep{
		{Name: "upgrade/pre/1:backup/backup/core/1:runJob", Action: "runJob", Args: map[string]string{argOperation: "backup"}}}}}, log: logr.Discard(), instance: in}
	got = r.redact(ctx, upgrade, "dump: postgres://app:0ld-Pa55word@db and s3cr3t-Pa55")
	if strings.Contains(got, "0ld-Pa55word") || strings.Contains(got, "s3cr3t-Pa55") {
		t.Errorf("redact = %q; want the running and the new instances' passwords masked", got)
	}
}
