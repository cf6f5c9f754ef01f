package source

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// heldCondition is a source holding one Locked condition, written by
// compare-and-swap as SourceConditions does.
type heldCondition struct {
	held *metav1.Condition
}

func (h *heldCondition) Condition(context.Context, string) (*metav1.Condition, error) {
	return h.held, nil
}

func (h *heldCondition) SetCondition(_ context.Context, was *metav1.Condition, c metav1.Condition) error {
	if !SameCondition(h.held, was) {
		return fmt.Errorf("status condition Locked: %w", ErrLockStateMoved)
	}
	h.held = &c
	return nil
}

// TestALockedConditionWrittenSinceIsWrittenOverOnlyWhenAboutAnOlderHead
// pins how the lock mode decides, its condition's compare-and-swap
// refused, whether the condition held is written over: by the head each
// is about, not by which was written first. One of an older head (a
// deposed leader's, landed while this locker's round ran), this locker's
// own write whose answer was lost, a removed one, and one of the same
// head saying it is locked again are written over; one of a newer head
// or of a head this locker's history does not hold stands, and one of
// the same head stands over an outcome that says it is locked again.
func TestALockedConditionWrittenSinceIsWrittenOverOnlyWhenAboutAnOlderHead(t *testing.T) {
	older, lock, ours, newer := gitsource.Hash{0xa1}, gitsource.Hash{0xb2}, gitsource.Hash{0xc3}, gitsource.Hash{0xd4}
	repo := lockRepoOf{parents: map[gitsource.Hash][]gitsource.Hash{newer: {ours}, ours: {lock}, lock: {older}}}
	read := lockCondition(gitsource.Hash{0x99}, LockResult{}, nil, false) // what the locker read before its round
	ownLost := lockCondition(ours, LockResult{}, errors.New("push failed"), true)
	for _, c := range []struct {
		name  string
		held  *metav1.Condition
		tried []metav1.Condition
		again bool
		want  bool // ours written
	}{
		{"an older head's", ptr(lockCondition(older, LockResult{}, nil, false)), nil, false, true},
		{"an older lock commit's LockedElsewhere", ptr(elsewhere(lock)), nil, false, true},
		{"removed", nil, nil, false, true},
		{"this locker's own whose answer was lost", ptr(ownLost), []metav1.Condition{ownLost}, true, true},
		{"the same head's, locked again, under a final outcome", ptr(lockCondition(ours, LockResult{}, errors.New("push failed"), true)), nil, false, true},
		{"the same head's, final, under one locked again", ptr(lockCondition(ours, LockResult{}, nil, false)), nil, true, false},
		{"a newer head's", ptr(lockCondition(newer, LockResult{}, nil, false)), nil, false, false},
		{"a head this locker's history does not hold", ptr(lockCondition(gitsource.Hash{0xee}, LockResult{}, nil, false)), nil, false, false},
		{"one naming no head", &metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonLocked, Message: "locked"}, nil, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := &heldCondition{held: c.held}
			l := &Locker{opts: LockModeOptions{Repo: repo, Conditions: src, Log: logr.Discard()}, condRead: true, condWas: &read, condTried: c.tried}
			var err error
			if c.again {
				err = fmt.Errorf("local/dev/hub: %w", drivers.ErrSandboxStart)
			}
			l.decided(ours, LockResult{}, err, c.again)
			mine := *l.pending
			l.writeCondition(context.Background())
			if got := SameCondition(src.held, &mine); got != c.want {
				t.Errorf("the source holds %+v; want this lock's written over %+v: %v", src.held, c.held, c.want)
			}
			if l.pending != nil {
				t.Errorf("the outcome is still pending: %+v", l.pending)
			}
		})
	}
}

// TestEveryLockedConditionNamesItsHeadWhereTheLockModeReadsIt pins that
// the message of every Locked condition the lock mode writes leads with
// the head it is about, where conditionHead finds it (overHeld decides
// by it).
func TestEveryLockedConditionNamesItsHeadWhereTheLockModeReadsIt(t *testing.T) {
	head := gitsource.Hash{0x5e, 0xed}
	for name, c := range map[string]metav1.Condition{
		"locked":           lockCondition(head, LockResult{Locked: []string{"local/dev/web=2"}, Commit: gitsource.Hash{1}}, nil, false),
		"held back":        lockCondition(head, LockResult{Failed: errors.New("local/dev/hub: bad")}, nil, true),
		"failed":           lockCondition(head, LockResult{}, errors.New("--path apps: no repository"), false),
		"locked elsewhere": elsewhere(head),
	} {
		if got := conditionHead(c.Message); got != head.Short() {
			t.Errorf("%s: %q is about %q, want %s", name, c.Message, got, head.Short())
		}
	}
}

// elsewhere is lockedElsewhere's condition of head.
func elsewhere(head gitsource.Hash) metav1.Condition {
	l := &Locker{opts: LockModeOptions{Repo: lockRepoOf{base: gitsource.Hash{0x77}}, Log: logr.Discard()}, subject: gitsource.Hash{0x66}}
	if err := l.lockedElsewhere(head); err != nil || l.pending == nil {
		panic(fmt.Sprintf("no LockedElsewhere condition: %v", err))
	}
	return *l.pending
}

func ptr[T any](v T) *T { return &v }
