// Package statusreport reports each lock commit's result in this cluster
// to the git host (commitstatus): pending while its tasks run or the sync
// has still to make one of them, failure when one failed or the agent
// refused one of its lockfiles or a change was withdrawn before it ran
// (the branch no longer held its lock commit: nothing of it was
// applied), success when all succeeded or were superseded by a newer
// instance that was applied (a superseded task follows the newer task
// that took its change on). It runs on the
// elected replica, reads the tasks from the manager's cache and posts a
// status only when a commit's changes.
package statusreport

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// Poster posts a commit status and reads the one the host shows:
// *commitstatus.Client.
type Poster interface {
	Post(ctx context.Context, sha string, s commitstatus.Status) error
	// Current is the newest status of statusContext on sha (ok false:
	// none).
	Current(ctx context.Context, sha, statusContext string) (s commitstatus.Status, ok bool, err error)
}

var _ Poster = (*commitstatus.Client)(nil)

// LockHistory is what the reporter reads of the agent's clone: the view
// the sync walks, *gitsource.Folder (or *gitsource.Repo when the
// desired state is the repository's root).
type LockHistory interface {
	// Head is the tracked branch's head as last fetched.
	Head() (gitsource.Hash, error)
	// LockChanges lists the lockfiles the commits after from up to to
	// change under prefix: what the sync walks from its position.
	LockChanges(from, to gitsource.Hash, prefix string) ([]gitsource.LockChange, error)
}

var (
	_ LockHistory = (*gitsource.Folder)(nil)
	_ LockHistory = (*gitsource.Repo)(nil)
)

// Options configure New.
type Options struct {
	// Reader reads the cluster's StyrminTasks and the StyrminSource.
	Reader client.Reader
	// Source is the StyrminSource whose refused lockfiles count as their
	// commits' failures (none given: only tasks count).
	Source types.NamespacedName
	// History is the agent's clone, the folder the sync walks. With it
	// and Source, a lockfile of a commit the sync has not synced yet
	// (after status.lastSyncedCommit) that has neither a task nor a
	// refusal keeps the commit pending: the sync makes the other
	// deployments' tasks when the API server refuses one, and tries that
	// one again at its next sync. Without it, only the tasks and the
	// refusals count.
	History LockHistory
	// Poster posts the statuses.
	Poster Poster
	// Writer, with Source, records on the StyrminSource the time before
	// which every commit whose tasks all ended has its final status on
	// the host (status.reportedThrough): a replica elected later, however
	// much later, asks the host about the commits that ended since rather
	// than taking them as reported. Without it (or before a replica
	// recorded one), Window stands in.
	Writer client.StatusClient
	// Cluster names the cluster; Context is the status context (default
	// "styrmin/<cluster>").
	Cluster, Context string
	// TargetURL, when set, links each status (the web UI).
	TargetURL string
	// Interval between two looks at the tasks (default 10 s).
	Interval time.Duration
	// Window: at the first round (this replica's election), when the
	// StyrminSource records no reportedThrough (no Writer, or an agent
	// that did not record it), commits whose tasks all ended longer ago
	// than this are taken as reported by an earlier leader and are left
	// alone; those that ended within it are posted unless the host
	// already shows a final status of theirs (default 1 h).
	Window time.Duration
	Log    logr.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Reporter posts the statuses. Start runs it as a manager's runnable.
type Reporter struct {
	o Options

	mu sync.Mutex
	// started is when the first round ran: Start runs once this replica
	// is elected, which may be days after it was built, and only what
	// ended since is this replica's to report without asking the host.
	started time.Time
	// resume: no request before it, the wait a rate limit asked for or
	// the back-off after the host failed to answer.
	resume time.Time
	// outage is the back-off from a host that failed to answer (a 5xx,
	// no connection), shared with the lock mode.
	outage commitstatus.Outage
	// token follows whether the host refuses the token: a bad one is
	// logged when the refusals start and end, not at every round.
	token commitstatus.TokenWatch
	// posted is the last status posted (or refused for good) per commit.
	posted map[string]postedStatus
	// unsynced is what the last look at the clone found the sync has
	// still to walk.
	unsynced unsyncedLocks
	// reported is the time before which the commits that ended were
	// reported by an earlier leader, decided at this replica's first
	// round: the StyrminSource's reportedThrough, else started less
	// Window.
	reported time.Time
	// through is the StyrminSource's reportedThrough as this replica last
	// read or wrote it (zero: none).
	through time.Time
}

// unsyncedLocks are the lockfiles the commits after the sync's position
// up to the clone's head change in this cluster, by commit: the
// deployments ("cluster/env/name") whose tasks the sync may still make.
// Read again only when the position or the head moved: while a sync
// fails, its position stays.
type unsyncedLocks struct {
	read           bool
	position, head gitsource.Hash
	byCommit       map[string][]string
}

// postedStatus is a status posted for a commit, with the tasks and
// refused lockfiles it counted.
type postedStatus struct {
	status  commitstatus.Status
	tasks   map[string]bool
	refused map[string]bool
	// carriers are the newer tasks its superseded tasks followed.
	carriers map[string]bool
	// refusals are the refused lockfiles counted: they go on counting
	// once the StyrminSource no longer keeps them (it keeps the newest
	// few), while a task of the commit still runs.
	refusals []v1alpha1.RefusedLock
}

// commitResult is what a lock commit did in the cluster: its tasks, and
// its lockfiles the agent refused.
type commitResult struct {
	tasks   []v1alpha1.StyrminTask
	refused []v1alpha1.RefusedLock
	// carriers are the newer tasks its superseded tasks' results follow
	// (changeTasks.carrier): the commit ends when they end.
	carriers []*v1alpha1.StyrminTask
}

// onlyFewer reports whether the commit's tasks are, all ended, among those
// a final status (success or failure) counted, its refused lockfiles
// among those it counted, and the newer tasks its superseded ones follow
// among those it counted or withdrawn: then only pruning of old tasks (or
// old refusals, or the newer task a superseded one of the commit
// followed) changed the summary, and posting it would rewrite the
// commit's result from what is left (a failure become success once the
// failed task was pruned). Tasks end once, so nothing else can change it
// but a change locked after a withdrawn one the commit's followed: it
// carries the commit's change on.
func (p postedStatus) onlyFewer(c commitResult) bool {
	if p.status.State == commitstatus.Pending {
		return false
	}
	for _, t := range c.tasks {
		if !t.Status.Phase.Terminal() || !p.tasks[taskKey(&t)] {
			return false
		}
	}
	for _, t := range c.carriers {
		// One withdrawn it follows again only once the task after it was
		// pruned: not news.
		if !t.Withdrawn() && !p.carriers[taskKey(t)] {
			return false
		}
	}
	for _, f := range c.refused {
		if !p.refused[f.Path] {
			return false
		}
	}
	return true
}

var _ manager.LeaderElectionRunnable = (*Reporter)(nil)

// New checks the options.
func New(o Options) (*Reporter, error) {
	if o.Reader == nil || o.Poster == nil || o.Cluster == "" {
		return nil, errors.New("statusreport: a reader, a poster and the cluster's name are required")
	}
	if o.Context == "" {
		o.Context = "styrmin/" + o.Cluster
	}
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Window <= 0 {
		o.Window = time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	return &Reporter{o: o, posted: map[string]postedStatus{}}, nil
}

// NeedLeaderElection is true: one replica reports.
func (r *Reporter) NeedLeaderElection() bool { return true }

// Start reports every Interval until ctx ends, logging each round's
// errors but a refused token's, which the round logs when the refusals
// start and end (a token not replaced is refused alike every round).
func (r *Reporter) Start(ctx context.Context) error {
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		errs := slices.DeleteFunc(r.report(ctx), func(err error) bool {
			var he *commitstatus.HTTPError
			return errors.As(err, &he) && he.Unauthorized()
		})
		if len(errs) > 0 && ctx.Err() == nil {
			r.o.Log.Error(errors.Join(errs...), "reporting commit statuses")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Report posts the status of every lock commit whose status changed since
// it was last posted. A refused token (401) is among the errors it
// returns at every round it ends, and is logged when the refusals start
// and when a token is taken again.
func (r *Reporter) Report(ctx context.Context) error {
	return errors.Join(r.report(ctx)...)
}

// report is Report, its errors apart.
func (r *Reporter) report(ctx context.Context) []error {
	now := r.o.Now()
	r.mu.Lock()
	if r.started.IsZero() {
		r.started = now
	}
	started, resume := r.started, r.resume
	r.mu.Unlock()
	if now.Before(resume) {
		return nil
	}
	// The StyrminSource is read before the tasks: the sync makes a
	// commit's tasks before it records the commit synced, so a round
	// that finds the position past a commit, and so waits for none of
	// its lockfiles, has its tasks in view too (but for the tasks' cache
	// being behind the source's).
	var src *v1alpha1.StyrminSource
	if r.o.Source.Name != "" {
		var got v1alpha1.StyrminSource
		err := r.o.Reader.Get(ctx, r.o.Source, &got)
		if client.IgnoreNotFound(err) != nil {
			return []error{fmt.Errorf("reading StyrminSource %s: %w", r.o.Source, err)}
		}
		if err == nil {
			src = &got
		}
	}
	r.mu.Lock()
	if r.reported.IsZero() {
		// Decided once, at the election: what this replica records later
		// is its own reporting.
		r.reported = started.Add(-r.o.Window)
		if src != nil && src.Status.ReportedThrough != nil {
			r.reported = src.Status.ReportedThrough.Time
			r.through = r.reported
		}
	}
	reported := r.reported
	r.mu.Unlock()
	var list v1alpha1.StyrminTaskList
	if err := r.o.Reader.List(ctx, &list); err != nil {
		return []error{fmt.Errorf("listing StyrminTasks: %w", err)}
	}
	byCommit := map[string]commitResult{}
	changes := changeTasks{}
	for i, t := range list.Items {
		// An operation task (a backup, a restore) carries the lock of the
		// change it follows: its result is not that commit's.
		if t.Spec.Deployment.Cluster == r.o.Cluster && t.Spec.Lock.Commit != "" && t.Spec.Operation == nil {
			c := byCommit[t.Spec.Lock.Commit]
			c.tasks = append(c.tasks, t)
			byCommit[t.Spec.Lock.Commit] = c
			changes[t.Spec.Deployment] = append(changes[t.Spec.Deployment], list.Items[i])
		}
	}
	for sha, c := range byCommit {
		for i := range c.tasks {
			if carrier := changes.carrier(&c.tasks[i]); carrier != nil {
				c.carriers = append(c.carriers, carrier)
			}
		}
		byCommit[sha] = c
	}
	if src != nil {
		for _, f := range src.Status.Refused {
			if id, ok := resolver.IDFromLockPath(f.Path); !ok || id.Cluster != r.o.Cluster {
				continue // another cluster's (a source that changed cluster)
			}
			c := byCommit[f.Commit]
			c.refused = append(c.refused, f)
			byCommit[f.Commit] = c
		}
	}
	unsynced := r.unsyncedLocks(src)
	var errs []error
	// settled are the commits whose final status the host shows as this
	// round summarized it (or refused for good).
	settled := map[string]bool{}
commits:
	for _, sha := range slices.Sorted(maps.Keys(byCommit)) {
		var he *commitstatus.HTTPError
		c := byCommit[sha]
		r.mu.Lock()
		last, seen := r.posted[sha]
		r.mu.Unlock()
		for _, f := range last.refusals {
			if !slices.ContainsFunc(c.refused, func(g v1alpha1.RefusedLock) bool { return g.Path == f.Path }) {
				c.refused = append(c.refused, f)
			}
		}
		waiting := 0
		if !seen || last.status.State == commitstatus.Pending {
			// Not after a final status, posted once nothing waited: the
			// sync makes no task of a commit it has synced, so a lockfile
			// of it found without a task later is one whose task was
			// pruned, met again by a walk from the root (a lost position).
			waiting = c.waiting(unsynced[sha])
		}
		s := summarize(r.o.Cluster, c.tasks, waiting, c.refused, changes)
		s.Context, s.TargetURL = r.o.Context, r.o.TargetURL
		if seen && (last.status == s || last.onlyFewer(c)) {
			settled[sha] = last.status.State != commitstatus.Pending
			continue
		}
		// Its tasks all ended before this replica's election (it may be
		// pending still, for a lockfile waiting for its task: the status
		// the earlier leader posted then is the same, or a final one it
		// posted once nothing waited):
		if !seen && endedBefore(c, started) {
			// An earlier leader may have reported it, from tasks some of
			// which may be pruned since (a failure's failed task): a
			// final status it posted stands. One that ended before the
			// time the leaders recorded has it (or was refused it for
			// good); one after may not, however long ago it ended (a
			// leader gone before posting it, and none elected for hours).
			if endedBefore(c, reported) {
				r.remember(sha, s, c)
				settled[sha] = true
				continue
			}
			shown, ok, err := r.o.Poster.Current(ctx, sha, s.Context)
			switch {
			case err == nil:
				r.answered()
				if ok && shown.State != commitstatus.Pending {
					r.remember(sha, s, c)
					settled[sha] = true
					continue
				}
			case errors.As(err, &he) && !he.Retryable() && !he.Unauthorized():
				// Not readable (a token that may only write): posted as
				// before this look.
				r.o.Log.V(1).Info("could not read a lock commit's status from the host", "commit", sha[:min(12, len(sha))], "error", err.Error())
			default:
				end, err := r.endsRound(ctx, err)
				errs = append(errs, err)
				if end {
					break commits
				}
				continue
			}
		}
		err := r.o.Poster.Post(ctx, sha, s)
		if err == nil {
			r.answered()
			r.o.Log.Info("reported a lock commit's result", "commit", sha[:min(12, len(sha))], "state", s.State, "description", s.Description)
			r.remember(sha, s, c)
			settled[sha] = s.State != commitstatus.Pending
			continue
		}
		end, err := r.endsRound(ctx, err)
		errs = append(errs, err)
		if end {
			break
		}
		if errors.As(err, &he) && !he.Retryable() {
			// Refused for good (a bad token, an unknown commit): not
			// asked again until the status changes.
			r.remember(sha, s, c)
			settled[sha] = true
		}
	}
	if err := r.recordReported(ctx, src, now, byCommit, settled); err != nil {
		errs = append(errs, err)
	}
	// Commits no task refers to any more are forgotten.
	r.mu.Lock()
	for sha := range r.posted {
		if _, ok := byCommit[sha]; !ok {
			delete(r.posted, sha)
		}
	}
	r.mu.Unlock()
	return errs
}

// answered records that the host took a request: an outage is over, and
// a token it refused before is taken again.
func (r *Reporter) answered() {
	r.mu.Lock()
	r.outage.Answered()
	_, ended := r.token.Observe(nil)
	r.mu.Unlock()
	if ended {
		r.o.Log.Info("the host takes the commit status token again; the statuses that waited are posted")
	}
}

// endsRound tells whether a request's error ends the round, the other
// commits being refused alike meanwhile: a refused token (expired,
// revoked), the one that replaces it used next round, logged when the
// refusals start (Start logs no other); a rate limit, no
// request then until the wait it asked for has passed (a minute when it
// named none, an hour at most); a host that did not answer (a 5xx, no
// connection), no request until a back-off has passed, which doubles
// while the outage lasts. err is given to say how long.
func (r *Reporter) endsRound(ctx context.Context, err error) (bool, error) {
	var he *commitstatus.HTTPError
	switch {
	case ctx.Err() != nil:
		return true, err
	case commitstatus.Unanswered(err):
		// Every commit would fail alike: the round ends at the first
		// (commitstatus.Outage: 30 s doubling to 10 minutes).
		r.mu.Lock()
		wait, _ := r.outage.Failed()
		r.resume = r.o.Now().Add(wait)
		r.mu.Unlock()
		return true, fmt.Errorf("%w (the host did not answer: no status is posted for %s)", err, wait.Round(time.Second))
	case errors.As(err, &he) && he.RateLimited():
		wait := he.RateLimitWait()
		r.mu.Lock()
		r.resume = r.o.Now().Add(wait)
		r.mu.Unlock()
		return true, fmt.Errorf("%w (no status is posted for %s)", err, wait.Round(time.Second))
	case errors.As(err, &he) && he.Unauthorized():
		r.mu.Lock()
		started, _ := r.token.Observe(err)
		r.mu.Unlock()
		if started {
			r.o.Log.Error(err, "the host refuses the commit status token (expired, revoked): statuses are posted once it takes one; logged again then")
		}
		return true, err
	default:
		return false, err
	}
}

func (r *Reporter) remember(sha string, s commitstatus.Status, c commitResult) {
	names := make(map[string]bool, len(c.tasks))
	for i := range c.tasks {
		names[taskKey(&c.tasks[i])] = true
	}
	refused := make(map[string]bool, len(c.refused))
	for _, f := range c.refused {
		refused[f.Path] = true
	}
	carriers := make(map[string]bool, len(c.carriers))
	for _, t := range c.carriers {
		carriers[taskKey(t)] = true
	}
	r.mu.Lock()
	r.posted[sha] = postedStatus{status: s, tasks: names, refused: refused, carriers: carriers, refusals: slices.Clone(c.refused)}
	r.mu.Unlock()
}

// taskKey names a task a status counted. Its UID too: a withdrawn
// change's task is deleted and made again, under its name, once its lock
// commit is back on the branch, and the new task's end is news.
func taskKey(t *v1alpha1.StyrminTask) string {
	return t.Namespace + "/" + t.Name + "/" + string(t.UID)
}

// The reportedThrough the StyrminSource records lags the round's clock by
// reportedMargin, which bounds how far the task cache may be behind a
// task's end (a commit it still shows running may have ended already)
// and the clocks of the replicas apart; it is written again once it
// moved on by reportedStep past a commit that ended, or to go back.
const (
	reportedMargin = 5 * time.Minute
	reportedStep   = 5 * time.Minute
)

// recordReported records on the StyrminSource the time before which every
// commit whose tasks all ended has its final status on the host: the end
// of the earliest that has not (a post that failed, a round that ended
// first, a commit pending for a lockfile waiting for its task), at most
// the round's time less reportedMargin. A replica elected later asks the
// host about the commits that ended since, however long ago.
func (r *Reporter) recordReported(ctx context.Context, src *v1alpha1.StyrminSource, now time.Time,
	byCommit map[string]commitResult, settled map[string]bool) error {
	if r.o.Writer == nil || src == nil {
		return nil
	}
	through := now.Add(-reportedMargin)
	for sha, c := range byCommit {
		if end, ok := endOf(c); ok && !settled[sha] && end.Before(through) {
			through = end
		}
	}
	// The API server keeps seconds: the time is kept earlier, not later.
	through = through.Truncate(time.Second)
	r.mu.Lock()
	last := r.through
	r.mu.Unlock()
	if !last.IsZero() && !through.Before(last) {
		// Moving it on matters only past a commit that ended (an idle
		// cluster writes nothing), and is done at most every step.
		passes := false
		for _, c := range byCommit {
			if end, ok := endOf(c); ok && !end.Before(last) && end.Before(through) {
				passes = true
				break
			}
		}
		if !passes || through.Sub(last) < reportedStep {
			return nil
		}
	}
	patch := fmt.Sprintf(`{"status":{"reportedThrough":%q}}`, through.UTC().Format(time.RFC3339))
	if err := r.o.Writer.Status().Patch(ctx, src.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		return fmt.Errorf("recording the commits reported on StyrminSource %s: %w", r.o.Source, err)
	}
	r.mu.Lock()
	r.through = through
	r.mu.Unlock()
	return nil
}

// endOf is when c's last task (or newer task its superseded ones follow)
// ended, or its last refusal was made; ok is false while one has not
// ended.
func endOf(c commitResult) (end time.Time, ok bool) {
	for _, tk := range c.ended() {
		if !tk.Status.Phase.Terminal() || tk.Status.FinishedAt == nil {
			return time.Time{}, false
		}
		if tk.Status.FinishedAt.After(end) {
			end = tk.Status.FinishedAt.Time
		}
	}
	for _, f := range c.refused {
		if f.Time.After(end) {
			end = f.Time.Time
		}
	}
	return end, true
}

// ended are the tasks whose ends end c: its own and its carriers.
func (c commitResult) ended() []*v1alpha1.StyrminTask {
	out := make([]*v1alpha1.StyrminTask, 0, len(c.tasks)+len(c.carriers))
	for i := range c.tasks {
		out = append(out, &c.tasks[i])
	}
	return append(out, c.carriers...)
}

// endedBefore tells whether every task of c (and every newer task its
// superseded ones follow) ended, and every refusal was made, before t.
func endedBefore(c commitResult, t time.Time) bool {
	for _, tk := range c.ended() {
		if !tk.Status.Phase.Terminal() || tk.Status.FinishedAt == nil || !tk.Status.FinishedAt.Time.Before(t) {
			return false
		}
	}
	for _, f := range c.refused {
		if !f.Time.Time.Before(t) {
			return false
		}
	}
	return true
}

// unsyncedLocks returns, by commit, the deployments whose lockfiles the
// sync has still to walk: those the commits after its position
// (status.lastSyncedCommit; none: from the root, as the sync walks) up to
// the clone's head change in this cluster, the list the sync's next walk
// reads (LockChanges, under locks/<cluster>). The sync records its
// position only once every task of the walk was made, so a commit at or
// before it owes none: that also covers every lockfile the sync rightly
// makes no task for (a tombstone of a deployment never applied here or
// gone everywhere, an earlier change of a deployment deleted at the
// head, a sequence its StyrminDeployment already holds, an invalid
// lockfile of a walk from the root, which records no refusal), which
// cannot be told from the cluster. They count as waiting only while the
// sync has not passed their commit, which it does at its first sync that
// goes through: no commit is kept pending once its tasks are all made.
//
// A commit the branch no longer holds (a force push) is not listed: the
// sync will not walk it. Nor is a deleted lockfile (refused, never a
// task). The lockfiles, not the Styrmin-Lock trailers, are what the sync
// makes tasks of: a trailer may name a deployment of another cluster, or
// one whose lockfile the commit does not change (a squashed message), and
// a commit without trailers (a merge's resolution) may change one.
//
// None when it cannot be known (no clone or StyrminSource given): the
// commits' tasks and refusals alone count then, as before History. When
// the clone cannot be read (the position a commit it does not hold yet,
// fetched by the replica elected before), the last look's answer stands
// until a look succeeds: a read that failed once must not turn a commit
// waiting for a task green.
func (r *Reporter) unsyncedLocks(src *v1alpha1.StyrminSource) map[string][]string {
	if r.o.History == nil || src == nil {
		return nil
	}
	r.mu.Lock()
	cached := r.unsynced
	r.mu.Unlock()
	head, err := r.o.History.Head()
	if err != nil {
		r.o.Log.V(1).Info("could not read the clone's head: lockfiles waiting for their tasks are counted as at the last look", "error", err.Error())
		return cached.byCommit
	}
	// A position that does not parse (edited by hand) is one the sync
	// ignores too: it walks from the root.
	position, _ := gitsource.ParseHash(src.Status.LastSyncedCommit)
	if position == head {
		return nil
	}
	if cached.read && cached.position == position && cached.head == head {
		return cached.byCommit
	}
	changes, err := r.o.History.LockChanges(position, head, resolver.ClusterLocksDir(r.o.Cluster))
	if err != nil {
		r.o.Log.V(1).Info("could not list the lock changes the sync has still to walk: lockfiles waiting for their tasks are counted as at the last look",
			"position", position.Short(), "head", head.Short(), "error", err.Error())
		return cached.byCommit
	}
	byCommit := map[string][]string{}
	for _, ch := range changes {
		id, ok := resolver.IDFromLockPath(ch.Path)
		if ch.Deleted || !ok || id.Cluster != r.o.Cluster {
			continue // the sync makes no task of it either
		}
		sha := ch.Commit.String()
		byCommit[sha] = append(byCommit[sha], id.String())
	}
	r.mu.Lock()
	r.unsynced = unsyncedLocks{read: true, position: position, head: head, byCommit: byCommit}
	r.mu.Unlock()
	return byCommit
}

// waiting counts the deployments of unsynced (a commit's lockfiles the
// sync has still to walk) for which c has neither a task nor a refused
// lockfile: the sync has still to make their tasks.
func (c commitResult) waiting(unsynced []string) int {
	if len(unsynced) == 0 {
		return 0
	}
	have := make(map[string]bool, len(c.tasks)+len(c.refused))
	for _, t := range c.tasks {
		have[t.Spec.Deployment.String()] = true
	}
	for _, f := range c.refused {
		if id, ok := resolver.IDFromLockPath(f.Path); ok {
			have[id.String()] = true
		}
	}
	n := 0
	for _, d := range unsynced {
		if !have[d] {
			have[d] = true // a deployment counts once
			n++
		}
	}
	return n
}

// Summarize is the status of one lock commit in a cluster from its
// tasks (one per deployment it locked) and its lockfiles the agent
// refused: failure when a task failed, was withdrawn before it ran or a
// lockfile was refused, pending
// while a task has not ended, success otherwise; the description counts
// them and names the failures.
func Summarize(cluster string, tasks []v1alpha1.StyrminTask, refused ...v1alpha1.RefusedLock) commitstatus.Status {
	return summarize(cluster, tasks, 0, refused, nil)
}

// changeTasks are the cluster's change tasks (not operations) by
// deployment.
type changeTasks map[v1alpha1.DeploymentID][]v1alpha1.StyrminTask

// carrier is the task that took a superseded task's change on
// (instance.Carrier): the task of its deployment at the sequence that
// superseded it (a newer instance holds the older change's content),
// followed while that one was superseded too, and past a change
// withdrawn since to the deployment's next one not withdrawn. Nil when
// none is named (a change withdrawn by a force push) or the cluster no
// longer has it (pruned); withdrawn when no change was locked after the
// withdrawn one yet.
func (ct changeTasks) carrier(t *v1alpha1.StyrminTask) *v1alpha1.StyrminTask {
	c, _ := instance.Carrier(ct[t.Spec.Deployment], t)
	return c
}

// summarize is Summarize with the commit's lockfiles whose tasks the sync
// has still to make (waiting): pending while one waits, unless the
// commit failed already; and with the cluster's change tasks, which a
// superseded task's result follows: its change never ran as its own, so
// it is applied when the newer instance that took it on is (success),
// failed when that one failed, and pending while that one has not ended.
// A superseded task whose newer one the cluster no longer has counts as
// a success, as do all without changes. A withdrawn task (its lock
// commit left the branch before it ran), or one superseded by a newer
// task withdrawn so while its deployment has no change locked after that
// one (which would carry it on), is a failure: nothing applied its
// change, and a pipeline waiting for the commit's status must not go on
// as if it were.
func summarize(cluster string, tasks []v1alpha1.StyrminTask, waiting int, refused []v1alpha1.RefusedLock, changes changeTasks) commitstatus.Status {
	var failed, withdrawn []string
	applied, superseded, running, carried := 0, 0, 0, 0
	for i, t := range tasks {
		switch t.Status.Phase {
		case v1alpha1.TaskSucceeded:
			applied++
		case v1alpha1.TaskSuperseded:
			c := changes.carrier(&tasks[i])
			switch {
			case tasks[i].Withdrawn():
				withdrawn = append(withdrawn, t.Spec.Deployment.String())
			case c != nil && c.Withdrawn():
				withdrawn = append(withdrawn, fmt.Sprintf("%s (as sequence %d)", t.Spec.Deployment, c.Spec.ToSequence))
			case c == nil || c.Status.Phase == v1alpha1.TaskSucceeded || c.Status.Phase == v1alpha1.TaskSuperseded:
				superseded++
			case c.Status.Phase == v1alpha1.TaskFailed:
				failed = append(failed, fmt.Sprintf("%s (as sequence %d)", t.Spec.Deployment, c.Spec.ToSequence))
			default:
				carried++
			}
		case v1alpha1.TaskFailed:
			failed = append(failed, t.Spec.Deployment.String())
		default:
			running++
		}
	}
	slices.Sort(failed)
	var rejected []string
	for _, f := range refused {
		name := f.Path
		if id, ok := resolver.IDFromLockPath(f.Path); ok {
			name = id.String()
		}
		rejected = append(rejected, name)
	}
	slices.Sort(rejected)
	var parts []string
	if len(rejected) > 0 {
		// First: the description is cut at 140 characters, and a refusal
		// is what nothing else on the commit shows.
		parts = append(parts, fmt.Sprintf("%s not applied: lockfile refused (see the StyrminSource)", strings.Join(rejected, ", ")))
	}
	if len(failed) > 0 {
		parts = append(parts, fmt.Sprintf("%s failed", strings.Join(failed, ", ")))
	}
	if len(withdrawn) > 0 {
		slices.Sort(withdrawn)
		parts = append(parts, fmt.Sprintf("%s not applied: withdrawn from the branch before it ran", strings.Join(withdrawn, ", ")))
	}
	switch {
	// Before the counts of tasks, as a refusal: nothing else on the
	// commit shows it (the sync's error is on the StyrminSource).
	case waiting == 1:
		parts = append(parts, "1 deployment waiting for its task (see the StyrminSource)")
	case waiting > 1:
		parts = append(parts, fmt.Sprintf("%d deployments waiting for their tasks (see the StyrminSource)", waiting))
	}
	if applied > 0 {
		parts = append(parts, plural(applied, "applied"))
	}
	if superseded > 0 {
		parts = append(parts, plural(superseded, "superseded by a newer instance"))
	}
	if carried > 0 {
		parts = append(parts, plural(carried, "superseded by a newer instance not applied yet"))
	}
	if running > 0 {
		parts = append(parts, plural(running, "running or waiting"))
	}
	s := commitstatus.Status{State: commitstatus.Success, Description: cluster + ": " + strings.Join(parts, "; ")}
	switch {
	case len(failed) > 0 || len(refused) > 0 || len(withdrawn) > 0:
		s.State = commitstatus.Failure
	case running > 0 || carried > 0 || waiting > 0:
		s.State = commitstatus.Pending
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 deployment " + what
	}
	return fmt.Sprintf("%d deployments %s", n, what)
}
