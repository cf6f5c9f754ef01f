package health

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/cachetest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

func TestAWorkloadTheCacheShowsOlderThanTheAgentWroteIsReadFromTheAPIServer(t *testing.T) {
	ctx, api := appNamespace(t)
	one := int32(1)
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}},
			},
		},
	}
	if err := api.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	// Generation 1 rolled out, as the deployment controller reports it
	// (this control plane runs none).
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if err := api.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	var before appsv1.Deployment
	if err := api.Get(ctx, client.ObjectKeyFromObject(d), &before); err != nil {
		t.Fatal(err)
	}
	// The agent's apply of a new image: generation 2, not rolled out.
	if err := api.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"web:2"}]}}}}`))); err != nil {
		t.Fatal(err)
	}
	if d.Generation <= before.Generation {
		t.Fatalf("the apply left generation %d", d.Generation)
	}

	cache := cachetest.Stale{Client: api, Copy: &before}
	inventory := []v1alpha1.ObjectRef{{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "app", Name: "web", Component: "web"}}
	wrote := func(gen int64) Written {
		return func(r v1alpha1.ObjectRef) int64 {
			if r.Kind == "Deployment" && r.Name == "web" {
				return gen
			}
			return 0
		}
	}
	check := func(written Written) (v1alpha1.ComponentStatus, int) {
		t.Helper()
		gets := 0
		comps, err := ComponentStatuses(ctx, cache, cachetest.Counting{Reader: api, Gets: &gets}, inventory, time.Time{}, written, nil, time.Time{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(comps) != 1 {
			t.Fatalf("components: %+v", comps)
		}
		return comps[0], gets
	}

	// What the check must not believe: the copy from before the apply
	// reads as ready.
	if cs, _ := check(nil); !cs.Ready {
		t.Fatalf("the copy from before the apply reads as not ready (%+v): this test shows nothing", cs)
	}
	cs, gets := check(wrote(d.Generation))
	if cs.Ready {
		t.Errorf("ready at generation %d, read from a cache at %d: the rollout has not started", d.Generation, before.Generation)
	}
	if len(cs.Workloads) != 1 || !strings.Contains(cs.Workloads[0].Message, "observe the change") {
		t.Errorf("workloads %+v, want one waiting for the deployment controller to observe the change", cs.Workloads)
	}
	if gets != 1 {
		t.Errorf("%d reads of the API server, want 1", gets)
	}
	// A cache that has seen the write is believed, with no read.
	if cs, gets := check(wrote(before.Generation)); !cs.Ready || gets != 0 {
		t.Errorf("a cache at the generation written: ready %t with %d reads of the API server, want ready with none", cs.Ready, gets)
	}
}

// TestAWorkloadNoComponentSelectsIsJudgedUnderTheChart: a chart may render
// a workload none of the driver's components selects (a subchart's
// cache, say). Its rollout is the release's too: one stuck (here never
// observed by its controller) keeps the deployment from Ready, under the
// "chart" component, instead of being left out of the check.
func TestAWorkloadNoComponentSelectsIsJudgedUnderTheChart(t *testing.T) {
	ctx, api := appNamespace(t)
	labels := map[string]string{"app": "cache"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "cache"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "cache", Image: "cache:1"}}},
			},
		},
	}
	if err := api.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	inventory := []v1alpha1.ObjectRef{{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "app", Name: "cache"}}
	comps, err := ComponentStatuses(ctx, api, api, inventory, time.Time{}, nil, nil, time.Time{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 1 || comps[0].Name != OthersComponent || comps[0].Ready || len(comps[0].Workloads) != 1 || comps[0].Workloads[0].Name != "cache" {
		t.Fatalf("components %+v, want %q not ready with Deployment cache", comps, OthersComponent)
	}
	if s := NotReadySummary(comps); !strings.Contains(s, "Deployment/cache") {
		t.Errorf("the Ready message %q does not name the workload", s)
	}
}

// appNamespace starts an API server (no controllers) with a namespace
// "app", and returns a client of it.
func appNamespace(t *testing.T) (context.Context, client.Client) {
	t.Helper()
	ctx, api, _ := appCluster(t)
	return ctx, api
}

// appCluster is appNamespace that also returns the cluster's config (for
// other clients of it).
func appCluster(t *testing.T) (context.Context, client.Client, *rest.Config) {
	t.Helper()
	c := testcluster.StartT(t, testcluster.Options{})
	api, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := api.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	return ctx, api, c.RESTConfig
}
