package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// StatusPoster posts a commit status on a commit of the git host.
// *commitstatus.Client implements it.
type StatusPoster interface {
	Post(ctx context.Context, sha string, s commitstatus.Status) error
}

var _ StatusPoster = (*commitstatus.Client)(nil)

// ConditionSetter records one condition of the StyrminSource, over what
// its writer last read or wrote there only.
type ConditionSetter interface {
	// Condition reads the source's condition of type conditionType (nil:
	// none).
	Condition(ctx context.Context, conditionType string) (*metav1.Condition, error)
	// SetCondition writes c when the source's condition of c's type is
	// still was (nil: none), else returns an error wrapping
	// ErrLockStateMoved and writes nothing.
	SetCondition(ctx context.Context, was *metav1.Condition, c metav1.Condition) error
}

// SourceConditions sets conditions on the StyrminSource Source, each
// from a copy read from Reader (the API server: the lock mode writes
// seldom, and a cache behind the syncer's writes would only conflict).
// The syncer writes the source's other conditions; a condition it does
// not own it keeps across its conflicts (keepLockerConditions).
type SourceConditions struct {
	Client client.Client
	Reader client.Reader
	Source types.NamespacedName
}

var _ ConditionSetter = (*SourceConditions)(nil)

// Condition reads the source's condition of type conditionType.
func (s *SourceConditions) Condition(ctx context.Context, conditionType string) (*metav1.Condition, error) {
	var src v1alpha1.StyrminSource
	if err := s.Reader.Get(ctx, s.Source, &src); err != nil {
		return nil, err
	}
	return apimeta.FindStatusCondition(src.Status.Conditions, conditionType), nil
}

// SetCondition writes c unless the source holds it already (status,
// reason and message), when the source's condition of its type is still
// was, else returns ErrLockStateMoved: an update of the copy compared,
// read again on a conflict. A blind write let a leader deposed mid-round
// (paused past its lease) write its older lock's condition over the one
// the next leader wrote of a newer head. A StyrminSource not made yet
// (the syncer makes it) is an error, for the caller to try again.
func (s *SourceConditions) SetCondition(ctx context.Context, was *metav1.Condition, c metav1.Condition) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var src v1alpha1.StyrminSource
		if err := s.Reader.Get(ctx, s.Source, &src); err != nil {
			return err
		}
		if !SameCondition(apimeta.FindStatusCondition(src.Status.Conditions, c.Type), was) {
			return fmt.Errorf("status condition %s of StyrminSource %s: %w", c.Type, s.Source, ErrLockStateMoved)
		}
		c.ObservedGeneration = src.Generation
		if !apimeta.SetStatusCondition(&src.Status.Conditions, c) {
			return nil
		}
		return s.Client.Status().Update(ctx, &src)
	})
}

// SameCondition reports whether a and b (nil: none) say the same: their
// status, reason and message. The generation they were written at, and
// when their status last changed, are not what a writer decided.
func SameCondition(a, b *metav1.Condition) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

var _ LockState = (*SourceConditions)(nil)

// LockState reads what the StyrminSource keeps of the lock mode's
// (status.lockStatuses and status.lockAgain).
func (s *SourceConditions) LockState(ctx context.Context) ([]v1alpha1.LockStatus, *v1alpha1.LockAgain, error) {
	var src v1alpha1.StyrminSource
	if err := s.Reader.Get(ctx, s.Source, &src); err != nil {
		return nil, nil, err
	}
	return src.Status.LockStatuses, src.Status.LockAgain, nil
}

// ErrLockStateMoved is returned by SetLockStatuses and SetLockAgain when
// the StyrminSource no longer holds what the writer last read or wrote
// there: another agent's lock mode wrote it since (a leader before this
// one, paused past its lease and finishing its round, or the next), or
// the syncer of an agent without lock mode removed it. Nothing is written
// over it: the writer reads it again.
var ErrLockStateMoved = errors.New("another writer changed it since it was last read")

// SetLockStatuses replaces the lock statuses the StyrminSource keeps with
// statuses when it still holds was (what the caller last read or wrote
// there; none and nil alike), else returns ErrLockStateMoved: a merge
// patch of that field alone, made on the resourceVersion of the copy it
// compared, read again on a conflict. A blind patch let a leader deposed
// mid-round write its queue over the one the next leader kept, whose
// statuses were then never posted. The syncer's writes of the status
// carry the field (an update on an older copy conflicts, and its fields
// are put on a copy read again).
func (s *SourceConditions) SetLockStatuses(ctx context.Context, was, statuses []v1alpha1.LockStatus) error {
	var list any = statuses
	if len(statuses) == 0 {
		list = nil // removed
	}
	holds := func(src *v1alpha1.StyrminSource) bool {
		return slices.Equal(src.Status.LockStatuses, was) || len(src.Status.LockStatuses)+len(was) == 0
	}
	if err := s.swapStatus(ctx, "lockStatuses", holds, list); err != nil {
		return fmt.Errorf("recording the lock statuses not posted yet on StyrminSource %s: %w", s.Source, err)
	}
	return nil
}

// SetLockAgain replaces the head the lock mode locks again (nil: none)
// when the StyrminSource still holds was, as SetLockStatuses.
func (s *SourceConditions) SetLockAgain(ctx context.Context, was, again *v1alpha1.LockAgain) error {
	var v any = again
	if again == nil {
		v = nil // removed
	}
	holds := func(src *v1alpha1.StyrminSource) bool {
		got := src.Status.LockAgain
		return got == nil && was == nil || got != nil && was != nil && *got == *was
	}
	if err := s.swapStatus(ctx, "lockAgain", holds, v); err != nil {
		return fmt.Errorf("recording the head the lock mode locks again on StyrminSource %s: %w", s.Source, err)
	}
	return nil
}

// swapStatus sets one field of the StyrminSource's status (nil: removes
// it) by a merge patch, when holds accepts the copy read from the API
// server, on that copy's resourceVersion: a write between the read and
// the patch conflicts, and is read again.
func (s *SourceConditions) swapStatus(ctx context.Context, field string, holds func(*v1alpha1.StyrminSource) bool, value any) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var src v1alpha1.StyrminSource
		if err := s.Reader.Get(ctx, s.Source, &src); err != nil {
			return err
		}
		if !holds(&src) {
			return fmt.Errorf("status.%s: %w", field, ErrLockStateMoved)
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": src.ResourceVersion},
			"status":   map[string]any{field: value},
		})
		if err != nil {
			return err
		}
		return s.Client.Status().Patch(ctx, &src, client.RawPatch(types.MergePatchType, patch))
	})
}

// keepLockerConditions is the syncer's conditions own on a copy of the
// StyrminSource read again after a conflict, with that copy's Locked
// condition: the lock mode writes it, and the syncer's older copy would
// put back what it held before.
func keepLockerConditions(own, fresh []metav1.Condition) []metav1.Condition {
	out := append([]metav1.Condition(nil), own...)
	apimeta.RemoveStatusCondition(&out, v1alpha1.ConditionLocked)
	if c := apimeta.FindStatusCondition(fresh, v1alpha1.ConditionLocked); c != nil {
		out = append(out, *c)
	}
	return out
}

// lockCondition is the Locked condition of one lock of head: True when
// every deployment of the head is locked (naming driver folders that do
// not load but held no deployment back), False naming what is held back
// and why, or that nothing was locked. again says the same head is
// locked again on the next round (the machine's trouble, not the
// configuration's). err is the lock's own, before LockHead names the head
// in it.
func lockCondition(head gitsource.Hash, res LockResult, err error, again bool) metav1.Condition {
	var b strings.Builder
	c := metav1.Condition{Type: v1alpha1.ConditionLocked}
	switch {
	case err != nil:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonLockFailed
		fmt.Fprintf(&b, "nothing locked at %s: %v", head.Short(), err)
	case res.Failed != nil:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonDeploymentsHeldBack
		fmt.Fprintf(&b, "at %s %s; held back: %v", head.Short(), lockedCount(res), res.Failed)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonLocked
		fmt.Fprintf(&b, "every deployment locked at %s (%s)", head.Short(), lockedCount(res))
	}
	if err == nil && len(res.BrokenDrivers) > 0 {
		folders := make([]string, len(res.BrokenDrivers))
		for i, d := range res.BrokenDrivers {
			folders[i] = "drivers/" + d.Name + "/" + d.Version
		}
		fmt.Fprintf(&b, "; driver folders that do not load: %s", strings.Join(folders, ", "))
	}
	if again {
		b.WriteString("; locked again on the next round")
	}
	// Last: the message is bounded, and many warnings must not cut what
	// the lock did.
	if err == nil && len(res.Warnings) > 0 {
		fmt.Fprintf(&b, "; warning: %s", strings.Join(res.Warnings, "; warning: "))
	}
	// One line: errors joined are one a line, and status commands print
	// the message under the source's own line.
	c.Message = boundMessage(strings.Join(strings.Split(strings.TrimSpace(b.String()), "\n"), "; "))
	return c
}

// conditionHeadPattern finds the head a Locked condition is about in
// its message, as lockCondition and lockedElsewhere lead with it.
var conditionHeadPattern = regexp.MustCompile(`^(?:nothing locked at|at|every deployment locked at|the head) ([0-9a-f]{12})\b`)

// conditionHead is the abbreviated name (gitsource.Hash.Short) of the
// head the Locked condition message msg is about, "" when it names none.
func conditionHead(msg string) string {
	m := conditionHeadPattern.FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	return m[1]
}

// lockStatus is the commit status of one lock of head, posted on head
// (the configuration commit people pushed): success when every
// deployment is locked, failure naming what was held back, or that
// nothing was; pending when the same head is locked again on the next
// round (the machine's trouble: the lock is not decided yet). The
// description leads with what is held back: the host keeps 140
// characters.
func lockStatus(res LockResult, err error, again bool) commitstatus.Status {
	var s commitstatus.Status
	switch {
	case err != nil:
		s.State, s.Description = commitstatus.Failure, fmt.Sprintf("nothing locked: %v", err)
	case res.Failed != nil:
		s.State, s.Description = commitstatus.Failure, fmt.Sprintf("held back: %v; %s", res.Failed, lockedCount(res))
	default:
		s.State, s.Description = commitstatus.Success, lockedCount(res)
	}
	if n := len(res.Warnings); err == nil && n > 0 {
		// The host keeps 140 characters: the warnings are on the source.
		s.Description += fmt.Sprintf("; %d warning(s) on the StyrminSource's Locked condition", n)
	}
	if again {
		s.State, s.Description = commitstatus.Pending, "locked again soon; "+s.Description
	}
	s.Description = strings.Join(strings.Fields(s.Description), " ")
	return s
}

// lockedCount says how many deployments res locked, and in which commit.
func lockedCount(res LockResult) string {
	switch n := len(res.Locked); {
	case n == 0:
		return "no lock needed"
	case n == 1:
		return fmt.Sprintf("1 deployment locked in %s", res.Commit.Short())
	default:
		return fmt.Sprintf("%d deployments locked in %s", n, res.Commit.Short())
	}
}
