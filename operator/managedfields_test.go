package operator_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// statusPatch writes a status the way the StyrminDeployment controller
// does: a merge patch of the status subresource, no resourceVersion.
func statusPatch(ctx context.Context, cl client.Client, key client.ObjectKey, round int) error {
	var sd v1alpha1.StyrminDeployment
	sd.Namespace, sd.Name = key.Namespace, key.Name
	patch := fmt.Sprintf(`{"status":{"observedGeneration":%d,"conditions":[{"type":"Ready","status":"True","reason":"Succeeded","message":"round %d","lastTransitionTime":"2026-12-05T00:00:00Z"}]}}`, round, round)
	return cl.Status().Patch(ctx, &sd, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// TestWrittenStyrminDeploymentsCarryNoManagedFields pins that the agent's
// writes leave a StyrminDeployment without managed fields, which the API
// server then does not track for its status writes either: a create's are
// cleared at once, a status write adds none, and a server-side apply by
// someone else (which tracks again) is cleared by the next change.
func TestWrittenStyrminDeploymentsCarryNoManagedFields(t *testing.T) {
	t.Parallel()
	_, cl := agenttest.StartCluster(t, testcluster.Options{})
	ctx := context.Background()
	base := exampleWeb(t)
	at := func(seq int64) *resolver.Instance {
		in := *base
		in.Sequence = seq
		in.Digest, _ = in.ComputeDigest()
		return &in
	}
	key := instance.Key(base.Context.Deployment.Namespace)
	managers := func(step string) []string {
		t.Helper()
		var sd v1alpha1.StyrminDeployment
		if err := cl.Get(ctx, key, &sd); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		var m []string
		for _, e := range sd.ManagedFields {
			m = append(m, e.Manager+"/"+string(e.Operation)+"/"+e.Subresource)
		}
		return m
	}

	created, err := instance.WriteInstance(ctx, cl, "", at(1))
	if err != nil {
		t.Fatal(err)
	}
	if m := managers("after the create"); len(m) != 0 {
		t.Fatalf("after the create: managed fields %v, want none", m)
	}
	if d := created.Deployment; d == nil || len(d.ManagedFields) != 0 || d.Spec.Sequence != 1 {
		t.Fatalf("the create's outcome: %+v; want the StyrminDeployment as written, without managed fields", d)
	}
	if err := statusPatch(ctx, cl, key, 1); err != nil {
		t.Fatal(err)
	}
	if m := managers("after a status write"); len(m) != 0 {
		t.Fatalf("after a status write: managed fields %v, want none", m)
	}
	// A patch of the object itself, as the controller's of its finalizer
	// or annotations: still none.
	var sd v1alpha1.StyrminDeployment
	sd.Namespace, sd.Name = key.Namespace, key.Name
	if err := cl.Patch(ctx, &sd, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"example.com/team":"web"}}}`))); err != nil {
		t.Fatal(err)
	}
	if m := managers("after a patch"); len(m) != 0 {
		t.Fatalf("after a merge patch: managed fields %v, want none", m)
	}

	// Someone applies an annotation: the API server tracks again.
	apply := fmt.Sprintf(`{"apiVersion":%q,"kind":"StyrminDeployment","metadata":{"name":%q,"namespace":%q,"annotations":{"example.com/note":"by hand"}}}`,
		v1alpha1.GroupVersion.String(), key.Name, key.Namespace)
	if err := cl.Patch(ctx, &sd, client.RawPatch(types.ApplyPatchType, []byte(apply)), client.FieldOwner("someone"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	if m := managers("after an apply"); len(m) == 0 {
		t.Fatal("after a server-side apply: no managed fields; the API server should track them again")
	}
	out, err := instance.WriteInstance(ctx, cl, "", at(2))
	if err != nil || !out.Written {
		t.Fatalf("sequence 2: %+v, %v", out, err)
	}
	if m := managers("after the next change"); len(m) != 0 {
		t.Fatalf("after the next change: managed fields %v, want none", m)
	}
	if err := cl.Get(ctx, key, &sd); err != nil || sd.Spec.Sequence != 2 || sd.Annotations["example.com/note"] != "by hand" {
		t.Fatalf("after the next change: sequence %d, annotations %v, %v; want 2 and the applied annotation kept", sd.Spec.Sequence, sd.Annotations, err)
	}
}

var benchWrites = flag.Int("managed-fields-deployments", 100, "BenchmarkStyrminDeploymentWrites: StyrminDeployments per iteration")

// BenchmarkStyrminDeploymentWrites measures what the API server spends on
// the StyrminDeployment writes of a deployment's change, with the managed
// fields it tracks when nobody clears them and without them (what
// WriteInstance leaves), on objects of the same size in the same run:
//
//   - change: the instance written (an update), then three status writes
//     (applied, Ready, the active instance: as the agent wrote them before
//     the active instance went with the Ready write, which saves one);
//   - create: the StyrminDeployment created (and, cleared, the update that
//     clears its managed fields: one request more), then the same three
//     status writes.
//
// Reported: the API server's CPU milliseconds per deployment, and the
// cleared writes' ratio to the tracked ones.
//
//	go test ./operator -run '^$' -bench StyrminDeploymentWrites -benchtime 5x
func BenchmarkStyrminDeploymentWrites(b *testing.B) {
	n := *benchWrites
	c, cl := agenttest.StartCluster(b, testcluster.Options{})
	ctx := context.Background()
	admin := rest.CopyConfig(c.RESTConfig)
	admin.QPS, admin.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		b.Fatal(err)
	}
	base := exampleWeb(b)
	at := func(name string, seq int64) *resolver.Instance {
		in := renamedInstance(b, base, name, "mf-"+name)
		in.Sequence = seq
		in.Digest, _ = in.ComputeDigest()
		return in
	}
	// A tracked StyrminDeployment is a copy of a written one, created
	// directly: the API server tracks a create's fields. Both ways read
	// what WriteInstance reads first (the namespace, the object), here
	// from the API server, in the agent from its cache.
	template, err := instance.WriteInstance(ctx, cl, "", at("template", 1))
	if err != nil {
		b.Fatal(err)
	}
	createTracked := func(name string) error {
		in := at(name, 1)
		if err := instance.EnsureNamespace(ctx, cl, in.Context.Deployment.Namespace, template.Deployment.Spec.Deployment); err != nil {
			return err
		}
		var none v1alpha1.StyrminDeployment
		if err := cl.Get(ctx, instance.Key(in.Context.Deployment.Namespace), &none); !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: %v, want not found", name, err)
		}
		sd := template.Deployment.DeepCopy()
		sd.ObjectMeta = metav1.ObjectMeta{Namespace: in.Context.Deployment.Namespace, Name: in.Context.Deployment.Namespace,
			Labels: sd.Labels, Annotations: sd.Annotations, Finalizers: sd.Finalizers}
		sd.Status = v1alpha1.StyrminDeploymentStatus{}
		return cl.Create(ctx, sd)
	}
	// create makes a StyrminDeployment at sequence 1, tracked or as
	// WriteInstance does.
	create := func(tracked bool, name string) error {
		if tracked {
			return createTracked(name)
		}
		_, err := instance.WriteInstance(ctx, cl, "", at(name, 1))
		return err
	}
	updateTracked := func(key client.ObjectKey, seq int64) error {
		if err := instance.EnsureNamespace(ctx, cl, key.Namespace, template.Deployment.Spec.Deployment); err != nil {
			return err
		}
		var sd v1alpha1.StyrminDeployment
		if err := cl.Get(ctx, key, &sd); err != nil {
			return err
		}
		sd.ManagedFields = nil // as read through a cache that strips them
		sd.Spec.Sequence = seq
		sd.Annotations[v1alpha1.AnnotationInstanceSequence] = fmt.Sprint(seq)
		return cl.Update(ctx, &sd)
	}
	statuses := func(key client.ObjectKey, round int) error {
		for k := range 3 {
			if err := statusPatch(ctx, cl, key, 3*round+k); err != nil {
				return err
			}
		}
		return nil
	}
	keyOf := func(name string) client.ObjectKey { return instance.Key("mf-" + name) }
	managed := func(b *testing.B, name string) int {
		var sd v1alpha1.StyrminDeployment
		if err := cl.Get(ctx, keyOf(name), &sd); err != nil {
			b.Fatal(err)
		}
		return len(sd.ManagedFields)
	}
	// each runs fn for the n deployments, eight at a time, and returns
	// the API server's CPU seconds meanwhile.
	each := func(b *testing.B, fn func(i int) error) float64 {
		cpu0 := apiserverCPU(b, cs)
		var g errgroup.Group
		g.SetLimit(8)
		for i := range n {
			g.Go(func() error { return fn(i) })
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		return apiserverCPU(b, cs) - cpu0
	}

	perDeployment := map[string]float64{}
	// A sub-benchmark runs more than once (b.N grows): each run writes
	// its own StyrminDeployments.
	runs := 0
	report := func(b *testing.B, name, reference string, cpu float64) {
		ms := 1000 * cpu / float64(n*b.N)
		perDeployment[name] = ms
		b.ReportMetric(ms, "apiserver-ms/deploy")
		if ref := perDeployment[reference]; ref > 0 && name != reference {
			b.ReportMetric(ms/ref, "ratio-to-tracked")
		}
	}
	for _, tracked := range []bool{true, false} {
		mode := map[bool]string{true: "tracked", false: "cleared"}[tracked]
		b.Run("change/managed-fields="+mode, func(b *testing.B) {
			runs++
			prefix := fmt.Sprintf("ch%d-%s", runs, mode)
			for i := range n {
				if err := create(tracked, fmt.Sprintf("%s-%04d", prefix, i)); err != nil {
					b.Fatal(err)
				}
			}
			var cpu float64
			for round := range b.N {
				seq := int64(round + 2)
				cpu += each(b, func(i int) error {
					name := fmt.Sprintf("%s-%04d", prefix, i)
					if tracked {
						if err := updateTracked(keyOf(name), seq); err != nil {
							return err
						}
					} else if _, err := instance.WriteInstance(ctx, cl, "", at(name, seq)); err != nil {
						return err
					}
					return statuses(keyOf(name), round)
				})
			}
			if got := managed(b, prefix+"-0000"); (got > 0) != tracked {
				b.Fatalf("%s: %d managed fields entries after the writes", mode, got)
			}
			report(b, "change/"+mode, "change/tracked", cpu)
		})
	}
	for _, tracked := range []bool{true, false} {
		mode := map[bool]string{true: "tracked", false: "cleared"}[tracked]
		b.Run("create/managed-fields="+mode, func(b *testing.B) {
			runs++
			prefix := fmt.Sprintf("cr%d-%s", runs, mode)
			var cpu float64
			for round := range b.N {
				cpu += each(b, func(i int) error {
					name := fmt.Sprintf("%s-%d-%04d", prefix, round, i)
					if err := create(tracked, name); err != nil {
						return err
					}
					return statuses(keyOf(name), round)
				})
			}
			if got := managed(b, prefix+"-0-0000"); (got > 0) != tracked {
				b.Fatalf("%s: %d managed fields entries after the writes", mode, got)
			}
			report(b, "create/"+mode, "create/tracked", cpu)
		})
	}
}

// renamedInstance is a copy of in as the deployment name in namespace:
// another deployment of the same configuration.
func renamedInstance(tb testing.TB, in *resolver.Instance, name, namespace string) *resolver.Instance {
	tb.Helper()
	out := *in
	out.ID.Name = name
	dc := *in.Context
	dc.Deployment.Name, dc.Deployment.Namespace = name, namespace
	out.Context = &dc
	d, err := out.ComputeDigest()
	if err != nil {
		tb.Fatal(err)
	}
	out.Digest = d
	return &out
}

// exampleWeb is the examples' local/dev/web instance.
func exampleWeb(tb testing.TB) *resolver.Instance {
	tb.Helper()
	ws, err := resolver.LoadWorkspace(os.DirFS("../examples"), resolver.WorkspaceOptions{SourceCommit: "0123456789abcdef0123456789abcdef01234567"})
	if err != nil {
		tb.Fatal(err)
	}
	r, ok := ws.Resolve().Get(resolver.ID{Cluster: "local", Environment: "dev", Name: "web"})
	if !ok {
		tb.Fatal("example local/dev/web does not resolve")
	}
	return r.Instance
}
