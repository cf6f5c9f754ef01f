package task

import (
	"context"
	"errors"
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// orderPollInterval is how often a task waiting for other deployments
// looks again by itself. The StyrminDeployment it waits for wakes it
// when it changes (waitFor); this is the net under that, for a change
// missed while the agent restarted, say.
const orderPollInterval = 10 * time.Second

// awaitOrder keeps a pending task waiting until every instance its own
// runs after (the lock's after: ID@SEQ) has run: that deployment's
// active sequence reached it and it is Ready. The order is in the lock,
// so an agent restarted between two of them keeps it. A peer whose task
// failed holds this one back, saying so, until a fix commit or a retry
// makes the peer Ready; a peer deleted since holds nothing back. An
// instance in a wave (Rollout) then waits the wave's pause, counted from
// when the last of them became Ready: from the cluster's state, so an
// agent restarted meanwhile waits no longer and no shorter.
func (r *Reconciler) awaitOrder(ctx context.Context, run *taskRun) (phaseResult, error) {
	t := run.task
	if t.Status.Phase != v1alpha1.TaskPending || run.instance == nil || IsOperation(t) {
		return phaseResult{}, nil
	}
	key := client.ObjectKeyFromObject(t)
	// Peers found done stay done (a task waits for each once): a task
	// woken again goes on from the first it waited for.
	w := r.orderProgress(key, len(run.instance.After))
	for i := w.next; i < len(run.instance.After); i++ {
		a := run.instance.After[i]
		id, seq, err := resolver.ParseAfter(a)
		if err != nil {
			// The lockfile's decoding refuses these; a task says so.
			return r.failTask(ctx, run, v1alpha1.ReasonLockMismatch, fmt.Sprintf("lock %s: after: %v", t.Spec.Lock.Path, err))
		}
		// What peerGone read of the peer's locks for this wait.
		var seen peerLocks
		if w.peer == id && w.seq == seq {
			seen = w.locks
		}
		peer, err := r.peerRan(ctx, t.Spec.Lock.Commit, id, seq, &seen)
		if err != nil {
			return phaseResult{}, err
		}
		if peer.done {
			if peer.readySince.After(w.gateOpened) {
				w.gateOpened = peer.readySince
			}
			continue
		}
		w.next, w.peer, w.seq, w.locks = i, id, seq, seen
		r.waitFor(key, w)
		why := "waiting for " + a + ": " + peer.why
		if ro := run.instance.Rollout; ro != nil && ro.Wave > 1 && !peer.failed {
			// One message while the wave before runs (not one per peer
			// and phase, each a status write); a failure names itself.
			why = fmt.Sprintf("waiting for wave %d to succeed and be Ready", ro.Wave-1)
		}
		return r.waitForOrder(ctx, run, why, orderPollInterval)
	}
	gateOpened := w.gateOpened
	r.dropWait(key)

	if ro := run.instance.Rollout; ro != nil && ro.Pause != "" && !gateOpened.IsZero() {
		pause, err := time.ParseDuration(ro.Pause)
		if err != nil {
			return r.failTask(ctx, run, v1alpha1.ReasonLockMismatch, fmt.Sprintf("lock %s: rollout.pause: %v", t.Spec.Lock.Path, err))
		}
		if left := time.Until(gateOpened.Add(pause)); left > 0 {
			until := gateOpened.Add(pause).UTC().Format(time.RFC3339)
			return r.waitForOrder(ctx, run, fmt.Sprintf("the wave before is Ready; pausing %s, until %s", ro.Pause, until), min(left, orderPollInterval))
		}
	}
	return phaseResult{}, nil
}

// waitForOrder records why the task waits (once per change of reason)
// and looks again after the interval.
func (r *Reconciler) waitForOrder(ctx context.Context, run *taskRun, why string, after time.Duration) (phaseResult, error) {
	msg := why
	if ro := run.instance.Rollout; ro != nil {
		msg = fmt.Sprintf("wave %d of %d: %s", ro.Wave, ro.Waves, why)
	}
	return r.waitSaying(ctx, run, v1alpha1.ReasonWaitingForOrder, msg, after)
}

// waitSaying keeps a pending task waiting: its conditions say why
// (reason, msg), written once per change of message, and it looks again
// after the interval.
func (r *Reconciler) waitSaying(ctx context.Context, run *taskRun, reason, msg string, after time.Duration) (phaseResult, error) {
	t := run.task
	// Bounded as the condition holds it: a message cut differs from the
	// whole one, and would be written again at every poll.
	msg = boundMessage(msg)
	if c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Message != msg || run.planUnwritten {
		setTaskConditions(t, reason, msg)
		if err := r.writeStatus(ctx, run); err != nil {
			return phaseResult{}, err
		}
	}
	run.log.V(1).Info("waiting", "reason", reason, "why", msg)
	return phaseResult{stop: true, after: after}, nil
}

// peerState is what awaitOrder learns of one instance it runs after.
type peerState struct {
	done bool
	// failed: the peer's task for that instance failed.
	failed bool
	// readySince is when the peer became Ready at that instance or later
	// (done only): when its task ended, or its Ready condition turned
	// true, whichever is later.
	readySince time.Time
	why        string
}

// peerRan tells whether deployment id ran its instance seq and is Ready,
// and if not, why. lockCommit is the waiting task's; seen is what was
// read of the peer's locks during this wait, updated.
func (r *Reconciler) peerRan(ctx context.Context, lockCommit string, id resolver.ID, seq int64, seen *peerLocks) (peerState, error) {
	did := v1alpha1.DeploymentID{Cluster: id.Cluster, Environment: id.Environment, Name: id.Name}
	var sds v1alpha1.StyrminDeploymentList
	if err := r.opts.Client.List(ctx, &sds, client.MatchingLabels(did.Labels())); err != nil {
		return peerState{}, fmt.Errorf("reading the StyrminDeployment of %s: %w", id, err)
	}
	if len(sds.Items) == 0 {
		gone, err := r.peerGone(ctx, lockCommit, id, seq, seen)
		if err != nil || gone {
			return peerState{done: gone}, err
		}
		return peerState{why: "its deployment is not created yet"}, nil
	}
	sd := &sds.Items[0]
	ready := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
	activeSeq, err := r.activeSequence(ctx, sd)
	if err != nil {
		return peerState{}, err
	}
	switch {
	case sd.Spec.Tombstone() && sd.Spec.Sequence == seq:
		// The awaited instance is the peer's deletion (an object moves
		// from it to this deployment): done once it is uninstalled, the
		// StyrminDeployment gone, or its task ended well.
		var del v1alpha1.StyrminTask
		err := r.opts.Client.Get(ctx, client.ObjectKey{Namespace: sd.Namespace, Name: v1alpha1.TaskName(id.Name, sd.Spec.Sequence)}, &del)
		switch {
		case err == nil && del.Status.Phase == v1alpha1.TaskSucceeded:
			return peerState{done: true}, nil
		case err == nil && del.Status.Phase == v1alpha1.TaskFailed:
			return peerState{failed: true, why: fmt.Sprintf("its deletion, task %s, failed (%s); a fix commit or `styrminctl retry %s` lets this one go on", del.Name, del.Status.Message, id)}, nil
		case client.IgnoreNotFound(err) != nil:
			return peerState{}, fmt.Errorf("reading task %s/%s: %w", sd.Namespace, v1alpha1.TaskName(id.Name, sd.Spec.Sequence), err)
		}
		return peerState{why: "it is being deleted"}, nil
	case sd.Spec.Tombstone():
		return peerState{done: true}, nil
	case activeSeq >= seq && ready != nil && ready.Status == metav1.ConditionTrue:
		var active *v1alpha1.StyrminTask
		var t v1alpha1.StyrminTask
		if err := r.opts.Client.Get(ctx, client.ObjectKey{Namespace: sd.Namespace, Name: v1alpha1.TaskName(id.Name, activeSeq)}, &t); err == nil {
			active = &t
		}
		return peerState{done: true, readySince: readySince(ready.LastTransitionTime.Time, active, time.Now())}, nil
	case activeSeq >= seq:
		why := "it is not Ready"
		if ready != nil && ready.Message != "" {
			why += " (" + ready.Reason + ": " + ready.Message + ")"
		}
		return peerState{why: why}, nil
	}
	var peer v1alpha1.StyrminTask
	err = r.opts.Client.Get(ctx, client.ObjectKey{Namespace: sd.Namespace, Name: v1alpha1.TaskName(id.Name, seq)}, &peer)
	switch {
	case err == nil && peer.Status.Phase == v1alpha1.TaskFailed:
		return peerState{failed: true, why: fmt.Sprintf("its task %s failed (%s); a fix commit or `styrminctl retry %s` lets this one go on", peer.Name, peer.Status.Message, id)}, nil
	case err == nil:
		return peerState{why: fmt.Sprintf("its task %s is %s", peer.Name, phaseOrNew(peer.Status.Phase))}, nil
	}
	return peerState{why: fmt.Sprintf("its active sequence is %d", activeSeq)}, nil
}

// activeSequence is the sequence of sd's active instance (0: none known).
// An agent before status.active wrote activeSequence when it applied the
// release, before the task's post steps ran, so alone it does not say the
// instance is active: instance.Active then asks the deployment's tasks,
// as the task's own workflow does, and a peer whose upgrade failed under
// that agent does not let the instances after it go on.
func (r *Reconciler) activeSequence(ctx context.Context, sd *v1alpha1.StyrminDeployment) (int64, error) {
	if sd.Status.Active != nil || sd.Status.ActiveSequence == 0 {
		return sd.Status.ActiveSequence, nil
	}
	tasks, err := r.tasksOf(ctx, sd.Namespace, sd.Spec.Deployment)
	if err != nil {
		return 0, err
	}
	if a := instance.Active(sd, tasks); a != nil {
		return a.Sequence, nil
	}
	return 0, nil
}

// peerLocks is what peerGone read of a peer's locks, kept for the wait
// so a poll reads no lockfile again: its namespace at the waiting task's
// lock commit ("" until read), and the last synced commit it read the
// peer's lock at.
type peerLocks struct {
	ns, synced string
}

// peerGone tells whether a peer without a StyrminDeployment was deleted
// after its instance seq, or by it (seq is the peer's tombstone: an
// object moves from it to the waiting deployment): finishing a tombstone
// deletes the
// StyrminDeployment, so without this a peer deleted since would look not
// created yet, and hold the task back for good.
//
// Its tasks say so first: a tombstone's task that succeeded, numbered
// above seq. They live in the peer's namespace, which its lock at the
// waiting task's lock commit names (that lock ordered after it, so it is
// there): read once per wait, then the list is the cache's, indexed by
// namespace. (A peer's lock written in the same commit and handed over to
// its task not run yet is taken here: that task reads its lockfile from
// git instead.)
//
// With no task of the peer left (its namespace deleted after it, and its
// tasks with it; or not created yet) the lock at the last commit the
// agent synced says it, as the sync's own rule for a deployment deleted at
// the head (no StyrminDeployment, a tombstone numbered after): read once
// per synced commit, only while the peer has neither StyrminDeployment nor
// task. A lock that cannot be read says nothing: not created yet, as
// before.
func (r *Reconciler) peerGone(ctx context.Context, lockCommit string, id resolver.ID, seq int64, seen *peerLocks) (bool, error) {
	if seen.ns == "" {
		in, err := r.peerLock(ctx, lockCommit, id)
		if err != nil || in == nil {
			return false, err
		}
		if in.Kind == resolver.KindTombstone {
			return in.Sequence >= seq, nil
		}
		if in.Context == nil || in.Context.Deployment.Namespace == "" {
			return false, nil
		}
		seen.ns = in.Context.Deployment.Namespace
	}
	tasks, err := r.tasksOf(ctx, seen.ns, instance.DeploymentID(id))
	if err != nil {
		return false, err
	}
	if len(tasks) > 0 || r.opts.Source.Name == "" {
		return deletedSince(tasks, seq) > 0, nil
	}
	var src v1alpha1.StyrminSource
	if err := r.opts.Client.Get(ctx, r.opts.Source, &src); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	synced := src.Status.LastSyncedCommit
	if synced == "" || synced == lockCommit || synced == seen.synced {
		// The waiting task's own commit holds the awaited instance; a
		// commit read already said nothing.
		return false, nil
	}
	in, err := r.peerLock(ctx, synced, id)
	if err != nil {
		return false, err
	}
	seen.synced = synced
	return in != nil && in.Kind == resolver.KindTombstone && in.Sequence >= seq, nil
}

// peerLock reads deployment id's lockfile at commit: nil when there is
// none to read (no lock source, no such commit or file).
func (r *Reconciler) peerLock(ctx context.Context, commit string, id resolver.ID) (*resolver.Instance, error) {
	if r.opts.Locks == nil {
		return nil, nil
	}
	in, err := instance.ReadLock(ctx, r.opts.Locks, v1alpha1.LockRef{Commit: commit, Path: id.LockPath()})
	if missing := (*instance.LockNotFoundError)(nil); errors.As(err, &missing) {
		return nil, nil
	}
	return in, err
}

// deletedSince returns the sequence of the newest of a deployment's
// tombstones whose task succeeded after its instance seq, or as it (seq
// is the tombstone), 0 when none did. Operations and tasks that did not
// succeed delete nothing.
func deletedSince(tasks []v1alpha1.StyrminTask, seq int64) int64 {
	var tomb int64
	for i := range tasks {
		t := &tasks[i]
		if t.Status.Phase != v1alpha1.TaskSucceeded || t.Spec.Operation != nil || t.Spec.ToSequence < seq {
			continue
		}
		if a := instance.TaskTarget(t); a != nil && a.Kind == v1alpha1.KindTombstone {
			tomb = max(tomb, t.Spec.ToSequence)
		}
	}
	return tomb
}

// readySince is when a peer that is Ready at its active instance became
// so: when its Ready condition last turned true or when the task that
// made the instance active ended, whichever is later. A task records its
// instance active before it writes its own end (finishWith), so a waiter
// woken by that record can find the task not ended yet; its Ready
// condition may have been true since an older instance. The instance is
// Ready from now, then, not since that older one: counting from the
// condition alone let a wave start without its pause. A task pruned from
// the history (nil) leaves the condition's time.
func readySince(readyTransition time.Time, active *v1alpha1.StyrminTask, now time.Time) time.Time {
	switch {
	case active == nil:
		return readyTransition
	case active.Status.FinishedAt == nil:
		return now
	case active.Status.FinishedAt.After(readyTransition):
		return active.Status.FinishedAt.Time
	}
	return readyTransition
}

func phaseOrNew(p v1alpha1.TaskPhase) string {
	if p == "" {
		return "new"
	}
	return string(p)
}

// orderWait is what a waiting task waits for: the instance peer@seq,
// the index of that entry in its after list (those before it ran), the
// list's length (a task's instance is fixed, but a replaced task reuses
// the name), and when the last of those that ran became Ready.
type orderWait struct {
	peer resolver.ID
	seq  int64
	// locks is what peerGone read of the peer's locks.
	locks      peerLocks
	next, of   int
	gateOpened time.Time
}

// orderProgress is how far task got through an after list of n entries
// (from the start when it was not waiting, or waited on another list).
func (r *Reconciler) orderProgress(task types.NamespacedName, n int) orderWait {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.waitsFor[task]; ok && w.of == n {
		return w
	}
	return orderWait{of: n}
}

// waitFor records that task waits for w.peer, whose StyrminDeployment
// wakes it once that instance ran.
func (r *Reconciler) waitFor(task types.NamespacedName, w orderWait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropWaitLocked(task)
	if r.waiting[w.peer] == nil {
		r.waiting[w.peer] = map[types.NamespacedName]bool{}
	}
	r.waiting[w.peer][task] = true
	r.waitsFor[task] = w
}

// dropWait forgets that task waits (it goes on, or is gone).
func (r *Reconciler) dropWait(task types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropWaitLocked(task)
}

func (r *Reconciler) dropWaitLocked(task types.NamespacedName) {
	w, ok := r.waitsFor[task]
	if !ok {
		return
	}
	delete(r.waiting[w.peer], task)
	if len(r.waiting[w.peer]) == 0 {
		delete(r.waiting, w.peer)
	}
	delete(r.waitsFor, task)
}

// waitersOf are the tasks that sd's change lets go on: those waiting for
// an instance of its deployment that it now runs, Ready (or for a
// deployment now deleted). Other changes wake none: a wave of a hundred
// tasks waiting for one peer would each look again at every status write
// of it; the poll shows a failure's message.
func (r *Reconciler) waitersOf(sd *v1alpha1.StyrminDeployment) []reconcile.Request {
	id := instanceID(sd.Spec.Deployment)
	ready := apimeta.IsStatusConditionTrue(sd.Status.Conditions, v1alpha1.ConditionReady)
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []reconcile.Request
	for t := range r.waiting[id] {
		if sd.Spec.Tombstone() || !sd.DeletionTimestamp.IsZero() || (ready && sd.Status.ActiveSequence >= r.waitsFor[t].seq) {
			out = append(out, reconcile.Request{NamespacedName: t})
		}
	}
	return out
}

// instanceID is the resolver's form of a deployment's identity.
func instanceID(id v1alpha1.DeploymentID) resolver.ID {
	return resolver.ID{Cluster: id.Cluster, Environment: id.Environment, Name: id.Name}
}
