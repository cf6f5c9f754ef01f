package release

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

func webDeployment(ns, image string) drivers.Object {
	y := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: %s
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: %s
`, ns, image)
	return drivers.Object{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Namespace: ns, Component: "web", YAML: []byte(y)}
}

// TestRevisionsAndCorrectionsKnowTheGenerationsTheyWroteWorkloadsAt pins
// what the health check compares a cached workload with: the generation
// the API server answered the agent's apply of it with, and its drift
// correction's. Workloads only: a ConfigMap has none to wait for.
func TestRevisionsAndCorrectionsKnowTheGenerationsTheyWroteWorkloadsAt(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "gens"
	e.namespace(t, ns)
	web := v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "web"}
	live := func() int64 {
		t.Helper()
		d, err := e.cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Generation
	}

	r1, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), webDeployment(ns, "web:1")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r1.Generations().Of(web), live(); got != want || got == 0 {
		t.Errorf("revision 1 knows generation %d of the Deployment, the API server has %d", got, want)
	}
	if got := r1.Generations().Of(v1alpha1.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "a"}); got != 0 {
		t.Errorf("a ConfigMap's generation kept: %d", got)
	}
	r2, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), webDeployment(ns, "web:2")), r1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r2.Generations().Of(web), live(); got != want || got <= r1.Generations().Of(web) {
		t.Errorf("revision 2 knows generation %d of the Deployment (revision 1: %d), the API server has %d", got, r1.Generations().Of(web), want)
	}

	// Someone changes the image; the correction puts it back, at a newer
	// generation.
	if _, err := e.cs.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"other"}]}}}}`), metav1.PatchOptions{FieldManager: "kubectl"}); err != nil {
		t.Fatal(err)
	}
	drifted := live()
	desired, drifts, err := e.helm.Check(ctx, ns, "app", 2, "", nil, r2.Desired())
	if err != nil || len(drifts) != 1 {
		t.Fatalf("drift check: %v, %d drifts", err, len(drifts))
	}
	_, gens, err := e.helm.Correct(ctx, desired, drifts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gens.Of(web), live(); got != want || got <= drifted {
		t.Errorf("the correction knows generation %d of the Deployment (drifted at %d), the API server has %d", got, drifted, want)
	}
}

// TestARevisionThatStopsSettingReplicasKeepsTheLiveOnes: revision 1 runs
// web at 3 replicas; revision 2 drops spec.replicas from the chart (an
// autoscaler is to own them). Applied without them by their sole
// manager, the field was removed and the API server defaulted it: web
// was cut to 1 pod until its autoscaler scaled it out again. The live 3
// are kept (handed to another manager first), the drift check finds
// nothing, and a revision that sets them again takes them back.
func TestARevisionThatStopsSettingReplicasKeepsTheLiveOnes(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "handover"
	e.namespace(t, ns)
	web := func(replicas string) drivers.Object {
		o := webDeployment(ns, "web:1")
		o.YAML = []byte(strings.Replace(string(o.YAML), "  replicas: 1\n", replicas, 1))
		return o
	}
	replicas := func() int32 {
		t.Helper()
		d, err := e.cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *d.Spec.Replicas
	}
	r1, _, err := e.helm.Apply(ctx, releaseReq(ns, web("  replicas: 3\n")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	r2, _, err := e.helm.Apply(ctx, releaseReq(ns, web("")), r1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := replicas(); got != 3 {
		t.Fatalf("after the revision that stops setting replicas web runs %d; want the live 3 kept", got)
	}
	if _, drifts, err := e.helm.Check(ctx, ns, "app", 2, "", nil, r2.Desired()); err != nil || len(drifts) != 0 {
		t.Fatalf("drift check of revision 2: %v, %s", err, Summary(drifts))
	}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, web("  replicas: 2\n")), r2, 2); err != nil {
		t.Fatal(err)
	}
	if got := replicas(); got != 2 {
		t.Fatalf("after a revision that sets 2 replicas again web runs %d", got)
	}
}

// scaleBeforeHandover is a dynamic client whose replicas handover apply
// is preceded, once, by scale: a scale that lands between the
// handover's read of the workload and its apply.
type scaleBeforeHandover struct {
	dynamic.Interface
	scale func()
}

func (d *scaleBeforeHandover) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return scaleBeforeHandoverNS{d.Interface.Resource(gvr), d}
}

type scaleBeforeHandoverNS struct {
	dynamic.NamespaceableResourceInterface
	d *scaleBeforeHandover
}

func (n scaleBeforeHandoverNS) Namespace(ns string) dynamic.ResourceInterface {
	return scaleBeforeHandoverRes{n.NamespaceableResourceInterface.Namespace(ns), n.d}
}

type scaleBeforeHandoverRes struct {
	dynamic.ResourceInterface
	d *scaleBeforeHandover
}

func (r scaleBeforeHandoverRes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*unstructured.Unstructured, error) {
	if opts.FieldManager == ReplicasHandoverManager && r.d.scale != nil {
		r.d.scale()
		r.d.scale = nil
	}
	return r.ResourceInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// TestAScaleDuringTheReplicasHandoverIsKept: revision 2 stops setting
// web's replicas (10, the chart's); between the handover's read of web
// and its apply an autoscaler scales web to 12 through the scale
// subresource, taking the field. The handover's apply was forced: it
// took the replicas back at the 10 read, cutting 12 pods to 10. Not
// forced, it conflicts, and the 12 stay the autoscaler's.
func TestAScaleDuringTheReplicasHandoverIsKept(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "handover-race"
	e.namespace(t, ns)
	web := func(replicas string) drivers.Object {
		o := webDeployment(ns, "web:1")
		o.YAML = []byte(strings.Replace(string(o.YAML), "  replicas: 1\n", replicas, 1))
		return o
	}
	r1, _, err := e.helm.Apply(ctx, releaseReq(ns, web("  replicas: 10\n")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	scaled := false
	e.helm.objects.dyn = &scaleBeforeHandover{Interface: e.helm.objects.dyn, scale: func() {
		s, err := e.cs.AppsV1().Deployments(ns).GetScale(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.Replicas = 12
		if _, err := e.cs.AppsV1().Deployments(ns).UpdateScale(ctx, "web", s, metav1.UpdateOptions{FieldManager: "kube-controller-manager"}); err != nil {
			t.Fatal(err)
		}
		scaled = true
	}}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, web("")), r1, 1); err != nil {
		t.Fatalf("revision 2, scaled during its handover: %v", err)
	}
	if !scaled {
		t.Fatal("the handover applied nothing: no scale raced it")
	}
	d, err := e.cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := *d.Spec.Replicas; got != 12 {
		t.Fatalf("after the revision that stops setting replicas, an autoscaler having scaled web to 12 during the handover, web runs %d; want 12", got)
	}
}
