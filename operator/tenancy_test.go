package operator_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// tenantDriver loads the tenancy test driver (testdata/drivers/tenant).
func tenantDriver(t *testing.T) *drivers.Driver {
	t.Helper()
	d, err := drivers.Load(os.DirFS("testdata/drivers/tenant/1.0.0"), drivers.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// tenantInstance is what the resolver makes of a deployment local/dev/name
// of the tenant driver in namespace dev-<name> under policy, with params.
func tenantInstance(t *testing.T, d *drivers.Driver, name string, seq int64, policy *drivers.Policy, params map[string]any) *resolver.Instance {
	t.Helper()
	applied, err := d.ApplyParameters(params)
	if err != nil {
		t.Fatal(err)
	}
	ctx := drivers.Context{
		Cluster:     drivers.ClusterContext{Name: "local"},
		Environment: drivers.EnvironmentContext{Name: "dev", Namespace: "dev", Policy: policy},
		Deployment:  drivers.DeploymentContext{Name: name, Namespace: "dev-" + name, AppVersion: "1.0.0", Driver: d.Name, DriverVersion: d.Version},
		Parameters:  applied,
	}
	values, err := d.Values(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := &resolver.Instance{
		APIVersion: resolver.APIVersion, Kind: resolver.KindInstance,
		ID:       resolver.ID{Cluster: "local", Environment: "dev", Name: name},
		Sequence: seq, SourceCommit: "0123456789abcdef0123456789abcdef01234567",
		Driver:     resolver.DriverRef{Name: d.Name, Version: d.Version, Digest: d.Digest},
		AppVersion: "1.0.0", Context: &ctx, Values: values,
	}
	if in.Digest, err = in.ComputeDigest(); err != nil {
		t.Fatal(err)
	}
	return in
}

// condition waits until the StyrminDeployment of ns has condition typ
// with reason, and returns its message.
func (e *env) condition(t *testing.T, ns, typ, reason string) string {
	t.Helper()
	var msg string
	agenttest.WaitUntil(t, 60*time.Second, fmt.Sprintf("%s to be %s with reason %s", ns, typ, reason), func(ctx context.Context) (bool, string, error) {
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, typ)
		if c == nil {
			return false, fmt.Sprintf("%v", sd.Status.Conditions), nil
		}
		msg = c.Message
		return c.Reason == reason, fmt.Sprintf("%v", sd.Status.Conditions), nil
	})
	return msg
}

// splitYAML splits a multi-document manifest.
func splitYAML(data []byte) [][]byte {
	var out [][]byte
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if strings.TrimSpace(doc) != "" {
			out = append(out, []byte(doc))
		}
	}
	return out
}

// TestAgentAppliesAsTheEnvironmentsServiceAccount pins impersonation end
// to end: an environment whose policy names a service account with no
// RoleBinding has its deployment refused by the API server (Ready false,
// reason Forbidden, naming the account), and the example Role
// (config/tenancy) makes it install, as that account.
func TestAgentAppliesAsTheEnvironmentsServiceAccount(t *testing.T) {
	t.Parallel()
	d := tenantDriver(t)
	e := startEnvWith(t, d)
	ctx := context.Background()
	const ns, sa = "dev-web", "styrmin-deployer"
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := e.client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}); err != nil {
		t.Fatal(err)
	}
	in := tenantInstance(t, d, "web", 1, &drivers.Policy{ServiceAccountName: sa}, map[string]any{})
	e.write(t, ns, in)
	msg := e.condition(t, ns, v1alpha1.ConditionReady, v1alpha1.ReasonForbidden)
	for _, want := range []string{"service account dev-web/styrmin-deployer", "policy.serviceAccountName", "forbidden", "system:serviceaccount:dev-web:styrmin-deployer"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ready message %q does not say %q", msg, want)
		}
	}

	t.Log("the example environment's Role lets the account apply")
	agenttest.Apply(t, e.client, "test", splitYAML(config.TenancyExample()))
	e.waitApplied(t, ns, 1)
	var cm corev1.ConfigMap
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-config"}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["data"] != "one" {
		t.Fatalf("config map data %v", cm.Data)
	}
}

// TestAgentRefusesObjectsOutsideThePolicy pins the agent's own check of
// an instance that leaves its environment's policy (a lock written around
// the CLI's check): a ClusterRole under the default policy stalls the
// StyrminDeployment (PolicyViolation, naming the deployment, the object
// and the rule) and applies nothing, and a task of the same instance ends
// Failed with that reason before any step.
func TestAgentRefusesObjectsOutsideThePolicy(t *testing.T) {
	t.Parallel()
	d := tenantDriver(t)
	e := startEnvWith(t, d)
	ctx := context.Background()
	in := tenantInstance(t, d, "cr", 1, nil, map[string]any{"clusterRole": true})
	ns := in.Context.Deployment.Namespace
	e.write(t, ns, in)
	msg := e.condition(t, ns, v1alpha1.ConditionStalled, v1alpha1.ReasonPolicyViolation)
	for _, want := range []string{"local/dev/cr", "ClusterRole cr-reader", "cluster-scoped", "policy kinds"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Stalled message %q does not say %q", msg, want)
		}
	}
	var cms corev1.ConfigMapList
	if err := e.client.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/managed-by": "Helm"}); err != nil || len(cms.Items) != 0 {
		t.Fatalf("a refused instance applied objects: %v, %d", err, len(cms.Items))
	}

	r, err := task.NewReconciler(task.Options{Client: e.client, Drivers: &driversource.CatalogSource{Catalog: e.workspace.Catalog}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	other := tenantInstance(t, d, "away", 1, nil, map[string]any{"otherNamespace": "dev-web"})
	got := runHandMadeTask(t, e, r, other, "dev-away", nil)
	if got.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(got.Status.Message, v1alpha1.ReasonPolicyViolation) ||
		!strings.Contains(got.Status.Message, "ConfigMap dev-web/away-elsewhere") || !strings.Contains(got.Status.Message, "policy namespaces") {
		t.Fatalf("task of an instance outside its namespaces: %s %q; want Failed, PolicyViolation naming the ConfigMap", got.Status.Phase, got.Status.Message)
	}
	if c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionStalled); c == nil || c.Reason != v1alpha1.ReasonPolicyViolation {
		t.Errorf("Stalled condition %+v, want reason %s", c, v1alpha1.ReasonPolicyViolation)
	}
}

// runHandMadeTask creates a task for in in namespace ns (carrying in,
// pointing at lock when given, naming specNS as spec.namespace when given,
// else ns) and reconciles it once.
func runHandMadeTask(t *testing.T, e *env, r *task.Reconciler, in *resolver.Instance, ns string, lock *v1alpha1.LockRef, specNS ...string) *v1alpha1.StyrminTask {
	t.Helper()
	ctx := context.Background()
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	spec, err := instance.SpecFromInstance(in)
	if err != nil {
		t.Fatal(err)
	}
	id := v1alpha1.DeploymentID{Cluster: in.ID.Cluster, Environment: in.ID.Environment, Name: in.ID.Name}
	ref := v1alpha1.LockRef{Commit: in.SourceCommit, Path: in.ID.LockPath()}
	if lock != nil {
		ref = *lock
	}
	named := ns
	if len(specNS) > 0 {
		named = specNS[0]
	}
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(in.ID.Name, in.Sequence), Namespace: ns, Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: named, Workflow: v1alpha1.WorkflowCreate,
			ToSequence: in.Sequence, Lock: ref, Instance: &spec},
	}
	if err := e.client.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.StyrminTask
	if err := e.client.Get(ctx, client.ObjectKeyFromObject(tk), &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// TestHandMadeTaskIsRefused pins that a StyrminTask that is not the change
// its lock records (an instance of its own, or another namespace than the
// deployment's) ends Failed and Stalled with reason LockMismatch, and
// writes no StyrminDeployment.
func TestHandMadeTaskIsRefused(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	repo, head := lockedClone(t)
	r, err := task.NewReconciler(task.Options{
		Client:     e.client,
		Drivers:    &driversource.CatalogSource{Catalog: e.workspace.Catalog},
		Locks:      instance.NewRepoLocks(repo),
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	lock := &v1alpha1.LockRef{Commit: head.String(), Path: "locks/local/dev/web.lock.yaml"}
	web := e.instance(t, "local", "dev", "web", 1)
	for _, c := range []struct {
		name   string
		in     *resolver.Instance
		ns     string
		specNS string
		want   string
	}{
		{"an instance that is not the locked one", withMessage(t, web, 1, "hand-made"), "dev-web", "dev-web", "spec.instance (sequence 1"},
		{"another namespace than the deployment's", web, "elsewhere", "elsewhere", `spec.namespace is "elsewhere" but the deployment's namespace is "dev-web"`},
		{"a spec.namespace other than the task's own", web, "other", "dev-web", `the task is in namespace "other" but spec.namespace is "dev-web"`},
	} {
		got := runHandMadeTask(t, e, r, c.in, c.ns, lock, c.specNS)
		if got.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(got.Status.Message, v1alpha1.ReasonLockMismatch) || !strings.Contains(got.Status.Message, c.want) ||
			!strings.Contains(got.Status.Message, lock.Path) {
			t.Errorf("%s: task %s %q; want Failed, LockMismatch saying %q and naming the lock", c.name, got.Status.Phase, got.Status.Message, c.want)
		}
		if cond := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionStalled); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonLockMismatch {
			t.Errorf("%s: Stalled condition %+v, want True with reason %s", c.name, cond, v1alpha1.ReasonLockMismatch)
		}
		var sds v1alpha1.StyrminDeploymentList
		if err := e.client.List(context.Background(), &sds, client.InNamespace(c.ns)); err != nil || len(sds.Items) != 0 {
			t.Fatalf("%s: a refused task wrote a StyrminDeployment: %v, %d", c.name, err, len(sds.Items))
		}
	}
}

// TestAdmissionPolicyLetsOnlyTheAgentWriteTasksAndDeployments pins the
// shipped ValidatingAdmissionPolicy on the local control plane: it is
// accepted; another user (with every RBAC permission) cannot create a
// StyrminTask or a StyrminDeployment, change a StyrminDeployment's spec
// (its environment policy, values, driver), set a styrmin.io/ annotation
// or change its status (status.appliedAs, status.release.manifestDigest,
// status.inventory, any field: the agent reads it back as its own); may
// still label a StyrminDeployment, remove its finalizer (as uninstall
// does) and remove the annotation (the documented recovery); and the
// agent's account does all of it.
func TestAdmissionPolicyLetsOnlyTheAgentWriteTasksAndDeployments(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	web := e.instance(t, "local", "dev", "web", 1)
	ns := web.Context.Deployment.Namespace
	e.write(t, ns, web) // before the policy: the test's admin is no agent

	agenttest.Apply(t, e.client, "test", splitYAML(config.AdmissionPolicy()))
	agenttest.Apply(t, e.client, "test", [][]byte{[]byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
`)})
	as := func(user string) client.Client {
		cfg := rest.CopyConfig(e.cluster.RESTConfig)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		scheme, err := operator.NewScheme()
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice := as("alice")
	agent := as("system:serviceaccount:" + config.AgentNamespace + ":" + config.AgentServiceAccount)
	spec, err := instance.SpecFromInstance(web)
	if err != nil {
		t.Fatal(err)
	}
	newTask := func(seq int64) *v1alpha1.StyrminTask {
		id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "web"}
		return &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName("web", seq), Namespace: ns, Labels: id.Labels()},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: seq,
				Lock: v1alpha1.LockRef{Commit: web.SourceCommit, Path: web.ID.LockPath()}, Instance: &spec},
		}
	}
	// The policy takes effect once the API server has loaded it.
	agenttest.WaitUntil(t, 30*time.Second, "alice's StyrminTask to be refused", func(ctx context.Context) (bool, string, error) {
		err := alice.Create(ctx, newTask(90))
		if err == nil {
			_ = e.client.Delete(ctx, newTask(90))
			return false, "created", nil
		}
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "only the Styrmin agent creates StyrminTasks"), err.Error(), nil
	})
	if err := agent.Create(ctx, newTask(91)); err != nil {
		t.Fatalf("the agent's StyrminTask: %v", err)
	}

	key := client.ObjectKey{Namespace: ns, Name: ns}
	// The status cases need a release the agent recorded.
	agenttest.WaitUntil(t, 60*time.Second, "the agent to record web's release", func(ctx context.Context) (bool, string, error) {
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, key, &sd); err != nil {
			return false, err.Error(), nil
		}
		return sd.Status.Release != nil && sd.Status.Release.ManifestDigest != "" && len(sd.Status.Inventory) > 0, fmt.Sprintf("%+v", sd.Status.Release), nil
	})
	refused := func(err error, says string) bool {
		return apierrors.IsForbidden(err) && strings.Contains(fmt.Sprint(err), says)
	}

	// A StyrminDeployment's spec is what the agent applies, as the
	// identity its policy names: a hand-made one, or a hand-edited spec,
	// would apply what no lock asked for.
	intruder := func() *v1alpha1.StyrminDeployment {
		return &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns}, Spec: *spec.DeepCopy()}
	}
	if err := alice.Create(ctx, intruder()); !refused(err, "only the Styrmin agent creates StyrminDeployments") {
		t.Errorf("alice creates a StyrminDeployment without annotations: %v, want forbidden by the policy", err)
	}
	if err := agent.Create(ctx, intruder(), client.DryRunAll); err != nil {
		t.Errorf("the agent creates a StyrminDeployment: %v", err)
	}
	patch := func(c client.Client, p string, opts ...client.PatchOption) error {
		sd := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns}}
		return c.Patch(ctx, sd, client.RawPatch(types.MergePatchType, []byte(p)), opts...)
	}
	for _, c := range []struct{ what, patch string }{
		{"names another tenant's service account in spec.context.environment.policy", `{"spec":{"context":{"environment":{"policy":{"serviceAccountName":"dev-other/deployer"}}}}}`},
		{"changes spec.values", `{"spec":{"values":{"image":{"repository":"example.com/other"}}}}`},
		{"changes spec.driver", `{"spec":{"driver":{"version":"9.9.9"}}}`},
	} {
		if err := patch(alice, c.patch); !refused(err, "only the Styrmin agent changes a StyrminDeployment's spec") {
			t.Errorf("alice %s: %v, want forbidden by the policy", c.what, err)
		}
		if err := patch(agent, c.patch, client.DryRunAll); err != nil {
			t.Errorf("the agent %s: %v", c.what, err)
		}
	}

	// An edit reads the newest object and retries when the controller
	// wrote it in between (a conflict is no answer of the policy).
	edit := func(c client.Client, change func(sd *v1alpha1.StyrminDeployment)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var sd v1alpha1.StyrminDeployment
			if err := e.client.Get(ctx, key, &sd); err != nil {
				t.Fatal(err)
			}
			change(&sd)
			return c.Update(ctx, &sd)
		})
	}
	if err := edit(alice, func(sd *v1alpha1.StyrminDeployment) { sd.Annotations[v1alpha1.AnnotationInstanceSequence] = "99" }); !apierrors.IsForbidden(err) ||
		!strings.Contains(fmt.Sprint(err), "styrmin.io/ annotations") {
		t.Fatalf("alice sets the sequence annotation: %v, want forbidden by the policy", err)
	}
	if err := edit(alice, func(sd *v1alpha1.StyrminDeployment) { sd.Annotations["styrmin.io/other"] = "x" }); !apierrors.IsForbidden(err) {
		t.Fatalf("alice adds a styrmin.io/ annotation: %v, want forbidden", err)
	}
	if err := edit(alice, func(sd *v1alpha1.StyrminDeployment) {
		if sd.Labels == nil {
			sd.Labels = map[string]string{}
		}
		sd.Labels["team"] = "a"
	}); err != nil {
		t.Fatalf("alice labels the StyrminDeployment: %v", err)
	}
	// The agent finds a deployment's tasks, peers and used sequences by
	// its styrmin.io/ labels: relabelled, one could hide from them or
	// stand in for another.
	for _, c := range []struct {
		what   string
		change func(labels map[string]string)
	}{
		{"changes styrmin.io/environment", func(l map[string]string) { l[v1alpha1.LabelEnvironment] = "staging" }},
		{"removes styrmin.io/cluster", func(l map[string]string) { delete(l, v1alpha1.LabelCluster) }},
		{"adds a styrmin.io/ label", func(l map[string]string) { l["styrmin.io/other"] = "x" }},
	} {
		if err := edit(alice, func(sd *v1alpha1.StyrminDeployment) { c.change(sd.Labels) }); !refused(err, "styrmin.io/ labels") {
			t.Errorf("alice %s of the StyrminDeployment: %v, want forbidden by the policy", c.what, err)
		}
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var task v1alpha1.StyrminTask
			if err := e.client.Get(ctx, client.ObjectKeyFromObject(newTask(91)), &task); err != nil {
				t.Fatal(err)
			}
			c.change(task.Labels)
			return alice.Update(ctx, &task)
		}); !refused(err, "styrmin.io/ labels") {
			t.Errorf("alice %s of a StyrminTask: %v, want forbidden by the policy", c.what, err)
		}
	}
	// Another label, on a task too: the policy's comment says so, and
	// the rule read a key the request does not have, refusing every
	// update of a task's object.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var task v1alpha1.StyrminTask
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(newTask(91)), &task); err != nil {
			t.Fatal(err)
		}
		task.Labels["team"] = "a"
		return alice.Update(ctx, &task)
	}); err != nil {
		t.Errorf("alice labels a StyrminTask: %v", err)
	}
	// styrminctl uninstall removes the agent's finalizer (the agent
	// re-adds it here: it runs).
	if err := edit(alice, func(sd *v1alpha1.StyrminDeployment) {
		sd.Finalizers = slices.DeleteFunc(sd.Finalizers, func(f string) bool { return f == v1alpha1.FinalizerRelease })
	}); err != nil {
		t.Fatalf("alice removes the agent's finalizer: %v", err)
	}
	if err := edit(alice, func(sd *v1alpha1.StyrminDeployment) { delete(sd.Annotations, v1alpha1.AnnotationInstanceSequence) }); err != nil {
		t.Fatalf("alice removes the sequence annotation (the documented recovery): %v", err)
	}
	if err := edit(agent, func(sd *v1alpha1.StyrminDeployment) {
		sd.Annotations = map[string]string{v1alpha1.AnnotationInstanceSequence: "1"}
	}); err != nil {
		t.Fatalf("the agent sets the sequence annotation: %v", err)
	}

	// status.appliedAs names the identity that uninstalls the release:
	// only the agent changes it.
	editStatus := func(c client.Client, change func(sd *v1alpha1.StyrminDeployment)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var sd v1alpha1.StyrminDeployment
			if err := e.client.Get(ctx, key, &sd); err != nil {
				t.Fatal(err)
			}
			change(&sd)
			return c.Status().Update(ctx, &sd)
		})
	}
	if err := editStatus(alice, func(sd *v1alpha1.StyrminDeployment) {
		sd.Status.AppliedAs = "system:serviceaccount:kube-system:generic-garbage-collector"
	}); !apierrors.IsForbidden(err) ||
		!strings.Contains(fmt.Sprint(err), "status.appliedAs") {
		t.Fatalf("alice sets status.appliedAs: %v, want forbidden by the policy", err)
	}
	// So is the rest of the status: an empty manifestDigest makes the
	// agent trust a Helm record whoever writes Secrets rewrote, the
	// inventory is what prune and uninstall delete, and every other field
	// is read back too (the conditions end a task's core step).
	for _, c := range []struct {
		what   string
		change func(sd *v1alpha1.StyrminDeployment)
	}{
		{"clears status.release.manifestDigest", func(sd *v1alpha1.StyrminDeployment) {
			if sd.Status.Release != nil {
				sd.Status.Release.ManifestDigest = ""
			}
		}},
		{"adds to status.inventory", func(sd *v1alpha1.StyrminDeployment) {
			sd.Status.Inventory = append(sd.Status.Inventory, v1alpha1.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "kube-system", Name: "kube-proxy"})
		}},
		{"changes status.driftCorrections", func(sd *v1alpha1.StyrminDeployment) { sd.Status.DriftCorrections++ }},
	} {
		if err := editStatus(alice, c.change); !refused(err, "only the Styrmin agent changes a StyrminDeployment's status") {
			t.Errorf("alice %s: %v, want forbidden by the policy", c.what, err)
		}
	}
	if err := editStatus(agent, func(sd *v1alpha1.StyrminDeployment) { sd.Status.AppliedAs = "system:serviceaccount:dev-web:deployer" }); err != nil {
		t.Fatalf("the agent sets status.appliedAs: %v", err)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, key, &sd); err != nil {
			t.Fatal(err)
		}
		if sd.Status.Release == nil {
			t.Fatal("the agent's release is no longer recorded")
		}
		sd.Status.Release.ManifestDigest = ""
		return agent.Status().Update(ctx, &sd, client.DryRunAll)
	}); err != nil {
		t.Fatalf("the agent changes status.release: %v", err)
	}
}

// clusterGadgetCRD defines ClusterGadget (example.com/v1), a custom kind
// the kind table does not know, served cluster-scoped.
const clusterGadgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: clustergadgets.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {kind: ClusterGadget, listKind: ClusterGadgetList, plural: clustergadgets, singular: clustergadget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
`

// TestAgentRefusesAClusterScopedCustomResource pins that the agent's
// policy check scopes a rendered object as the cluster serves its kind,
// not by its name: a ClusterGadget (a CRD with scope Cluster, unknown to
// the kind table, so rendered into the deployment's namespace and passed
// by the CLI's check) under the default policy stalls the
// StyrminDeployment with PolicyViolation naming the object and the rule,
// and nothing of the release is applied, though the agent's RBAC would
// let it create ClusterGadgets; a task of the instance ends Failed with
// that reason before any step.
func TestAgentRefusesAClusterScopedCustomResource(t *testing.T) {
	t.Parallel()
	d := tenantDriver(t)
	e := startEnvWith(t, d)
	ctx := context.Background()
	agenttest.Apply(t, e.client, "test", [][]byte{[]byte(clusterGadgetCRD), []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: test-clustergadgets}
rules: [{apiGroups: [example.com], resources: [clustergadgets], verbs: ["*"]}]
`), []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: test-clustergadgets}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: test-clustergadgets}
subjects: [{kind: ServiceAccount, name: ` + config.AgentServiceAccount + `, namespace: ` + config.AgentNamespace + `}]
`)})
	gadgets := &unstructured.UnstructuredList{}
	gadgets.SetAPIVersion("example.com/v1")
	gadgets.SetKind("ClusterGadgetList")
	agenttest.WaitUntil(t, 30*time.Second, "ClusterGadgets to be served", func(ctx context.Context) (bool, string, error) {
		err := e.client.List(ctx, gadgets)
		return err == nil, fmt.Sprint(err), nil
	})

	in := tenantInstance(t, d, "cg", 1, nil, map[string]any{"clusterGadget": true})
	ns := in.Context.Deployment.Namespace
	e.write(t, ns, in)
	msg := e.condition(t, ns, v1alpha1.ConditionStalled, v1alpha1.ReasonPolicyViolation)
	for _, want := range []string{"deployment local/dev/cg: ClusterGadget cg-gadget: kind ClusterGadget is cluster-scoped and not listed", "allowed: every namespaced kind", "policy kinds"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Stalled message %q does not say %q", msg, want)
		}
	}
	if err := e.client.List(ctx, gadgets); err != nil || len(gadgets.Items) != 0 {
		t.Fatalf("a refused instance created ClusterGadgets: %v, %d", err, len(gadgets.Items))
	}
	var cms corev1.ConfigMapList
	if err := e.client.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/managed-by": "Helm"}); err != nil || len(cms.Items) != 0 {
		t.Fatalf("a refused instance applied objects: %v, %d", err, len(cms.Items))
	}

	r, err := task.NewReconciler(task.Options{Client: e.client, Drivers: &driversource.CatalogSource{Catalog: e.workspace.Catalog}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	other := tenantInstance(t, d, "cgt", 1, nil, map[string]any{"clusterGadget": true})
	got := runHandMadeTask(t, e, r, other, "dev-cgt", nil)
	if got.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(got.Status.Message, v1alpha1.ReasonPolicyViolation) ||
		!strings.Contains(got.Status.Message, "ClusterGadget cgt-gadget: kind ClusterGadget is cluster-scoped") {
		t.Fatalf("task of an instance rendering a ClusterGadget: %s %q; want Failed, PolicyViolation naming the ClusterGadget", got.Status.Phase, got.Status.Message)
	}
}
