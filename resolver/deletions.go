package resolver

import (
	"fmt"
	"strings"
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
	return fmt.Sprintf("lock refused: it deletes %d deployments (%s), more than the deletion threshold of %d; nothing was written. If that is intended, allow it explicitly: --allow-deletions %d",
		e.Deletions.Count, strings.Join(names, ", "), e.Deletions.Threshold, e.Deletions.Count)
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
