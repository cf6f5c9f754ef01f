package testcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/testcluster"
)

// waitTimeout bounds each wait for the controllers; measured times are
// well under two seconds, the margin is for a loaded machine.
const waitTimeout = 60 * time.Second

func newClient(t *testing.T, c *testcluster.Cluster) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// eventually polls cond until it returns true, failing the test with the
// last observation after waitTimeout.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	last := ""
	for {
		ok, obs := cond(ctx)
		if ok {
			return
		}
		last = obs
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not reached after %s; last seen: %s", what, waitTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func createNamespace(t *testing.T, cl client.Client, name string) {
	t.Helper()
	if err := cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func TestClusterRunsWorkloadsOnFakeNodes(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{Workloads: true, Nodes: 2})
	cl := newClient(t, c)

	t.Run("fake nodes are Ready with the capacity set", func(t *testing.T) {
		var nodes corev1.NodeList
		if err := cl.List(context.Background(), &nodes); err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) != 2 {
			t.Fatalf("got %d nodes, want 2", len(nodes.Items))
		}
		for _, n := range nodes.Items {
			if got := n.Status.Allocatable.Pods().Value(); got != 250 {
				t.Errorf("node %s allocatable pods = %d, want 250", n.Name, got)
			}
			ready := false
			for _, cond := range n.Status.Conditions {
				ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
			}
			if !ready {
				t.Errorf("node %s is not Ready: %v", n.Name, n.Status.Conditions)
			}
		}
	})

	t.Run("API server rejects an object that breaks its CRD schema", func(t *testing.T) {
		testCRDSchemaValidation(t, cl)
	})
	t.Run("Deployment becomes Available with ready pods on fake nodes", func(t *testing.T) {
		testDeploymentAvailable(t, cl, c.NodeNames)
	})
	t.Run("Job completes", func(t *testing.T) {
		testJobCompletes(t, cl)
	})
	t.Run("StatefulSet gets its volume from the default storage class", func(t *testing.T) {
		testStatefulSetGetsVolumes(t, cl)
	})
	t.Run("deleting a namespace deletes its objects", func(t *testing.T) {
		testNamespaceDeletion(t, cl)
	})
	t.Run("admin kubeconfig works with the built kubectl", func(t *testing.T) {
		out, err := exec.Command(filepath.Join(c.BinDir, "kubectl"), "--kubeconfig", c.KubeconfigPath,
			"get", "nodes", "-o", "name").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get nodes: %v\n%s", err, out)
		}
		if got, want := strings.Fields(string(out)), []string{"node/kwok-node-0", "node/kwok-node-1"}; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("kubectl get nodes = %q, want %q", got, want)
		}
	})
}

func testCRDSchemaValidation(t *testing.T, cl client.Client) {
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.styrmin.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.styrmin.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {
							Type:     "object",
							Required: []string{"size"},
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"size":  {Type: "integer", Minimum: ptr.To(1.0), Maximum: ptr.To(10.0)},
								"color": {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"red"`)}, {Raw: []byte(`"blue"`)}}},
							},
						},
					},
				}},
			}},
		},
	}
	if err := cl.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	eventually(t, "CRD Established", func(ctx context.Context) (bool, string) {
		var got apiextensionsv1.CustomResourceDefinition
		if err := cl.Get(ctx, client.ObjectKeyFromObject(crd), &got); err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprint(got.Status.Conditions)
	})

	widget := func(name string, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.styrmin.io", Version: "v1", Kind: "Widget"})
		u.SetNamespace("default")
		u.SetName(name)
		return u
	}
	// The discovery of a new CRD lags its Established condition a little.
	eventually(t, "valid Widget accepted", func(ctx context.Context) (bool, string) {
		err := cl.Create(ctx, widget("good", map[string]any{"size": int64(3), "color": "red"}))
		return err == nil, fmt.Sprint(err)
	})
	for _, tc := range []struct {
		name, wantInMessage string
		spec                map[string]any
	}{
		{"size-too-big", "spec.size", map[string]any{"size": int64(11)}},
		{"size-not-integer", "spec.size", map[string]any{"size": "three"}},
		{"size-missing", "spec.size", map[string]any{"color": "red"}},
		{"color-not-in-enum", "spec.color", map[string]any{"size": int64(2), "color": "green"}},
	} {
		err := cl.Create(ctx, widget(tc.name, tc.spec))
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: create error = %v, want Invalid", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.wantInMessage) {
			t.Errorf("%s: error %q does not name %s", tc.name, err, tc.wantInMessage)
		}
	}
}

func testDeploymentAvailable(t *testing.T, cl client.Client, nodeNames []string) {
	ctx := context.Background()
	createNamespace(t, cl, "deploy")
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "deploy", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "registry.example/web:1",
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)},
					}},
				}}},
			},
		},
	}
	if err := cl.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Deployment Available with 3 ready replicas", func(ctx context.Context) (bool, string) {
		var got appsv1.Deployment
		if err := cl.Get(ctx, client.ObjectKeyFromObject(dep), &got); err != nil {
			return false, err.Error()
		}
		available := false
		for _, c := range got.Status.Conditions {
			available = available || (c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue)
		}
		return available && got.Status.ReadyReplicas == 3 && got.Status.UpdatedReplicas == 3,
			fmt.Sprintf("ready=%d updated=%d conditions=%v", got.Status.ReadyReplicas, got.Status.UpdatedReplicas, got.Status.Conditions)
	})

	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace("deploy"), client.MatchingLabels(labels)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 3 {
		t.Fatalf("got %d pods, want 3", len(pods.Items))
	}
	for _, p := range pods.Items {
		if !slices.Contains(nodeNames, p.Spec.NodeName) {
			t.Errorf("pod %s on node %q, want one of %v", p.Name, p.Spec.NodeName, nodeNames)
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			t.Errorf("pod %s: phase %s, IP %q; want Running with an IP", p.Name, p.Status.Phase, p.Status.PodIP)
		}
	}
}

func testJobCompletes(t *testing.T, cl client.Client) {
	ctx := context.Background()
	createNamespace(t, cl, "jobs")
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "migrate"},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](3),
			Parallelism: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "migrate", Image: "registry.example/migrate:1"}},
			}},
		},
	}
	if err := cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Job Complete", func(ctx context.Context) (bool, string) {
		var got batchv1.Job
		if err := cl.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				t.Fatalf("Job failed: %s", c.Message)
			}
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return got.Status.Succeeded == 3, fmt.Sprintf("succeeded=%d", got.Status.Succeeded)
			}
		}
		return false, fmt.Sprintf("succeeded=%d conditions=%v", got.Status.Succeeded, got.Status.Conditions)
	})
}

func testNamespaceDeletion(t *testing.T, cl client.Client) {
	ctx := context.Background()
	createNamespace(t, cl, "doomed")
	labels := map[string]string{"app": "doomed"}
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "doomed", Name: "settings"}, Data: map[string]string{"k": "v"}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "doomed", Name: "app"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
				},
			},
		},
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for pods so that the deletion has dependents to cascade to.
	eventually(t, "pods of the doomed Deployment running", func(ctx context.Context) (bool, string) {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace("doomed")); err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 2, fmt.Sprintf("%d of %d pods running", running, len(pods.Items))
	})

	if err := cl.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "namespace and its objects gone", func(ctx context.Context) (bool, string) {
		err := cl.Get(ctx, client.ObjectKey{Name: "doomed"}, &corev1.Namespace{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("namespace: %v", err)
		}
		for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &appsv1.DeploymentList{}, &appsv1.ReplicaSetList{}, &corev1.PodList{}} {
			if err := cl.List(ctx, list, client.InNamespace("doomed")); err != nil {
				return false, err.Error()
			}
			if n := meta.LenList(list); n > 0 {
				return false, fmt.Sprintf("%d %T left", n, list)
			}
		}
		return true, ""
	})
}

func TestStopLeavesNoProcess(t *testing.T) {
	c, err := testcluster.Start(context.Background(), testcluster.Options{Workloads: true, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	before := componentPids(t, c.KubeconfigPath)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if len(before) == 0 {
		t.Fatal("found no running component before Stop: the check below would prove nothing")
	}
	for _, pid := range before {
		if alive(pid) {
			t.Errorf("process %d still runs after Stop", pid)
		}
	}
	if _, err := os.Stat(c.KubeconfigPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kubeconfig %s still there after Stop (err %v)", c.KubeconfigPath, err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// componentPids lists the processes whose command line mentions the
// cluster's work folder (the folder of its kubeconfig): etcd, the API
// server, controller-manager, scheduler and kwok.
func componentPids(t *testing.T, kubeconfig string) []int {
	t.Helper()
	marker := []byte(filepath.Dir(kubeconfig))
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), string(marker)) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 5 {
		t.Errorf("found %d component processes before Stop, want 5 (etcd, apiserver, controller-manager, scheduler, kwok)", len(pids))
	}
	return pids
}

func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

func TestStartWithoutBinariesSaysHowToBuildThem(t *testing.T) {
	t.Setenv(testcluster.BinDirEnv, t.TempDir())
	_, err := testcluster.Start(context.Background(), testcluster.Options{})
	if !errors.Is(err, testcluster.ErrBinariesMissing) {
		t.Fatalf("error = %v, want ErrBinariesMissing", err)
	}
	for _, want := range []string{"make testcluster", "etcd", "kube-apiserver"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestAPIServerOptionsReachTheServer(t *testing.T) {
	logDir := t.TempDir()
	c := testcluster.StartT(t, testcluster.Options{
		ServiceCIDR: "10.123.0.0/16",
		LogDir:      logDir,
		// Without NamespaceLifecycle, objects may go into namespaces that do not exist.
		APIServerArgs: []string{"--disable-admission-plugins=ServiceAccount,NamespaceLifecycle"},
	})
	cl := newClient(t, c)
	ctx := context.Background()

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if err := cl.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(svc.Spec.ClusterIP, "10.123.") {
		t.Errorf("Service ClusterIP = %q, want one in 10.123.0.0/16", svc.Spec.ClusterIP)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "nowhere", Name: "c"}}
	if err := cl.Create(ctx, cm); err != nil {
		t.Errorf("create in a missing namespace with NamespaceLifecycle disabled: %v", err)
	}
	if len(c.NodeNames) != 0 {
		t.Errorf("NodeNames = %v without workloads, want none", c.NodeNames)
	}

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
		info, err := os.Stat(filepath.Join(logDir, name))
		if err != nil {
			t.Errorf("log %s: %v", name, err)
		} else if info.Size() == 0 {
			t.Errorf("log %s is empty", name)
		}
	}
}
