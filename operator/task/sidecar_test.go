package task

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// sidecarDriver is a driver whose workload runs its application beside a
// proxy that never exits (as a database proxy does), after an init
// container, with a runJob step that runs in container (empty: the
// first).
func sidecarDriver(t *testing.T, container string) *drivers.Driver {
	t.Helper()
	args := ""
	if container != "" {
		args = `, args: {container: "` + container + `"}`
	}
	return jobsDriverWithPod(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]`+args+`}]`, `      initContainers:
        - name: wait-for-db
          image: busybox
          command: ["true"]
      containers:
        - name: app
          image: app
          args: ["serve"]
          readinessProbe: {httpGet: {path: /ready, port: 8080}}
        - name: proxy
          image: proxy
          args: ["--port=5432"]
          livenessProbe: {tcpSocket: {port: 5432}}
`)
}

// TestARunJobStepRunsTheWorkloadsOtherContainersAsSidecarsThatEndWithIt
// pins that a Job made from a workload with more than one container can
// end: the step's command runs in the pod's only container, and the
// workload's other containers run as native sidecars (init containers
// that restart always, after the workload's own init containers), which
// Kubernetes stops once the command ended. As plain containers beside it,
// a proxy that never exits kept the Job running until the step's
// timeout failed it, whatever the migration did.
func TestARunJobStepRunsTheWorkloadsOtherContainersAsSidecarsThatEndWithIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, container  string
		runs, sidecar    string
		runsImage        string
		sidecarArgsCheck []string
	}{
		{name: "the first container runs the command", runs: "app", sidecar: "proxy", runsImage: "app", sidecarArgsCheck: []string{"--port=5432"}},
		{name: "the container the step names runs it", container: "proxy", runs: "proxy", sidecar: "app", runsImage: "proxy", sidecarArgsCheck: []string{"serve"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const ns = "dev-jobs"
			cl := withCRDs(t, ns)
			ctx := context.Background()
			d := sidecarDriver(t, tc.container)
			r := driverReconciler(t, cl, d)
			tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}); err != nil {
				t.Fatal(err)
			}
			var job batchv1.Job
			if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}, &job); err != nil {
				t.Fatalf("the step's Job: %v", err)
			}
			spec := job.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("the Job's pod has %d containers (%v), want only the one that runs the command", len(spec.Containers), names(spec.Containers))
			}
			c := spec.Containers[0]
			if c.Name != tc.runs || c.Image != tc.runsImage || len(c.Command) != 1 || c.Command[0] != "migrate" || len(c.Args) != 0 {
				t.Errorf("the Job's container is %s (image %s, command %v, args %v), want %s running [migrate] without the workload's args", c.Name, c.Image, c.Command, c.Args, tc.runs)
			}
			if got := names(spec.InitContainers); len(got) != 2 || got[0] != "wait-for-db" || got[1] != tc.sidecar {
				t.Fatalf("the Job's init containers are %v, want [wait-for-db %s]: the workload's own first, then its other container as a sidecar", got, tc.sidecar)
			}
			if p := spec.InitContainers[0].RestartPolicy; p != nil {
				t.Errorf("the workload's own init container got restartPolicy %s: it must still run to completion first", *p)
			}
			side := spec.InitContainers[1]
			if side.RestartPolicy == nil || *side.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("the sidecar %s has restartPolicy %v, want Always (a native sidecar, stopped when the command ends)", side.Name, side.RestartPolicy)
			}
			if len(side.Args) != len(tc.sidecarArgsCheck) || side.Args[0] != tc.sidecarArgsCheck[0] || len(side.Command) != 0 {
				t.Errorf("the sidecar %s runs command %v args %v, want the workload's own (args %v)", side.Name, side.Command, side.Args, tc.sidecarArgsCheck)
			}
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				if c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil {
					t.Errorf("container %s of the Job keeps a probe of the workload's", c.Name)
				}
			}
		})
	}
}

// names are the containers' names.
func names(cs []corev1.Container) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// TestAJobsLogIsItsCommandContainers pins which container's log is a
// runJob step's output: the one that runs the step's command. A Job this
// agent makes has only that one (the others are sidecars); one an older
// agent made, still running across the upgrade, has every container of
// the workload, and the command's is the one args.container named, not
// always the first.
func TestAJobsLogIsItsCommandContainers(t *testing.T) {
	migrate := []string{"migrate", "--all"}
	for _, tc := range []struct {
		name string
		cs   []corev1.Container
		want string
	}{
		{"the only container", []corev1.Container{{Name: "app", Command: migrate}}, "app"},
		{"an older agent's Job, the command in the second", []corev1.Container{{Name: "app", Args: []string{"serve"}}, {Name: "tools", Command: migrate}}, "tools"},
		{"an older agent's Job, the command in the first", []corev1.Container{{Name: "app", Command: migrate}, {Name: "proxy"}}, "app"},
		{"no container runs it: the first", []corev1.Container{{Name: "app"}, {Name: "proxy"}}, "app"},
	} {
		if got := commandContainer(tc.cs, migrate); got != tc.want {
			t.Errorf("%s: the log of %s, want %s", tc.name, got, tc.want)
		}
	}
}
