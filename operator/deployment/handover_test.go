package deployment

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAReplicaThatLostItsLeaseDoesNotRecordAnOlderChangeActive pins the
// controller's record of the active instance against a second writer, as
// the task's own record is: a replica that lost its lease while its cache
// showed change 5 Ready over change 4 active wakes after the next leader
// recorded 6. Its status write, which records 5 active, is made only over
// the copy it read; a merge patch over whatever was there wrote 5 over 6,
// and change 7's workflow would have been chosen against 5.
func TestAReplicaThatLostItsLeaseDoesNotRecordAnOlderChangeActive(t *testing.T) {
	t.Parallel()
	const ns = "dev-web"
	cl, sd := webDeployment(t, 5)
	ctx := context.Background()
	active := func(seq int64) {
		sd.Status.Active = &v1alpha1.ActiveInstance{Sequence: seq, Task: v1alpha1.TaskName("web", seq)}
		sd.Status.ActiveSequence = seq
	}
	active(4)
	if err := cl.Status().Update(ctx, sd); err != nil {
		t.Fatal(err)
	}
	stale := sd.DeepCopy() // what the old leader's cache holds
	// The next leader runs change 5, then 6.
	sd.Spec.Sequence, sd.Spec.Digest = 6, "sha256:"+strings.Repeat("6", 64)
	if err := cl.Update(ctx, sd); err != nil {
		t.Fatal(err)
	}
	active(6)
	if err := cl.Status().Update(ctx, sd); err != nil {
		t.Fatal(err)
	}

	metrics, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{client: cl, metrics: metrics, states: map[string]*deploymentState{}, now: time.Now, interval: time.Minute}
	rs := &reconcileState{sd: stale.DeepCopy(), ready: true}
	// What activeWithReady records of change 5 when its core step waits
	// for exactly this.
	rs.sd.Status.Active = &v1alpha1.ActiveInstance{Sequence: 5, Task: v1alpha1.TaskName("web", 5)}
	rs.sd.Status.ActiveSequence = 5
	if _, err := r.resultFor(ctx, rs, stale, nil); err != nil {
		t.Fatalf("resultFor: %v", err)
	}
	var got v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, client.ObjectKeyFromObject(sd), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.ActiveSequence != 6 || got.Status.Active == nil || got.Status.Active.Sequence != 6 {
		t.Fatalf("active sequence %d (active %+v), want 6: an older change was recorded active over a newer one", got.Status.ActiveSequence, got.Status.Active)
	}
}
