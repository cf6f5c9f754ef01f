package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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
// and a second run finds nothing to do.
func TestUninstallLeavesApplicationsRunningLetsTheirNamespacesGoAndCanRunTwice(t *testing.T) {
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
	// finalizer; a backup the agent holds too.
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
		if err := cl.Create(ctx, o); err != nil {
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
