package source

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// The Locked condition says in one line what the last lock of a head did:
// everything locked, some deployments held back (named, with why and the
// driver folders that do not load), or nothing locked; and whether the
// same head is locked again without a new commit.
func TestTheLockedConditionSaysWhatTheLastLockHeldBack(t *testing.T) {
	head := gitsource.Hash{0xab, 0xcd}
	commit := gitsource.Hash{0x12, 0x34}
	broken := []*drivers.BrokenDriverError{{Name: "graphhub", Version: "3.0.0", Err: errors.New("expected '}'")}}
	for _, tc := range []struct {
		name   string
		res    LockResult
		err    error
		again  bool
		status metav1.ConditionStatus
		reason string
		msg    []string
	}{
		{"all locked", LockResult{Locked: []string{"local/dev/web=2", "local/dev/hub=3"}, Commit: commit},
			nil, false, metav1.ConditionTrue, v1alpha1.ReasonLocked, []string{"every deployment locked at HEAD", "2 deployments locked in COMMIT"}},
		{"nothing to lock", LockResult{}, nil, false, metav1.ConditionTrue, v1alpha1.ReasonLocked, []string{"no lock needed"}},
		{"a broken folder that held no one back", LockResult{Locked: []string{"local/dev/web=2"}, Commit: commit, BrokenDrivers: broken},
			nil, false, metav1.ConditionTrue, v1alpha1.ReasonLocked, []string{"1 deployment locked", "driver folders that do not load: drivers/graphhub/3.0.0"}},
		{"held back", LockResult{Locked: []string{"local/dev/web=2"}, Commit: commit, BrokenDrivers: broken,
			Failed: fmt.Errorf("local/dev/hub: %w", broken[0])},
			nil, false, metav1.ConditionFalse, v1alpha1.ReasonDeploymentsHeldBack, []string{"held back: local/dev/hub: driver graphhub@3.0.0 does not load", "drivers/graphhub/3.0.0"}},
		{"held back for the machine", LockResult{Failed: fmt.Errorf("local/dev/hub: %w", drivers.ErrSandboxStart)},
			nil, true, metav1.ConditionFalse, v1alpha1.ReasonDeploymentsHeldBack, []string{"no lock needed; held back: local/dev/hub", "locked again on the next round"}},
		{"locked with a warning", LockResult{Locked: []string{"local/dev/web=2"}, Commit: commit,
			Warnings: []string{"clusters local and other give environment dev the domain example.com (clusters/local/cluster.cue, clusters/other/cluster.cue)"}},
			nil, false, metav1.ConditionTrue, v1alpha1.ReasonLocked, []string{"1 deployment locked", "warning: clusters local and other give environment dev the domain example.com"}},
		{"nothing locked", LockResult{}, errors.New("drivers/webapp/1.0.0: does not load; local/dev/web runs it"),
			false, metav1.ConditionFalse, v1alpha1.ReasonLockFailed, []string{"nothing locked at HEAD: drivers/webapp/1.0.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := lockCondition(head, tc.res, tc.err, tc.again)
			if c.Type != v1alpha1.ConditionLocked || c.Status != tc.status || c.Reason != tc.reason {
				t.Fatalf("%s %s %s, want Locked %s %s", c.Type, c.Status, c.Reason, tc.status, tc.reason)
			}
			for _, m := range tc.msg {
				m = strings.NewReplacer("HEAD", head.Short(), "COMMIT", commit.Short()).Replace(m)
				if !strings.Contains(c.Message, m) {
					t.Errorf("message %q does not say %q", c.Message, m)
				}
			}
			if strings.Contains(c.Message, "lock mode: locking") {
				t.Errorf("message %q repeats the log's prefix", c.Message)
			}
			if !tc.again && strings.Contains(c.Message, "again") {
				t.Errorf("message %q says the head is locked again", c.Message)
			}
		})
	}
	joined := LockResult{Failed: errors.Join(errors.New("local/dev/hub: driver graphhub@3.0.0 does not load"), errors.New("local/dev/api: parameter replicas: must be at most 10"))}
	if c := lockCondition(head, joined, nil, false); strings.Contains(c.Message, "\n") || !strings.Contains(c.Message, "does not load; local/dev/api") {
		t.Errorf("the message of two deployments held back, %q, is not one line naming both", c.Message)
	}
	many := LockResult{Failed: errors.New(strings.Repeat("local/dev/app: a parameter the driver refuses; ", 500))}
	if c := lockCondition(head, many, nil, false); len(c.Message) > maxMessage+8 {
		t.Errorf("a message of %d bytes, want at most about %d", len(c.Message), maxMessage)
	}
}

// The syncer, writing after a conflict on a copy read again, keeps that
// copy's Locked condition (the lock mode's) and puts its own others.
func TestASyncAfterAConflictKeepsTheLockModesCondition(t *testing.T) {
	own := []metav1.Condition{
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSynced},
		{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonLocked, Message: "older"},
	}
	fresh := []metav1.Condition{
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonFetchFailed},
		{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDeploymentsHeldBack, Message: "newer"},
	}
	got := keepLockerConditions(own, fresh)
	if r := apimeta.FindStatusCondition(got, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v, want the sync's own", r)
	}
	if l := apimeta.FindStatusCondition(got, v1alpha1.ConditionLocked); l == nil || l.Message != "newer" {
		t.Errorf("Locked %+v, want the fresh copy's", l)
	}
	if got := keepLockerConditions(own, nil); apimeta.FindStatusCondition(got, v1alpha1.ConditionLocked) != nil {
		t.Errorf("a Locked condition the fresh copy does not hold was put back: %+v", got)
	}
	if apimeta.FindStatusCondition(own, v1alpha1.ConditionLocked).Message != "older" {
		t.Error("the sync's own conditions were changed in place")
	}
}

// The commit status of a lock, on the configuration commit pushed:
// success when everything is locked, failure leading with what is held
// back (the host keeps 140 characters), pending while the same head is
// locked again; on one line.
func TestALocksCommitStatusLeadsWithWhatItHeldBack(t *testing.T) {
	commit := gitsource.Hash{0x12, 0x34}
	for _, tc := range []struct {
		name  string
		res   LockResult
		err   error
		again bool
		state commitstatus.State
		lead  string
	}{
		{"all locked", LockResult{Locked: []string{"local/dev/web=2", "local/dev/hub=3"}, Commit: commit}, nil, false,
			commitstatus.Success, "2 deployments locked in " + commit.Short()},
		{"nothing to lock", LockResult{}, nil, false, commitstatus.Success, "no lock needed"},
		{"locked with warnings", LockResult{Locked: []string{"local/dev/web=2"}, Commit: commit, Warnings: []string{"a", "b"}}, nil, false,
			commitstatus.Success, "1 deployment locked in " + commit.Short() + "; 2 warning(s) on the StyrminSource's Locked condition"},
		{"held back", LockResult{Locked: []string{"local/dev/web=2"}, Commit: commit, Failed: errors.New("local/dev/hub: driver graphhub@3.0.0 does not load\nlocal/dev/api: parameter replicas: must be at most 10")},
			nil, false, commitstatus.Failure, "held back: local/dev/hub: driver graphhub@3.0.0 does not load local/dev/api: "},
		{"nothing locked", LockResult{}, errors.New("drivers/webapp/1.0.0 does not load"), false,
			commitstatus.Failure, "nothing locked: drivers/webapp/1.0.0 does not load"},
		{"the machine's trouble", LockResult{Failed: fmt.Errorf("local/dev/hub: %w", drivers.ErrSandboxStart)}, nil, true,
			commitstatus.Pending, "locked again soon; held back: local/dev/hub"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := lockStatus(tc.res, tc.err, tc.again)
			if s.State != tc.state || !strings.HasPrefix(s.Description, tc.lead) {
				t.Fatalf("%s %q, want %s leading with %q", s.State, s.Description, tc.state, tc.lead)
			}
			if strings.ContainsAny(s.Description, "\n\t") {
				t.Errorf("description %q is not one line", s.Description)
			}
		})
	}
}
