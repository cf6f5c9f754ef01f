package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/testcluster"
)

// deletionEnv is a control plane with the controller-manager (its
// namespace controller deletes namespaces), the agent's RBAC (with
// ClusterRoles, which the tenant driver renders on demand), and the
// agent's manager acting as its service account, which start starts
// (again) and stop stops.
type deletionEnv struct {
	*env
	driver *drivers.Driver
	stop   func()
}

func startDeletionEnv(t *testing.T) *deletionEnv {
	t.Helper()
	c, cl := agenttest.StartCluster(t, testcluster.Options{Workloads: true, Nodes: 1})
	agenttest.Apply(t, cl, "test", append([][]byte{config.Namespace()}, config.RBAC()...))
	agenttest.Apply(t, cl, "test", [][]byte{[]byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: test-clusterroles}
rules: [{apiGroups: [rbac.authorization.k8s.io], resources: [clusterroles], verbs: ["*"]}]
`), []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: test-clusterroles}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: test-clusterroles}
subjects: [{kind: ServiceAccount, name: ` + config.AgentServiceAccount + `, namespace: ` + config.AgentNamespace + `}]
`)})
	e := &deletionEnv{env: &env{cluster: c, client: cl}, driver: tenantDriver(t)}
	e.start(t)
	t.Cleanup(func() { e.stop() })
	return e
}

// start starts the agent's manager, stopped by e.stop.
func (e *deletionEnv) start(t *testing.T) {
	t.Helper()
	catalog := drivers.NewCatalog()
	if err := catalog.Add(e.driver); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(e.cluster.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + config.AgentNamespace + ":" + config.AgentServiceAccount}
	mgr, err := operator.NewManager(cfg, operator.ManagerOptions{
		Drivers:       &driversource.CatalogSource{Catalog: catalog},
		DriftInterval: time.Hour,
		Logger:        testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	e.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
}

// releaseRecords counts the release records of release name in ns.
func (e *deletionEnv) releaseRecords(ctx context.Context, ns, name string) (int, error) {
	var secrets corev1.SecretList
	err := e.client.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": name})
	return len(secrets.Items), err
}

// TestDeletingTheNamespaceOfADeploymentDeletesItsObjectsOutsideIt: a
// deployment's namespace deleted by hand (kubectl delete ns) deletes its
// release records with everything else in it, here while the agent is
// down (so surely before the StyrminDeployment's finalizer runs; a
// running agent races the namespace controller for them). The uninstall
// then found no history and deleted nothing: the release's ClusterRole
// and its ConfigMap in another namespace (the policy's) were left behind.
// The agent, started again, deletes them from the StyrminDeployment's
// inventory, and the namespace finishes deleting.
func TestDeletingTheNamespaceOfADeploymentDeletesItsObjectsOutsideIt(t *testing.T) {
	t.Parallel()
	e := startDeletionEnv(t)
	ctx := context.Background()
	const shared = "dev-shared"
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shared}}); err != nil {
		t.Fatal(err)
	}
	policy := &drivers.Policy{Kinds: []string{"*", "ClusterRole"}, Namespaces: []string{shared}}
	in := tenantInstance(t, e.driver, "gone", 1, policy, map[string]any{"clusterRole": true, "otherNamespace": shared})
	ns := in.Context.Deployment.Namespace
	e.write(t, ns, in)
	e.waitApplied(t, ns, 1)
	clusterRole := client.ObjectKey{Name: "gone-reader"}
	elsewhere := client.ObjectKey{Namespace: shared, Name: "gone-elsewhere"}
	if err := e.client.Get(ctx, clusterRole, &rbacv1.ClusterRole{}); err != nil {
		t.Fatalf("the release's ClusterRole: %v", err)
	}
	if err := e.client.Get(ctx, elsewhere, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the release's ConfigMap in %s: %v", shared, err)
	}

	e.stop()
	if err := e.client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// The namespace controller deletes each kind of the namespace in its
	// own order: wait for both the records gone and the StyrminDeployment
	// marked deleted (held by its finalizer, which no agent runs).
	agenttest.WaitUntil(t, 60*time.Second, "the namespace controller to delete the release records of "+ns+" and mark its StyrminDeployment deleted", func(ctx context.Context) (bool, string, error) {
		n, err := e.releaseRecords(ctx, ns, "gone")
		if err != nil || n > 0 {
			return false, fmt.Sprintf("%d records (%v)", n, err), nil
		}
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			return false, "", fmt.Errorf("the StyrminDeployment, to be held by its finalizer: %w", err)
		}
		return !sd.DeletionTimestamp.IsZero(), "the StyrminDeployment not marked deleted yet", nil
	})

	e.start(t)
	agenttest.WaitUntil(t, 90*time.Second, "namespace "+ns+" to be gone", func(ctx context.Context) (bool, string, error) {
		var n corev1.Namespace
		err := e.client.Get(ctx, client.ObjectKey{Name: ns}, &n)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, fmt.Sprintf("%s %v", n.Status.Phase, err), nil
	})
	if err := e.client.Get(ctx, clusterRole, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
		t.Errorf("the release's ClusterRole %s after its namespace went: %v, want gone", clusterRole.Name, err)
	}
	if err := e.client.Get(ctx, elsewhere, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the release's ConfigMap %s after its namespace went: %v, want gone", elsewhere, err)
	}
}

// TestDeletingTheStyrminDeploymentCRDLeavesTheApplicationsRunning:
// deleting Styrmin's CRDs while the agent runs (kubectl delete -k
// config/, a careless kubectl delete crd) deletes every
// StyrminDeployment, and their finalizer uninstalled every application.
// Removing Styrmin is not removing the applications: the finalizer lets
// go without uninstalling, saying so in an event, and the application's
// objects and release records stay, a plain Helm release.
func TestDeletingTheStyrminDeploymentCRDLeavesTheApplicationsRunning(t *testing.T) {
	t.Parallel()
	e := startDeletionEnv(t)
	ctx := context.Background()
	in := tenantInstance(t, e.driver, "kept", 1, nil, map[string]any{})
	ns := in.Context.Deployment.Namespace
	e.write(t, ns, in)
	e.waitApplied(t, ns, 1)

	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName("styrmindeployments." + v1alpha1.Group)
	if err := e.client.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 60*time.Second, "CRD "+crd.GetName()+" to be gone", func(ctx context.Context) (bool, string, error) {
		err := e.client.Get(ctx, client.ObjectKeyFromObject(crd), crd.DeepCopy())
		return apierrors.IsNotFound(err), fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	var cm corev1.ConfigMap
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kept-config"}, &cm); err != nil {
		t.Errorf("the application's ConfigMap after the CRD went: %v, want it still there", err)
	}
	if n, err := e.releaseRecords(ctx, ns, "kept"); err != nil || n != 1 {
		t.Errorf("%d release records after the CRD went (%v), want 1 kept", n, err)
	}
	agenttest.WaitUntil(t, 30*time.Second, "an event saying the release was left running", func(ctx context.Context) (bool, string, error) {
		evs := e.events(t, ns, "LeftRunning")
		return len(evs) == 1, fmt.Sprintf("%d events", len(evs)), nil
	})
}
