package source

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// What the syncer does when the history it follows is not what it was:
// malformed trailers (skipped, reported) and a branch rewound or
// force-pushed (reported; the new history applied without reusing a
// sequence).

// reportBadTrailers records a Warning event for the malformed Styrmin-Lock
// trailers of a lock commit. They were skipped and the sync goes on: the
// lockfiles, not the trailers, say what a commit locks, and failing here
// would stop every later change until the history was rewritten.
func (s *Syncer) reportBadTrailers(src *v1alpha1.StyrminSource, ch gitsource.LockChange, res *SyncResult) {
	res.BadTrailers += len(ch.BadTrailers)
	msgs := make([]string, len(ch.BadTrailers))
	for i, err := range ch.BadTrailers {
		msgs[i] = err.Error()
	}
	s.warn(src, v1alpha1.ReasonInvalidLockTrailer, "lock commit %s: %s; skipped (its lockfiles are synced)", ch.Commit.Short(), strings.Join(msgs, "; "))
	s.opts.Log.Info("skipping malformed lock trailers", "commit", ch.Commit.Short(), "trailers", msgs)
}

// rewritten tells whether head does not descend from the last synced
// commit, and records a Warning event when so. The walk that follows
// still lists the new history's lock changes from there (or from the
// root, when the old commit is gone), and its rules apply unchanged: a
// lock whose sequence does not follow the deployment's previous one is
// ignored (InvalidLock), a sequence the cluster already runs makes no
// task; followHistory then says which deployments that leaves behind.
func (s *Syncer) rewritten(src *v1alpha1.StyrminSource, head gitsource.Hash) (bool, error) {
	if s.position.IsZero() {
		return false, nil
	}
	ok, err := s.opts.Repo.Descends(head, s.position)
	if err != nil {
		return false, fmt.Errorf("sync: does %s descend from %s: %w", head.Short(), s.position.Short(), err)
	}
	if ok {
		return false, nil
	}
	if head != s.warnedRewrite {
		// Once per head: a sync that fails (a task refused) keeps the
		// position and meets the same rewrite at every poll.
		s.warnedRewrite = head
		s.warn(src, v1alpha1.ReasonHistoryRewritten, "branch %s moved from %s to %s, which does not descend from it (a force push or a rewind): applying what the new history locks, never reusing a sequence", s.opts.Spec.Branch, s.position.Short(), head.Short())
		s.opts.Log.Info("history rewritten", "from", s.position.Short(), "head", head.Short())
	}
	return true, nil
}

// followHistory owns the HistoryRewritten condition. After a rewrite, and
// while the condition stands, it compares each lock of the cluster at
// head with what the cluster ran. A deployment whose lock has a sequence
// the cluster already used (its newest task is at that number or above)
// for other content stays where it is: applying the lock would give one
// number two instances, which breaks the rule every guard and plan relies
// on. The condition names it, loudly, until a lock numbers past the
// cluster's (the lock mode numbers after operator.UsedSequences; a CI
// lock must be made past it) or the branch comes back to what the cluster
// runs.
func (s *Syncer) followHistory(ctx context.Context, src *v1alpha1.StyrminSource, head gitsource.Hash, res *SyncResult) error {
	standing := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionHistoryRewritten)
	if !res.Rewritten && standing == nil {
		return nil
	}
	used, revivable, err := s.sequencesUsed(ctx, head)
	if err != nil {
		return err
	}
	if used, err = s.revive(ctx, used, revivable, res); err != nil {
		return err
	}
	res.SequenceUsed = make([]string, len(used))
	for i, u := range used {
		res.SequenceUsed[i] = u.id.String()
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionHistoryRewritten, Status: metav1.ConditionTrue, ObservedGeneration: src.Generation}
	switch {
	case len(used) > 0:
		cond.Reason = v1alpha1.ReasonSequenceUsed
		cond.Message = "the branch locks sequences the cluster already used, so these locks are ignored and the deployments keep what they run until a lock numbers past it: " + describeUsed(used)
		if standing == nil || standing.Message != cond.Message {
			s.warn(src, v1alpha1.ReasonSequenceUsed, "%s", cond.Message)
		}
	case res.Rewritten:
		cond.Reason = v1alpha1.ReasonHistoryRewritten
		cond.Message = fmt.Sprintf("the branch was rewritten (%s does not descend from %s); every deployment follows the new history", head.Short(), s.position.Short())
	default:
		// A forward move with nothing left behind.
		apimeta.RemoveStatusCondition(&src.Status.Conditions, v1alpha1.ConditionHistoryRewritten)
		return nil
	}
	apimeta.SetStatusCondition(&src.Status.Conditions, cond)
	return nil
}

// usedSequence is a deployment whose lock at the head reuses a sequence.
type usedSequence struct {
	id resolver.ID
	// locked is the sequence the branch locks, ran the highest the cluster
	// has a task for.
	locked, ran int64
}

// describeUsed names the first maxListed deployments and counts the rest:
// a force-push under a fan-out leaves thousands, more than a condition's
// message may hold (and a status write refused would keep the position
// from moving).
func describeUsed(used []usedSequence) string {
	shown := used[:min(len(used), maxListed)]
	parts := make([]string, len(shown), len(shown)+1)
	for i, u := range shown {
		parts[i] = fmt.Sprintf("%s (the branch locks %d, the cluster ran %d; the next lock must be %d or above)", u.id, u.locked, u.ran, u.ran+1)
	}
	if more := len(used) - len(shown); more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(parts, ", ")
}

// revivableLock is a lock at the head whose change's task ended
// Superseded before it ran: made again when what superseded it was
// withdrawn (createTask), else used, when not nil, says the sequence the
// lock reuses.
type revivableLock struct {
	task *v1alpha1.StyrminTask
	used *usedSequence
}

// revive makes again the tasks of the head's locks superseded before they
// ran by a change the branch withdrew since (createTask tells): a branch
// rewound to the older change's commit walks no commit, so this look at
// the head is where the sync meets it again, and without it neither
// change was applied and the deployment stayed behind the head for good.
// It returns used with the sequences of the locks not made again.
func (s *Syncer) revive(ctx context.Context, used []usedSequence, revivable []revivableLock, res *SyncResult) ([]usedSequence, error) {
	for _, r := range revivable {
		t := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: r.task.Name, Namespace: r.task.Namespace, Labels: maps.Clone(r.task.Labels)},
			Spec:       *r.task.Spec.DeepCopy(),
		}
		created, err := s.createTask(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("sync: %s (%s at %s): %w", instance.ResolverID(t.Spec.Deployment), t.Spec.Lock.Path, shortCommit(t.Spec.Lock.Commit), err)
		}
		if created {
			res.Created = append(res.Created, t.Namespace+"/"+t.Name)
		} else if r.used != nil {
			used = append(used, *r.used)
		}
	}
	slices.SortFunc(used, func(a, b usedSequence) int { return strings.Compare(a.id.String(), b.id.String()) })
	return used, nil
}

// sequencesUsed returns, sorted, the deployments of the cluster whose
// lockfile at head holds a sequence at or below the newest task the
// cluster has for them, with other content than that task's. Lockfiles
// that do not read were reported by the walk and are left out. Apart,
// the locks at head whose change's task ended Superseded before it ran
// (revive).
func (s *Syncer) sequencesUsed(ctx context.Context, head gitsource.Hash) ([]usedSequence, []revivableLock, error) {
	fsys, err := s.opts.Repo.FS(head)
	if err != nil {
		return nil, nil, fmt.Errorf("sync: reading the tree at %s: %w", head.Short(), err)
	}
	var sds v1alpha1.StyrminDeploymentList
	if err := s.opts.Client.List(ctx, &sds); err != nil {
		return nil, nil, fmt.Errorf("sync: listing StyrminDeployments: %w", err)
	}
	var tasks v1alpha1.StyrminTaskList
	if err := s.opts.Client.List(ctx, &tasks); err != nil {
		return nil, nil, fmt.Errorf("sync: listing StyrminTasks: %w", err)
	}
	newest := map[resolver.ID]*v1alpha1.StyrminTask{}
	for _, st := range instance.Standings(sds.Items, tasks.Items) {
		newest[st.ID] = st.Newest
	}
	type change struct {
		id  resolver.ID
		seq int64
	}
	superseded := map[change]*v1alpha1.StyrminTask{}
	for i := range tasks.Items {
		if t := &tasks.Items[i]; t.Spec.Operation == nil && t.Status.Phase == v1alpha1.TaskSuperseded && !t.Withdrawn() && !ranAStep(t) {
			superseded[change{instance.ResolverID(t.Spec.Deployment), t.Spec.ToSequence}] = t
		}
	}
	var out []usedSequence
	var revivable []revivableLock
	err = fs.WalkDir(fsys, s.prefix, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == s.prefix {
				return fs.SkipDir
			}
			return err
		}
		if d.IsDir() || path.Ext(p) != ".yaml" {
			return nil
		}
		id, ok := resolver.IDFromLockPath(p)
		if !ok || id.Cluster != s.opts.Cluster {
			return nil
		}
		task := newest[id]
		if task == nil || task.Spec.Target == nil {
			return nil
		}
		in, err := resolver.ReadLock(fsys, p)
		if err != nil {
			return nil //nolint:nilerr // reported by the walk
		}
		var used *usedSequence
		if in.Sequence <= task.Spec.ToSequence && in.Digest != task.Spec.Target.Digest {
			used = &usedSequence{id: id, locked: in.Sequence, ran: task.Spec.ToSequence}
		}
		if old := superseded[change{id, in.Sequence}]; old != nil && old.Spec.Target != nil && old.Spec.Target.Digest == in.Digest {
			revivable = append(revivable, revivableLock{task: old, used: used})
		} else if used != nil {
			out = append(out, *used)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("sync: reading the locks at %s: %w", head.Short(), err)
	}
	slices.SortFunc(out, func(a, b usedSequence) int { return strings.Compare(a.id.String(), b.id.String()) })
	return out, revivable, nil
}
