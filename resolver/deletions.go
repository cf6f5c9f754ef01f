package resolver

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/styrmin/styrmin/gitsource"
)

// DefaultDeletionThreshold is how many deployments one change may delete
// without an explicit allowance when styrmin.cue sets no
// deletionThreshold.
const DefaultDeletionThreshold = 1

// AllowDeletionsTrailer records, on a lock commit, the allowance that let
// it delete more deployments than the threshold.
const AllowDeletionsTrailer = "Styrmin-Allow-Deletions"

// Deletions is the deletion rule applied to one change: how many
// deployments it deletes, the threshold, the allowance, and whether it is
// refused (more than both).
type Deletions struct {
	Count, Threshold, Allowed int
	Refused                   bool
}

// DeletionRule applies the deletion rule, the one every path uses (plan,
// lock, lock --commit and --push, lock mode): a change deleting more
// deployments than the threshold (override when set, else the
// repository's deletionThreshold, else DefaultDeletionThreshold) and
// more than allowed is refused.
func DeletionRule(settings RepoSettings, override *int, allowed, count int) Deletions {
	threshold := DefaultDeletionThreshold
	if settings.DeletionThreshold != nil {
		threshold = *settings.DeletionThreshold
	}
	if override != nil {
		threshold = *override
	}
	return Deletions{Count: count, Threshold: threshold, Allowed: allowed, Refused: count > threshold && count > allowed}
}

// Deleted lists the deployments changes delete: new tombstones. An
// environment's ingress controller is not counted: it is tombstoned only
// once no application of its environment uses its class after the lock
// (ingressStillUsed keeps it otherwise, removing ingress: too), and goes
// after those that moved off it (orderIngress), so nothing loses its
// class. The cluster's shared controller is counted: removing ingress:
// leaves the applications' class without a controller.
func Deleted(changes []LockChange) []ID {
	var out []ID
	for _, c := range changes {
		if c.Next.Internal != "" && c.ID.Environment != ClusterEnvironment {
			continue
		}
		if c.Next.Tombstone() && (c.Previous == nil || !c.Previous.Tombstone()) {
			out = append(out, c.ID)
		}
	}
	return out
}

// DeletionsRefusedError is a lock refused by the deletion rule: nothing
// was written.
type DeletionsRefusedError struct {
	Deletions Deletions
	IDs       []ID
}

func (e *DeletionsRefusedError) Error() string {
	names := make([]string, len(e.IDs))
	for i, id := range e.IDs {
		names[i] = id.String()
	}
	// Both ways to allow it are named: lock mode takes no flag, only the
	// trailer on a configuration commit it locks.
	return fmt.Sprintf("lock refused: it deletes %d deployments (%s), more than the deletion threshold of %d; nothing was written. If that is intended, allow it explicitly: --allow-deletions %d, or, for a committed lock (--commit, --push, the agent's lock mode), the trailer \"%s: %d\" on a configuration commit it locks",
		e.Deletions.Count, strings.Join(names, ", "), e.Deletions.Threshold, e.Deletions.Count, AllowDeletionsTrailer, e.Deletions.Count)
}

// AllowanceTrailerError is a lock the deletion rule refused while a
// configuration commit it locks carries a Styrmin-Allow-Deletions
// trailer that is no number: most likely the allowance its author meant
// to give. It names the commit, the trailer and the value, and unwraps
// to the *DeletionsRefusedError (nothing was written either way).
type AllowanceTrailerError struct {
	// Commit is the configuration commit; Value the trailer's value as
	// written.
	Commit  gitsource.Hash
	Value   string
	Refused *DeletionsRefusedError
}

func (e *AllowanceTrailerError) Error() string {
	// The commit is likely pushed, its message fixed for good: the way
	// out the refusal names (a new commit with the trailer, or the flag)
	// is the one that works.
	return fmt.Sprintf("commit %s: trailer %s: %q: expected a whole number ≥ 0, so it allows no deletion; %v",
		e.Commit.Short(), AllowDeletionsTrailer, e.Value, e.Refused)
}

func (e *AllowanceTrailerError) Unwrap() error { return e.Refused }

// parseAllowance reads the value of a Styrmin-Allow-Deletions trailer:
// a whole number ≥ 0, in decimal digits only (strconv.Atoi alone would
// take "+2" and "-1").
func parseAllowance(v string) (int, bool) {
	if v == "" || strings.Trim(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

// checkDeletions applies the deletion rule to a lock's changes.
func checkDeletions(settings RepoSettings, changes []LockChange, allowed int) (Deletions, error) {
	ids := Deleted(changes)
	d := DeletionRule(settings, nil, allowed, len(ids))
	if d.Refused {
		return d, &DeletionsRefusedError{Deletions: d, IDs: ids}
	}
	return d, nil
}
