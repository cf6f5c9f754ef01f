package deployment

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/afterwrite"
)

// conflictRetry is how soon a deployment whose status write conflicted is
// read again, from the API server, and decided again.
const conflictRetry = 250 * time.Millisecond

// read reads a deployment's StyrminDeployment for a reconcile: from the
// API server when its last status write conflicted (the cache may hold
// the very copy it conflicted with) or the cache is behind this
// controller's own last write, else from the cache.
func (r *Reconciler) read(ctx context.Context, key client.ObjectKey, sd *v1alpha1.StyrminDeployment) error {
	if r.takeReadFresh(key.Namespace) {
		if err := r.apiReader.Get(ctx, key, sd); err != nil {
			r.readFresh(key.Namespace) // still owed
			return err
		}
		return nil
	}
	_, err := afterwrite.Read(ctx, r.client, r.apiReader, key, sd, r.wroteVersion(key.Namespace))
	return err
}

// writeStatus writes sd's status as a merge patch from base carrying the
// resourceVersion of the copy it was decided on (orig): a leader paused
// past its lease that wakes and writes what it decided before its pause
// (Ready, the applied sequence and release, the conditions) meets a
// conflict instead of writing over the next leader's newer status; a
// copy the cache served behind another writer's write does too. A conflict
// makes the next read the API server's (readFresh).
//
// A copy newer than orig that the cache holds by the time of the write and
// that differs from it in nothing the decision read (a task's create
// followed by its write clearing the managed fields, which the cache
// strips) lends its resourceVersion: a change's first status write would
// otherwise conflict with that write and cost a read and a write more.
//
// It reports whether a status write of another writer, newer than this
// one, was seen while it was under way (the predicate statusWrittenElsewhere
// holds it back then): the deployment is to be decided again.
func (r *Reconciler) writeStatus(ctx context.Context, sd, base, orig *v1alpha1.StyrminDeployment) (otherSince bool, err error) {
	r.rebase(ctx, base, orig)
	st := r.state(sd.Namespace)
	r.mu.Lock()
	st.writing, st.seenWriting = true, ""
	r.mu.Unlock()
	err = r.client.Status().Patch(ctx, sd, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	r.mu.Lock()
	defer r.mu.Unlock()
	st.writing = false
	switch {
	case err == nil:
		st.wrote = sd.ResourceVersion
		otherSince = st.seenWriting != "" && newer(st.seenWriting, sd.ResourceVersion)
	case apierrors.IsConflict(err):
		st.fresh = true
	}
	st.seenWriting = ""
	return otherSince, err
}

// rebase gives base the resourceVersion of the cache's copy of it when
// that copy is newer than orig and holds what orig holds of everything a
// reconcile decides on: spec (generation), annotations, labels, deletion,
// finalizers and status.
func (r *Reconciler) rebase(ctx context.Context, base, orig *v1alpha1.StyrminDeployment) {
	var cur v1alpha1.StyrminDeployment
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(orig), &cur); err != nil {
		return
	}
	if !newer(cur.ResourceVersion, orig.ResourceVersion) || !sameDecision(&cur, orig) {
		return
	}
	base.ResourceVersion = cur.ResourceVersion
}

// sameDecision reports whether a and b hold the same of what a reconcile
// reads to decide.
func sameDecision(a, b *v1alpha1.StyrminDeployment) bool {
	return a.UID == b.UID && a.Generation == b.Generation &&
		equality.Semantic.DeepEqual(a.Annotations, b.Annotations) &&
		equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		a.DeletionTimestamp.Equal(b.DeletionTimestamp) &&
		equality.Semantic.DeepEqual(a.Finalizers, b.Finalizers) &&
		equality.Semantic.DeepEqual(a.Spec, b.Spec) &&
		equality.Semantic.DeepEqual(a.Status, b.Status)
}

// newer reports whether resourceVersion a is newer than b; versions that
// cannot be compared count as newer (an etcd-backed API server always
// gives comparable ones).
func newer(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err != nil || c > 0
}

// readFresh makes the next reconcile of a deployment read it from the API
// server.
func (r *Reconciler) readFresh(namespace string) {
	st := r.state(namespace)
	r.mu.Lock()
	defer r.mu.Unlock()
	st.fresh = true
}

// takeReadFresh reports whether the next read of a deployment is owed to
// the API server, and clears it.
func (r *Reconciler) takeReadFresh(namespace string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states[namespace]
	if st == nil || !st.fresh {
		return false
	}
	st.fresh = false
	return true
}

// statusWrittenElsewhere passes a status write this controller did not
// make: one newer than its last write of the deployment (its own are
// not, and their events are dropped). A leader paused past its lease may
// write what it decided before its pause over a copy this leader found
// nothing to change in (the conflict check cannot catch that: the copy is
// the same); a write whose answer was lost landed unseen; a hand edit
// of the status. The controller decides again on it, instead of leaving
// it until a workload's event or the drift interval. The task's record of
// the active instance passes as before (activeSequenceChanged).
func (r *Reconciler) statusWrittenElsewhere() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.StyrminDeployment)
			n, ok2 := e.ObjectNew.(*v1alpha1.StyrminDeployment)
			if !ok1 || !ok2 || equality.Semantic.DeepEqual(o.Status, n.Status) {
				return false
			}
			return r.notOwnWrite(n.Namespace, n.ResourceVersion)
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// notOwnWrite reports whether a status change seen at resourceVersion rv
// is another writer's. While this controller's own write of the
// deployment is under way, what is seen is kept for writeStatus to judge
// once the write answers (its own write's event may come first).
func (r *Reconciler) notOwnWrite(namespace, rv string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states[namespace]
	switch {
	case st == nil || st.wrote == "" && !st.writing:
		return true
	case st.writing:
		if st.seenWriting == "" || newer(rv, st.seenWriting) {
			st.seenWriting = rv
		}
		return false
	}
	return newer(rv, st.wrote)
}
