package operator_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestDriverActionsAndUninstallActAsTheEnvironmentsServiceAccount pins
// that a task's driver actions and a deleted deployment's uninstall act
// as the service account the environment's policy names, not as the
// agent (which runs here with every right, so only impersonation can be
// refused):
//   - the shipped example Role without Jobs: the upgrade's migration
//     (runJob) is refused, naming the account, and the task fails;
//   - with Jobs granted again, `styrminctl retry` runs the upgrade as the
//     account (stop workers, migrate, start) and it succeeds;
//   - the StyrminDeployment records the account in status.appliedAs;
//   - the account may not delete Deployments: the deployment removed
//     from git stays installed, its uninstall refused naming the account;
//     granted again, the release is uninstalled.
func TestDriverActionsAndUninstallActAsTheEnvironmentsServiceAccount(t *testing.T) {
	t.Parallel()
	const sa = "styrmin-deployer"
	user := drivers.ServiceAccountUser(appNamespace, sa)
	e := startServiceAccountAppEnv(t, sa)
	editRole := e.roleEditor(t, client.ObjectKey{Namespace: appNamespace, Name: sa})
	var jobs rbacv1.PolicyRule
	editRole(func(r *rbacv1.Role) {
		r.Rules = slices.DeleteFunc(r.Rules, func(p rbacv1.PolicyRule) bool {
			if slices.Contains(p.APIGroups, "batch") {
				jobs = p
				return true
			}
			return false
		})
	})
	if len(jobs.Verbs) == 0 {
		t.Fatal("the example Role grants no Jobs: the test's premise is gone")
	}

	e.lock(t)
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", 1))
	if sd := e.deployment(t, appNamespace); sd.Status.AppliedAs != user {
		t.Fatalf("status.appliedAs %q, want %q", sd.Status.AppliedAs, user)
	}

	t.Log("the upgrade's migration Job is refused for the account")
	failed := e.change(t, "app", "app: 1.1.0", map[string][]byte{appDeployment: appConfig("1.1.0", "")})
	ft := e.waitTask(t, appNamespace, "app", failed)
	if ft.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(ft.Status.Message, "upgrade/pre/3:runJob") {
		t.Fatalf("app-%d: %s (%s), want Failed at its migration", failed, ft.Status.Phase, ft.Status.Message)
	}
	for _, want := range []string{"creating job", user, "policy.serviceAccountName", "forbidden"} {
		if !strings.Contains(ft.Status.Message, want) {
			t.Errorf("the failed task's message %q does not say %q", ft.Status.Message, want)
		}
	}

	t.Log("with Jobs granted, the retry runs the upgrade as the account")
	editRole(func(r *rbacv1.Role) { r.Rules = append(r.Rules, jobs) })
	e.ctl(t, "retry", "local/dev/app", "--push")
	rt := e.waitTask(t, appNamespace, "app", failed+1)
	requireSucceeded(t, rt)
	if got := strings.Join(stepNames(rt), " "); !strings.Contains(got, "stopComponents=Succeeded 3:runJob=Succeeded") || !strings.Contains(got, "startComponents=Succeeded") {
		t.Errorf("the retried upgrade's steps: %s", got)
	}

	t.Log("the deployment removed from git is uninstalled as the account")
	var apps rbacv1.PolicyRule
	editRole(func(r *rbacv1.Role) {
		for i, p := range r.Rules {
			if slices.Contains(p.APIGroups, "apps") {
				apps = *p.DeepCopy()
				r.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(p.Verbs), func(v string) bool { return v == "delete" })
			}
		}
	})
	e.commitConfig(t, "app: gone", map[string][]byte{appDeployment: nil})
	e.lock(t)
	key := client.ObjectKey{Namespace: appNamespace, Name: appNamespace}
	agenttest.WaitUntil(t, 60*time.Second, "the uninstall refused for the account", func(ctx context.Context) (bool, string, error) {
		var sd v1alpha1.StyrminDeployment
		if err := e.c.Get(ctx, key, &sd); err != nil {
			return false, "", err
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Reason != v1alpha1.ReasonUninstallFailed {
			return false, fmt.Sprintf("tombstone %v, Ready %+v", sd.Spec.Tombstone(), c), nil
		}
		return strings.Contains(c.Message, user) && strings.Contains(c.Message, "forbidden"), c.Message, nil
	})
	editRole(func(r *rbacv1.Role) {
		for i, p := range r.Rules {
			if slices.Contains(p.APIGroups, "apps") {
				r.Rules[i] = apps
			}
		}
	})
	agenttest.WaitUntil(t, 60*time.Second, "the release uninstalled and its StyrminDeployment gone", func(ctx context.Context) (bool, string, error) {
		var sd v1alpha1.StyrminDeployment
		err := e.c.Get(ctx, key, &sd)
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("StyrminDeployment: %v", err), client.IgnoreNotFound(err)
		}
		var d appsv1.Deployment
		err = e.c.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: "app-app"}, &d)
		return apierrors.IsNotFound(err), fmt.Sprintf("Deployment app-app: %v", err), client.IgnoreNotFound(err)
	})
}

// roleEditor returns a function that changes the Role named role.
func (e *agentEnv) roleEditor(t *testing.T, role client.ObjectKey) func(change func(r *rbacv1.Role)) {
	return func(change func(r *rbacv1.Role)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var r rbacv1.Role
			if err := e.c.Get(context.Background(), role, &r); err != nil {
				return err
			}
			change(&r)
			return e.c.Update(context.Background(), &r)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// startServiceAccountAppEnv is the faulty driver's app alone in dev (the
// examples' dev deployments would need accounts of their own), dev's
// policy naming service account sa, and config/tenancy's example
// environment applied for dev-app; nothing locked, no agent started.
func startServiceAccountAppEnv(t *testing.T, sa string) *agentEnv {
	t.Helper()
	repo := faultyRepo(t)
	repo["clusters/local/environments/dev/deployments/web.cue"] = nil
	repo["clusters/local/environments/dev/deployments/hub.cue"] = nil
	repo["clusters/local/environments/dev/environment.cue"] = &fstest.MapFile{Data: []byte(`namespacePrefix: "dev"
backupLocation:  "s3://backups/local/dev"
policy: serviceAccountName: "` + sa + `"
`)}
	e := startAgentEnvWith(t, repo)
	agenttest.Apply(t, e.c, "test", splitYAML(bytes.ReplaceAll(config.TenancyExample(), []byte("dev-web"), []byte(appNamespace))))
	return e
}

// TestDeletingTheNamespaceOfADeploymentThatAppliesAsAServiceAccountEnds:
// the service account, its Role and the Role that lets the agent act as
// it live in the deployment's namespace (config/tenancy). Deleting that
// namespace deletes them while the StyrminDeployment's finalizer waits to
// uninstall as the account, which is then forbidden for good: the
// namespace stayed Terminating. The agent uninstalls itself then.
func TestDeletingTheNamespaceOfADeploymentThatAppliesAsAServiceAccountEnds(t *testing.T) {
	t.Parallel()
	e := startServiceAccountAppEnv(t, "styrmin-deployer")
	e.lock(t)
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", 1))
	ctx := context.Background()
	if err := e.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNamespace}}); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 90*time.Second, "namespace "+appNamespace+" to be gone", func(ctx context.Context) (bool, string, error) {
		var ns corev1.Namespace
		err := e.c.Get(ctx, client.ObjectKey{Name: appNamespace}, &ns)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		var sd v1alpha1.StyrminDeployment
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: appNamespace}, &sd); err == nil {
			if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady); c != nil {
				return false, fmt.Sprintf("%s; the StyrminDeployment: %s: %s", ns.Status.Phase, c.Reason, c.Message), nil
			}
		}
		return false, string(ns.Status.Phase), nil
	})
}

// TestADriftCheckThatCannotReadTheObjectsLeavesReadyAlone: a drift check
// that fails (here the account may no longer read Deployments: a Role
// tightened by hand) says nothing of the workloads, which the agent reads
// itself. It turned Ready False (HealthCheckFailed), paging whoever alerts
// on Ready for a deployment that runs fine; now Drifted is Unknown, naming
// the failure, and Ready stays True.
func TestADriftCheckThatCannotReadTheObjectsLeavesReadyAlone(t *testing.T) {
	t.Parallel()
	const sa = "styrmin-deployer"
	e := startServiceAccountAppEnv(t, sa)
	e.lock(t)
	e.startAgent(t, "--drift-interval=2s")
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", 1))
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var r rbacv1.Role
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: sa}, &r); err != nil {
			return err
		}
		for i, p := range r.Rules {
			if slices.Contains(p.APIGroups, "apps") {
				r.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(p.Verbs), func(v string) bool { return v == "get" })
			}
		}
		return e.c.Update(ctx, &r)
	})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: appNamespace, Name: appNamespace}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var sd v1alpha1.StyrminDeployment
		if err := e.c.Get(ctx, key, &sd); err != nil {
			t.Fatal(err)
		}
		ready := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue {
			t.Fatalf("Ready after a drift check could not read the objects: %+v, want True", ready)
		}
		drifted := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted)
		if drifted != nil && drifted.Reason == v1alpha1.ReasonDriftCheckFailed {
			if drifted.Status != metav1.ConditionUnknown || !strings.Contains(drifted.Message, "forbidden") {
				t.Errorf("Drifted %+v, want Unknown naming the refused read", drifted)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failed drift check reported in 60 s: Drifted %+v", drifted)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestADriftCorrectionRefusedForOneObjectLeavesReadyAloneAndPutsTheRestBack:
// a correction the API server refused for one object (here the account
// may no longer patch app-app: a Role tightened by hand; a volume claim
// expanded by hand, which cannot shrink, is another) turned Ready False
// and back every drift interval with a Warning each time, stopped there
// so the drifted app-worker after it in install order was never put back,
// and recorded nothing of a correction. Now app-worker is put back and
// recorded, Drifted and a Warning name app-app and why, and Ready stays
// True throughout.
func TestADriftCorrectionRefusedForOneObjectLeavesReadyAloneAndPutsTheRestBack(t *testing.T) {
	t.Parallel()
	const sa = "styrmin-deployer"
	e := startServiceAccountAppEnv(t, sa)
	e.lock(t)
	e.startAgent(t, "--drift-interval=2s")
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", 1))
	ctx := context.Background()
	e.roleEditor(t, client.ObjectKey{Namespace: appNamespace, Name: sa})(func(r *rbacv1.Role) {
		for i, p := range r.Rules {
			if slices.Contains(p.APIGroups, "apps") {
				r.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(p.Verbs), func(v string) bool { return v == "patch" })
			}
		}
		r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"},
			ResourceNames: []string{"app-worker"}, Verbs: []string{"patch"}})
	})
	// A label of the Deployment, not of its pods: no rollout, so the
	// workloads' health has no reason to change.
	const label = "app.kubernetes.io/name"
	for _, name := range []string{"app-app", "app-worker"} {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var d appsv1.Deployment
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: name}, &d); err != nil {
				return err
			}
			d.Labels[label] = "by-hand"
			return e.c.Update(ctx, &d, client.FieldOwner("kubectl-label"))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	labelOf := func(name string) string {
		var d appsv1.Deployment
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: name}, &d); err != nil {
			t.Fatal(err)
		}
		return d.Labels[label]
	}
	key := client.ObjectKey{Namespace: appNamespace, Name: appNamespace}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var sd v1alpha1.StyrminDeployment
		if err := e.c.Get(ctx, key, &sd); err != nil {
			t.Fatal(err)
		}
		ready := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue {
			t.Fatalf("Ready after a drift correction was refused: %+v, want True", ready)
		}
		drifted := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted)
		recorded := sd.Status.LastDriftCorrection != nil && sd.Status.DriftCorrections > 0 &&
			slices.ContainsFunc(sd.Status.LastDriftCorrection.Objects, func(o v1alpha1.DriftedObject) bool { return o.Name == "app-worker" })
		if recorded && drifted != nil && drifted.Reason == v1alpha1.ReasonDriftCorrectionFailed {
			if drifted.Status != metav1.ConditionTrue || !strings.Contains(drifted.Message, "Deployment/app-app") || !strings.Contains(drifted.Message, "forbidden") {
				t.Errorf("Drifted %+v, want True naming app-app and its refusal", drifted)
			}
			if slices.ContainsFunc(sd.Status.LastDriftCorrection.Objects, func(o v1alpha1.DriftedObject) bool { return o.Name == "app-app" }) {
				t.Errorf("the correction recorded %+v, the refused app-app among them", sd.Status.LastDriftCorrection.Objects)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no correction of app-worker recorded beside app-app's refusal in 60 s: corrections %d %+v, Drifted %+v",
				sd.Status.DriftCorrections, sd.Status.LastDriftCorrection, drifted)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := labelOf("app-worker"); got != "faulty" {
		t.Errorf("app-worker's label %q after the correction, want the chart's", got)
	}
	if got := labelOf("app-app"); got != "by-hand" {
		t.Errorf("app-app's label %q, whose correction the account may not make", got)
	}
	agenttest.WaitUntil(t, 20*time.Second, "a Warning naming app-app's refusal", func(ctx context.Context) (bool, string, error) {
		var evs eventsv1.EventList
		if err := e.c.List(ctx, &evs, client.InNamespace(appNamespace)); err != nil {
			return false, err.Error(), nil
		}
		for _, ev := range evs.Items {
			if ev.Reason == v1alpha1.ReasonDriftCorrectionFailed && ev.Type == corev1.EventTypeWarning &&
				strings.Contains(ev.Note, "Deployment/app-app") && strings.Contains(ev.Note, "forbidden") {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d events, none yet", len(evs.Items)), nil
	})
}

// TestADeploymentAddedBackAfterAFailedDeletionWaitsForTheUninstallThenIsCreated:
// a deletion whose task failed (the uninstall refused for the account
// past the step's timeout) is no active instance, so the deployment added
// back ran as an update from the instance before it: no setup hook (a
// database's init) over what the uninstall, which goes on, deleted. The
// change now waits, saying why, until the uninstall ended, then installs
// the deployment anew, as a create with its setup hook.
func TestADeploymentAddedBackAfterAFailedDeletionWaitsForTheUninstallThenIsCreated(t *testing.T) {
	t.Parallel()
	const sa = "styrmin-deployer"
	e := startServiceAccountAppEnv(t, sa)
	ctx := context.Background()
	editRole := e.roleEditor(t, client.ObjectKey{Namespace: appNamespace, Name: sa})
	e.lock(t)
	e.startAgent(t, "--step-timeout=40s")
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", 1))

	var apps rbacv1.PolicyRule
	editRole(func(r *rbacv1.Role) {
		for i, p := range r.Rules {
			if slices.Contains(p.APIGroups, "apps") {
				apps = *p.DeepCopy()
				r.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(p.Verbs), func(v string) bool { return v == "delete" })
			}
		}
	})
	e.commitConfig(t, "app: gone", map[string][]byte{appDeployment: nil})
	deletion := e.lock(t)["app"]
	if dt := e.waitTask(t, appNamespace, "app", deletion); dt.Status.Phase != v1alpha1.TaskFailed {
		t.Fatalf("app-%d, the deletion: %s (%s), want Failed at its timeout", deletion, dt.Status.Phase, dt.Status.Message)
	}

	back := e.change(t, "app", "app: back", map[string][]byte{appDeployment: appConfig("1.0.0", "")})
	name := client.ObjectKey{Namespace: appNamespace, Name: v1alpha1.TaskName("app", back)}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		var tk v1alpha1.StyrminTask
		err := e.c.Get(ctx, name, &tk)
		if client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		c := apimeta.FindStatusCondition(tk.Status.Conditions, v1alpha1.ConditionReady)
		if tk.Status.Phase == v1alpha1.TaskPending && c != nil && c.Reason == v1alpha1.ReasonDeletionInProgress &&
			strings.Contains(c.Message, fmt.Sprintf("the deletion at sequence %d", deletion)) {
			t.Logf("app-%d waits: %s", back, c.Message)
			if out := e.ctl(t, "status", "--kubeconfig", e.kubeconfig); !strings.Contains(out, fmt.Sprintf("local/dev/app: sequence %d: waiting for the deletion at sequence %d", back, deletion)) {
				t.Errorf("styrminctl status does not say why app waits:\n%s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("app-%d (%v): %s, %+v; want it pending, waiting for the deletion's uninstall", back, err, tk.Status.Phase, c)
		}
	}
	editRole(func(r *rbacv1.Role) {
		for i, p := range r.Rules {
			if slices.Contains(p.APIGroups, "apps") {
				r.Rules[i] = apps
			}
		}
	})
	rt := e.waitTask(t, appNamespace, "app", back)
	requireSucceeded(t, rt)
	if rt.Status.Workflow != v1alpha1.WorkflowCreate || !strings.HasPrefix(rt.Status.Steps[0].Name, "setup/") {
		t.Fatalf("app-%d ran %s (%v); want a create, its setup hook", back, rt.Status.Workflow, stepNames(rt))
	}
}
