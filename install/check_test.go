package install

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

// finding is the finding whose message starts with prefix.
func finding(t *testing.T, fs []Finding, prefix string) Finding {
	t.Helper()
	for _, f := range fs {
		if strings.HasPrefix(f.Message, prefix) {
			return f
		}
	}
	t.Fatalf("no finding %q in %v", prefix, fs)
	return Finding{}
}

// setAgentStatus writes the agent Deployment's status as the Deployment
// controller would (the control plane runs none): its observed generation
// is the current one unless observed is given.
func setAgentStatus(ctx context.Context, t *testing.T, cl client.Client, ns string, st appsv1.DeploymentStatus, observed ...int64) {
	t.Helper()
	var dep appsv1.Deployment
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: agentDeployment}, &dep); err != nil {
		t.Fatal(err)
	}
	st.ObservedGeneration = dep.Generation
	if len(observed) > 0 {
		st.ObservedGeneration = observed[0]
	}
	dep.Status = st
	if err := cl.Status().Update(ctx, &dep); err != nil {
		t.Fatal(err)
	}
}

// rolledOut is the status of the agent's two replicas all updated and
// available.
var rolledOut = appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2,
	Conditions: []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
		{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
	}}

// A failed upgrade of the agent keeps its old pods ready while the new
// ReplicaSet crashloops: check calls the agent healthy only once the
// rollout of its current generation is complete, and says what waits.
func TestCheckCallsTheAgentHealthyOnlyWhenItsRolloutIsComplete(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	ctx := context.Background()
	cl, err := newClient(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The repository is on a closed port: this test is about the agent.
	o := Options{Cluster: "local", Repo: "https://127.0.0.1:1/desired.git", Image: "agent:v0.1.0", Version: "v0.1.0"}
	objs, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, c.RESTConfig, objs, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	check := func() Finding {
		t.Helper()
		f := finding(t, Check(ctx, c.RESTConfig, CheckOptions{GitTimeout: 5 * time.Second}), "agent Deployment ")
		t.Log(f.Message)
		return f
	}

	setAgentStatus(ctx, t, cl, DefaultNamespace, rolledOut)
	if f := check(); !f.OK {
		t.Fatalf("a complete rollout fails: %s", f.Message)
	}

	// The upgrade: a new image, not observed by the controller yet.
	o.Image = "agent:v0.2.0"
	if objs, err = Render(o); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, c.RESTConfig, objs, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := cl.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: agentDeployment}, &dep); err != nil {
		t.Fatal(err)
	}
	setAgentStatus(ctx, t, cl, DefaultNamespace, rolledOut, dep.Generation-1)
	if f := check(); f.OK || !strings.Contains(f.Message, "has not observed generation") {
		t.Errorf("an upgrade not observed yet: %+v", f)
	}

	// Observed: one new pod crashloops past the progress deadline, the two
	// old ones are ready and available.
	setAgentStatus(ctx, t, cl, DefaultNamespace, appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 1, ReadyReplicas: 2, AvailableReplicas: 2, UnavailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "styrmin-agent-7d9f" has timed out progressing.`},
		}})
	f := check()
	for _, want := range []string{"2/2 replicas ready", "1 of 2 replicas run the current template", "ProgressDeadlineExceeded", "rollout status"} {
		if f.OK || !strings.Contains(f.Message, want) {
			t.Errorf("a failed upgrade with its old pods ready: %+v, want a failure saying %q", f, want)
		}
	}

	// Every replica updated, the last old pod still terminating; then one
	// updated replica not available yet.
	setAgentStatus(ctx, t, cl, DefaultNamespace, appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2})
	if f := check(); f.OK || !strings.Contains(f.Message, "1 old replicas pending termination") {
		t.Errorf("an old pod still terminating: %+v", f)
	}
	setAgentStatus(ctx, t, cl, DefaultNamespace, appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1, AvailableReplicas: 1})
	if f := check(); f.OK || !strings.Contains(f.Message, "1 of 2 updated replicas available") {
		t.Errorf("an updated replica not available: %+v", f)
	}

	setAgentStatus(ctx, t, cl, DefaultNamespace, rolledOut)
	if f := check(); !f.OK || !strings.Contains(f.Message, "image agent:v0.2.0") {
		t.Errorf("the upgrade rolled out: %+v", f)
	}
}

// A strict-tenancy owner replaces the default environment's
// ClusterRoleBinding with RoleBindings: an install or upgrade with
// WithoutDefaultEnvironmentBinding never makes it again, and check
// accepts its absence (and reports one left from before).
func TestInstallWithoutTheDefaultEnvironmentBindingNeverMakesItAndCheckAcceptsItsAbsence(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	ctx := context.Background()
	cl, err := newClient(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	git := gitserver.New(t, gitserver.WithToken("right-token"))
	git.Seed("desired", fstest.MapFS{"styrmin.cue": {Data: []byte("version: 1\n")}}, "seed")
	install := func(without bool) {
		t.Helper()
		objs, err := Render(Options{Cluster: "local", Repo: git.RepoURL("desired"), Image: "agent:v0.1.0", Version: "v0.1.0", WithoutDefaultEnvironmentBinding: without})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Apply(ctx, c.RESTConfig, objs, ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bindingExists := func() bool {
		t.Helper()
		err := cl.Get(ctx, client.ObjectKey{Name: defaultEnvironment}, &rbacv1.ClusterRoleBinding{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	check := func() []Finding {
		t.Helper()
		fs := Check(ctx, c.RESTConfig, CheckOptions{GitTimeout: 10 * time.Second})
		for _, f := range fs {
			t.Logf("%v %s", f.OK, f.Message)
		}
		return fs
	}
	const bindingFinding = "ClusterRoleBinding " + defaultEnvironment

	// Installed as shipped, with what check needs to pass beside RBAC: the
	// agent rolled out, its source Ready, the repository's Secret.
	install(false)
	if !bindingExists() {
		t.Fatal("an install as shipped made no default environment binding")
	}
	setAgentStatus(ctx, t, cl, DefaultNamespace, rolledOut)
	if err := cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultSecretName, Namespace: DefaultNamespace},
		Data: map[string][]byte{operator.SecretKeyToken: []byte("right-token")}}); err != nil {
		t.Fatal(err)
	}
	src := &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Name: "styrmin", Namespace: DefaultNamespace},
		Spec: v1alpha1.StyrminSourceSpec{URL: git.RepoURL("desired"), Branch: "main", Cluster: "local"}}
	if err := cl.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	src.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSynced, Message: "synced", LastTransitionTime: metav1.Now()}}
	if err := cl.Status().Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	if fs := check(); Failed(fs) {
		t.Fatal("check fails on an install as shipped")
	}

	// Upgraded without the binding while the old one is still there:
	// the upgrade deletes nothing, and check says it grants too much.
	install(true)
	// The new annotation is a new generation of the Deployment (for its
	// annotations too), with the same pod template: the controller
	// observes it and rolls nothing.
	setAgentStatus(ctx, t, cl, DefaultNamespace, rolledOut)
	if !bindingExists() {
		t.Error("the install deleted the binding: the owner deletes it once RoleBindings grant the role")
	}
	if f := finding(t, check(), bindingFinding); f.OK || !strings.Contains(f.Message, "kubectl delete clusterrolebinding "+defaultEnvironment) {
		t.Errorf("a binding left from before: %+v, want a failure saying how to delete it", f)
	}

	// The owner removes it (docs/tenancy.md): check passes, and installs
	// again without it never make it again.
	if err := cl.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: defaultEnvironment}}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		fs := check()
		if Failed(fs) {
			t.Errorf("check %d after the binding was removed fails", i+1)
		}
		if f := finding(t, fs, bindingFinding); !f.OK || !strings.Contains(f.Message, "absent, as installed") {
			t.Errorf("check %d: %+v", i+1, f)
		}
		// An install alike changes nothing: the agent's rollout stays
		// complete for the next check.
		install(true)
		if bindingExists() {
			t.Fatalf("install %d without the binding made it again", i+1)
		}
	}
}

// A CRD established at another schema than this version's (Helm installs
// crds/ only on the first install) fails check, naming the CRD, the
// version and the field, and saying how to update it; one applied by a
// newer version says that instead; install puts this version's back.
func TestCheckFailsACRDWhoseSchemaIsNotThisVersions(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	ctx := context.Background()
	cl, err := newClient(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	install := func(v string) {
		t.Helper()
		objs, err := Render(Options{Cluster: "local", Repo: "https://127.0.0.1:1/desired.git", Image: "agent:" + v, Version: v})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Apply(ctx, c.RESTConfig, objs, ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const name = "styrmindeployments.styrmin.io"
	check := func() Finding {
		t.Helper()
		f := finding(t, Check(ctx, c.RESTConfig, CheckOptions{GitTimeout: time.Second, Version: "v0.2.0"}), "CRD "+name)
		t.Logf("%v %s", f.OK, f.Message)
		return f
	}

	install("v0.2.0")
	if f := check(); !f.OK || !strings.Contains(f.Message, "schema as this version's") {
		t.Fatalf("check of the CRDs just installed: %+v", f)
	}

	// The schema of an older version: one status field fewer, applied by
	// Helm's crds/ or kubectl (no version annotation).
	var crd apiextensionsv1.CustomResourceDefinition
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
		t.Fatal(err)
	}
	status := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	const dropped = "observedGeneration"
	if _, ok := status.Properties[dropped]; !ok {
		t.Fatalf("the status schema of %s has no %s: pick another field", name, dropped)
	}
	delete(status.Properties, dropped)
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"] = status
	delete(crd.Annotations, operator.AnnotationCRDVersion)
	if err := cl.Update(ctx, &crd); err != nil {
		t.Fatal(err)
	}
	f := check()
	for _, want := range []string{"CRD " + name + ": its v1alpha1 schema differs from this version's (v0.2.0) at schema.properties.status.properties." + dropped,
		"an unrecorded version", "prunes", "styrminctl install", "kubectl apply --server-side -f"} {
		if f.OK || !strings.Contains(f.Message, want) {
			t.Errorf("check of an older schema: %+v, want a failure saying %q", f, want)
		}
	}

	// Applied by a newer version: check with that version's styrminctl.
	crd = apiextensionsv1.CustomResourceDefinition{}
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
		t.Fatal(err)
	}
	crd.Annotations = map[string]string{operator.AnnotationCRDVersion: "v0.9.0"}
	if err := cl.Update(ctx, &crd); err != nil {
		t.Fatal(err)
	}
	if f := check(); f.OK || !strings.Contains(f.Message, "applied by v0.9.0") || !strings.Contains(f.Message, "newer") {
		t.Errorf("check of a newer version's schema: %+v", f)
	}

	install("v0.2.0")
	if f := check(); !f.OK {
		t.Errorf("check after install put the schema back: %+v", f)
	}
}
