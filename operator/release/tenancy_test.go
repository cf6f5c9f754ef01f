package release

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/drivers"
)

// TestReleaseUpgradeDoesNotTakeOverAnotherManagersObject pins that an
// upgrade adding an object another field manager already owns fails with
// an error naming the object and that manager, and leaves it as it was,
// while the objects the release created are still applied with force
// (their drift is taken back).
func TestReleaseUpgradeDoesNotTakeOverAnotherManagersObject(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "upgrade-taken"
	e.namespace(t, ns)
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "ours")), nil, 0); err != nil {
		t.Fatal(err)
	}
	// Another manager changes a field of the release's own object (drift)
	// and owns an object the next revision adds.
	patch := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"v":"edited"}}`)
	force := true
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Patch(ctx, "a", types.ApplyPatchType, patch, metav1.PatchOptions{FieldManager: "someone-else", Force: &force}); err != nil {
		t.Fatal(err)
	}
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}, Data: map[string]string{"v": "theirs"}}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Create(ctx, theirs, metav1.CreateOptions{FieldManager: "someone-else"}); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "ours2"), configMap(ns, "b", "ours")), nil, 1)
	if err == nil || !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "ConfigMap") || !strings.Contains(err.Error(), "/b") ||
		!strings.Contains(err.Error(), `field manager someone-else`) || !strings.Contains(err.Error(), "does not take over") {
		t.Fatalf("upgrade over another manager's object: %v; want a conflict naming ConfigMap b and manager someone-else", err)
	}
	// a is the release's: forced back to its value; b is untouched.
	if got := e.configMaps(t, ns); got != "a=ours2 b=theirs" {
		t.Fatalf("config maps %q, want a=ours2 b=theirs", got)
	}
}

// TestReleaseAsAServiceAccountIsBoundByItsRBAC pins impersonation: a
// release applied as a service account with no RoleBinding is refused
// with a forbidden error naming the account, and the example environment
// (config/tenancy) makes the same apply succeed, its records included,
// while the account still cannot reach another namespace.
func TestReleaseAsAServiceAccountIsBoundByItsRBAC(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	hc, err := rest.HTTPClientFor(e.cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(e.cluster.RESTConfig, hc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(e.cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(e.cs, dyn, mapper, Options{MaxHistory: 10, Config: e.cluster.RESTConfig})
	if err != nil {
		t.Fatal(err)
	}
	const ns, sa = "dev-web", "styrmin-deployer"
	e.namespace(t, ns)
	if _, err := e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := drivers.ServiceAccountUser(ns, sa)
	as, err := h.As(user)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := h.As(user); again != as {
		t.Error("As built a second engine for the same user")
	}
	_, _, err = as.Apply(ctx, releaseReq(ns, configMap(ns, "a", "ours")), nil, 0)
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), user) {
		t.Fatalf("apply as %s without a RoleBinding: %v; want forbidden naming the account", sa, err)
	}
	if got := e.configMaps(t, ns); got != "" {
		t.Fatalf("config maps %q after a forbidden apply", got)
	}

	applyManifests(t, dyn, mapper, config.TenancyExample())
	if _, _, err := as.Apply(ctx, releaseReq(ns, configMap(ns, "a", "ours")), nil, 0); err != nil {
		t.Fatalf("apply as %s with the example Role: %v", sa, err)
	}
	if got := e.configMaps(t, ns); got != "a=ours" {
		t.Fatalf("config maps %q, want a=ours", got)
	}
	if got := e.history(t, ns, "app"); got != "1:deployed" {
		t.Fatalf("history %q, want 1:deployed", got)
	}
	const other = "dev-other"
	e.namespace(t, other)
	req := releaseReq(ns, configMap(ns, "a", "ours"), configMap(other, "x", "ours"))
	if _, _, err := as.Apply(ctx, req, nil, 1); err == nil || !apierrors.IsForbidden(err) {
		t.Fatalf("apply as %s into %s: %v; want forbidden", sa, other, err)
	}
}

// applyManifests creates every object of a multi-document YAML.
func applyManifests(t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, data []byte) {
	t.Helper()
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		var res dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if u.GetNamespace() != "" {
			res = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		}
		if _, err := res.Create(context.Background(), u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// deployerEngine is the release engine acting as the example
// environment's account (config/tenancy, namespace dev-web), logging to
// log.
func deployerEngine(t *testing.T, e *releaseEnv, log slog.Handler) *Releases {
	t.Helper()
	ctx := context.Background()
	hc, err := rest.HTTPClientFor(e.cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(e.cluster.RESTConfig, hc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(e.cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(e.cs, dyn, mapper, Options{MaxHistory: 10, Config: e.cluster.RESTConfig, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	applyManifests(t, dyn, mapper, config.TenancyExample())
	if _, err := e.cs.CoreV1().ServiceAccounts("dev-web").Get(ctx, "styrmin-deployer", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	as, err := h.As(drivers.ServiceAccountUser("dev-web", "styrmin-deployer"))
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// autoscaledApp applies, as h, a release of Deployments web and worker in
// namespace ns, makes an autoscaler from outside the release for web, and
// scales both through the scale subresource, as an autoscaler or kubectl
// scale does.
func autoscaledApp(t *testing.T, e *releaseEnv, h *Releases, ns string) {
	t.Helper()
	ctx := context.Background()
	worker := webDeployment(ns, "nginx:1.27")
	worker.Name, worker.YAML = "worker", []byte(strings.ReplaceAll(string(worker.YAML), "name: web\n", "name: worker\n"))
	if _, _, err := h.Apply(ctx, releaseReq(ns, webDeployment(ns, "nginx:1.27"), worker), nil, 0); err != nil {
		t.Fatal(err)
	}
	minReplicas := int32(1)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "keda-hpa-web", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas: &minReplicas, MaxReplicas: 5},
	}
	if _, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "worker"} {
		e.scaleDeployment(t, ns, name, 3)
	}
}

// TestTheExampleEnvironmentsAccountTellsAnAutoscalersReplicasFromHandScaledOnes:
// the example Role had no rule for autoscalers, so a drift check as its
// account could not list them and put back the replicas KEDA or an HPA
// set. With it, the autoscaled web is left to its autoscaler and only the
// hand-scaled worker is drift.
func TestTheExampleEnvironmentsAccountTellsAnAutoscalersReplicasFromHandScaledOnes(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "dev-web"
	e.namespace(t, ns)
	as := deployerEngine(t, e, nil)
	autoscaledApp(t, e, as, ns)
	_, drifts, err := as.Check(ctx, ns, "app", 1, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Summary(drifts), "Deployment/worker (.spec.replicas)"; got != want {
		t.Fatalf("drifts %q, want %q: web's replicas are its autoscaler's", got, want)
	}
}

// TestAnAccountThatCannotListAutoscalersLeavesTakenReplicasAndSaysSo: a
// check as an account without the right to list autoscalers took a
// forbidden listing for "none" and put back replicas an autoscaler set,
// every drift interval. It cannot tell an autoscaler from kubectl scale,
// so it leaves the replicas as they are and warns, once per takeover.
func TestAnAccountThatCannotListAutoscalersLeavesTakenReplicasAndSaysSo(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "dev-web"
	e.namespace(t, ns)
	var log bytes.Buffer
	as := deployerEngine(t, e, slog.NewTextHandler(&log, nil))
	role, err := e.cs.RbacV1().Roles(ns).Get(ctx, "styrmin-deployer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role.Rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.APIGroups, "autoscaling") })
	if _, err := e.cs.RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	autoscaledApp(t, e, as, ns)

	d, drifts, err := as.Check(ctx, ns, "app", 1, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(drifts) > 0 {
		t.Fatalf("drifts %q, want none: the account cannot tell whose the replicas are", Summary(drifts))
	}
	for _, name := range []string{"web", "worker"} {
		if !strings.Contains(log.String(), "Deployment/dev-web/"+name+": its replicas were changed outside Styrmin") {
			t.Errorf("no warning about %s's replicas in:\n%s", name, log.String())
		}
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "horizontalpodautoscalers (autoscaling) in namespace dev-web") {
		t.Errorf("the warning does not say what to grant:\n%s", log.String())
	}
	warned := log.Len()
	if _, drifts, err = as.Check(ctx, ns, "app", 1, "", nil, d); err != nil || len(drifts) > 0 {
		t.Fatalf("the next check: drifts %q, %v; want none", Summary(drifts), err)
	}
	if log.Len() != warned {
		t.Errorf("the next check warned again:\n%s", log.String()[warned:])
	}
	for _, name := range []string{"web", "worker"} {
		dep, err := e.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := *dep.Spec.Replicas; got != 3 {
			t.Errorf("%s runs %d replicas, want the 3 it was scaled to", name, got)
		}
	}
}
