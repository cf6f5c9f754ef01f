package intern

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// cachedDeployment is a StyrminDeployment of deployment i as the agent's
// cache decodes it from a watch event: every string its own copy.
func cachedDeployment(tb testing.TB, i int) *v1alpha1.StyrminDeployment {
	tb.Helper()
	ns := fmt.Sprintf("dev-app%04d", i)
	driver := v1alpha1.DriverRef{Name: "webapp", Version: "1.1.0", Digest: "sha256:43808c6aece574a08b839ef6ee031b743d23aa4ac5ee9fec33b3453726388851"}
	sd := v1alpha1.StyrminDeployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "styrmin.io/v1alpha1", Kind: "StyrminDeployment"},
		ObjectMeta: metav1.ObjectMeta{Name: ns, Namespace: ns, UID: types.UID(fmt.Sprintf("1e5915b9-e38b-40d1-bb41-%012d", i)), ResourceVersion: fmt.Sprint(1000 + i),
			Labels:      map[string]string{"styrmin.io/cluster": "local", "styrmin.io/environment": "dev", "styrmin.io/deployment": fmt.Sprintf("app%04d", i)},
			Annotations: map[string]string{"styrmin.io/instance-sequence": "2"}, Finalizers: []string{"styrmin.io/release"}},
		Spec: v1alpha1.StyrminDeploymentSpec{Kind: "Instance", Deployment: v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: fmt.Sprintf("app%04d", i)},
			Sequence: 2, SourceCommit: "9b21abef6319bea7c076f7ab6340901b0bf7592b", Digest: fmt.Sprintf("sha256:%064d", i), Driver: driver, AppVersion: "1.25.0",
			Context: &apiextensionsv1.JSON{Raw: fmt.Appendf(nil, `{"cluster":{"domain":"local.styrmin.dev","ingressClass":"nginx","name":"local"},"deployment":{"name":"app%04d","namespace":%q},"environment":{"name":"dev","namespace":"dev"},"parameters":{"message":"Hello from Styrmin","replicas":2}}`, i, ns)},
			Values:  &apiextensionsv1.JSON{Raw: []byte(`{"image":{"repository":"docker.io/library/nginx","tag":"1.25.0"},"message":"Hello from Styrmin","replicaCount":2,"resources":{"limits":{"memory":"64Mi"},"requests":{"cpu":"50m","memory":"64Mi"}}}`)}},
		Status: v1alpha1.StyrminDeploymentStatus{
			ObservedGeneration: 2, AppliedSequence: 2, AppliedDigest: fmt.Sprintf("sha256:%064d", i),
			Active:  &v1alpha1.ActiveInstance{Sequence: 2, Kind: "Instance", Digest: fmt.Sprintf("sha256:%064d", i), Driver: driver, AppVersion: "1.25.0", Task: fmt.Sprintf("app%04d-2", i)},
			Release: &v1alpha1.ReleaseStatus{Name: fmt.Sprintf("app%04d", i), Revision: 2, Chart: "webapp-1.1.0", Status: "deployed"},
			Conditions: []metav1.Condition{
				{Type: "Stalled", Status: "False", ObservedGeneration: 2, Reason: "Succeeded", Message: "the instance resolves and renders"},
				{Type: "Ready", Status: "True", ObservedGeneration: 2, Reason: "Succeeded", Message: "sequence 2 runs as release revision 2; 1 components ready"},
				{Type: "Drifted", Status: "False", ObservedGeneration: 1, Reason: "NoDrift", Message: "not checked yet"},
				{Type: "Reconciling", Status: "False", ObservedGeneration: 2, Reason: "Succeeded", Message: "the cluster runs the instance"},
			},
			Inventory: []v1alpha1.ObjectRef{
				{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "web-content"},
				{APIVersion: "v1", Kind: "Service", Namespace: ns, Name: "web", Component: "web"},
				{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "web", Component: "web"},
			},
			Components: []v1alpha1.ComponentStatus{{Name: "web", Ready: true, DesiredReplicas: 2, ReadyReplicas: 2,
				Workloads: []v1alpha1.WorkloadStatus{{Kind: "Deployment", Name: "web", DesiredReplicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, Ready: true}}}},
		},
	}
	raw, err := json.Marshal(&sd)
	if err != nil {
		tb.Fatal(err)
	}
	var out v1alpha1.StyrminDeployment
	if err := json.Unmarshal(raw, &out); err != nil {
		tb.Fatal(err)
	}
	return &out
}

func addr(s string) uintptr { return uintptr(unsafe.Pointer(unsafe.StringData(s))) }

func TestObjectsShareTheirRepeatedStringsAndKeepTheirOwn(t *testing.T) {
	tab := New(0)
	a, b := cachedDeployment(t, 1), cachedDeployment(t, 2)
	wantA, wantB := a.DeepCopy(), b.DeepCopy()
	tab.Object(a)
	tab.Object(b)
	if !reflect.DeepEqual(a, wantA) || !reflect.DeepEqual(b, wantB) {
		t.Fatal("interning changed an object's content")
	}
	labelKey := func(sd *v1alpha1.StyrminDeployment) string {
		for k := range sd.Labels {
			if k == "styrmin.io/cluster" {
				return k
			}
		}
		return ""
	}
	for name, pair := range map[string][2]string{
		"apiVersion":            {a.APIVersion, b.APIVersion},
		"a label's key":         {labelKey(a), labelKey(b)},
		"a label's value":       {a.Labels["styrmin.io/cluster"], b.Labels["styrmin.io/cluster"]},
		"a finalizer":           {a.Finalizers[0], b.Finalizers[0]},
		"the driver's digest":   {a.Spec.Driver.Digest, b.Spec.Driver.Digest},
		"the active driver":     {a.Status.Active.Driver.Digest, b.Spec.Driver.Digest},
		"a condition's message": {a.Status.Conditions[1].Message, b.Status.Conditions[1].Message},
		"an inventory kind":     {a.Status.Inventory[2].Kind, b.Status.Inventory[2].Kind},
	} {
		if addr(pair[0]) != addr(pair[1]) {
			t.Errorf("%s %q: not shared", name, pair[0])
		}
	}
	for _, own := range []string{string(a.UID), a.ResourceVersion} {
		if _, ok := tab.m[own]; ok {
			t.Errorf("the object's own %q was kept in the table", own)
		}
	}
	if c, ok := tab.m[a.Namespace]; ok && addr(c) == addr(a.Namespace) {
		t.Error("the object's namespace (its metadata's) was kept in the table")
	}
}

func TestAFullTableStartsAgainEmpty(t *testing.T) {
	tab := New(3)
	for _, s := range []string{"a", "b", "c", "a"} {
		tab.String(s)
	}
	if len(tab.m) != 3 {
		t.Fatalf("%d strings kept, want 3", len(tab.m))
	}
	if got := tab.String("d"); got != "d" || len(tab.m) != 1 {
		t.Fatalf("a fourth string: %q, %d kept; want it alone", got, len(tab.m))
	}
	long := string(make([]byte, MaxLen+1))
	if tab.String(long); len(tab.m) != 1 {
		t.Fatal("a string longer than MaxLen was kept")
	}
}

func TestTheTransformRunsTheNextOneAndTakesOnlyItsTypes(t *testing.T) {
	tab := New(0)
	var ran []any
	next := func(obj any) (any, error) {
		ran = append(ran, obj)
		if sd, ok := obj.(*v1alpha1.StyrminDeployment); ok {
			sd.ManagedFields = nil
		}
		return obj, nil
	}
	transform := tab.Transform(next, &v1alpha1.StyrminDeployment{})
	sd := cachedDeployment(t, 3)
	sd.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	got, err := transform(cache.DeletedFinalStateUnknown{Key: "k", Obj: sd})
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := got.(cache.DeletedFinalStateUnknown); !ok || d.Obj != sd || d.Key != "k" || sd.ManagedFields != nil || len(ran) != 1 {
		t.Fatalf("a tombstone: %#v, next ran %d times", got, len(ran))
	}
	if _, ok := tab.m["styrmin.io/v1alpha1"]; !ok {
		t.Fatal("the StyrminDeployment's strings were not shared")
	}
	task := &v1alpha1.StyrminTask{TypeMeta: metav1.TypeMeta{Kind: "StyrminTask-only-here"}}
	if _, err := transform(task); err != nil || len(ran) != 2 {
		t.Fatalf("another type: %v, next ran %d times", err, len(ran))
	}
	if _, ok := tab.m["StyrminTask-only-here"]; ok {
		t.Fatal("a type not given was interned")
	}
}

// BenchmarkCachedDeploymentsRetain measures what 2,000 cached
// StyrminDeployments hold, each decoded on its own and with their strings
// shared: the live heap per object after a collection, with the table;
// and the time Object takes per StyrminDeployment.
//
//	go test ./operator/internal/intern -run '^$' -bench CachedDeploymentsRetain
func BenchmarkCachedDeploymentsRetain(b *testing.B) {
	const n = 2000
	retained := func(share bool) float64 {
		keep := make([]*v1alpha1.StyrminDeployment, n)
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		tab := New(0)
		for i := range keep {
			keep[i] = cachedDeployment(b, i)
			if share {
				tab.Object(keep[i])
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		runtime.KeepAlive(keep)
		runtime.KeepAlive(tab)
		return float64(ms.HeapAlloc-before) / n
	}
	var each, shared float64
	var took time.Duration
	for range b.N {
		each += retained(false)
		shared += retained(true)
		objs := make([]*v1alpha1.StyrminDeployment, n)
		for i := range objs {
			objs[i] = cachedDeployment(b, i)
		}
		tab := New(0)
		start := time.Now()
		for _, o := range objs {
			tab.Object(o)
		}
		took += time.Since(start)
	}
	b.ReportMetric(each/float64(b.N), "copies-B/object")
	b.ReportMetric(shared/float64(b.N), "shared-B/object")
	b.ReportMetric(shared/each, "ratio")
	b.ReportMetric(float64(took.Microseconds())/float64(n*b.N), "µs/object")
}
