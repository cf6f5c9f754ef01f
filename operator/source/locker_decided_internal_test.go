package source

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// recorded keeps what a Locker wrote through its two sinks; fail makes
// the next write of each fail once (the API server or the host away).
type recorded struct {
	conditions []metav1.Condition
	statuses   []string // "sha state"
	fail       bool
	// refuse answers the posts of these commits (by their first four
	// hex digits) with the error; asked counts the posts it refused.
	refuse map[string]error
	asked  int
}

// Condition is the last condition written (any type: the locker writes
// one).
func (r *recorded) Condition(context.Context, string) (*metav1.Condition, error) {
	if r.fail {
		return nil, errors.New("the API server is away")
	}
	if len(r.conditions) == 0 {
		return nil, nil
	}
	c := r.conditions[len(r.conditions)-1]
	return &c, nil
}

// SetCondition writes whatever the source held.
func (r *recorded) SetCondition(_ context.Context, _ *metav1.Condition, c metav1.Condition) error {
	if r.fail {
		return errors.New("the API server is away")
	}
	r.conditions = append(r.conditions, c)
	return nil
}

func (r *recorded) Post(_ context.Context, sha string, s commitstatus.Status) error {
	if r.fail {
		return errors.New("the host is away")
	}
	if err := r.refuse[sha[:4]]; err != nil {
		r.asked++
		return err
	}
	r.statuses = append(r.statuses, sha[:4]+" "+string(s.State))
	return nil
}

var (
	_ ConditionSetter = (*recorded)(nil)
	_ StatusPoster    = (*recorded)(nil)
)

// round decides one lock's outcome and writes it, as LockHead does.
func (l *Locker) round(head gitsource.Hash, res LockResult, err error, again bool) {
	l.resume(context.Background())
	l.decided(head, res, err, again)
	l.writeCondition(context.Background())
	l.postStatus(context.Background())
	l.keepState(context.Background())
}

// idle is a round of LockHead that decides nothing (the head was handled,
// or is a lock commit that leaves nothing to lock).
func (l *Locker) idle() {
	l.resume(context.Background())
	l.writeCondition(context.Background())
	l.postStatus(context.Background())
	l.keepState(context.Background())
}

// queueOf is a LockState in memory (the StyrminSource's fields), which
// writes whatever it held;
// failRead and failWrite make its reads and writes fail (the API server
// away), writes counts those made.
type queueOf struct {
	kept                []v1alpha1.LockStatus
	again               *v1alpha1.LockAgain
	failRead, failWrite bool
	writes              int
}

func (q *queueOf) LockState(context.Context) ([]v1alpha1.LockStatus, *v1alpha1.LockAgain, error) {
	if q.failRead {
		return nil, nil, errors.New("the API server is away")
	}
	return slices.Clone(q.kept), q.again, nil
}

func (q *queueOf) SetLockAgain(_ context.Context, _, a *v1alpha1.LockAgain) error {
	if q.failWrite {
		return errors.New("the API server is away")
	}
	q.again, q.writes = a, q.writes+1
	return nil
}

func (q *queueOf) SetLockStatuses(_ context.Context, _, s []v1alpha1.LockStatus) error {
	if q.failWrite {
		return errors.New("the API server is away")
	}
	q.kept, q.writes = slices.Clone(s), q.writes+1
	return nil
}

var _ LockState = (*queueOf)(nil)

func (q *queueOf) commits() string {
	var out []string
	for _, k := range q.kept {
		out = append(out, k.Commit[:4]+" "+k.State)
	}
	return strings.Join(out, ",")
}

// TestALockStatusTheHostDidNotTakeIsPostedByTheNextAgent pins that the
// statuses the lock mode decided while the host was away (no answer, a
// rate limit's wait of up to an hour) outlive its process: they were kept
// in its memory only, and an agent restarted meanwhile, or a replica
// elected, never decided for those configuration commits again (the head
// is their lock commit, skipped), so a commit kept no lock status at all,
// or "locked again soon" (pending) for ever. They are now kept on the
// StyrminSource while the host has not taken them (written only then),
// and the next agent posts them first, oldest first; one that cannot read
// them yet writes nothing over them.
func TestALockStatusTheHostDidNotTakeIsPostedByTheNextAgent(t *testing.T) {
	sinks, q := &recorded{}, &queueOf{}
	opts := LockModeOptions{Conditions: sinks, Statuses: sinks, State: q, StatusContext: "styrmin/local/lock", Log: logr.Discard()}
	first, second, third := gitsource.Hash{0xa1, 0xa1}, gitsource.Hash{0xb2, 0xb2}, gitsource.Hash{0xc3, 0xc3}
	l := &Locker{opts: opts}
	l.round(first, LockResult{Failed: fmt.Errorf("local/dev/hub: %w", drivers.ErrSandboxStart)}, nil, true)
	if q.writes != 0 {
		t.Fatalf("a status the host took was recorded (%d writes: %s): nothing is written while the host takes them", q.writes, q.commits())
	}
	sinks.fail = true // the host away, then the agent stops
	l.round(first, LockResult{Locked: []string{"local/dev/hub=3"}, Commit: gitsource.Hash{0x10}}, nil, false)
	l.round(second, LockResult{Failed: errors.New("local/dev/web: parameter workers: must be at most 8")}, nil, false)
	if got, want := q.commits(), "a1a1 success,b2b2 failure"; got != want {
		t.Fatalf("the source keeps %q, want %q", got, want)
	}

	// The next agent cannot read them at first, and decides a head of
	// its own while the host is still away: nothing is written over them.
	next := &Locker{opts: opts}
	q.failRead = true
	next.round(third, LockResult{Locked: []string{"local/dev/api=2"}, Commit: gitsource.Hash{0x11}}, nil, false)
	if got, want := q.commits(), "a1a1 success,b2b2 failure"; got != want {
		t.Fatalf("an agent that could not read them wrote %q over %q", got, want)
	}
	q.failRead, sinks.fail = false, false
	next.statusResume = time.Time{} // the back-off from the host away is over
	next.idle()                     // the head is the lock commit: nothing decided
	if got, want := strings.Join(sinks.statuses, ","), "a1a1 pending,a1a1 success,b2b2 failure,c3c3 success"; got != want {
		t.Fatalf("statuses %q, want %q: those the agent before decided first", got, want)
	}
	if len(q.kept) != 0 {
		t.Fatalf("the source still keeps %q once the host took them", q.commits())
	}
	writes := q.writes
	next.idle()
	if q.writes != writes || len(sinks.statuses) != 4 {
		t.Errorf("a round with nothing new wrote the queue (%d writes, was %d) or posted again %v", q.writes, writes, sinks.statuses)
	}
}

// What the lock mode writes of a head locked again round after round: an
// outcome once while it stays the same (its message may differ by a port
// every round; the host keeps 1,000 statuses per commit), the final one
// always, even with the same status and reason as the retried one (it
// names another cause); a write that failed, and whose head's outcome
// then came back to what the source holds, is not made late; a lock finishing
// on the lock mode's own commit is its configuration head's.
func TestWhatALockedAgainHeadWritesAndWhen(t *testing.T) {
	sinks := &recorded{}
	l := &Locker{opts: LockModeOptions{Conditions: sinks, Statuses: sinks, StatusContext: "styrmin/local/lock", Log: logr.Discard()}}
	head := gitsource.Hash{0xa1, 0xa1}
	machine := func(port int) LockResult {
		return LockResult{Failed: fmt.Errorf("local/dev/hub: fetching its driver: dial 10.0.0.1:%d: %w", port, drivers.ErrSandboxStart)}
	}
	l.round(head, machine(40001), nil, true)
	l.round(head, machine(40002), nil, true)
	if len(sinks.conditions) != 1 || strings.Join(sinks.statuses, ",") != "a1a1 pending" {
		t.Fatalf("two rounds of the same trouble wrote %d conditions and statuses %v, want one of each", len(sinks.conditions), sinks.statuses)
	}
	// The head's final outcome: held back for its configuration now.
	final := LockResult{Failed: errors.New("local/dev/hub: parameter workers: must be at most 8")}
	l.round(head, final, nil, false)
	if n := len(sinks.conditions); n != 2 || sinks.conditions[1].Reason != v1alpha1.ReasonDeploymentsHeldBack ||
		!strings.Contains(sinks.conditions[1].Message, "must be at most 8") || strings.Contains(sinks.conditions[1].Message, "again") {
		t.Fatalf("the final outcome: %d conditions, last %+v; want it written, naming the parameter", n, sinks.conditions[n-1])
	}
	if strings.Join(sinks.statuses, ",") != "a1a1 pending,a1a1 failure" {
		t.Fatalf("statuses %v, want pending then failure", sinks.statuses)
	}

	// A second head in trouble (written), then in other trouble whose
	// write fails, then in the first again: what the source holds says
	// it, and the failed write is not made late.
	next := gitsource.Hash{0xb2, 0xb2}
	l.round(next, machine(40003), nil, true)
	written := len(sinks.conditions)
	sinks.fail = true
	l.round(next, LockResult{}, fmt.Errorf("pushing: %w", drivers.ErrSandboxStart), true)
	sinks.fail = false
	l.round(next, machine(40004), nil, true)
	if len(sinks.conditions) != written {
		t.Fatalf("a failed write of an outcome that came back to the one held was made late: %+v", sinks.conditions[len(sinks.conditions)-1])
	}
	if l.pending != nil {
		t.Fatalf("pending %+v, want none: the source holds the outcome", l.pending)
	}

	// subjectOf: the lock mode's own commit, locked again, is its
	// configuration head's lock finishing; any other head is its own.
	own := gitsource.Hash{0xc3}
	l.last, l.again, l.subject = own, true, next
	if got := l.subjectOf(own); got != next {
		t.Errorf("the own commit locked again decides for %s, want its configuration head %s", got.Short(), next.Short())
	}
	if got := l.subjectOf(head); got != head || l.subject != head {
		t.Errorf("a new head decides for %s (subject %s), want itself", got.Short(), l.subject.Short())
	}
}

// A head's final lock status decided while the host was away was dropped
// when the next head was decided before the host came back: only the
// newest head's status was kept to post, and the earlier configuration
// commit stayed "locked again soon" (pending) on the host for ever. Every
// head's last outcome not yet posted is now posted once the host answers
// (after the back-off from a host away), oldest first.
func TestALocksFinalStatusIsPostedWhenTheHostComesBackAfterANewerHead(t *testing.T) {
	sinks := &recorded{}
	t0 := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	clk := &statusClock{now: t0}
	l := &Locker{opts: LockModeOptions{Conditions: sinks, Statuses: sinks, StatusContext: "styrmin/local/lock", Log: logr.Discard(), Now: clk.Now}}
	first, second := gitsource.Hash{0xa1, 0xa1}, gitsource.Hash{0xb2, 0xb2}
	l.round(first, LockResult{Failed: fmt.Errorf("local/dev/hub: %w", drivers.ErrSandboxStart)}, nil, true)
	sinks.fail = true
	l.round(first, LockResult{Failed: errors.New("local/dev/hub: parameter workers: must be at most 8")}, nil, false)
	l.round(second, LockResult{Locked: []string{"local/dev/web=4"}, Commit: gitsource.Hash{0xc3}}, nil, false)
	sinks.fail = false
	clk.Set(t0.Add(commitstatus.MinOutageWait)) // the back-off from the host away is over
	l.postStatus(context.Background())
	if got, want := strings.Join(sinks.statuses, ","), "a1a1 pending,a1a1 failure,b2b2 success"; got != want {
		t.Fatalf("statuses %s, want %s: the first head's final status too", got, want)
	}
	l.postStatus(context.Background())
	if n := len(sinks.statuses); n != 3 {
		t.Fatalf("a round with nothing new posted again: %v", sinks.statuses)
	}
}

// TestALockStatusTheHostRefusesForGoodDoesNotHoldBackTheNewerHeads pins
// that a status the host will never take (422 for a commit it does not
// have, 404) is dropped, not asked again at the front of the queue: the
// statuses are posted oldest first, and each round stopped at the first
// refusal, so no newer head's status was posted until 32 more heads had
// pushed it out. A refusal that may pass (5xx, a rate limit, a bad token)
// still waits for a later round (a 5xx's after a back-off), the order
// kept.
func TestALockStatusTheHostRefusesForGoodDoesNotHoldBackTheNewerHeads(t *testing.T) {
	first, second, third := gitsource.Hash{0xa1, 0xa1}, gitsource.Hash{0xb2, 0xb2}, gitsource.Hash{0xd4, 0xd4}
	sinks := &recorded{refuse: map[string]error{"a1a1": &commitstatus.HTTPError{Code: http.StatusUnprocessableEntity, Message: "No commit found for SHA"}}}
	t0 := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	clk := &statusClock{now: t0}
	l := &Locker{opts: LockModeOptions{Conditions: sinks, Statuses: sinks, StatusContext: "styrmin/local/lock", Log: logr.Discard(), Now: clk.Now}}
	l.round(first, LockResult{Locked: []string{"local/dev/web=3"}, Commit: gitsource.Hash{0xc1}}, nil, false)
	l.round(second, LockResult{Locked: []string{"local/dev/web=4"}, Commit: gitsource.Hash{0xc3}}, nil, false)
	if got, want := strings.Join(sinks.statuses, ","), "b2b2 success"; got != want {
		t.Fatalf("statuses %q, want %q: the newer head's, past the one refused for good", got, want)
	}
	l.round(third, LockResult{Locked: []string{"local/dev/web=5"}, Commit: gitsource.Hash{0xc5}}, nil, false)
	if sinks.asked != 1 {
		t.Errorf("the refused status was asked %d times, want once", sinks.asked)
	}

	// One that may pass keeps its place.
	sinks.refuse["e5e5"] = &commitstatus.HTTPError{Code: http.StatusBadGateway, Message: "bad gateway"}
	l.round(gitsource.Hash{0xe5, 0xe5}, LockResult{Locked: []string{"local/dev/web=6"}, Commit: gitsource.Hash{0xc6}}, nil, false)
	l.round(gitsource.Hash{0xf6, 0xf6}, LockResult{Locked: []string{"local/dev/web=7"}, Commit: gitsource.Hash{0xc7}}, nil, false)
	delete(sinks.refuse, "e5e5")
	clk.Set(t0.Add(commitstatus.MinOutageWait)) // the back-off from the 502 is over
	l.postStatus(context.Background())
	if got, want := strings.Join(sinks.statuses, ","), "b2b2 success,d4d4 success,e5e5 success,f6f6 success"; got != want {
		t.Fatalf("statuses %q, want %q: a status that may pass is posted once it does, in order", got, want)
	}
}

// lockRepoOf answers lockedElsewhere's two questions: the newest lock
// under any head is base, and each commit has the parents given.
type lockRepoOf struct {
	LockRepo
	base    gitsource.Hash
	parents map[gitsource.Hash][]gitsource.Hash
}

func (r lockRepoOf) UnlockedChanges(gitsource.Hash, string, string, int) (gitsource.Unlocked, error) {
	return gitsource.Unlocked{Base: r.base}, nil
}

func (r lockRepoOf) Commit(h gitsource.Hash) (gitsource.CommitInfo, error) {
	return gitsource.CommitInfo{Hash: h, Parents: r.parents[h]}, nil
}

// TestALockThisLockerMadeOverItsOwnIsNotLockedElsewhere pins that a head
// whose lock commit this locker pushed keeps what the Locked condition
// says, whatever that lock's parent: its lock made again over its own
// (a sandbox that could not start), or moved by the compare-and-swap onto
// a newer configuration commit. Known only by its parent being the
// configuration head decided for, such a lock read as another locker's
// once a retry commit had moved the last head handled, and the
// condition's DeploymentsHeldBack turned Unknown, LockedElsewhere.
func TestALockThisLockerMadeOverItsOwnIsNotLockedElsewhere(t *testing.T) {
	config, newer := gitsource.Hash{0xc0}, gitsource.Hash{0xc1}
	first, again, retry := gitsource.Hash{0x10}, gitsource.Hash{0x11}, gitsource.Hash{0x12}
	for _, c := range []struct {
		name   string
		lock   gitsource.Hash
		parent gitsource.Hash
	}{
		{"a lock made again over its own", again, first},
		{"a lock moved onto a newer configuration commit", first, newer},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo := lockRepoOf{base: c.lock, parents: map[gitsource.Hash][]gitsource.Hash{c.lock: {c.parent}}}
			l := &Locker{opts: LockModeOptions{Repo: repo, Log: logr.Discard()}, subject: config, last: retry, made: []gitsource.Hash{first, again}}
			if err := l.lockedElsewhere(retry); err != nil {
				t.Fatal(err)
			}
			if l.pending != nil {
				t.Errorf("its own lock %s read as another locker's: %s %s", c.lock.Short(), l.pending.Reason, l.pending.Message)
			}
			// Not among the locks it made: another locker's.
			l.made = nil
			if err := l.lockedElsewhere(retry); err != nil {
				t.Fatal(err)
			}
			if l.pending == nil || l.pending.Reason != v1alpha1.ReasonLockedElsewhere {
				t.Errorf("a lock this locker did not make left the condition as it was: %+v", l.pending)
			}
		})
	}
}

// lockCommitRepo is a clone whose head is lock, a lock commit over
// configuration commit config that leaves nothing to lock.
type lockCommitRepo struct {
	LockRepo
	config, lock gitsource.Hash
}

func (r lockCommitRepo) LockChanges(_, to gitsource.Hash, _ string) ([]gitsource.LockChange, error) {
	if to != r.lock {
		return nil, nil
	}
	return []gitsource.LockChange{{Commit: r.lock, Path: "locks/local/dev/web.lock.yaml", Locks: map[string]int{"local/dev/web": 4}}}, nil
}

func (r lockCommitRepo) UnlockedChanges(gitsource.Hash, string, string, int) (gitsource.Unlocked, error) {
	return gitsource.Unlocked{Base: r.lock}, nil
}

func (r lockCommitRepo) ReusedSequences(gitsource.Hash, string, string) (map[string]int, error) {
	return nil, nil
}

// TestAHeadLeftForTheMachinesTroubleIsLockedAgainByTheNextAgent pins that
// a lock that left deployments of a configuration head unlocked for the
// machine's trouble (a sandbox that could not start, a driver source not
// fetched), after it committed the others, is locked again by the next
// agent (restarted, or a replica elected): only the stopped process knew
// to lock it again, and the next found at the head a lock commit leaving
// nothing to lock, skipped it, and those deployments waited for the next
// configuration commit while the head's status said "locked again soon"
// for ever. The head is kept on the StyrminSource while it is to be
// locked again (status.lockAgain), and dropped once it is locked whole.
func TestAHeadLeftForTheMachinesTroubleIsLockedAgainByTheNextAgent(t *testing.T) {
	config, lock := gitsource.Hash{0xc0, 0xc0}, gitsource.Hash{0x10, 0x10}
	repo := lockCommitRepo{config: config, lock: lock}
	sinks, q := &recorded{}, &queueOf{}
	opts := LockModeOptions{Repo: repo, Conditions: sinks, Statuses: sinks, State: q, StatusContext: "styrmin/local/lock", Log: logr.Discard()}
	// The lock of config committed web and left hub, whose sandbox could
	// not start: what lockHead leaves after that round.
	l := &Locker{opts: opts}
	l.resume(context.Background())
	l.subject, l.last, l.again = config, lock, true
	l.decided(config, LockResult{Locked: []string{"local/dev/web=4"}, Commit: lock, Failed: fmt.Errorf("local/dev/hub: %w", drivers.ErrSandboxStart)}, nil, true)
	l.postStatus(context.Background())
	l.keepState(context.Background())
	if q.again == nil || q.again.Commit != config.String() || q.again.Head != lock.String() {
		t.Fatalf("the source keeps %+v to lock again, want %s at %s", q.again, config.Short(), lock.Short())
	}

	// The agent stops; the next one's first round at the same head.
	next := &Locker{opts: opts}
	next.resume(context.Background())
	skip, err := next.leaves(context.Background(), lock)
	if err != nil {
		t.Fatal(err)
	}
	if skip {
		t.Fatalf("the next agent skips %s, a lock commit that left hub for the machine's trouble: hub waits for the next configuration commit", lock.Short())
	}
	if got := next.subjectOf(lock); got != config {
		t.Fatalf("the next agent's lock decides for %s, want the configuration head %s (its status pending until then)", got.Short(), config.Short())
	}
	// Locked whole now: nothing is left to lock again.
	next.last, next.again = lock, false
	next.decided(config, LockResult{Locked: []string{"local/dev/hub=7"}, Commit: gitsource.Hash{0x11}}, nil, false)
	next.postStatus(context.Background())
	next.keepState(context.Background())
	if q.again != nil {
		t.Fatalf("the source still keeps %+v to lock again once the head was locked whole", q.again)
	}
	if got, want := strings.Join(sinks.statuses, ","), "c0c0 pending,c0c0 success"; got != want {
		t.Errorf("statuses %q, want %q", got, want)
	}

	// An agent before that left nothing to lock again: the head is skipped.
	last := &Locker{opts: opts}
	last.resume(context.Background())
	if skip, err := last.leaves(context.Background(), lock); err != nil || !skip {
		t.Errorf("a lock commit that leaves nothing to lock: skipped %v, %v; want skipped", skip, err)
	}
}

// TestALockModeWithoutAStatusTokenDropsTheStatusesAnAgentBeforeKept pins
// what an agent whose lock mode posts no statuses (its token withdrawn)
// does with those an agent before kept for the host: it removes them.
// Kept, they waited for a token given months later, and were posted then:
// "locked again soon" on a commit long settled.
func TestALockModeWithoutAStatusTokenDropsTheStatusesAnAgentBeforeKept(t *testing.T) {
	sinks := &recorded{}
	q := &queueOf{kept: []v1alpha1.LockStatus{{Commit: gitsource.Hash{0xa1, 0xa1}.String(), State: "pending", Description: "locked again soon"}}}
	l := &Locker{opts: LockModeOptions{Conditions: sinks, State: q, StatusContext: "styrmin/local/lock", Log: logr.Discard()}}
	l.round(gitsource.Hash{0xb2, 0xb2}, LockResult{Locked: []string{"local/dev/api=2"}, Commit: gitsource.Hash{0x11}}, nil, false)
	if len(q.kept) != 0 {
		t.Fatalf("the source still keeps %q for a host this agent posts nothing to", q.commits())
	}
	writes := q.writes
	l.idle()
	if q.writes != writes {
		t.Errorf("a round with nothing kept wrote the queue again (%d writes, was %d)", q.writes, writes)
	}
}
