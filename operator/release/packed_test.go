package release

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestPackedRevisionKeepsEveryObjectAndFieldSetInAFractionOfTheirSize
// pins what the agent keeps per release for the drift check: the objects
// (their JSON, whether they outlive the release, their resource) and the
// field sets come back as they went in, a field set known to be empty
// stays known, one not known stays unknown, and the packed form is
// smaller than a third of the JSON it holds.
func TestPackedRevisionKeepsEveryObjectAndFieldSetInAFractionOfTheirSize(t *testing.T) {
	t.Parallel()
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	namespaces := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	obj := func(kind, ns, name string, gvr schema.GroupVersionResource, keep bool) *desiredObject {
		labels := strings.Repeat(fmt.Sprintf(`"app.kubernetes.io/part-%s":"web",`, name), 12)
		data := fmt.Sprintf(`{"apiVersion":"v1","kind":%q,"metadata":{"name":%q,"namespace":%q,"labels":{%s"x":"y"}},"spec":{"replicas":2}}`, kind, name, ns, labels)
		return &desiredObject{ref: v1alpha1.ObjectRef{APIVersion: gvr.GroupVersion().String(), Kind: kind, Namespace: ns, Name: name},
			gvr: gvr, namespaced: ns != "", data: []byte(data), keep: keep, namespace: "dev-web"}
	}
	objects := []*desiredObject{
		obj("Deployment", "dev-web", "web", deployments, false),
		obj("Deployment", "dev-web", "worker", deployments, true),
		obj("Namespace", "", "dev-web-extra", namespaces, false),
	}
	objects[1].autoscaled = true
	fieldSet := []byte(`{"f:metadata":{"f:labels":{` + strings.Repeat(`"f:app.kubernetes.io/name":{},`, 20) + `"f:x":{}}},"f:spec":{"f:replicas":{}}}`)
	expected := map[string][]byte{
		objectKey(objects[0].ref): fieldSet,
		objectKey(objects[2].ref): nil, // known: Styrmin owns none of it
	}
	packed, err := pack(objects, expected)
	if err != nil {
		t.Fatal(err)
	}
	gotObjects, gotExpected, err := unpack(dyn, packed)
	if err != nil {
		t.Fatal(err)
	}
	if len(gotObjects) != len(objects) {
		t.Fatalf("%d objects unpacked, want %d", len(gotObjects), len(objects))
	}
	size := 0
	for i, want := range objects {
		got := gotObjects[i]
		size += len(want.data)
		if got.ref != want.ref || got.gvr != want.gvr || got.namespaced != want.namespaced || got.keep != want.keep ||
			got.autoscaled != want.autoscaled || got.namespace != want.namespace || !bytes.Equal(got.data, want.data) || got.resource == nil {
			t.Errorf("object %d: got %+v, want %+v", i, got, want)
		}
	}
	for key, want := range expected {
		size += len(want)
		got, ok := gotExpected[key]
		if !ok || !bytes.Equal(got, want) {
			t.Errorf("field set of %s: %q (known %v), want %q", key, got, ok, want)
		}
	}
	if _, ok := gotExpected[objectKey(objects[1].ref)]; ok {
		t.Errorf("the unknown field set of %s came back known", objects[1].ref)
	}
	if len(packed)*3 > size {
		t.Errorf("packed: %d bytes for %d bytes of JSON; want under a third", len(packed), size)
	}
	if _, _, err := unpack(dyn, []byte("not deflate")); err == nil || !strings.Contains(err.Error(), "unpacking the release's objects") {
		t.Errorf("unpacking garbage: %v", err)
	}
}

// TestPackingAllocatesLittleBesidesItsOutput pins that packing a
// revision holds no compressor of its own: a flate writer is about 1 MB
// of tables, and one per packing was 40% of what the agent allocated at
// 2,000 deployments.
func TestPackingAllocatesLittleBesidesItsOutput(t *testing.T) {
	// Not in parallel: it counts what the whole process allocates.
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	var objects []*desiredObject
	for i := range 4 {
		name := fmt.Sprintf("web-%d", i)
		data := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":"dev-web","labels":{"app.kubernetes.io/name":"web","app.kubernetes.io/instance":%q}},"spec":{"replicas":2,"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.25.0"}]}}}}`, name, name)
		objects = append(objects, &desiredObject{ref: v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "dev-web", Name: name},
			gvr: gvr, namespaced: true, data: []byte(data), namespace: "dev-web"})
	}
	if _, err := pack(objects, nil); err != nil { // the pools filled
		t.Fatal(err)
	}
	const runs = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := pack(objects, nil); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	// A collection may empty the pools once or twice meanwhile; a writer
	// of its own per packing would be 1 MB each time.
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 64<<10 {
		t.Errorf("packing allocates %d bytes per revision of %d objects, want under 64 KiB", per, len(objects))
	}
}
