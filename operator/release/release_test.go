package release

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/helmtest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

// releaseEnv is an API server and the release layer the agent uses.
type releaseEnv struct {
	cluster *testcluster.Cluster
	cs      *kubernetes.Clientset
	helm    *Releases
}

func startReleaseEnv(t *testing.T, maxHistory int) *releaseEnv {
	t.Helper()
	c := testcluster.StartT(t, testcluster.Options{})
	hc, err := rest.HTTPClientFor(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(c.RESTConfig, hc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(cs, dyn, mapper, Options{MaxHistory: maxHistory})
	if err != nil {
		t.Fatal(err)
	}
	return &releaseEnv{cluster: c, cs: cs, helm: h}
}

func (e *releaseEnv) namespace(t *testing.T, name string) {
	t.Helper()
	if _, err := e.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// history is `helm history`.
func (e *releaseEnv) history(t *testing.T, ns, name string) string {
	t.Helper()
	rels, err := action.NewHistory(helmtest.CLIConfig(t, e.cluster.KubeconfigPath, ns)).Run(name)
	if err != nil {
		t.Fatalf("helm history %s/%s: %v", ns, name, err)
	}
	var parts []string
	for _, r := range rels {
		rel := r.(*release.Release)
		parts = append(parts, fmt.Sprintf("%d:%s", rel.Version, rel.Info.Status))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func (e *releaseEnv) configMaps(t *testing.T, ns string) string {
	t.Helper()
	list, err := e.cs.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range list.Items {
		if cm.Name != "kube-root-ca.crt" {
			names = append(names, cm.Name+"="+cm.Data["v"])
		}
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

func configMap(ns, name, value string, annotations ...string) drivers.Object {
	y := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\n"
	if len(annotations) > 0 {
		y += "  annotations:\n"
		for i := 0; i+1 < len(annotations); i += 2 {
			y += "    " + annotations[i] + ": " + annotations[i+1] + "\n"
		}
	}
	y += "data:\n  v: \"" + value + "\"\n"
	return drivers.Object{APIVersion: "v1", Kind: "ConfigMap", Name: name, Namespace: ns, Component: "app", YAML: []byte(y)}
}

func releaseReq(ns string, objects ...drivers.Object) Request {
	return Request{
		Namespace: ns, Name: "app", Driver: v1alpha1.DriverRef{Name: "mini", Version: "1.0.0", Digest: "sha256:x"},
		AppVersion: "1.0.0", Values: map[string]any{"v": "x"}, Objects: objects, Description: "test",
	}
}

// TestReleaseRevisionsAreHelmRecordsPrunedAndTrimmed pins the release
// layer on a real API server: each apply is one revision that `helm
// history` reads (the previous one superseded), objects a revision drops
// are deleted unless Helm's keep policy says otherwise, the history is
// trimmed to its bound, and a revision the caller does not know of (a
// lost status) is found instead of written over.
func TestReleaseRevisionsAreHelmRecordsPrunedAndTrimmed(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 2)
	ctx := context.Background()
	const ns = "rel"
	e.namespace(t, ns)

	r1, installed, err := e.helm.Apply(ctx, releaseReq(ns,
		configMap(ns, "a", "1"), configMap(ns, "b", "1", "helm.sh/resource-policy", "keep"), configMap(ns, "c", "1")), nil, 0)
	if err != nil || !installed || r1.number != 1 {
		t.Fatalf("first apply: %v, installed %v", err, installed)
	}
	if got := e.history(t, ns, "app"); got != "1:deployed" {
		t.Fatalf("history %q, want 1:deployed", got)
	}
	// The revision kept in memory, encoded, is the record as stored.
	kept, err := r1.decode()
	if err != nil {
		t.Fatal(err)
	}
	stored, err := e.helm.records.get(ctx, ns, "app", 1)
	if err != nil {
		t.Fatal(err)
	}
	if kept.Manifest != stored.Manifest || kept.Info.Status != stored.Info.Status || !reflect.DeepEqual(kept.Config, stored.Config) ||
		kept.Chart.Metadata.Version != stored.Chart.Metadata.Version {
		t.Errorf("the kept revision decodes to %+v, the stored record is %+v", kept, stored)
	}
	if got := e.configMaps(t, ns); got != "a=1 b=1 c=1" {
		t.Fatalf("config maps %q", got)
	}
	// The objects and field sets kept for the drift check, packed.
	objs, fields, err := unpack(e.helm.objects.dyn, r1.desired)
	if err != nil {
		t.Fatal(err)
	}
	if len(fields) != 3 || !strings.Contains(string(fields["/ConfigMap/rel/a"]), `"f:v"`) {
		t.Fatalf("owned field sets from the apply: %q", fields)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.ref.Kind+"/"+o.ref.Namespace+"/"+o.ref.Name)
		if o.gvr.Resource != "configmaps" || !o.namespaced || o.namespace != ns || !json.Valid(o.data) {
			t.Errorf("kept object %s: resource %v, namespaced %v, namespace %q, JSON %v", o.ref, o.gvr, o.namespaced, o.namespace, json.Valid(o.data))
		}
	}
	if got := strings.Join(names, " "); got != "ConfigMap/rel/a ConfigMap/rel/b ConfigMap/rel/c" {
		t.Errorf("kept objects %s", got)
	}

	r2, installed, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "2")), r1, 1)
	if err != nil || installed || r2.number != 2 {
		t.Fatalf("second apply: %v, installed %v", err, installed)
	}
	if got := e.history(t, ns, "app"); got != "1:superseded 2:deployed" {
		t.Fatalf("history %q, want 1:superseded 2:deployed", got)
	}
	if got := e.configMaps(t, ns); got != "a=2 b=1" {
		t.Fatalf("config maps %q: c should be pruned, b kept by its policy", got)
	}

	// Nothing in memory: the status's revision is read by key.
	r3, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "3")), nil, 2)
	if err != nil || r3.number != 3 {
		t.Fatalf("third apply: %v", err)
	}
	if got := e.history(t, ns, "app"); got != "2:superseded 3:deployed" {
		t.Fatalf("history %q, want 2:superseded 3:deployed (trimmed to 2)", got)
	}

	// A lost status: the history is asked, revision 1 is not written
	// again although its record was trimmed.
	r4, installed, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "4")), nil, 0)
	if err != nil || installed || r4.number != 4 {
		t.Fatalf("apply with no revision known: %v, installed %v (want revision 4)", err, installed)
	}
	// A stale status (revision 2 while 4 exists) and a stale memory: the
	// write of 3 finds it taken and moves on.
	r5, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "5")), r2, 2)
	if err != nil || r5.number != 5 {
		t.Fatalf("apply with a stale revision: %v", err)
	}
	if got := e.history(t, ns, "app"); got != "4:superseded 5:deployed" {
		t.Fatalf("history %q, want 4:superseded 5:deployed", got)
	}
	rel, err := e.helm.records.get(ctx, ns, "app", 5)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rel.Manifest, "# Source: app/configmap-a.yaml") || rel.ApplyMethod != "ssa" || rel.Chart.Metadata.Name != "mini" {
		t.Fatalf("record of revision 5: manifest %q, apply method %q", rel.Manifest, rel.ApplyMethod)
	}
}

// TestReleaseInstallDoesNotTakeOverAnotherManagersObject pins that a
// first install leaves an object it did not create as it was, names it,
// and records no revision; once the object is gone the install works.
func TestReleaseInstallDoesNotTakeOverAnotherManagersObject(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "taken"
	e.namespace(t, ns)
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Data: map[string]string{"v": "theirs"}}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Create(ctx, theirs, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "ours")), nil, 0)
	if err == nil || !strings.Contains(err.Error(), "ConfigMap") || !strings.Contains(err.Error(), "does not take over") || !apierrors.IsConflict(err) {
		t.Fatalf("install over another manager's object: %v, want a conflict naming the ConfigMap", err)
	}
	if got := e.configMaps(t, ns); got != "a=theirs" {
		t.Fatalf("config maps %q: the other manager's object changed", got)
	}
	secrets, err := e.cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Fatalf("%d release records written for an install that changed nothing", len(secrets.Items))
	}
	if err := e.cs.CoreV1().ConfigMaps(ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "ours")), nil, 0); err != nil {
		t.Fatal(err)
	}
	if got := e.history(t, ns, "app"); got != "1:deployed" {
		t.Fatalf("history %q, want 1:deployed", got)
	}
}

// releaseRecordCount counts a namespace's Helm release records.
func (e *releaseEnv) releaseRecordCount(t *testing.T, ns string) int {
	t.Helper()
	secrets, err := e.cs.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatal(err)
	}
	return len(secrets.Items)
}

// TestReleaseUninstallRemovesObjectsAndHistoryButKeptObjects pins the
// uninstall the agent does without Helm's action, as `helm uninstall`
// does it: the latest revision's objects are deleted (but one annotated
// helm.sh/resource-policy: keep), every record goes, Helm then knows no
// such release, and uninstalling again is not an error.
func TestReleaseUninstallRemovesObjectsAndHistoryButKeptObjects(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "gone"
	e.namespace(t, ns)
	keep := []string{"helm.sh/resource-policy", "keep"}
	r1, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), configMap(ns, "b", "1", keep...)), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "2"), configMap(ns, "b", "1", keep...), configMap(ns, "c", "2")), r1, 1); err != nil {
		t.Fatal(err)
	}
	if got := e.history(t, ns, "app"); got != "1:superseded 2:deployed" {
		t.Fatalf("history %q, want 1:superseded 2:deployed", got)
	}
	if err := e.helm.Uninstall(ctx, ns, "app", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.configMaps(t, ns); got != "b=1" {
		t.Fatalf("config maps after uninstall %q, want only the kept b=1", got)
	}
	if n := e.releaseRecordCount(t, ns); n != 0 {
		t.Fatalf("%d release records left after uninstall", n)
	}
	if _, err := action.NewHistory(helmtest.CLIConfig(t, e.cluster.KubeconfigPath, ns)).Run("app"); !errors.Is(err, driver.ErrReleaseNotFound) {
		t.Fatalf("helm history after uninstall: %v, want release not found", err)
	}
	if err := e.helm.Uninstall(ctx, ns, "app", nil, nil); err != nil {
		t.Fatalf("uninstalling a release that is gone: %v", err)
	}
}

// TestReleaseRecordsAreReadAsHelmWroteThem pins the other direction of
// the format: a release the Helm SDK installed (its encoder, its labels)
// is read by the agent's records, upgraded as the next revision with the
// Helm revision superseded, and uninstalled with the object Helm created.
func TestReleaseRecordsAreReadAsHelmWroteThem(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "helmmade"
	e.namespace(t, ns)
	install := action.NewInstall(helmtest.CLIConfig(t, e.cluster.KubeconfigPath, ns))
	install.ReleaseName, install.Namespace = "app", ns
	install.ServerSideApply = true
	install.WaitStrategy = kube.HookOnlyStrategy
	chart := &chartv2.Chart{
		Metadata:  &chartv2.Metadata{APIVersion: chartv2.APIVersionV2, Name: "byhand", Version: "0.1.0"},
		Templates: []*common.File{{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  v: helm\n")}},
	}
	if _, err := install.RunWithContext(ctx, chart, nil); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	latest, err := e.helm.records.latest(ctx, ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	if latest == nil || latest.Version != 1 || latest.Chart.Metadata.Name != "byhand" || !strings.Contains(latest.Manifest, "v: helm") {
		t.Fatalf("the record Helm wrote, as read: %+v", latest)
	}
	got, err := e.helm.records.get(ctx, ns, "app", 1)
	if err != nil || got.Manifest != latest.Manifest {
		t.Fatalf("revision 1 by key: %v", err)
	}
	// The status names no revision: the history is read and the upgrade
	// is revision 2.
	r2, installed, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "ours")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if installed || r2.number != 2 {
		t.Fatalf("apply over Helm's release: installed %v, revision %d; want an upgrade to 2", installed, r2.number)
	}
	if got := e.history(t, ns, "app"); got != "1:superseded 2:deployed" {
		t.Fatalf("history %q, want 1:superseded 2:deployed", got)
	}
	if got := e.configMaps(t, ns); got != "a=ours" {
		t.Fatalf("config maps %q, want a=ours", got)
	}
	if err := e.helm.Uninstall(ctx, ns, "app", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, n := e.configMaps(t, ns), e.releaseRecordCount(t, ns); got != "" || n != 0 {
		t.Fatalf("after uninstall: config maps %q, %d records", got, n)
	}
}

// TestReleaseFailedInstallTakesNothingOverAndUninstallLeavesOthersObjects
// pins what a partly failed first install leaves: its failed revision
// lists an object another manager owns; a retry does not take it over
// (no forcing while no revision deployed), and uninstalling deletes only
// the objects that carry the release's annotations, as Helm does. Once a
// revision deployed, a retry after a failed one forces again. A revision
// whose manifest holds a kind no longer served uninstalls all the same.
func TestReleaseFailedInstallTakesNothingOverAndUninstallLeavesOthersObjects(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "partial"
	e.namespace(t, ns)
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}, Data: map[string]string{"v": "theirs"}}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Create(ctx, theirs, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}
	req := releaseReq(ns, configMap(ns, "a", "1"), configMap(ns, "b", "ours"))
	for attempt := 1; attempt <= 2; attempt++ {
		if _, _, err := e.helm.Apply(ctx, req, nil, 0); err == nil || !apierrors.IsConflict(err) {
			t.Fatalf("attempt %d over another manager's object: %v, want a conflict", attempt, err)
		}
		if got := e.configMaps(t, ns); got != "a=1 b=theirs" {
			t.Fatalf("attempt %d: config maps %q: the other manager's object was taken over", attempt, got)
		}
	}
	if got := e.history(t, ns, "app"); got != "1:failed 2:failed" {
		t.Fatalf("history %q, want two failed revisions", got)
	}
	if err := e.helm.Uninstall(ctx, ns, "app", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, n := e.configMaps(t, ns), e.releaseRecordCount(t, ns); got != "b=theirs" || n != 0 {
		t.Fatalf("after uninstall: config maps %q, %d records; want only the other manager's b", got, n)
	}

	// Once a revision deployed, a retry after a failed one takes fields
	// back again: here from a hand edit of a.
	if err := e.cs.CoreV1().ConfigMaps(ns).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Apply(ctx, req, nil, 0); err != nil {
		t.Fatal(err)
	}
	edit := func() {
		t.Helper()
		cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["v"] = "edited"
		if _, err := e.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
	}
	edit()
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "2"), configMap(ns, "zz_invalid", "x")), nil, 0); err == nil {
		t.Fatal("an upgrade with an invalid object name succeeded")
	}
	edit()
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "3"), configMap(ns, "b", "ours")), nil, 0); err != nil {
		t.Fatalf("retry after a failed upgrade of a deployed release: %v", err)
	}
	if got, h := e.configMaps(t, ns), e.history(t, ns, "app"); got != "a=3 b=ours" || h != "1:superseded 2:failed 3:deployed" {
		t.Fatalf("after the retry: config maps %q, history %q", got, h)
	}

	ghost := &release.Release{Name: "ghost", Namespace: ns, Version: 1, Info: &release.Info{Status: "deployed"},
		Manifest: "---\n# Source: x/widget.yaml\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"}
	if _, err := e.helm.records.create(ctx, ghost, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.helm.Uninstall(ctx, ns, "ghost", nil, nil); err != nil {
		t.Fatalf("uninstall of a release whose kind is no longer served: %v", err)
	}
	if got, err := e.cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=ghost"}); err != nil || len(got.Items) != 0 {
		t.Fatalf("records left after uninstalling ghost: %v", err)
	}
}

// clusterRoleBinding is a chart's `{{.Release.Name}}-view` binding of the
// view role to the release's service account: the same name for a
// deployment of the same name in every environment.
func clusterRoleBinding(name, saNamespace string) drivers.Object {
	y := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: " + name + "\n" +
		"roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: view\n" +
		"subjects:\n- kind: ServiceAccount\n  name: api\n  namespace: " + saNamespace + "\n"
	return drivers.Object{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding", Name: name, Component: "app", YAML: []byte(y)}
}

// TestAReleaseDoesNotTakeOverAnotherReleasesObjectOfTheSameName pins that
// two releases rendering the same object, a cluster-scoped one (release
// api in dev and in prod) or one in a namespace both may write (releases
// web and api), never share it: every release applies with the same field
// manager, so only the release annotations tell. The second release's
// apply fails naming the first and changes nothing (not even its own other
// objects, and records no revision), the object stays the first's
// (annotations and content), and the second's uninstall leaves it. An
// object whose annotations name another release by the time an uninstall
// runs is left too, though the uninstalled release created it.
func TestAReleaseDoesNotTakeOverAnotherReleasesObjectOfTheSameName(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	for _, ns := range []string{"dev", "prod", "web", "staging", "shared"} {
		e.namespace(t, ns)
	}
	req := func(ns, name string, objects ...drivers.Object) Request {
		r := releaseReq(ns, objects...)
		r.Name = name
		return r
	}
	owner := func(t *testing.T, ns, name string) (string, string) {
		t.Helper()
		if ns == "" {
			crb, err := e.cs.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return crb.Annotations[ReleaseNamespaceAnnotation] + "/" + crb.Annotations[ReleaseNameAnnotation], crb.Subjects[0].Namespace
		}
		cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Annotations[ReleaseNamespaceAnnotation] + "/" + cm.Annotations[ReleaseNameAnnotation], cm.Data["v"]
	}
	cases := []struct {
		name          string
		first, second Request
		// objNS and obj name the shared object; content is the first's.
		objNS, obj, content string
	}{
		{"cluster-scoped, same release name in another namespace",
			req("dev", "api", clusterRoleBinding("api-view", "dev")),
			req("prod", "api", configMap("prod", "own", "prod"), clusterRoleBinding("api-view", "prod")),
			"", "api-view", "dev"},
		{"namespaced, in a namespace both write, another release name",
			req("web", "web", configMap("shared", "settings", "web")),
			req("staging", "api", configMap("staging", "own", "staging"), configMap("shared", "settings", "staging")),
			"shared", "settings", "web"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			first := c.first.Namespace + "/" + c.first.Name
			if _, _, err := e.helm.Apply(ctx, c.first, nil, 0); err != nil {
				t.Fatal(err)
			}
			_, _, err := e.helm.Apply(ctx, c.second, nil, 0)
			var conflict *ConflictError
			if !errors.As(err, &conflict) || conflict.Release != first || !strings.Contains(err.Error(), c.obj) || !strings.Contains(err.Error(), "release "+first) {
				t.Fatalf("second release's apply over %s: %v, want a conflict naming the object and release %s", c.obj, err, first)
			}
			if who, content := owner(t, c.objNS, c.obj); who != first || content != c.content {
				t.Fatalf("%s belongs to %s with content %q, want still %s's with %q", c.obj, who, content, first, c.content)
			}
			if _, err := e.cs.CoreV1().ConfigMaps(c.second.Namespace).Get(ctx, "own", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("the refused release's own object: %v, want not created", err)
			}
			if n := e.releaseRecordCount(t, c.second.Namespace); n != 0 {
				t.Fatalf("%d records for a refused install that changed nothing", n)
			}
			if err := e.helm.Uninstall(ctx, c.second.Namespace, c.second.Name, nil, nil); err != nil {
				t.Fatal(err)
			}
			if who, content := owner(t, c.objNS, c.obj); who != first || content != c.content {
				t.Fatalf("after the second release's uninstall %s belongs to %s with %q, want %s's with %q", c.obj, who, content, first, c.content)
			}
		})
	}

	// The second release created the binding (the first's was deleted by
	// hand), then it was deleted again and the first's upgrade made it
	// anew: the second's record lists it, its annotations name the first.
	// The second's uninstall leaves it.
	if err := e.cs.RbacV1().ClusterRoleBindings().Delete(ctx, "api-view", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Apply(ctx, cases[0].second, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.cs.RbacV1().ClusterRoleBindings().Delete(ctx, "api-view", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Apply(ctx, cases[0].first, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.helm.Uninstall(ctx, "prod", "api", nil, nil); err != nil {
		t.Fatal(err)
	}
	if who, content := owner(t, "", "api-view"); who != "dev/api" || content != "dev" {
		t.Fatalf("after prod's uninstall api-view belongs to %s with %q, want dev/api's", who, content)
	}
}

// TestAnObjectAnotherReleaseMadeAgainIsNeitherCorrectedNorTakenBack: dev's
// release api created ClusterRoleBinding api-view; prod's, rendering the
// same name, was refused; then the binding was deleted by hand and prod's
// retry made it, as prod's. Both releases apply with one field manager,
// so dev's drift check found its field set in place and said nothing, and
// dev's next upgrade forced it back (it created the object): the binding
// silently swapped which service account it grants, each release
// rewriting the other's. Now dev's check reports it taken by prod's
// release and its correction leaves it, naming that release; dev's
// upgrade is refused naming it and changes nothing.
func TestAnObjectAnotherReleaseMadeAgainIsNeitherCorrectedNorTakenBack(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	e.namespace(t, "dev")
	e.namespace(t, "prod")
	dev, prod := releaseReq("dev", clusterRoleBinding("api-view", "dev")), releaseReq("prod", clusterRoleBinding("api-view", "prod"))
	dev.Name, prod.Name = "api", "api"
	r1, _, err := e.helm.Apply(ctx, dev, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Apply(ctx, prod, nil, 0); err == nil {
		t.Fatal("prod's install over dev's binding was not refused")
	}
	if err := e.cs.RbacV1().ClusterRoleBindings().Delete(ctx, "api-view", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Apply(ctx, prod, nil, 0); err != nil {
		t.Fatal(err)
	}
	grants := func(t *testing.T) string {
		t.Helper()
		crb, err := e.cs.RbacV1().ClusterRoleBindings().Get(ctx, "api-view", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return crb.Annotations[ReleaseNamespaceAnnotation] + "/" + crb.Annotations[ReleaseNameAnnotation] + " grants " + crb.Subjects[0].Namespace
	}
	const prods = "prod/api grants prod"

	desired, drifts, err := e.helm.Check(ctx, "dev", "api", r1.number, r1.manifestDigest, nil, r1.Desired())
	if err != nil {
		t.Fatal(err)
	}
	if len(drifts) != 1 || drifts[0].TakenBy != "prod/api" {
		t.Fatalf("dev's drift check: %+v; want api-view reported taken by release prod/api", drifts)
	}
	corrected, _, err := e.helm.Correct(ctx, desired, drifts)
	var conflict *ConflictError
	if len(corrected) != 0 || !errors.As(err, &conflict) || conflict.Release != "prod/api" || !strings.Contains(err.Error(), "taken by release prod/api") {
		t.Fatalf("dev's correction: put back %d, %v; want none, refused naming release prod/api", len(corrected), err)
	}
	if got := grants(t); got != prods {
		t.Fatalf("after dev's correction the binding is %q; want %q", got, prods)
	}

	dev.Objects = append(dev.Objects, configMap("dev", "own", "2"))
	_, _, err = e.helm.Apply(ctx, dev, r1, r1.number)
	if !errors.As(err, &conflict) || conflict.Release != "prod/api" || !strings.Contains(err.Error(), "api-view") {
		t.Fatalf("dev's upgrade: %v; want refused naming api-view and release prod/api", err)
	}
	if got := grants(t); got != prods {
		t.Fatalf("after dev's upgrade the binding is %q; want %q", got, prods)
	}
	if _, err := e.cs.CoreV1().ConfigMaps("dev").Get(ctx, "own", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused upgrade's other object: %v, want not applied", err)
	}
}

// TestASecretAtTheNextRecordNameIsNumberedPast: a Secret that is no
// release record (an ordinary Secret a chart or a person made, or one of
// the record's type that does not decode) holds the name of the next
// revision's record. The history does not read it, so every upgrade met
// it and failed, its objects applied without a record; the revision is
// now numbered past it, and the history reads on.
func TestASecretAtTheNextRecordNameIsNumberedPast(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "squat"
	e.namespace(t, ns)
	r1, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: releaseKey("app", 2)}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"k": []byte("v")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: releaseKey("app", 3), Labels: map[string]string{"owner": "helm", "name": "app", "version": "3"}},
			Type: RecordType, Data: map[string][]byte{"release": []byte("not a record")}},
	} {
		if _, err := e.cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r4, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "2")), r1, 1)
	if err != nil {
		t.Fatalf("upgrade past the Secrets at revisions 2 and 3: %v", err)
	}
	if r4.number != 4 {
		t.Errorf("upgrade recorded revision %d; want 4, past the names held", r4.number)
	}
	if got := e.configMaps(t, ns); got != "a=2" {
		t.Errorf("config maps %q; want a=2", got)
	}
	if got := e.history(t, ns, "app"); got != "1:superseded 4:deployed" {
		t.Errorf("history %q; want 1:superseded 4:deployed", got)
	}
	// Trimming the history (10 revisions) later reaches the names held:
	// the Secrets that are no records stay.
	prev := r4
	for v := 5; v <= 13; v++ {
		if prev, _, err = e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", fmt.Sprint(v))), prev, prev.number); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.cs.CoreV1().Secrets(ns).Get(ctx, releaseKey("app", 2), metav1.GetOptions{}); err != nil {
		t.Errorf("the Secret at revision 2's name, no record, after the history was trimmed past it: %v", err)
	}
}

// TestARevisionWhoseRecordCannotBeWrittenAppliesNothing: a release whose
// record would not fit in its Secret (1 MiB: here two ConfigMaps of
// 600 KB that do not compress) is refused before any object is applied:
// applied, its objects would be in no record, never pruned nor
// uninstalled. The error says so (ErrRevisionTooLarge) with the sizes.
func TestARevisionWhoseRecordCannotBeWrittenAppliesNothing(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "big"
	e.namespace(t, ns)
	big := func(name string) drivers.Object {
		o := configMap(ns, name, "x")
		noise := make([]byte, 450<<10)
		rand.NewChaCha8([32]byte{name[0]}).Read(noise) //nolint:errcheck // never fails
		o.YAML = append(o.YAML, []byte("binaryData:\n  blob: "+base64.StdEncoding.EncodeToString(noise)+"\n")...)
		return o
	}
	_, _, err := e.helm.Apply(ctx, releaseReq(ns, big("one"), big("two")), nil, 0)
	if !errors.Is(err, ErrRevisionTooLarge) || !strings.Contains(err.Error(), "at most 1048576") {
		t.Fatalf("apply of a release too large for its record: %v; want ErrRevisionTooLarge with the sizes", err)
	}
	if got := e.configMaps(t, ns); got != "" {
		t.Errorf("config maps %q applied; want none", got)
	}
	secrets, err := e.cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d Secrets written; want none", len(secrets.Items))
	}
}

// TestAReleaseDoesNotAdoptAnExistingObjectWithoutReleaseAnnotations pins
// that an object outside the release's namespace that exists and carries
// no release's annotations (an administrator's ClusterRoleBinding, a
// ConfigMap in a namespace the policy adds) is refused, though the
// release renders it with the same content: server-side apply would share
// it without a conflict, and the release's uninstall would then delete
// it. The refusal changes nothing, records nothing, says how to let the
// release adopt the object, and the release's uninstall leaves it; once
// annotated for the release, it is adopted (and uninstalled with it). In
// the release's own namespace, which the agent creates for it, such an
// object is the release's to take (a field another manager owns there is
// refused by the apply's conflict).
func TestAReleaseDoesNotAdoptAnExistingObjectWithoutReleaseAnnotations(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	for _, ns := range []string{"prod", "shared"} {
		e.namespace(t, ns)
	}
	// The administrator's objects, as the chart renders them.
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "api-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "api", Namespace: "prod"}},
	}, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"shared", "prod"} {
		theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns}, Data: map[string]string{"v": "same"}}
		if _, err := e.cs.CoreV1().ConfigMaps(ns).Create(ctx, theirs, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
			t.Fatal(err)
		}
	}
	annotations := func(t *testing.T, ns, name string) map[string]string {
		t.Helper()
		if ns == "" {
			crb, err := e.cs.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return crb.Annotations
		}
		cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s/%s: %v", ns, name, err)
		}
		return cm.Annotations
	}
	cases := []struct {
		name     string
		obj      drivers.Object
		objNS    string
		annotate string // the kubectl command the error gives
	}{
		{"cluster-scoped", clusterRoleBinding("api-view", "prod"), "",
			"kubectl annotate clusterrolebinding.rbac.authorization.k8s.io api-view meta.helm.sh/release-name=api meta.helm.sh/release-namespace=prod"},
		{"in another namespace", configMap("shared", "settings", "same"), "shared",
			"kubectl annotate configmap -n shared settings meta.helm.sh/release-name=api meta.helm.sh/release-namespace=prod"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := releaseReq("prod", configMap("prod", "own", "prod"), c.obj)
			req.Name = "api"
			_, _, err := e.helm.Apply(ctx, req, nil, 0)
			var conflict *ConflictError
			if !errors.As(err, &conflict) || !conflict.Unowned || !strings.Contains(err.Error(), "belongs to no release") || !strings.Contains(err.Error(), c.annotate) {
				t.Fatalf("apply over an object without release annotations: %v; want a refusal saying %q", err, c.annotate)
			}
			if ann := annotations(t, c.objNS, c.obj.Name); ann[ReleaseNameAnnotation] != "" {
				t.Fatalf("the refused object was annotated %v", ann)
			}
			if _, err := e.cs.CoreV1().ConfigMaps("prod").Get(ctx, "own", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("the refused release's own object: %v, want not created", err)
			}
			if n := e.releaseRecordCount(t, "prod"); n != 0 {
				t.Fatalf("%d records for a refused install", n)
			}
			if err := e.helm.Uninstall(ctx, "prod", "api", nil, nil); err != nil {
				t.Fatal(err)
			}
			annotations(t, c.objNS, c.obj.Name) // still there

			// Annotated as the error says: adopted, and uninstalled with
			// the release.
			patch := []byte(`{"metadata":{"annotations":{"meta.helm.sh/release-name":"api","meta.helm.sh/release-namespace":"prod"}}}`)
			if c.objNS == "" {
				_, err = e.cs.RbacV1().ClusterRoleBindings().Patch(ctx, c.obj.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			} else {
				_, err = e.cs.CoreV1().ConfigMaps(c.objNS).Patch(ctx, c.obj.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.helm.Apply(ctx, req, nil, 0); err != nil {
				t.Fatalf("apply over the object annotated for the release: %v", err)
			}
			if err := e.helm.Uninstall(ctx, "prod", "api", nil, nil); err != nil {
				t.Fatal(err)
			}
			if c.objNS == "" {
				_, err = e.cs.RbacV1().ClusterRoleBindings().Get(ctx, c.obj.Name, metav1.GetOptions{})
			} else {
				_, err = e.cs.CoreV1().ConfigMaps(c.objNS).Get(ctx, c.obj.Name, metav1.GetOptions{})
			}
			if !apierrors.IsNotFound(err) {
				t.Fatalf("the adopted object after the uninstall: %v, want deleted", err)
			}
		})
	}

	// The release's own namespace: the same object without annotations is
	// taken.
	req := releaseReq("prod", configMap("prod", "settings", "same"))
	req.Name = "api"
	if _, _, err := e.helm.Apply(ctx, req, nil, 0); err != nil {
		t.Fatalf("apply over an object without annotations in the release's namespace: %v", err)
	}
	if ann := annotations(t, "prod", "settings"); ann[ReleaseNameAnnotation] != "api" {
		t.Fatalf("the release namespace's object is annotated %v, want the release's", ann)
	}
}

// TestAnObjectDroppedBeforeTheLastDeployedRevisionIsNotForcedAfterAFailedOne
// pins that after a failed revision only the last deployed revision's
// objects count as the release's: an object an older revision had, which
// a later one pruned and another release has created since, is refused
// when a fix adds it again, not taken over.
func TestAnObjectDroppedBeforeTheLastDeployedRevisionIsNotForcedAfterAFailedOne(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	for _, ns := range []string{"dev", "prod"} {
		e.namespace(t, ns)
	}
	req := func(ns string, objects ...drivers.Object) Request {
		r := releaseReq(ns, objects...)
		r.Name = "api"
		return r
	}
	r1, _, err := e.helm.Apply(ctx, req("dev", configMap("dev", "a", "1"), clusterRoleBinding("api-view", "dev")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	r2, _, err := e.helm.Apply(ctx, req("dev", configMap("dev", "a", "2")), r1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Apply(ctx, req("prod", clusterRoleBinding("api-view", "prod")), nil, 0); err != nil {
		t.Fatalf("prod's release creating the binding dev's dropped: %v", err)
	}
	if _, _, err := e.helm.Apply(ctx, req("dev", configMap("dev", "a", "3"), configMap("dev", "zz_invalid", "3")), r2, 2); err == nil {
		t.Fatal("an upgrade with an invalid object name succeeded")
	}
	// The fix adds the binding again; the status was lost (the history
	// is read, its latest revision failed).
	_, _, err = e.helm.Apply(ctx, req("dev", configMap("dev", "a", "4"), clusterRoleBinding("api-view", "dev")), nil, 0)
	var conflict *ConflictError
	if !errors.As(err, &conflict) || conflict.Release != "prod/api" {
		t.Fatalf("dev's fix adding prod's binding: %v; want a conflict naming release prod/api", err)
	}
	crb, err := e.cs.RbacV1().ClusterRoleBindings().Get(ctx, "api-view", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crb.Annotations[ReleaseNamespaceAnnotation] != "prod" || crb.Subjects[0].Namespace != "prod" {
		t.Fatalf("api-view is annotated %v with subject %v, want still prod's", crb.Annotations, crb.Subjects)
	}
}

// TestObjectsAFailedRevisionCreatedAreForcedByItsRetry pins that the
// objects a failed install or upgrade created are the release's: another
// manager's edit of one (kubectl edit, scale) is taken back by the retry,
// which would otherwise conflict on every attempt saying the release did
// not create it.
func TestObjectsAFailedRevisionCreatedAreForcedByItsRetry(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "failed-created"
	e.namespace(t, ns)
	edit := func(name string) {
		t.Helper()
		cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["v"] = "edited"
		if _, err := e.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
	}
	// A failed install creates a.
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), configMap(ns, "zz_invalid", "1")), nil, 0); err == nil {
		t.Fatal("an install with an invalid object name succeeded")
	}
	edit("a")
	r2, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "2")), nil, 0)
	if err != nil {
		t.Fatalf("retry of the failed install after an edit of the object it created: %v", err)
	}
	if got, h := e.configMaps(t, ns), e.history(t, ns, "app"); got != "a=2" || h != "1:failed 2:deployed" {
		t.Fatalf("after the retry: config maps %q, history %q", got, h)
	}
	// A failed upgrade creates b; the retry starts from the deployed
	// revision, as the controller's does.
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "3"), configMap(ns, "b", "3"), configMap(ns, "zz_invalid", "3")), r2, 2); err == nil {
		t.Fatal("an upgrade with an invalid object name succeeded")
	}
	edit("b")
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "4"), configMap(ns, "b", "4")), r2, 2); err != nil {
		t.Fatalf("retry of the failed upgrade after an edit of the object it created: %v", err)
	}
	if got := e.configMaps(t, ns); got != "a=4 b=4" {
		t.Fatalf("after the retry: config maps %q, want a=4 b=4", got)
	}
}

// TestAnApplyCancelledAfterItsFirstObjectIsStillRecorded pins that a
// reconcile cancelled while it applies (SIGTERM, a lost lease) records
// the objects it applied, as a failed revision: written on the apply's
// context, the record failed at once, and the objects were in no record,
// never pruned nor uninstalled. The context here is cancelled as the
// API server's answer to the first object's apply arrives.
func TestAnApplyCancelledAfterItsFirstObjectIsStillRecorded(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	const ns = "cancelled"
	e.namespace(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := rest.CopyConfig(e.cluster.RESTConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil || req.Method != http.MethodPatch || !strings.HasSuffix(req.URL.Path, "/configmaps/a") {
				return resp, err
			}
			// The answer read before the cancel: the apply of a succeeds.
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(body))
			cancel()
			return resp, rerr
		})
	})
	hc, err := rest.HTTPClientFor(e.cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(e.cluster.RESTConfig, hc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(e.cs, dyn, mapper, Options{MaxHistory: 10})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = h.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), configMap(ns, "b", "1")), nil, 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("apply cancelled after its first object: %v, want context.Canceled", err)
	}
	if got := e.configMaps(t, ns); got != "a=1" {
		t.Fatalf("config maps %q, want a=1 applied before the cancel", got)
	}
	if got := e.history(t, ns, "app"); got != "1:failed" {
		t.Fatalf("history %q, want the cancelled apply recorded as 1:failed", got)
	}
	if err := e.helm.Uninstall(context.Background(), ns, "app", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.configMaps(t, ns); got != "" {
		t.Fatalf("config maps after the uninstall %q, want none", got)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
