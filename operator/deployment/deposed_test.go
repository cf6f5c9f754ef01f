package deployment

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/styrmin/styrmin/internal/cachetest"
	"github.com/styrmin/styrmin/internal/crdtest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
)

// TestADeposedLeadersReadyDoesNotLandOverTheNextLeadersRollout pins the
// status write against a second writer: a replica paused past its lease
// while it judged change 5 Ready wakes after the next leader applied
// change 6 and wrote it not ready yet. Its write, a merge patch from its
// cached copy, replaced the conditions whole: Ready True over change 6's
// rollout, at 6's generation and applied sequence, so change 6's task
// took 6 as running and ready (its waves went on) while its pods were
// still starting, or crashing. The write is made only over the copy it
// was decided on; the conflict makes the next reconcile read the API
// server's copy, not the cache's that may still hold the old one.
func TestADeposedLeadersReadyDoesNotLandOverTheNextLeadersRollout(t *testing.T) {
	t.Parallel()
	const ns = "dev-web"
	cl, sd := webDeployment(t, 5)
	ctx := context.Background()
	rollingOut := func(seq int64) {
		sd.Status.ObservedGeneration, sd.Status.AppliedSequence = sd.Generation, seq
		setCondition(sd, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonComponentsNotReady, "web: 0/2 ready")
	}
	rollingOut(5)
	if err := cl.Status().Update(ctx, sd); err != nil {
		t.Fatal(err)
	}
	stale := sd.DeepCopy() // what the old leader's cache holds
	// The next leader applies change 6, rolling out.
	sd.Spec.Sequence, sd.Spec.Digest = 6, "sha256:"+strings.Repeat("6", 64)
	if err := cl.Update(ctx, sd); err != nil {
		t.Fatal(err)
	}
	rollingOut(6)
	if err := cl.Status().Update(ctx, sd); err != nil {
		t.Fatal(err)
	}

	metrics, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cache := cachetest.Stale{Client: cl, Copy: stale}
	r := &Reconciler{client: cache, apiReader: cl, metrics: metrics, states: map[string]*deploymentState{}, now: time.Now, interval: time.Minute}
	// What the old leader decided of change 5 before its pause.
	rs := &reconcileState{sd: stale.DeepCopy(), ready: true}
	setCondition(rs.sd, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSucceeded, "sequence 5 runs as release revision 2; 1 components ready")
	res, err := r.resultFor(ctx, rs, stale, nil)
	if err != nil {
		t.Fatalf("resultFor: %v", err)
	}
	var got v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, client.ObjectKeyFromObject(sd), &got); err != nil {
		t.Fatal(err)
	}
	if ok, _ := instance.Applied(&got, 6); ok {
		t.Fatalf("change 6 reads as running and Ready (%v): the old leader's Ready of change 5 was written over its rollout", apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady))
	}
	if res.RequeueAfter == 0 {
		t.Errorf("result %+v: a write that conflicted is to be decided again", res)
	}
	// The cache still serves the old copy: the next reconcile reads the
	// API server's.
	var next v1alpha1.StyrminDeployment
	if err := r.read(ctx, client.ObjectKeyFromObject(sd), &next); err != nil {
		t.Fatal(err)
	}
	if next.Spec.Sequence != 6 {
		t.Errorf("the reconcile after the conflict read sequence %d, want the API server's 6", next.Spec.Sequence)
	}
}

// TestAStatusWriteSeenWhileTheControllersOwnIsUnderWayIsJudgedOnItsAnswer
// pins the wake on another writer's status against the controller's own
// writes: the event of its own write may come before the write's answer,
// when the controller does not know that resourceVersion yet. Held back
// until the answer, its own is no wake (a reconcile more for every status
// write), and another writer's after it is.
func TestAStatusWriteSeenWhileTheControllersOwnIsUnderWayIsJudgedOnItsAnswer(t *testing.T) {
	t.Parallel()
	const ns = "dev-web"
	cl, sd := webDeployment(t, 1)
	ctx := context.Background()
	var r *Reconciler
	another := false // whether another writer writes after the controller
	wrapped := interceptor.NewClient(noWatch{cl}, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := c.Status().Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			// The informer sees the write before its answer is read.
			if r.notOwnWrite(ns, obj.GetResourceVersion()) {
				t.Error("the controller's own write, seen before its answer, passed as another's")
			}
			if another {
				o := obj.DeepCopyObject().(*v1alpha1.StyrminDeployment)
				o.Status.DriftCorrections++
				if err := c.Status().Update(ctx, o); err != nil {
					return err
				}
				if r.notOwnWrite(ns, o.ResourceVersion) {
					t.Error("another's write seen while the controller's was under way passed before its answer")
				}
			}
			return nil
		},
	})
	r = &Reconciler{client: wrapped, apiReader: cl, states: map[string]*deploymentState{}, now: time.Now, interval: time.Minute}
	for _, tc := range []struct {
		another bool
		want    bool
	}{{false, false}, {true, true}} {
		another = tc.another
		var cur v1alpha1.StyrminDeployment
		if err := cl.Get(ctx, client.ObjectKeyFromObject(sd), &cur); err != nil {
			t.Fatal(err)
		}
		next := cur.DeepCopy()
		next.Status.AppliedSequence++
		otherSince, err := r.writeStatus(ctx, next, cur.DeepCopy(), &cur)
		if err != nil {
			t.Fatal(err)
		}
		if otherSince != tc.want {
			t.Errorf("another writer after the controller: %v; the write reports one seen since: %v", tc.another, otherSince)
		}
		// After the answer: the controller's own is not another's.
		if r.notOwnWrite(ns, next.ResourceVersion) {
			t.Error("the controller's own write, seen after its answer, passed as another's")
		}
	}
}

// noWatch is a client the interceptor takes, which never watches.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("no watch")
}

// TestAddingTheFinalizerKeepsOneAnotherWriterAddedSince: a merge patch
// replaces the finalizers whole, so the controller's, added from a cached
// copy older than another writer's finalizer, dropped that one (and with
// it the other's cleanup at deletion). It is added only over the copy
// read; a conflict is retried.
func TestAddingTheFinalizerKeepsOneAnotherWriterAddedSince(t *testing.T) {
	t.Parallel()
	cl, sd, stale := withAnotherWritersFinalizer(t)
	r := &Reconciler{client: cl, apiReader: cl, states: map[string]*deploymentState{}, now: time.Now, interval: time.Minute}
	err := r.ensureFinalizer(context.Background(), &reconcileState{sd: stale.DeepCopy()})
	if got := finalizersOf(t, cl, sd); !slices.Contains(got, "example.com/cleanup") {
		t.Fatalf("finalizers %v (ensureFinalizer: %v): the one added since the copy was read is gone", got, err)
	}
	if err == nil {
		t.Error("the finalizer was added over a copy older than the object's: want a conflict, retried")
	}
}

// withAnotherWritersFinalizer makes a StyrminDeployment (with the
// release's finalizer when the caller's test removes it: stale's
// finalizers are as given) and returns it as another writer left it,
// its finalizer added, and stale, the copy read before that.
func withAnotherWritersFinalizer(t *testing.T, finalizers ...string) (client.Client, *v1alpha1.StyrminDeployment, *v1alpha1.StyrminDeployment) {
	t.Helper()
	cl, sd := webDeployment(t, 1, finalizers...)
	ctx := context.Background()
	stale := sd.DeepCopy()
	sd.Finalizers = append(sd.Finalizers, "example.com/cleanup")
	if err := cl.Update(ctx, sd); err != nil {
		t.Fatal(err)
	}
	return cl, sd, stale
}

// finalizersOf reads sd's finalizers from the API server.
func finalizersOf(t *testing.T, cl client.Client, sd *v1alpha1.StyrminDeployment) []string {
	t.Helper()
	var got v1alpha1.StyrminDeployment
	if err := cl.Get(context.Background(), client.ObjectKeyFromObject(sd), &got); err != nil {
		t.Fatal(err)
	}
	return got.Finalizers
}

// TestRemovingTheFinalizerKeepsOneAnotherWriterAddedSince: once the
// release is uninstalled, its finalizer is removed with a merge patch,
// which replaces the list whole: from a copy older than another writer's
// finalizer, that one went too, and the object could go before that
// writer's clean-up ran. Removed over the copy read, it conflicts, and
// the next reconcile reads the object afresh.
func TestRemovingTheFinalizerKeepsOneAnotherWriterAddedSince(t *testing.T) {
	t.Parallel()
	cl, sd, stale := withAnotherWritersFinalizer(t, v1alpha1.FinalizerRelease)
	ctx := context.Background()
	r := &Reconciler{client: cl, apiReader: cl, states: map[string]*deploymentState{}, now: time.Now, interval: time.Minute}
	err := r.removeFinalizer(ctx, stale.DeepCopy())
	if got := finalizersOf(t, cl, sd); !slices.Contains(got, "example.com/cleanup") {
		t.Fatalf("finalizers %v (removeFinalizer: %v): the one added since the copy was read is gone", got, err)
	}
	if err == nil || !r.takeReadFresh(sd.Namespace) {
		t.Errorf("the finalizer was removed over a copy older than the object's (%v): want a conflict, the object read afresh next", err)
	}
	// From the copy read afresh, it goes, and the other stays.
	var fresh v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, client.ObjectKeyFromObject(sd), &fresh); err != nil {
		t.Fatal(err)
	}
	if err := r.removeFinalizer(ctx, &fresh); err != nil {
		t.Fatal(err)
	}
	if got := finalizersOf(t, cl, sd); !slices.Equal(got, []string{"example.com/cleanup"}) {
		t.Errorf("finalizers %v, want only the other writer's", got)
	}
}

// webDeployment starts an API server with the CRDs and makes the web
// example's StyrminDeployment in its namespace (dev-web) at sequence seq
// (a digest of that digit), with finalizers.
func webDeployment(t *testing.T, seq int64, finalizers ...string) (client.Client, *v1alpha1.StyrminDeployment) {
	t.Helper()
	const ns = "dev-web"
	cl := crdtest.Start(t, ns)
	sd := &v1alpha1.StyrminDeployment{}
	sd.Name, sd.Namespace, sd.Finalizers = ns, ns, finalizers
	sd.Spec = v1alpha1.StyrminDeploymentSpec{Deployment: v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "web"},
		Sequence: seq, Digest: "sha256:" + strings.Repeat(strconv.FormatInt(seq%10, 10), 64), Driver: v1alpha1.DriverRef{Name: "webapp", Version: "1.0.0"}}
	if err := cl.Create(context.Background(), sd); err != nil {
		t.Fatal(err)
	}
	return cl, sd
}
