package source

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/internal/eventnote"
	"github.com/styrmin/styrmin/operator/internal/outcome"
	"github.com/styrmin/styrmin/resolver"
)

// LockRepo is what the locker needs of its clone: fetch the branch, tell a
// lock commit from a configuration commit, and commit lockfiles back with
// compare-and-swap, and read the history a lock walks (each configuration
// commit since the last lock is its own change). *gitsource.Repo
// implements it.
type LockRepo interface {
	gitsource.Writer
	gitsource.History
	Fetch(ctx context.Context) (gitsource.FetchResult, error)
	LockChanges(from, to gitsource.Hash, prefix string) ([]gitsource.LockChange, error)
	Commit(commit gitsource.Hash) (gitsource.CommitInfo, error)
}

var _ LockRepo = (*gitsource.Repo)(nil)

// DefaultLockAttempts bounds the push attempts of one lock when the branch
// keeps moving.
const DefaultLockAttempts = 8

// LockModeOptions configures the agent's lock mode, for teams without CI:
// the agent locks every configuration head itself and pushes the lock
// commits back (so its credentials need write access).
type LockModeOptions struct {
	// Repo is the locker's clone; when nil, URL and Branch are cloned in
	// memory with Auth.
	Repo   LockRepo
	URL    string
	Branch string
	// Dir is the folder of the repository that holds the desired-state
	// repository when it is cloned here ("" for its root).
	Dir  string
	Auth gitsource.Auth
	// NetworkTimeout bounds the clone (0: gitsource's default).
	NetworkTimeout time.Duration
	// SecretName/SecretNamespace name the Secret holding push credentials
	// (NewAgent reads it into Auth; default: the agent's
	// repository Secret).
	SecretName      string
	SecretNamespace string
	// Interval between fetches (default DefaultPollInterval); Trigger
	// locks at once.
	Interval time.Duration
	// AllOrNothing locks nothing when a deployment fails to resolve; by
	// default the deployments that resolve are locked anyway (one broken
	// deployment does not stop the others).
	AllOrNothing bool
	// MaxAttempts bounds the push attempts (default DefaultLockAttempts).
	MaxAttempts int
	// FetchDriver returns the fetcher of the driver sources styrmin.cue
	// lists, for one lock (NewAgent: driversource.Remotes.LockFetcher);
	// nil refuses such a listing.
	FetchDriver func(ctx context.Context) resolver.DriverFetcher
	// Used returns the sequences the cluster has seen, per deployment
	// (NewAgent: the highest task of each). A lock numbers after them as
	// after the branch's history, so a branch rewound by a force-push
	// never makes a number the cluster ran be used again. Nil: the
	// history only.
	Used func(ctx context.Context) (resolver.UsedSequences, error)
	// RanDigests returns, per deployment, the digest of the instance of
	// the sequence Used gives (NewAgent: its newest task's target). A
	// lockfile at that sequence locking other content (a lock made after
	// a rewind, numbered after the branch's history only: `styrminctl
	// lock --push`, CI) is no instance the cluster runs, and is locked
	// again past it. Nil: only a lockfile below Used is.
	RanDigests func(ctx context.Context) (map[resolver.ID]string, error)
	// DriverLimits and Sandbox bound the drivers a lock loads (NewAgent:
	// the agent's; they override styrmin.cue's limits where set).
	DriverLimits drivers.Limits
	Sandbox      *drivers.Sandbox
	// ConfigSandbox bounds the evaluation of the configuration a lock
	// reads (NewAgent: made from Sandbox; see resolver.ConfigSandbox).
	ConfigSandbox *resolver.ConfigSandbox
	// OnLocked is called after a lock commit was pushed (the agent
	// triggers its syncer).
	OnLocked func(LockResult)
	// Conditions, when set, receives the Locked condition of every lock
	// of a new head (NewAgent: the StyrminSource's, SourceConditions):
	// deployments held back, and why, are seen there rather than only in
	// the agent's log. One not written (the API server away, the
	// StyrminSource not made yet) is written on a later round. One
	// another agent's lock mode wrote since this one read it is written
	// over when it is about an older head (an ancestor of this lock's),
	// else this lock's outcome is dropped: the newer head's stands,
	// whatever the order of the writes.
	Conditions ConditionSetter
	// Statuses, when set, receives the commit status of every lock of a
	// new head, posted on that configuration commit with context
	// StatusContext (NewAgent: the agent's commit status client, with
	// "styrmin/<cluster>/lock"), linking StatusTargetURL: who pushed sees
	// on the git host whether it was locked whole. One not posted is
	// posted on a later round (after a rate limit's wait, or a back-off
	// from a host that does not answer).
	Statuses        StatusPoster
	StatusContext   string
	StatusTargetURL string
	// State, when set, keeps across the agent's restarts and elections
	// what the next agent could not learn again (NewAgent: on the
	// StyrminSource, SourceConditions): the statuses the host has not
	// taken yet (with Statuses), which it posts, and a configuration head
	// whose lock left deployments for the machine's trouble, which it
	// locks again. Without it both are lost with the process: the head is
	// by then their lock commit, which the next agent skips.
	State LockState
	// Log receives the locker's logs.
	Log logr.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// LockResult says what one LockHead did.
type LockResult struct {
	// Head is the fetched branch head.
	Head gitsource.Hash
	// Skipped is true when the head was already handled or is a lock
	// commit (the engine's own, or CI's): nothing was resolved.
	Skipped bool
	// Commit is the lock commit pushed (zero when none was needed).
	Commit gitsource.Hash
	// Locked names the deployments locked, "cluster/env/name=sequence".
	Locked []string
	// Failed is the resolve error of the deployments left unlocked.
	Failed error
	// BrokenDrivers are the driver versions of the head that do not load;
	// only the deployments whose choice of version one could change are
	// in Failed.
	BrokenDrivers []*drivers.BrokenDriverError
	// Warnings are what the head's configuration may not mean though it
	// locked (resolver.LockOutcome.Warnings: two clusters giving an
	// environment of one name one domain), as styrminctl lock prints them.
	Warnings []string
}

// Locker runs the lock step inside the agent: on each new head that is not
// a lock commit it resolves the configuration and pushes the changed
// lockfiles with compare-and-swap. Its own commits never cause another
// lock: a lock commit is skipped, and a head whose locks are current makes
// no commit anyway.
type Locker struct {
	opts    LockModeOptions
	trigger chan struct{}
	// last is the last head handled (by the Start loop only).
	last gitsource.Hash
	// again is set when the last lock left deployments unlocked for the
	// machine's trouble (a sandbox child that could not start, a driver
	// source that could not be fetched): the next round locks the head
	// again though it was handled, or is the lock mode's own commit.
	again bool
	// pending is the Locked condition of the last lock not yet written to
	// opts.Conditions.
	pending *metav1.Condition
	// pendingKey is pending's decidedKey; condWritten that of the last
	// condition written.
	pendingKey, condWritten decidedKey
	// condRead is false until the source's Locked condition was read
	// (again, after another writer changed it); condWas is what it holds
	// as last read or written there (nil: none): a condition is written
	// only over it.
	condRead bool
	condWas  *metav1.Condition
	// condTried are the conditions written since condWas whose answer was
	// lost (a timeout): found on the source, they are this locker's own.
	condTried []metav1.Condition
	// subject is the configuration head the last lock decided for (see
	// subjectOf).
	subject gitsource.Hash
	// failedAgain is the configuration head whose last lock failed for
	// the machine's or the network's trouble (nothing decided locked),
	// zero otherwise; landed is a head found to be a lock commit made
	// over it (a push whose answer was lost after the host stored it,
	// another locker of the same head), whose round decides failedAgain's
	// outcome rather than skip it: its status said "locked again soon"
	// for ever.
	failedAgain, landed gitsource.Hash
	// pendingStatuses are the commit statuses not yet posted to
	// opts.Statuses, the last of each head, oldest first (at most
	// maxPendingStatuses): a head's final status decided while the host
	// was away is posted though a newer head was decided since.
	// statusPosted is the decidedKey of the last posted.
	pendingStatuses []headStatus
	statusPosted    decidedKey
	// statusResume: no status is posted before it, the wait the host's
	// rate limit asked for or the back-off from a host that does not
	// answer (every request is refused or fails alike meanwhile).
	statusResume time.Time
	// statusOutage is that back-off, the commit status reporter's: an
	// outage is logged when it starts and ends, not at every round.
	statusOutage commitstatus.Outage
	// statusToken follows whether the host refuses the token: a bad one
	// is logged when the refusals start and end, not at every round.
	statusToken commitstatus.TokenWatch
	// stateRead is false until opts.State was read once (nothing is
	// written before: what an agent before left there would be lost);
	// queued and keptAgain are what it holds as last read or written.
	stateRead bool
	queued    []v1alpha1.LockStatus
	keptAgain *v1alpha1.LockAgain
	// made are the lock commits this locker pushed, newest last (at most
	// maxMadeLocks): a head whose lock is one of them is locked here,
	// whatever its parent (a lock made again over its own, one a
	// compare-and-swap moved onto a newer configuration commit).
	made []gitsource.Hash

	// authMu guards opts.Auth and clone, which SetAuth changes while the
	// Start loop clones and pushes.
	authMu sync.Mutex
	// clone is the repository ensureRepo cloned (nil before, or when
	// opts.Repo was given).
	clone *gitsource.Repo
}

// SetAuth replaces the push credentials (a token rotated in their
// Secret): the lock mode's clone pushes with them from its next push.
func (l *Locker) SetAuth(a gitsource.Auth) error {
	l.authMu.Lock()
	defer l.authMu.Unlock()
	l.opts.Auth = a
	if l.clone != nil {
		return l.clone.SetAuth(a)
	}
	return nil
}

// headStatus is a commit status for a configuration head.
type headStatus struct {
	head   gitsource.Hash
	status commitstatus.Status
	key    decidedKey
}

// NewLocker checks opts and returns a Locker. When opts.Repo is nil the
// clone is made on first use, so building a Locker is cheap.
func NewLocker(opts LockModeOptions) (*Locker, error) {
	if opts.Repo == nil && opts.URL == "" {
		return nil, errors.New("lock mode: a repository or its URL is required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultPollInterval
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultLockAttempts
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Locker{opts: opts, trigger: make(chan struct{}, 1)}, nil
}

// Trigger asks for a lock now (on a webhook push). It never blocks.
func (l *Locker) Trigger() {
	select {
	case l.trigger <- struct{}{}:
	default:
	}
}

// Start clones when needed, then locks at once, on every interval and on
// Trigger, until ctx ends. Failures, the clone's included, are logged and
// the next round tries again: a runnable that returned an error would
// stop the whole agent over a remote that is down for a minute.
func (l *Locker) Start(ctx context.Context) error {
	l.opts.Log.Info("lock mode started", "interval", l.opts.Interval.String())
	pollLoop(ctx, l.opts.Interval, l.trigger, func(ctx context.Context) {
		if err := l.ensureRepo(ctx); err != nil {
			if ctx.Err() == nil {
				l.opts.Log.Error(err, "lock mode: no clone yet; trying again", "after", l.opts.Interval.String())
			}
			return
		}
		if _, err := l.LockHead(ctx); err != nil && ctx.Err() == nil {
			l.opts.Log.Error(err, "lock failed")
		}
	})
	return nil
}

// LockHead fetches the branch and locks its head unless it was handled
// already or is a lock commit. It is not safe for concurrent use (Start
// calls it from one goroutine).
func (l *Locker) LockHead(ctx context.Context) (LockResult, error) {
	l.resume(ctx)
	if l.opts.Conditions != nil && !l.condRead {
		// Before the round: a write landing while it locks is another's,
		// written over only when about an older head (overHeld). Not read
		// yet (the API server away, the source not made): read again
		// before the write.
		_ = l.readCondition(ctx)
	}
	res, err := l.lockHead(ctx)
	l.writeCondition(ctx)
	l.postStatus(ctx)
	l.keepState(ctx)
	return res, err
}

// decided records the outcome of a lock of head for opts.Conditions and
// opts.Statuses, written by writeCondition and postStatus. While a head
// is locked again round after round (the machine's trouble) its outcome
// is written again only when the condition's status or reason, or the
// commit status's state, changes: its messages may differ by a detail
// every round (a port in a network error), and the host keeps at most
// 1,000 statuses of a context per commit. A final outcome is always
// written.
func (l *Locker) decided(head gitsource.Hash, res LockResult, err error, again bool) {
	c := lockCondition(head, res, err, again)
	// A final outcome (not again) is always written: it may name another
	// cause than the retried one before.
	if k := (decidedKey{head, string(c.Status), c.Reason, again}); !again || k != l.condWritten {
		l.pending, l.pendingKey = &c, k
	} else {
		l.pending = nil // what the source holds says it already
	}
	s := lockStatus(res, err, again)
	s.Context, s.TargetURL = l.opts.StatusContext, l.opts.StatusTargetURL
	// The head's earlier outcome not posted yet is replaced.
	l.pendingStatuses = slices.DeleteFunc(l.pendingStatuses, func(p headStatus) bool { return p.head == head })
	if k := (decidedKey{head, string(s.State), "", again}); !again || k != l.statusPosted {
		l.pendingStatuses = append(l.pendingStatuses, headStatus{head: head, status: s, key: k})
	}
	if n := len(l.pendingStatuses) - maxPendingStatuses; n > 0 {
		// The host away for as many heads: the oldest are let go.
		for _, p := range l.pendingStatuses[:n] {
			l.opts.Log.Info("a lock's commit status was not posted: the host was away for too many heads since", "head", p.head.Short(), "state", p.status.State)
		}
		l.pendingStatuses = slices.Delete(l.pendingStatuses, 0, n)
	}
}

// maxPendingStatuses bounds the lock statuses kept for a host that does
// not answer: one per head locked meanwhile.
const maxPendingStatuses = v1alpha1.MaxLockStatuses

// subjectOf is the configuration head a lock of head decides for: head,
// unless head is the lock mode's own commit locked again (some of its
// configuration head's deployments were left for the machine's trouble),
// which is that configuration head's lock finishing.
func (l *Locker) subjectOf(head gitsource.Hash) gitsource.Hash {
	if head == l.landed && !l.failedAgain.IsZero() {
		l.subject = l.failedAgain
		return l.subject
	}
	if head == l.last && l.again && !l.subject.IsZero() {
		return l.subject
	}
	l.subject = head
	return head
}

// decidedKey is what decides whether a lock's outcome is written again:
// its head, the condition's status and reason or the commit status's
// state, and whether the head is locked again.
type decidedKey struct {
	head           gitsource.Hash
	status, reason string
	again          bool
}

// postStatus posts the pending commit statuses, oldest first; the first
// that fails ends the round (the host refuses the others alike), and it
// and the later ones are posted on a later round. A rate limit ends the
// rounds that post until the wait it asked for has passed
// (commitstatus.HTTPError.RateLimitWait, as the commit status reporter
// waits): the statuses decided meanwhile are kept, and posted then. A
// host that does not answer (a 5xx, no connection) is backed off from as
// the reporter does (commitstatus.Outage: 30 s doubling to 10 minutes),
// the statuses kept alike. A refused token (401) is asked again every
// round, as a token replaced in its Secret is used once read. Both are
// logged only when they start and when they end.
func (l *Locker) postStatus(ctx context.Context) {
	if l.opts.Statuses == nil || len(l.pendingStatuses) == 0 || l.now().Before(l.statusResume) {
		return
	}
	for len(l.pendingStatuses) > 0 {
		p := l.pendingStatuses[0]
		err := l.opts.Statuses.Post(ctx, p.head.String(), p.status)
		if err != nil && ctx.Err() != nil {
			// Stopping: the status is posted later or by the next leader,
			// and the context's end says nothing of the host.
			return
		}
		if !commitstatus.Unanswered(err) && l.statusOutage.Answered() {
			l.opts.Log.Info("the host answers the lock's commit statuses again; those that waited are posted", "waiting", len(l.pendingStatuses))
		}
		started, ended := l.statusToken.Observe(err)
		if ended {
			l.opts.Log.Info("the host takes the token of the lock's commit statuses again; those that waited are posted")
		}
		if err != nil {
			var he *commitstatus.HTTPError
			if commitstatus.Unanswered(err) {
				wait, outage := l.statusOutage.Failed()
				l.statusResume = l.now().Add(wait)
				if outage {
					l.opts.Log.Error(err, "the host does not answer the lock's commit statuses: asked again after a back-off growing to 10 minutes, they are posted once it answers; logged again then",
						"for", wait.Round(time.Second).String(), "head", p.head.Short(), "waiting", len(l.pendingStatuses))
				} else {
					l.opts.Log.V(1).Info("the host still does not answer the lock's commit statuses",
						"error", err.Error(), "for", wait.Round(time.Second).String(), "waiting", len(l.pendingStatuses))
				}
				return
			}
			if errors.As(err, &he) && he.RateLimited() {
				wait := he.RateLimitWait()
				l.statusResume = l.now().Add(wait)
				l.opts.Log.Error(err, "the host rate limits its API: no lock commit status is posted until its wait is over",
					"for", wait.Round(time.Second).String(), "head", p.head.Short(), "waiting", len(l.pendingStatuses))
				return
			}
			if errors.As(err, &he) && !he.Retryable() && !he.Unauthorized() {
				// Refused for good (a commit the host does not have, a
				// status it will not take): asked again, it would hold
				// every newer head's status behind it.
				l.opts.Log.Error(err, "the host refused the lock's commit status; not asked again", "head", p.head.Short())
				l.pendingStatuses = l.pendingStatuses[1:]
				continue
			}
			// What is left is a refused token (401).
			if started {
				// A token not replaced is refused alike every round: logged
				// again only once the host takes one.
				l.opts.Log.Error(err, "the host refuses the token of the lock's commit statuses (expired, revoked): they are posted once it takes one; logged again then",
					"head", p.head.Short(), "waiting", len(l.pendingStatuses))
			} else {
				l.opts.Log.V(1).Info("the host still refuses the token of the lock's commit statuses", "waiting", len(l.pendingStatuses))
			}
			return
		}
		l.pendingStatuses, l.statusPosted = l.pendingStatuses[1:], p.key
	}
}

// LockState keeps what the lock mode must not lose with its process
// across the agent's restarts and elections: *SourceConditions.
type LockState interface {
	// LockState reads what is kept (a StyrminSource not made yet: a
	// NotFound error, nothing kept).
	LockState(ctx context.Context) ([]v1alpha1.LockStatus, *v1alpha1.LockAgain, error)
	// SetLockStatuses replaces the statuses kept (none: removed) when
	// what is kept is still was (what this locker last read or wrote),
	// else returns an error wrapping ErrLockStateMoved and writes nothing.
	SetLockStatuses(ctx context.Context, was, statuses []v1alpha1.LockStatus) error
	// SetLockAgain replaces the head to lock again (nil: removed) when
	// what is kept is still was, as SetLockStatuses.
	SetLockAgain(ctx context.Context, was, again *v1alpha1.LockAgain) error
}

// resume takes up, once, what an agent before this one left: the
// statuses the host had not taken when it stopped, and a head its lock
// left deployments of for the machine's trouble. What cannot be read yet
// (the API server away) is read on a later round; until then nothing is
// written over it.
func (l *Locker) resume(ctx context.Context) {
	if l.opts.State == nil || l.stateRead {
		return
	}
	kept, again, err := l.opts.State.LockState(ctx)
	if err != nil && !apierrors.IsNotFound(err) {
		if ctx.Err() == nil {
			l.opts.Log.Error(err, "reading what the lock mode of an agent before left to do; read on a later round")
		}
		return
	}
	l.stateRead, l.queued, l.keptAgain = true, kept, again
	l.resumeAgain(again)
	if l.opts.Statuses != nil {
		l.resumeStatuses(kept)
	}
}

// resumeAgain makes the configuration head an agent before was to lock
// again (some of its deployments left for the machine's trouble) this
// locker's to lock again, deciding for it, as if this locker had made
// that lock: its head is a lock commit that leaves nothing to lock, and
// would be skipped, the deployments left waiting for the next
// configuration commit and the head's status pending for ever. Not when
// this locker handled a head already.
func (l *Locker) resumeAgain(a *v1alpha1.LockAgain) {
	if a == nil || !l.last.IsZero() {
		return
	}
	commit, cerr := gitsource.ParseHash(a.Commit)
	head, herr := gitsource.ParseHash(a.Head)
	if cerr != nil || herr != nil {
		return
	}
	l.opts.Log.Info("locking again the head an agent before left deployments of for the machine's trouble", "head", commit.Short(), "lock", head.Short())
	l.subject, l.last, l.again = commit, head, true
}

// resumeStatuses queues the statuses an agent before decided and the host
// had not taken: posted first, oldest first, unless this locker decided
// their head again since (decided replaces them).
func (l *Locker) resumeStatuses(kept []v1alpha1.LockStatus) {
	var earlier []headStatus
	for _, k := range kept {
		head, err := gitsource.ParseHash(k.Commit)
		if err != nil || slices.ContainsFunc(l.pendingStatuses, func(p headStatus) bool { return p.head == head }) {
			continue
		}
		s := commitstatus.Status{State: commitstatus.State(k.State), Description: k.Description,
			Context: l.opts.StatusContext, TargetURL: l.opts.StatusTargetURL}
		earlier = append(earlier, headStatus{head: head, status: s, key: decidedKey{head, k.State, "", false}})
	}
	if len(earlier) == 0 {
		return
	}
	l.opts.Log.Info("posting the lock statuses an agent before decided and the host had not taken", "waiting", len(earlier))
	l.pendingStatuses = append(earlier, l.pendingStatuses...)
	if n := len(l.pendingStatuses) - maxPendingStatuses; n > 0 {
		l.pendingStatuses = slices.Delete(l.pendingStatuses, 0, n)
	}
}

// keepState records in opts.State what changed of what the next agent
// must not lose: no write while the host takes each status as it is
// decided and no lock is left to make again. One that fails is made on a
// later round.
func (l *Locker) keepState(ctx context.Context) {
	if l.opts.State == nil || !l.stateRead {
		return
	}
	switch {
	case l.opts.Statuses != nil:
		l.keepStatuses(ctx)
	case len(l.queued) > 0:
		// Kept by an agent before for a host this one posts nothing to
		// (its token withdrawn): posted once a token came back, months
		// later maybe, they would say what was long settled.
		l.dropStatuses(ctx)
	}
	l.keepAgain(ctx)
}

// dropStatuses removes the statuses an agent before kept.
func (l *Locker) dropStatuses(ctx context.Context) {
	if err := l.opts.State.SetLockStatuses(ctx, l.queued, nil); err != nil {
		l.stateNotKept(ctx, err, "removing the lock statuses an agent before kept for the host; removed on a later round")
		return
	}
	l.queued = nil
}

// keepStatuses records the statuses not posted yet.
func (l *Locker) keepStatuses(ctx context.Context) {
	want := make([]v1alpha1.LockStatus, 0, len(l.pendingStatuses))
	for _, p := range l.pendingStatuses {
		want = append(want, v1alpha1.LockStatus{Commit: p.head.String(), State: string(p.status.State),
			Description: eventnote.Cut(p.status.Description, maxQueuedDescription)})
	}
	if slices.Equal(want, l.queued) {
		return
	}
	if err := l.opts.State.SetLockStatuses(ctx, l.queued, want); err != nil {
		l.stateNotKept(ctx, err, "recording the lock statuses the host has not taken; recorded on a later round")
		return
	}
	l.queued = want
}

// keepAgain records the configuration head the next round locks again,
// and the head its lock left, or that there is none.
func (l *Locker) keepAgain(ctx context.Context) {
	var want *v1alpha1.LockAgain
	if l.again && !l.last.IsZero() && !l.subject.IsZero() {
		want = &v1alpha1.LockAgain{Commit: l.subject.String(), Head: l.last.String()}
	}
	if want == nil && l.keptAgain == nil || want != nil && l.keptAgain != nil && *want == *l.keptAgain {
		return
	}
	if err := l.opts.State.SetLockAgain(ctx, l.keptAgain, want); err != nil {
		l.stateNotKept(ctx, err, "recording the head the lock mode locks again; recorded on a later round")
		return
	}
	l.keptAgain = want
}

// stateNotKept logs a write of opts.State that failed: at V(1) when the
// syncer has not made the StyrminSource yet, as for the condition. One
// refused as another writer changed the state since makes the next round
// read it again (resume), and take up what it holds, before it writes.
func (l *Locker) stateNotKept(ctx context.Context, err error, msg string) {
	switch {
	case errors.Is(err, ErrLockStateMoved):
		l.stateRead = false
		l.opts.Log.Info("another agent's lock mode changed what the lock mode keeps on the StyrminSource since this one read it: not written over; read again on the next round", "error", err.Error())
	case apierrors.IsNotFound(err):
		l.opts.Log.V(1).Info(msg, "error", err.Error())
	case ctx.Err() == nil:
		l.opts.Log.Error(err, msg)
	}
}

// maxQueuedDescription bounds a status's description kept in the queue
// (the host keeps 140 characters of it).
const maxQueuedDescription = 1024

// now is the locker's clock.
func (l *Locker) now() time.Time {
	if l.opts.Now == nil { // a Locker not made by NewLocker (tests)
		return time.Now()
	}
	return l.opts.Now()
}

// writeCondition writes the pending Locked condition, if any, over the
// one this locker last read or wrote. One changed there since is written
// over only when it says no newer head's outcome (overHeld): the order of
// the writes does not say whose head is newer (a leader paused past its
// lease writes after the next leader's read or after its write), and a
// write of this locker's own whose answer was lost is no other agent's.
// Otherwise this locker's outcome is dropped, the held condition kept.
func (l *Locker) writeCondition(ctx context.Context) {
	if l.pending == nil || l.opts.Conditions == nil {
		return
	}
	err := l.readCondition(ctx)
	if err == nil {
		err = l.swapCondition(ctx)
	}
	switch {
	case err == nil:
		l.condWas, l.condTried = l.pending, nil
		l.pending, l.condWritten = nil, l.pendingKey
	case errors.Is(err, ErrLockStateMoved):
		l.opts.Log.Info("another agent's lock mode wrote the Locked condition of a newer head, or of this one, since this one read it: not written over; this lock's is dropped",
			"head", l.pendingKey.head.Short(), "reason", l.pending.Reason, "held", heldMessage(l.condWas))
		l.pending = nil
	case apierrors.IsNotFound(err): // the syncer has not made the StyrminSource yet
		l.opts.Log.V(1).Info("no StyrminSource yet for the Locked condition; written on a later round")
	default:
		// It may have landed, its answer lost: not another agent's then.
		l.tried(*l.pending)
		if ctx.Err() == nil {
			l.opts.Log.Error(err, "recording the Locked condition; written on a later round")
		}
	}
}

// swapCondition writes the pending condition over condWas and, while
// another condition is found there that overHeld writes over, over that.
func (l *Locker) swapCondition(ctx context.Context) error {
	for swaps := 0; ; swaps++ {
		err := l.opts.Conditions.SetCondition(ctx, l.condWas, *l.pending)
		if !errors.Is(err, ErrLockStateMoved) || swaps == maxConditionSwaps {
			return err
		}
		held, rerr := l.opts.Conditions.Condition(ctx, v1alpha1.ConditionLocked)
		if rerr != nil {
			return rerr // condWas kept: the next write compares it again
		}
		if l.condWas = held; !l.overHeld(held) {
			return err
		}
	}
}

// maxConditionSwaps bounds the writes of one condition over others
// written meanwhile (each of an older head).
const maxConditionSwaps = 3

// maxTriedConditions bounds the conditions a locker remembers writing
// without an answer.
const maxTriedConditions = 4

// tried remembers c as written without an answer (it may have landed).
func (l *Locker) tried(c metav1.Condition) {
	if l.condTried = append(l.condTried, c); len(l.condTried) > maxTriedConditions {
		l.condTried = slices.Delete(l.condTried, 0, len(l.condTried)-maxTriedConditions)
	}
}

// overHeld reports whether the pending condition is written over held,
// which the source holds though this locker did not read or write it
// there: held is none (removed), or this locker's own write whose answer
// was lost, or about an older head than the pending one (an ancestor in
// the history: a leader before this one, paused past its lease, wrote
// it while this one's round ran), or about the same head when the
// pending outcome is final (it ends one saying the head is locked again,
// and says what another final one of that head says). A condition about
// a newer head, or one this locker's history does not hold (fetched
// after this locker's round, or left by a rewind), stands.
func (l *Locker) overHeld(held *metav1.Condition) bool {
	if held == nil || slices.ContainsFunc(l.condTried, func(c metav1.Condition) bool { return SameCondition(&c, held) }) {
		return true
	}
	short := conditionHead(held.Message)
	switch {
	case short == "":
		return false
	case short == l.pendingKey.head.Short():
		return !l.pendingKey.again
	}
	return l.hasAncestor(l.pendingKey.head, short)
}

// maxAncestorWalk bounds the commits hasAncestor reads.
const maxAncestorWalk = 1024

// hasAncestor reports whether one of head's ancestors (not head), a few
// hundred commits back at most, has the abbreviated name short.
func (l *Locker) hasAncestor(head gitsource.Hash, short string) bool {
	if l.opts.Repo == nil || head.IsZero() {
		return false
	}
	seen := map[gitsource.Hash]bool{head: true}
	queue := []gitsource.Hash{head}
	for len(queue) > 0 && len(seen) <= maxAncestorWalk {
		info, err := l.opts.Repo.Commit(queue[0])
		queue = queue[1:]
		if err != nil {
			continue
		}
		for _, p := range info.Parents {
			if p.Short() == short {
				return true
			}
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	return false
}

// heldMessage is what a condition held says, for the log.
func heldMessage(c *metav1.Condition) string {
	if c == nil {
		return ""
	}
	return c.Message
}

// readCondition reads the source's Locked condition, once and again
// after another writer changed it.
func (l *Locker) readCondition(ctx context.Context) error {
	if l.condRead {
		return nil
	}
	was, err := l.opts.Conditions.Condition(ctx, v1alpha1.ConditionLocked)
	if err != nil {
		return err
	}
	l.condRead, l.condWas = true, was
	return nil
}

func (l *Locker) lockHead(ctx context.Context) (LockResult, error) {
	var res LockResult
	if err := l.ensureRepo(ctx); err != nil {
		return res, err
	}
	fr, err := l.opts.Repo.Fetch(ctx)
	if err != nil {
		return res, fmt.Errorf("lock mode: fetch: %w", err)
	}
	res.Head = fr.Head
	if skip, err := l.leaves(ctx, fr.Head); err != nil || skip {
		res.Skipped = skip
		return res, err
	}
	// Decided before this round changes what the last one left.
	subject := l.subjectOf(fr.Head)
	policy := resolver.LockKeepGoing
	if l.opts.AllOrNothing {
		policy = resolver.LockAllOrNothing
	}
	wo := resolver.WorkspaceOptions{DriverLimits: l.opts.DriverLimits, Sandbox: l.opts.Sandbox, ConfigSandbox: l.opts.ConfigSandbox,
		DriversKeepGoing: policy == resolver.LockKeepGoing}
	if l.opts.FetchDriver != nil {
		wo.FetchDriver = l.opts.FetchDriver(ctx)
	}
	// A folder (--path) that holds no desired-state repository would lock
	// nothing and say so as if every deployment were locked: refused,
	// naming it, in the Locked condition and the lock commit's status.
	co := resolver.CommitOptions{Attempts: l.opts.MaxAttempts, History: l.opts.Repo, RequireRepository: true}
	if l.opts.Used != nil {
		if co.Used, err = l.opts.Used(ctx); err != nil {
			return res, fmt.Errorf("lock mode: the sequences the cluster ran: %w", err)
		}
	}
	if co.Reused, err = l.ranOther(ctx, fr.Head, co.Used); err != nil {
		return res, err
	}
	out, err := resolver.CommitLocksWith(ctx, l.opts.Repo, wo, resolver.LockRequest{Policy: policy}, co)
	if err != nil {
		// A configuration that does not resolve is retried only on the next
		// head: the same head would fail the same way. A driver source
		// that could not be fetched (the network, the credentials) or a
		// sandbox that could not start is tried again on the next round.
		var ce *resolver.ConfigError
		var de *resolver.DeploymentError
		var re *resolver.DeletionsRefusedError
		// A folder that holds no repository is one too: the same head
		// holds none the next round either.
		if !transient(err) && (errors.As(err, &ce) || errors.As(err, &de) || errors.As(err, &re) || errors.Is(err, resolver.ErrNotRepository)) {
			l.last, l.again = fr.Head, false
		}
		if d := strings.Trim(l.opts.Dir, "/"); d != "" && d != "." {
			// The view is the folder: its root is --path's.
			err = fmt.Errorf("--path %s: %w", d, err)
		}
		again := l.again || l.last != fr.Head
		l.decided(subject, res, err, again)
		l.failedAgain, l.landed = gitsource.Hash{}, gitsource.Hash{}
		if again {
			l.failedAgain = subject
		}
		return res, fmt.Errorf("lock mode: locking %s: %w", fr.Head.Short(), err)
	}
	if fr.Head == l.landed && !out.Committed {
		// The lock of the head that failed landed: decided as this lock.
		res.Commit, res.Locked = fr.Head, l.lockedSince(subject, fr.Head)
	}
	l.failedAgain, l.landed = gitsource.Hash{}, gitsource.Hash{}
	l.last = fr.Head
	res.Failed, res.BrokenDrivers, res.Warnings = out.Skipped, out.BrokenDrivers, out.Warnings
	for _, b := range out.BrokenDrivers {
		l.opts.Log.Error(b, "a driver version does not load; only the deployments whose choice of version it could change are left unlocked", "head", fr.Head.Short())
	}
	for _, w := range out.Warnings {
		l.opts.Log.Info("lock warning: "+w, "head", fr.Head.Short())
	}
	l.again = transient(out.Skipped)
	if out.Committed {
		res.Commit = out.Commit
		for _, c := range out.Changes {
			res.Locked = append(res.Locked, fmt.Sprintf("%s=%d", c.ID, c.Next.Sequence))
		}
	}
	l.decided(subject, res, nil, l.again)
	if out.Skipped != nil {
		l.opts.Log.Error(out.Skipped, "some deployments did not resolve; the others were locked", "head", fr.Head.Short(), "again", l.again)
	}
	if !out.Committed {
		return res, nil
	}
	// The lock commit is the new head: remembering it saves the next round
	// a resolve (it would make no commit anyway).
	l.last = out.Commit
	if l.made = append(l.made, out.Commit); len(l.made) > maxMadeLocks {
		l.made = slices.Delete(l.made, 0, len(l.made)-maxMadeLocks)
	}
	l.opts.Log.Info("locked", "head", fr.Head.Short(), "commit", out.Commit.Short(), "deployments", res.Locked, "attempts", out.Attempts)
	if l.opts.OnLocked != nil {
		l.opts.OnLocked(res)
	}
	return res, nil
}

// leaves reports whether a round leaves head as it is: handled already,
// and not to be locked again (the machine's trouble), or a lock commit
// that leaves nothing to lock.
func (l *Locker) leaves(ctx context.Context, head gitsource.Hash) (bool, error) {
	if head.IsZero() || head == l.last && !l.again {
		return true, nil
	}
	lockCommit, err := l.isLockCommit(head)
	if err != nil || !lockCommit || l.again {
		return false, err
	}
	pending, err := l.pendingUnder(ctx, head)
	if err != nil || pending {
		return false, err
	}
	if l.landedOver(head, l.failedAgain) {
		l.landed = head
		return false, nil
	}
	l.opts.Log.V(1).Info("head is a lock commit; nothing to lock", "head", head.Short())
	if err := l.lockedElsewhere(head); err != nil {
		return false, err
	}
	l.last = head
	return true, nil
}

// maxLandedWalk bounds the first-parent walk from a lock commit at the
// head back to the configuration head whose lock failed.
const maxLandedWalk = 64

// landedOver reports whether head, a lock commit, has config (not zero)
// among its first-parent ancestors, a few commits back: the lock that
// failed as far as this locker knew landed (its push's answer lost), or
// another locker locked that head meanwhile.
func (l *Locker) landedOver(head, config gitsource.Hash) bool {
	if config.IsZero() {
		return false
	}
	for h, i := head, 0; i < maxLandedWalk; i++ {
		info, err := l.opts.Repo.Commit(h)
		if err != nil || len(info.Parents) == 0 {
			return false
		}
		if h = info.Parents[0]; h == config {
			return true
		}
	}
	return false
}

// lockedSince names the deployments the lock commits from config to head
// lock, "cluster/env/name=sequence", by their Styrmin-Lock trailers.
func (l *Locker) lockedSince(config, head gitsource.Hash) []string {
	changes, err := l.opts.Repo.LockChanges(config, head, resolver.LocksDir)
	if err != nil {
		return nil
	}
	seq := map[string]int{}
	for _, c := range changes {
		maps.Copy(seq, c.Locks)
	}
	out := make([]string, 0, len(seq))
	for k, n := range seq {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(out)
	return out
}

// maxMadeLocks bounds the lock commits a locker remembers making: a head
// under an older one than these is long past what the condition says.
const maxMadeLocks = 16

// lockedElsewhere decides the Locked condition of head, a lock commit that
// leaves nothing to lock, when its lock is not this locker's: another
// locker (styrminctl lock --push, CI, another cluster's agent) locked
// configuration commits this one never decided for, and the condition,
// which names what an older head held back, no longer stands. Its lock
// (the walk's base: the newest lock commit under head but for retries)
// is this locker's when it is the last head handled, or was made over
// the configuration head this locker decided for last (two lockers of
// one head). Nothing is decided before this locker decided a head (a
// restart): the condition may be its own lock of this one.
func (l *Locker) lockedElsewhere(head gitsource.Hash) error {
	if l.subject.IsZero() {
		return nil
	}
	un, err := l.opts.Repo.UnlockedChanges(head, "", resolver.LocksDir, resolver.DefaultMaxUnlocked)
	if err != nil {
		return fmt.Errorf("lock mode: reading %s: %w", head.Short(), err)
	}
	lock := un.Base
	if lock.IsZero() || lock == l.last || lock == l.subject || slices.Contains(l.made, lock) {
		return nil
	}
	info, err := l.opts.Repo.Commit(lock)
	if err != nil {
		return fmt.Errorf("lock mode: reading %s: %w", lock.Short(), err)
	}
	if len(info.Parents) > 0 && info.Parents[0] == l.subject {
		return nil
	}
	c := metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonLockedElsewhere,
		Message: fmt.Sprintf("the head %s is locked by %s, a lock commit the lock mode did not make (styrminctl lock --push, CI, another cluster's agent): what it held back is in that lock's output",
			head.Short(), lock.Short())}
	l.pending, l.pendingKey = &c, decidedKey{head, string(c.Status), c.Reason, false}
	// The status of the configuration commits it locked is that locker's.
	l.subject = head
	return nil
}

// transient reports whether a lock's skipped deployments include one
// that failed for the machine or the network, not its configuration: a
// sandbox child that could not start, a driver source not fetched. The
// same head locks them once that passes; a configuration error would fail
// alike, and waits for the next head.
func transient(skipped error) bool {
	if skipped == nil {
		return false
	}
	if errors.Is(skipped, drivers.ErrSandboxStart) {
		return true
	}
	var ce *resolver.ConfigError
	return errors.As(skipped, &ce) && ce.Err != nil && !outcome.IsStalled(driversource.Classify(ce.Err))
}

// ensureRepo clones the repository in memory on first use.
func (l *Locker) ensureRepo(ctx context.Context) error {
	if l.opts.Repo != nil {
		return nil
	}
	l.authMu.Lock()
	auth := l.opts.Auth
	l.authMu.Unlock()
	repo, err := gitsource.Clone(ctx, l.opts.URL, "", gitsource.CloneOptions{Branch: l.opts.Branch, Auth: auth, NetworkTimeout: l.opts.NetworkTimeout})
	if err != nil {
		return fmt.Errorf("lock mode: cloning %s: %w", gitsource.PublicURL(l.opts.URL), err)
	}
	view, err := repo.InFolder(l.opts.Dir)
	if err != nil {
		return fmt.Errorf("lock mode: %w", err)
	}
	l.authMu.Lock()
	defer l.authMu.Unlock()
	if !auth.Equal(l.opts.Auth) {
		// Rotated while the clone ran.
		if err := repo.SetAuth(l.opts.Auth); err != nil {
			return fmt.Errorf("lock mode: %w", err)
		}
	}
	l.clone = repo
	l.opts.Repo = view
	return nil
}

// isLockCommit reports whether head is a lock commit: it changes files
// under locks/ and carries Styrmin-Lock trailers.
func (l *Locker) isLockCommit(head gitsource.Hash) (bool, error) {
	changes, err := l.opts.Repo.LockChanges(l.last, head, resolver.LocksDir)
	if err != nil && !l.last.IsZero() {
		changes, err = l.opts.Repo.LockChanges(gitsource.Hash{}, head, resolver.LocksDir)
	}
	if err != nil {
		return false, fmt.Errorf("lock mode: reading %s: %w", head.Short(), err)
	}
	for i := len(changes) - 1; i >= 0; i-- {
		if changes[i].Commit == head {
			return len(changes[i].Locks) > 0, nil
		}
	}
	return false, nil
}

// pendingUnder reports whether a lock commit at the head still leaves
// something to lock: configuration commits under it that no lock took
// (the head is a retry, which locks the same instances again and no
// configuration), or a lockfile behind a sequence the cluster ran (the
// branch was rewound to an older lock, whose instances the agent never
// applies again), or a lockfile at a number the history used for another
// instance too. Otherwise the head is skipped without a resolve.
func (l *Locker) pendingUnder(ctx context.Context, head gitsource.Hash) (bool, error) {
	un, err := l.opts.Repo.UnlockedChanges(head, "", resolver.LocksDir, resolver.DefaultMaxUnlocked)
	if errors.Is(err, gitsource.ErrTooManyUnlocked) {
		return true, nil // the lock says what to do about it
	}
	if err != nil {
		return false, fmt.Errorf("lock mode: reading %s: %w", head.Short(), err)
	}
	if !un.Base.IsZero() && un.Base != head && len(un.Commits) > 0 {
		return true, nil
	}
	var ran resolver.UsedSequences
	if l.opts.Used != nil {
		if ran, err = l.opts.Used(ctx); err != nil {
			return false, fmt.Errorf("lock mode: the sequences the cluster ran: %w", err)
		}
	}
	// A squash merge of a pull request whose lock took a number another
	// merged pull request locked too is a lock commit at the head, and its
	// lockfile is no instance the cluster can run: it is locked again.
	keys, err := l.opts.Repo.ReusedSequences(head, ".", resolver.LocksDir)
	if err != nil {
		return false, fmt.Errorf("lock mode: reading %s: %w", head.Short(), err)
	}
	reused := resolver.ReusedFromHistory(keys)
	if len(ran) == 0 && len(reused) == 0 {
		return false, nil
	}
	tree, err := l.opts.Repo.TreeAt(head, ".")
	if err != nil {
		return false, fmt.Errorf("lock mode: reading %s: %w", head.Short(), err)
	}
	locks, err := resolver.LoadLocks(tree)
	if err != nil {
		return true, nil // the lock reports it
	}
	other, err := l.ranOther(ctx, head, ran)
	if err != nil {
		return false, err
	}
	for id, in := range locks {
		if in.Sequence < ran[id] || reused.Reuses(id, in) || other.Reuses(id, in) {
			return true, nil
		}
	}
	return false, nil
}

// ranOther returns the deployments whose lockfile at head holds the
// sequence the cluster ran last (ran) for another instance than the
// cluster ran at it (RanDigests): a lock made after a rewind numbered
// after the branch's history only took the number again. The agent
// refuses it (SequenceUsed), and a lock past the cluster's number is the
// way out: without it, the configuration stayed unapplied until the next
// change.
func (l *Locker) ranOther(ctx context.Context, head gitsource.Hash, ran resolver.UsedSequences) (resolver.ReusedSequences, error) {
	if l.opts.RanDigests == nil || len(ran) == 0 {
		return nil, nil
	}
	digests, err := l.opts.RanDigests(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock mode: the instances the cluster ran: %w", err)
	}
	tree, err := l.opts.Repo.TreeAt(head, ".")
	if err != nil {
		return nil, fmt.Errorf("lock mode: reading %s: %w", head.Short(), err)
	}
	locks, err := resolver.LoadLocks(tree)
	if err != nil {
		return nil, nil //nolint:nilerr // the lock reports it
	}
	out := resolver.ReusedSequences{}
	for id, in := range locks {
		if d := digests[id]; d != "" && in.Sequence == ran[id] && in.Digest != d {
			out[id] = in.Sequence
		}
	}
	return out, nil
}

// NeedLeaderElection makes only the elected agent lock: two replicas
// would otherwise resolve and push the same head twice.
func (l *Locker) NeedLeaderElection() bool { return true }
