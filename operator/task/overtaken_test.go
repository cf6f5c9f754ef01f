package task

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// rewoundBranch is a branch whose head is one of its lock commits, each
// of which locks one instance (a force push took the others away).
type rewoundBranch struct {
	head  gitsource.Hash
	locks map[string][]byte // by commit
}

func (b *rewoundBranch) Head() (gitsource.Hash, error) { return b.head, nil }

func (b *rewoundBranch) Holds(c gitsource.Hash) (bool, error) {
	_, ok := b.locks[c.String()]
	return ok, nil
}

func (b *rewoundBranch) LockFile(_ context.Context, ref v1alpha1.LockRef) ([]byte, error) {
	if data, ok := b.locks[ref.Commit]; ok {
		return data, nil
	}
	return nil, &instance.LockNotFoundError{Ref: ref, Err: gitsource.ErrCommitNotFound}
}

// TestAChangeIsNotSupersededByANewerOneTheBranchWithdrew pins a pending
// change whose newer change a force push withdrew (the branch reset to
// the pending one's lock commit) while an earlier task ran: the pending
// one counted the newer, still Pending, as overtaking it and ended
// Superseded before it ran; the newer then ended Withdrawn when its turn
// came; neither was applied, and the deployment stayed behind the change
// git's head locks for good (only styrminctl lock --retry-failed
// recovered). The pending change runs; the newer ends Withdrawn.
func TestAChangeIsNotSupersededByANewerOneTheBranchWithdrew(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := jobsDriver(t, `{}`)
	commit := func(seq int64) string {
		return gitsource.Hash{byte(seq)}.String()
	}
	branch := &rewoundBranch{locks: map[string][]byte{}}
	ins := map[int64]*resolver.Instance{}
	for _, seq := range []int64{4, 5, 6, 7, 8, 9, 10, 11} {
		ins[seq] = jobsInstanceWith(t, d, ns, seq, "1.0.0", map[string]any{"data": string(rune('a' + seq))})
		data, err := resolver.EncodeLock(ins[seq])
		if err != nil {
			t.Fatal(err)
		}
		branch.locks[commit(seq)] = data
	}
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Locks: branch, Branch: branch, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	// runToEnd runs task seq until its core step waits for the
	// StyrminDeployment, reports it Ready at seq, and runs the task to its end.
	runToEnd := func(req reconcile.Request, seq int64) *v1alpha1.StyrminTask {
		t.Helper()
		tk := reconcileUntil(t, r, cl, req, "the core step running", func(tk *v1alpha1.StyrminTask) bool {
			i := tk.Status.CurrentStep
			return tk.Status.Phase.Terminal() || int(i) < len(tk.Status.Steps) && tk.Status.Steps[i].State == v1alpha1.StepRunning
		})
		if tk.Status.Phase.Terminal() {
			return tk
		}
		var sd v1alpha1.StyrminDeployment
		if err := cl.Get(ctx, instance.Key(ns), &sd); err != nil {
			t.Fatalf("the StyrminDeployment task %d's core step wrote: %v", seq, err)
		}
		sd.Status.ObservedGeneration, sd.Status.AppliedSequence = sd.Generation, seq
		apimeta.SetStatusCondition(&sd.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonSucceeded, Message: "ready", ObservedGeneration: sd.Generation})
		if err := cl.Status().Update(ctx, &sd); err != nil {
			t.Fatal(err)
		}
		return reconcileUntil(t, r, cl, req, "the task ended", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() })
	}

	// Sequence 4 is the deployment's; 5 and 6 were locked while it ran.
	branch.head = gitsource.Hash{4}
	first := createJobsTaskAt(t, cl, ins[4], v1alpha1.WorkflowCreate, commit(4))
	if tk := runToEnd(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(first)}, 4); tk.Status.Phase != v1alpha1.TaskSucceeded {
		t.Fatalf("task 4: %s %q, want it succeeded", tk.Status.Phase, tk.Status.Message)
	}
	fifth := createJobsTaskAt(t, cl, ins[5], v1alpha1.WorkflowUpdate, commit(5))
	sixth := createJobsTaskAt(t, cl, ins[6], v1alpha1.WorkflowUpdate, commit(6))
	// A force push takes the branch back to 5's lock commit.
	delete(branch.locks, commit(6))
	branch.head = gitsource.Hash{5}

	tk := runToEnd(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(fifth)}, 5)
	if tk.Status.Phase != v1alpha1.TaskSucceeded {
		t.Fatalf("task 5, the change the branch's head locks: %s (superseded by %d) %q; want it run to its end: the newer change it counted is withdrawn",
			tk.Status.Phase, tk.Status.SupersededBy, tk.Status.Message)
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(sixth)}
	if tk = reconcileUntil(t, r, cl, req, "task 6 ended", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() }); !tk.Withdrawn() {
		t.Fatalf("task 6, whose lock commit a force push took away: %s %q; want it Superseded, withdrawn", tk.Status.Phase, tk.Status.Message)
	}

	// The same with the newer change's turn first: ended Withdrawn, it
	// overtakes nothing either.
	seventh := createJobsTaskAt(t, cl, ins[7], v1alpha1.WorkflowUpdate, commit(7))
	eighth := createJobsTaskAt(t, cl, ins[8], v1alpha1.WorkflowUpdate, commit(8))
	delete(branch.locks, commit(8))
	branch.head = gitsource.Hash{7}
	req = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(eighth)}
	if tk = reconcileUntil(t, r, cl, req, "task 8 ended", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() }); !tk.Withdrawn() {
		t.Fatalf("task 8, whose lock commit a force push took away: %s %q; want it Superseded, withdrawn", tk.Status.Phase, tk.Status.Message)
	}
	if tk = runToEnd(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(seventh)}, 7); tk.Status.Phase != v1alpha1.TaskSucceeded {
		t.Fatalf("task 7, after the newer change ended withdrawn: %s (superseded by %d) %q; want it run to its end",
			tk.Status.Phase, tk.Status.SupersededBy, tk.Status.Message)
	}

	// 10 was superseded before it ran by 11, which a force push back to
	// 9 withdrew since: 10 wrote nothing, and overtakes nothing.
	ninth := createJobsTaskAt(t, cl, ins[9], v1alpha1.WorkflowUpdate, commit(9))
	tenth := createJobsTaskAt(t, cl, ins[10], v1alpha1.WorkflowUpdate, commit(10))
	eleventh := createJobsTaskAt(t, cl, ins[11], v1alpha1.WorkflowUpdate, commit(11))
	branch.head = gitsource.Hash{11}
	req = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tenth)}
	if tk = reconcileUntil(t, r, cl, req, "task 10 ended", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() }); tk.Status.SupersededBy != 11 {
		t.Fatalf("task 10, before the force push: %s (superseded by %d) %q; want it superseded by 11", tk.Status.Phase, tk.Status.SupersededBy, tk.Status.Message)
	}
	delete(branch.locks, commit(10))
	delete(branch.locks, commit(11))
	branch.head = gitsource.Hash{9}
	req = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(eleventh)}
	if tk = reconcileUntil(t, r, cl, req, "task 11 ended", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() }); !tk.Withdrawn() {
		t.Fatalf("task 11, whose lock commit a force push took away: %s %q; want it Superseded, withdrawn", tk.Status.Phase, tk.Status.Message)
	}
	if tk = runToEnd(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ninth)}, 9); tk.Status.Phase != v1alpha1.TaskSucceeded {
		t.Fatalf("task 9, after 10 was superseded by 11, withdrawn since: %s (superseded by %d) %q; want it run to its end",
			tk.Status.Phase, tk.Status.SupersededBy, tk.Status.Message)
	}
}
