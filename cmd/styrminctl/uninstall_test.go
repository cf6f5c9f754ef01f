package main

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/testcluster"
)

// uninstall removes Styrmin and leaves the applications running: it stops
// the agent first (and refuses while another agent pod runs), strips the
// agent's finalizers so that an application's namespace can be deleted
// without hanging, deletes the Styrmin objects, the CRDs and install's
// objects, never the application's objects or its Helm release Secret,
// and a second run finds nothing to do. The ended Jobs of the agent's
// task steps go (they stayed in the namespaces for good, nothing pruning
// them any more); one that runs is left to end, named, and the chart's
// own Jobs stay.
func TestUninstallLeavesApplicationsRunningLetsTheirNamespacesGoAndCanRunTwice(t *testing.T) {
	t.Parallel()
	c := testcluster.StartT(t, testcluster.Options{Workloads: true})
	kc := c.KubeconfigPath
	ctx := context.Background()
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runCluster(t, kc, "install", "--cluster", "local", "--repo", "https://git.example.com/platform/desired-state.git", "--image", "agent:test"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	eventually := func(what string, cond func() (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) { return cond() }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	agentPods := func(ns string) int {
		t.Helper()
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "styrmin-agent"}); err != nil {
			t.Fatal(err)
		}
		return len(pods.Items)
	}
	eventually("the agent's pods run", func() (bool, error) { return agentPods("styrmin-system") == 2, nil })

	// An application: its namespace, a ConfigMap, its Helm release
	// record, and the StyrminDeployment the agent holds with its
	// finalizer (written as the agent: the admission policy lets no one
	// else create one); a backup the agent holds too.
	agentCfg := rest.CopyConfig(c.RESTConfig)
	agentCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:styrmin-system:styrmin-agent"}
	acl, err := client.New(agentCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "app"}, Data: map[string]string{"k": "v"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.web.v1", Namespace: "app", Labels: map[string]string{"owner": "helm", "name": "web"}},
			Type: "helm.sh/release.v1", Data: map[string][]byte{"release": []byte("H4sI")}},
		&v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "app", Finalizers: []string{v1alpha1.FinalizerRelease}},
			Spec: *fixtureInstance("dev", "web", 1, v1alpha1.KindInstance, "webapp@1.1.0", "1.25.0")},
		&v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "styrmin-system", Finalizers: []string{operation.Finalizer}},
			Spec: v1alpha1.StyrminBackupSpec{Environment: "dev"}},
	} {
		writer := cl
		if _, ok := o.(*v1alpha1.StyrminDeployment); ok {
			writer = acl
		}
		if err := writer.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(o client.Object) bool {
		t.Helper()
		err := cl.Get(ctx, client.ObjectKeyFromObject(o), o)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	// The Jobs of its tasks' steps (one ended, one running) and the
	// chart's own.
	endedJob, runningJob, chartJob := stepJobs(t, cl)
	sd := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "app"}}

	// Another agent runs (a second installation): nothing is removed.
	rogue := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "styrmin-agent-elsewhere", Namespace: "default", Labels: map[string]string{"app.kubernetes.io/name": "styrmin-agent"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:test"}}}}
	if err := cl.Create(ctx, rogue); err != nil {
		t.Fatal(err)
	}
	out, err := runCluster(t, kc, "uninstall")
	if err == nil || !strings.Contains(err.Error(), "default/styrmin-agent-elsewhere") || !strings.Contains(err.Error(), "no Styrmin object was removed") {
		t.Fatalf("uninstall with another agent running: err = %v\n%s", err, out)
	}
	if !exists(sd) || len(sd.Finalizers) != 1 {
		t.Fatalf("a refused uninstall touched the StyrminDeployment: %+v", sd.ObjectMeta)
	}
	// It stopped the agent first, and returned once its pods had ended.
	if !strings.HasPrefix(out, "Deployment styrmin-system/styrmin-agent scaled to 0 replicas\n") || agentPods("styrmin-system") != 0 {
		t.Errorf("the agent was not stopped first (%d pods left):\n%s", agentPods("styrmin-system"), out)
	}
	if err := cl.Delete(ctx, rogue, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	eventually("the other agent's pod goes", func() (bool, error) { return !exists(&corev1.Pod{ObjectMeta: rogue.ObjectMeta}), nil })

	out, err = runCluster(t, kc, "uninstall")
	t.Log("\n" + out)
	if err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	for _, want := range []string{
		"StyrminDeployment app/app: finalizer styrmin.io/release removed (its application is not uninstalled)",
		"StyrminBackup styrmin-system/nightly: finalizer styrmin.io/operation-tasks removed",
		"1 StyrminDeployment(s) deleted",
		"CustomResourceDefinition styrmindeployments.styrmin.io deleted",
		"ClusterRole styrmin-agent deleted",
		"ValidatingAdmissionPolicy styrmin-agent-writes-tasks deleted",
		"Namespace styrmin-system deleted",
		"Styrmin removed. The applications keep running as plain Helm releases",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall does not say %q", want)
		}
	}
	// The agent's bindings went before its objects: an agent scaled up
	// again meanwhile can then uninstall nothing.
	if unbound, stripped := strings.Index(out, "ClusterRoleBinding styrmin-agent deleted"), strings.Index(out, "StyrminDeployment app/app: finalizer"); unbound < 0 || unbound > stripped {
		t.Errorf("the agent's ClusterRoleBinding was not deleted before the StyrminDeployments' finalizers were removed:\n%s", out)
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := cl.List(ctx, &crds); err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds.Items {
		if crd.Spec.Group == v1alpha1.Group {
			t.Errorf("CRD %s remains", crd.Name)
		}
	}
	// The application is untouched: its objects and release record stay.
	if !exists(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "app"}}) ||
		!exists(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.web.v1", Namespace: "app"}}) {
		t.Fatal("uninstall deleted the application's objects")
	}
	// Its steps' Job that ended goes; the running one is left to end,
	// named; the chart's stays.
	if exists(endedJob) && endedJob.DeletionTimestamp.IsZero() {
		t.Errorf("the ended Job of a task's step, %s, stays after uninstall", endedJob.Name)
	}
	if !exists(runningJob) || !runningJob.DeletionTimestamp.IsZero() || !exists(chartJob) || !chartJob.DeletionTimestamp.IsZero() {
		t.Errorf("uninstall deleted a step's Job that runs (%s) or the chart's own (%s)", runningJob.Name, chartJob.Name)
	}
	for _, want := range []string{"1 ended Job(s) of the agent's task steps deleted in namespace app", "Job app/web-seed-1 of task web-1 has not ended: left to end"} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall does not say %q", want)
		}
	}

	// Its namespace can go: nothing waits for the agent.
	if err := cl.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"app", "styrmin-system"} {
		eventually("namespace "+ns+" is deleted", func() (bool, error) {
			return !exists(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}), nil
		})
	}

	out, err = runCluster(t, kc, "uninstall")
	if err != nil || !strings.HasPrefix(out, "nothing to remove") {
		t.Fatalf("second uninstall: %v\n%s", err, out)
	}
}

// uninstall refuses, changing nothing, while a StyrminTask runs: the
// replicas its stopComponents step scaled the application down from live
// only in its status. --force goes on and prints them. An evicted or
// failed agent pod, which scaling to 0 leaves, does not hold it up.
func TestUninstallRefusesWhileATaskRunsAndForcePrintsItsRecordedReplicas(t *testing.T) {
	t.Parallel()
	c := testcluster.StartT(t, testcluster.Options{Workloads: true})
	kc := c.KubeconfigPath
	ctx := context.Background()
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runCluster(t, kc, "install", "--cluster", "local", "--repo", "https://git.example.com/platform/desired-state.git", "--image", "agent:test"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	eventually := func(what string, cond func() (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) { return cond() }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	agent := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "styrmin-agent", Namespace: "styrmin-system"}}
	eventually("the agent is available", func() (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(agent), agent)
		return err == nil && agent.Status.AvailableReplicas == 2, err
	})

	// A failed agent pod (evicted): owned by something else than the
	// agent's ReplicaSet, which would adopt it, and schedulable nowhere.
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "evictor", Namespace: "styrmin-system"}}
	if err := cl.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	yes := true
	failed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "styrmin-agent-evicted", Namespace: "styrmin-system", Labels: map[string]string{"app.kubernetes.io/name": "styrmin-agent"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"nowhere": "true"},
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "agent", Image: "agent:test", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: new(bool), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	if err := cl.Create(ctx, failed); err != nil {
		t.Fatal(err)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // the scheduler writes it too
		if err := cl.Get(ctx, client.ObjectKeyFromObject(failed), failed); err != nil {
			return err
		}
		failed.Status.Phase, failed.Status.Reason, failed.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		return cl.Status().Update(ctx, failed)
	}); err != nil {
		t.Fatal(err)
	}

	// A running task, written as the agent (only it may), whose
	// stopComponents step scaled a worker down from 3.
	agentCfg := rest.CopyConfig(c.RESTConfig)
	agentCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:styrmin-system:styrmin-agent"}
	acl, err := client.New(agentCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	task := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: "dev-web-2", Namespace: "styrmin-system"},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "web"}, Namespace: "app",
			Workflow: v1alpha1.WorkflowUpgrade, FromSequence: 1, ToSequence: 2, Lock: v1alpha1.LockRef{Commit: strings.Repeat("a", 40), Path: "locks/local/dev/web.lock.yaml"}}}
	if err := acl.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
	task.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, Workflow: v1alpha1.WorkflowUpgrade, CurrentStep: 1, Steps: []v1alpha1.TaskStep{
		{Name: "upgrade/pre/1:stopComponents", Mode: "pre", Action: "stopComponents", Components: []string{"worker"}, State: v1alpha1.StepSucceeded,
			Recorded: map[string]string{"Deployment/worker": "3"}},
		{Name: "upgrade/core/2:helmUpgrade", Mode: "core", Action: "helmUpgrade", State: v1alpha1.StepRunning},
	}}
	if err := acl.Status().Update(ctx, task); err != nil {
		t.Fatal(err)
	}

	out, err := runCluster(t, kc, "uninstall", "--timeout", "20s")
	if err == nil || !strings.Contains(err.Error(), "StyrminTask styrmin-system/dev-web-2 (deployment local/dev/web in namespace app, Running)") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("uninstall during a running task: err = %v\n%s", err, out)
	}
	if out != "" {
		t.Errorf("a refused uninstall did something:\n%s", out)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(agent), agent); err != nil || agent.Spec.Replicas == nil || *agent.Spec.Replicas != 2 {
		t.Errorf("a refused uninstall changed the agent: %v, replicas %v", err, agent.Spec.Replicas)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(task), task); err != nil {
		t.Errorf("a refused uninstall deleted the task: %v", err)
	}

	out, err = runCluster(t, kc, "uninstall", "--force", "--timeout", "20s")
	t.Log("\n" + out)
	if err != nil {
		t.Fatalf("uninstall --force: %v\n%s", err, out)
	}
	for _, want := range []string{
		"Deployment styrmin-system/styrmin-agent scaled to 0 replicas",
		"--force: StyrminTask styrmin-system/dev-web-2 (deployment local/dev/web in namespace app, Running) not ended; its stopComponents steps stopped, in namespace app, Deployment/worker: 3 replicas",
		"1 StyrminTask(s) deleted",
		"Styrmin removed.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall --force does not say %q", want)
		}
	}
}

// stepJobs makes in namespace app the Jobs of deployment dev/web's task
// web-1's steps, as the agent labels them, one ended (web-migrate-1) and
// one running (web-seed-1), and a Job of its chart (no task label). They
// are suspended: no Job controller starts their pods.
func stepJobs(t *testing.T, cl client.Client) (ended, running, chart *batchv1.Job) {
	t.Helper()
	ctx := context.Background()
	job := func(name string, step bool) *batchv1.Job {
		labels := map[string]string{"app.kubernetes.io/name": "web"}
		if step {
			labels = v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "web"}.Labels()
			labels[v1alpha1.LabelTask] = "web-1"
		}
		yes := true
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", Labels: labels},
			Spec: batchv1.JobSpec{Suspend: &yes, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}}}
		if err := cl.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	ended, running, chart = job("web-migrate-1", true), job("web-seed-1", true), job("web-chart-hook", false)
	// Ended as the Job controller ends one; it writes the status too.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(ended), ended); err != nil {
			return err
		}
		now := metav1.Now()
		ended.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}}
		return cl.Status().Update(ctx, ended)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ended, running, chart
}
