package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// TestCRDSchemas pins, on a real API server, that the generated CRDs accept
// real objects (values and context kept whole, not pruned) and refuse bad
// ones with an error naming the field.
func TestCRDSchemas(t *testing.T) {
	t.Parallel()
	c, cl := agenttest.StartCluster(t, testcluster.Options{})
	ctx := context.Background()
	// Installing again is a no-op, as an agent restart does it.
	if err := operator.InstallCRDs(ctx, c.RESTConfig); err != nil {
		t.Fatalf("second install: %v", err)
	}

	in := &resolver.Instance{
		APIVersion: resolver.APIVersion, Kind: resolver.KindInstance,
		ID:       resolver.ID{Cluster: "local", Environment: "dev", Name: "web"},
		Sequence: 4, SourceCommit: "0123456789abcdef0123456789abcdef01234567",
		Driver: resolver.DriverRef{Name: "webapp", Version: "1.1.0", Digest: "sha256:" + strings.Repeat("a", 64),
			Source: &resolver.DriverOrigin{URL: "https://git.example.com/drivers.git", Ref: "main", Path: "webapp", Commit: strings.Repeat("c", 40)}},
		AppVersion: "1.25.0",
		Values:     map[string]any{"replicaCount": 2, "nested": map[string]any{"list": []any{"a", 1.5, true}}},
	}
	in.Context = mustContext(t, `{"cluster":{"name":"local","domain":"d","ingressClass":"nginx","dedicatedIngress":false},
		"environment":{"name":"dev","namespace":"dev"},"deployment":{"name":"web","namespace":"default","appVersion":"1.25.0","driver":"webapp","driverVersion":"1.1.0"},
		"parameters":{"replicas":2,"secret":{"name":"db","key":"password"}},"services":{}}`)
	var err error
	if in.Digest, err = in.ComputeDigest(); err != nil {
		t.Fatal(err)
	}
	spec, err := instance.SpecFromInstance(in)
	if err != nil {
		t.Fatal(err)
	}
	sd := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}, Spec: spec}
	if err := cl.Create(ctx, sd); err != nil {
		t.Fatalf("a real StyrminDeployment is refused: %v", err)
	}
	var back v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, client.ObjectKeyFromObject(sd), &back); err != nil {
		t.Fatal(err)
	}
	got, err := instance.InstanceFromSpec(&back.Spec)
	if err != nil {
		t.Fatalf("the stored spec no longer matches its digest (pruned?): %v", err)
	}
	if got.Digest != in.Digest || got.Context.Parameters["secret"] == nil || got.Driver.Source == nil || *got.Driver.Source != *in.Driver.Source {
		t.Fatalf("round trip through the API server changed the instance: %+v", got)
	}

	task := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dev.web.4"},
		Spec: v1alpha1.StyrminTaskSpec{
			Deployment: spec.Deployment, Namespace: "default", Workflow: v1alpha1.WorkflowUpgrade,
			FromSequence: 3, ToSequence: 4, Lock: v1alpha1.LockRef{Commit: in.SourceCommit, Path: in.ID.LockPath()},
			Instance: &spec,
		},
	}
	if err := cl.Create(ctx, task); err != nil {
		t.Fatalf("a real StyrminTask is refused: %v", err)
	}
	task.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, Steps: []v1alpha1.TaskStep{
		{Name: "upgrade/pre/0:stopComponents", Hook: "upgrade", Mode: "pre", Action: "stopComponents", Components: []string{"worker"}, State: v1alpha1.StepSucceeded, Recorded: map[string]string{"Deployment/worker": "3"}},
		{Name: "upgrade/core/0:upgradeDeploymentVersion", Hook: "upgrade", Mode: "core", Action: "upgradeDeploymentVersion", State: v1alpha1.StepRunning},
	}}
	if err := cl.Status().Update(ctx, task); err != nil {
		t.Fatalf("a real StyrminTask status is refused: %v", err)
	}
	source := &v1alpha1.StyrminSource{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "local"},
		Spec:       v1alpha1.StyrminSourceSpec{URL: "https://git.example.com/state.git", Branch: "main", Cluster: "local"},
	}
	if err := cl.Create(ctx, source); err != nil {
		t.Fatalf("a real StyrminSource is refused: %v", err)
	}

	bad := []struct {
		name  string
		kind  string
		edit  func(obj map[string]any)
		field string // the error must name it
	}{
		{"instance without a driver", "StyrminDeployment", func(o map[string]any) { delete(specOf(o), "driver") }, "driver.name"},
		{"sequence zero", "StyrminDeployment", func(o map[string]any) { specOf(o)["sequence"] = 0 }, "spec.sequence"},
		{"digest not sha256", "StyrminDeployment", func(o map[string]any) { specOf(o)["digest"] = "md5:abc" }, "spec.digest"},
		{"unknown kind", "StyrminDeployment", func(o map[string]any) { specOf(o)["kind"] = "Snapshot" }, "spec.kind"},
		{"values not an object", "StyrminDeployment", func(o map[string]any) { specOf(o)["values"] = []any{1} }, "spec.values"},
		{"empty deployment name", "StyrminDeployment", func(o map[string]any) { specOf(o)["deployment"].(map[string]any)["name"] = "" }, "spec.deployment.name"},
		{"unknown workflow", "StyrminTask", func(o map[string]any) { specOf(o)["workflow"] = "rollback" }, "spec.workflow"},
		{"task without a lock", "StyrminTask", func(o map[string]any) { delete(specOf(o), "lock") }, "spec.lock"},
		{"source without a URL", "StyrminSource", func(o map[string]any) { delete(specOf(o), "url") }, "spec.url"},
	}
	valid := map[string]client.Object{"StyrminDeployment": sd, "StyrminTask": task, "StyrminSource": source}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			obj := toUnstructured(t, tc.kind, valid[tc.kind])
			obj.SetName("bad")
			obj.SetResourceVersion("")
			tc.edit(obj.Object)
			err := cl.Create(ctx, obj)
			if err == nil {
				t.Fatalf("the API server accepted a %s with %s", tc.kind, tc.name)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error does not name %s: %v", tc.field, err)
			}
		})
	}

	// Sanity: the CRDs carry the printer columns kubectl shows.
	var crd apiextensionsv1.CustomResourceDefinition
	if err := client.IgnoreNotFound(cl.Get(ctx, client.ObjectKey{Name: "styrmindeployments.styrmin.io"}, &crd)); err == nil && len(crd.Spec.Versions) > 0 {
		var cols []string
		for _, col := range crd.Spec.Versions[0].AdditionalPrinterColumns {
			cols = append(cols, col.Name)
		}
		for _, want := range []string{"Sequence", "App", "Driver", "Ready", "Age"} {
			if !strings.Contains(strings.Join(cols, ","), want) {
				t.Errorf("printer columns %v lack %s", cols, want)
			}
		}
	}
}

func specOf(o map[string]any) map[string]any { return o["spec"].(map[string]any) }

func toUnstructured(t *testing.T, kind string, obj client.Object) *unstructured.Unstructured {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind(kind)
	delete(u.Object, "status")
	return u
}

func mustContext(t *testing.T, js string) *drivers.Context {
	t.Helper()
	var c drivers.Context
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestWriteInstanceGuard pins the guard of the core step on a real API
// server: a newer sequence is kept, a resumed write is idempotent, a
// hand-edited annotation stops writes until it is removed, and a tombstone
// without a StyrminDeployment writes nothing.
func TestWriteInstanceGuard(t *testing.T) {
	t.Parallel()
	_, cl := agenttest.StartCluster(t, testcluster.Options{})
	ctx := context.Background()
	ctxJSON := `{"cluster":{"name":"c","domain":"d","ingressClass":"i","dedicatedIngress":false},"environment":{"name":"e","namespace":"e"},
		"deployment":{"name":"app","namespace":"e-app","appVersion":"1.0.0","driver":"webapp","driverVersion":"1.0.0"},"parameters":{},"services":{}}`
	newInstance := func(seq int64, msg string) *resolver.Instance {
		in := &resolver.Instance{APIVersion: resolver.APIVersion, Kind: resolver.KindInstance,
			ID: resolver.ID{Cluster: "c", Environment: "e", Name: "app"}, Sequence: seq,
			Driver: resolver.DriverRef{Name: "webapp", Version: "1.0.0"}, AppVersion: "1.0.0",
			Context: mustContext(t, ctxJSON), Values: map[string]any{"message": msg}}
		in.Digest, _ = in.ComputeDigest()
		return in
	}
	write := func(in *resolver.Instance) instance.WriteOutcome {
		t.Helper()
		out, err := instance.WriteInstance(ctx, cl, "", in)
		if err != nil {
			t.Fatalf("write sequence %d: %v", in.Sequence, err)
		}
		return out
	}

	if out := write(newInstance(1, "one")); !out.Written || out.Deployment.Name != "e-app" {
		t.Fatalf("create: %+v", out)
	}
	var ns corev1.Namespace
	if err := cl.Get(ctx, client.ObjectKey{Name: "e-app"}, &ns); err != nil || ns.Labels[v1alpha1.LabelDeployment] != "app" {
		t.Fatalf("namespace not created with identity labels: %v %v", err, ns.Labels)
	}
	if out := write(newInstance(3, "three")); !out.Written {
		t.Fatalf("sequence 3 over 1: %+v", out)
	}
	if out := write(newInstance(2, "two")); out.Written || out.Kept != 3 {
		t.Fatalf("sequence 2 over 3: %+v, want kept 3", out)
	}
	if out := write(newInstance(3, "three")); !out.Written {
		t.Fatalf("writing sequence 3 again (a resumed task): %+v", out)
	}

	var sd v1alpha1.StyrminDeployment
	key := client.ObjectKey{Namespace: "e-app", Name: "e-app"}
	if err := cl.Get(ctx, key, &sd); err != nil {
		t.Fatal(err)
	}
	gen := sd.Generation
	sd.Annotations[v1alpha1.AnnotationInstanceSequence] = "lots"
	if err := cl.Update(ctx, &sd); err != nil {
		t.Fatal(err)
	}
	if _, err := instance.WriteInstance(ctx, cl, "", newInstance(4, "four")); err == nil || !strings.Contains(err.Error(), v1alpha1.AnnotationInstanceSequence) {
		t.Fatalf("unparsable annotation: err = %v, want one naming the annotation", err)
	}
	sd.Annotations[v1alpha1.AnnotationInstanceSequence] = "999"
	if err := cl.Update(ctx, &sd); err != nil {
		t.Fatal(err)
	}
	if out := write(newInstance(4, "four")); out.Written || out.Kept != 999 {
		t.Fatalf("under a hand-set 999: %+v", out)
	}
	// Recovery: remove the annotation, the next change writes.
	delete(sd.Annotations, v1alpha1.AnnotationInstanceSequence)
	if err := cl.Update(ctx, &sd); err != nil {
		t.Fatal(err)
	}
	if out := write(newInstance(5, "five")); !out.Written || out.Deployment.Spec.Sequence != 5 || out.Deployment.Generation == gen {
		t.Fatalf("after removing the annotation: %+v", out)
	}

	// An instance of another deployment whose namespace would be this one
	// (the resolver refuses such configurations; a hand-made lock or task
	// could still try) is refused, and nothing changes.
	other := newInstance(9, "intruder")
	other.ID.Environment = "other"
	other.Digest, _ = other.ComputeDigest()
	if _, err := instance.WriteInstance(ctx, cl, "", other); !errors.Is(err, instance.ErrOtherDeployment) || !strings.Contains(err.Error(), "c/e/app") {
		t.Fatalf("an instance of another deployment: %v, want ErrOtherDeployment naming the one the namespace holds", err)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(&sd), &sd); err != nil || sd.Spec.Sequence != 5 {
		t.Fatalf("after the refused write: sequence %d, %v; want 5 unchanged", sd.Spec.Sequence, err)
	}

	tomb := &resolver.Instance{APIVersion: resolver.APIVersion, Kind: resolver.KindTombstone,
		ID: resolver.ID{Cluster: "c", Environment: "e", Name: "gone"}, Sequence: 2}
	tomb.Digest, _ = tomb.ComputeDigest()
	out, err := instance.WriteInstance(ctx, cl, "e-gone", tomb)
	if err != nil || !out.Written || out.Deployment != nil {
		t.Fatalf("tombstone without a StyrminDeployment: %+v, %v", out, err)
	}
	if err := cl.Get(ctx, client.ObjectKey{Name: "e-gone"}, &ns); err == nil {
		t.Fatal("a tombstone created its namespace")
	}
}
