package health

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAWorkloadScaledToZeroOutsideStyrminIsNotReady: a Deployment whose
// chart asks for 2 replicas, scaled to 0 by hand, read "0 of 0 ready":
// the deployment stayed Ready (and its commit green) with nothing
// serving, until the drift check put the replicas back, and for ever when
// an autoscaler scales it (the drift check leaves its replicas to the
// autoscaler, which disables its scaling at 0). It is not ready, saying
// who scaled it and, with an autoscaler, what to do; 0 replicas the
// chart asks for, or the agent's own stop step set, stay ready.
func TestAWorkloadScaledToZeroOutsideStyrminIsNotReady(t *testing.T) {
	api := workloadWorld(t)
	ctx := context.Background()
	// apply applies the chart's Deployment at replicas, as the agent does.
	apply := func(replicas int32) {
		t.Helper()
		labels := map[string]string{"app": "web"}
		d := &appsv1.Deployment{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}},
				},
			},
		}
		if err := api.Patch(ctx, d, client.Apply, client.FieldOwner(v1alpha1.FieldManager), client.ForceOwnership); err != nil {
			t.Fatal(err)
		}
	}
	// scale sets the replicas as manager, as kubectl scale does.
	scale := func(replicas int, manager string) {
		t.Helper()
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"}}
		patch := []byte(`{"spec":{"replicas":` + strconv.Itoa(replicas) + `}}`)
		if err := api.Patch(ctx, d, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(manager)); err != nil {
			t.Fatal(err)
		}
	}
	ref := v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "app", Name: "web", Component: "web"}
	// at waits until the Deployment's controller observed it at replicas
	// (every pod of the ones before gone) and returns its status.
	at := func(replicas int32) v1alpha1.WorkloadStatus {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			var d appsv1.Deployment
			if err := api.Get(ctx, client.ObjectKey{Namespace: "app", Name: "web"}, &d); err != nil {
				t.Fatal(err)
			}
			comps, err := ComponentStatuses(ctx, api, api, []v1alpha1.ObjectRef{ref}, time.Time{}, nil, nil, time.Time{}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			ws := comps[0].Workloads[0]
			if d.Status.ObservedGeneration >= d.Generation && d.Status.Replicas == replicas && d.Status.ReadyReplicas == replicas {
				if ws.Ready != comps[0].Ready {
					t.Fatalf("workload ready %v, component ready %v", ws.Ready, comps[0].Ready)
				}
				return ws
			}
			if time.Now().After(deadline) {
				t.Fatalf("not at %d replicas within 90 s: %+v", replicas, d.Status)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	apply(2)
	if ws := at(2); !ws.Ready {
		t.Fatalf("the chart's 2 replicas running: %+v; want ready", ws)
	}
	scale(0, "kubectl")
	ws := at(0)
	if ws.Ready || !strings.Contains(ws.Message, "scaled to 0 outside Styrmin (by kubectl)") || !strings.Contains(ws.Message, "drift check") {
		t.Fatalf("scaled to 0 by hand: %+v; want not ready, naming kubectl and the drift check", ws)
	}

	// An autoscaler scales it: nothing puts the replicas back.
	two := int32(2)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web-hpa"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    &two, MaxReplicas: 5,
		},
	}
	if err := api.Create(ctx, hpa); err != nil {
		t.Fatal(err)
	}
	ws = at(0)
	if ws.Ready || !strings.Contains(ws.Message, "HorizontalPodAutoscaler web-hpa") || !strings.Contains(ws.Message, "scaling is disabled") ||
		!strings.Contains(ws.Message, "kubectl scale -n app deployment/web --replicas=2") {
		t.Fatalf("scaled to 0 by hand under an autoscaler: %+v; want not ready, naming the autoscaler, its disabled scaling and the command", ws)
	}
	if err := api.Delete(ctx, hpa); err != nil {
		t.Fatal(err)
	}

	// The agent's own stop step: a task runs, or a failed one holds it
	// (the deployment says so).
	apply(2)
	at(2)
	scale(0, v1alpha1.ActionsFieldManager)
	if ws := at(0); !ws.Ready {
		t.Fatalf("stopped by the agent's stop step: %+v; want ready (0 of 0)", ws)
	}
	// The chart asks for 0.
	apply(0)
	if ws := at(0); !ws.Ready {
		t.Fatalf("the chart's 0 replicas: %+v; want ready", ws)
	}
}

// TestAnAutoscalerThatScalesToZeroIdlesItsWorkloadThere: an autoscaler of
// minReplicas 0, or KEDA's, may leave its workload at 0.
func TestAnAutoscalerThatScalesToZeroIdlesItsWorkloadThere(t *testing.T) {
	zero, one := int32(0), int32(1)
	for _, tc := range []struct {
		name string
		hpa  autoscalingv2.HorizontalPodAutoscaler
		want bool
	}{
		{"minReplicas unset", autoscalingv2.HorizontalPodAutoscaler{}, false},
		{"minReplicas 1", autoscalingv2.HorizontalPodAutoscaler{Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: &one}}, false},
		{"minReplicas 0", autoscalingv2.HorizontalPodAutoscaler{Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: &zero}}, true},
		{"KEDA's", autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{APIVersion: "keda.sh/v1alpha1", Kind: "ScaledObject", Name: "web"}}},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: &one}}, true},
	} {
		if got := idlesAtZero(&tc.hpa); got != tc.want {
			t.Errorf("%s: idles at zero %v, want %v", tc.name, got, tc.want)
		}
	}
}

// countingReader counts the reads of the API server the health check
// makes through it.
type countingReader struct {
	client.Reader
	gets, lists *int
}

func (c countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	*c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	*c.lists++
	return c.Reader.List(ctx, list, opts...)
}

// webAt is Deployment app/web, at replicas unless nil, applied by manager.
func webAt(t *testing.T, api client.Client, replicas *int32, manager string) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}},
			},
		},
	}
	if err := api.Patch(context.Background(), d, client.Apply, client.FieldOwner(manager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
}

// observedAtZero waits until the Deployment's controller observed web
// at 0 replicas.
func observedAtZero(t *testing.T, api client.Client) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var d appsv1.Deployment
		if err := api.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "web"}, &d); err != nil {
			t.Fatal(err)
		}
		if d.Status.ObservedGeneration >= d.Generation && ReplicasOf(d.Spec.Replicas) == 0 && d.Status.Replicas == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("web not observed at 0 replicas within 60 s: %+v", d.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var webRef = v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "app", Name: "web", Component: "web"}

// TestAWorkloadIdlingAtZeroIsReadFromTheAPIServerOncePerChange: a
// workload KEDA idles at 0 (its HorizontalPodAutoscaler of minReplicas
// 0) was read from the API server, and its namespace's autoscalers
// listed, on every health check (every pod or workload event, every
// drift interval): at thousands of deployments with idle environments, a
// steady load for nothing. The verdict stands while the workload's
// resourceVersion does: one read of each, and one more once it changes.
func TestAWorkloadIdlingAtZeroIsReadFromTheAPIServerOncePerChange(t *testing.T) {
	api := workloadWorld(t)
	ctx := context.Background()
	zero := int32(0)
	webAt(t, api, &zero, "keda-operator")
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "keda-hpa-web"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    &zero, MaxReplicas: 5,
			// Scaling to 0 takes an external or object metric.
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "queue-length"},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewQuantity(5, resource.DecimalSI)},
			}}},
		},
	}
	if err := api.Create(ctx, hpa); err != nil {
		t.Fatal(err)
	}
	observedAtZero(t, api)
	var gets, lists int
	live := countingReader{Reader: api, gets: &gets, lists: &lists}
	var zeroes Zeroes
	check := func() v1alpha1.WorkloadStatus {
		t.Helper()
		comps, err := ComponentStatuses(ctx, api, live, []v1alpha1.ObjectRef{webRef}, time.Time{}, nil, nil, time.Time{}, &zeroes, nil)
		if err != nil {
			t.Fatal(err)
		}
		return comps[0].Workloads[0]
	}
	for i := range 5 {
		if ws := check(); !ws.Ready {
			t.Fatalf("check %d: idling at 0 under its autoscaler: %+v; want ready", i, ws)
		}
	}
	if gets != 1 || lists != 1 {
		t.Fatalf("5 checks of an unchanged workload at 0 read it %d times and listed the autoscalers %d times; want once each", gets, lists)
	}

	// The autoscaler goes, and the workload changes: judged again, once.
	if err := api.Delete(ctx, hpa); err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"}}
	if err := api.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"touched":"yes"}}}`)), client.FieldOwner("kubectl")); err != nil {
		t.Fatal(err)
	}
	observedAtZero(t, api) // a Deployment's annotations count in its generation
	for i := range 3 {
		if ws := check(); ws.Ready || !strings.Contains(ws.Message, "scaled to 0 outside Styrmin (by keda-operator)") {
			t.Fatalf("check %d after the change: %+v; want not ready, scaled to 0 by keda-operator", i, ws)
		}
	}
	if gets != 2 || lists != 2 {
		t.Fatalf("after a change, 3 checks made %d reads and %d lists in all; want 2 of each", gets, lists)
	}
}

// TestAWorkloadTheReleaseHandedOverAtZeroIsReady: a chart runs web at 0
// and its next version stops setting replicas; the release keeps the
// live 0 under its handover manager (release.ReplicasHandoverManager).
// It read "scaled to 0 outside Styrmin (by styrmin-replicas-handover)"
// for good: the 0 is the chart's last.
func TestAWorkloadTheReleaseHandedOverAtZeroIsReady(t *testing.T) {
	api := workloadWorld(t)
	ctx := context.Background()
	zero := int32(0)
	webAt(t, api, &zero, v1alpha1.FieldManager)
	webAt(t, api, &zero, v1alpha1.ReplicasHandoverManager)
	webAt(t, api, nil, v1alpha1.FieldManager)
	observedAtZero(t, api)
	var d appsv1.Deployment
	if err := api.Get(ctx, client.ObjectKey{Namespace: "app", Name: "web"}, &d); err != nil {
		t.Fatal(err)
	}
	if by := replicasManagers(d.ManagedFields); !slices.Equal(by, []string{v1alpha1.ReplicasHandoverManager}) {
		t.Fatalf("web's replicas held by %v; want the handover's alone", by)
	}
	comps, err := ComponentStatuses(ctx, api, api, []v1alpha1.ObjectRef{webRef}, time.Time{}, nil, nil, time.Time{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ws := comps[0].Workloads[0]; !ws.Ready {
		t.Fatalf("handed over at 0 by the release: %+v; want ready", ws)
	}
}
