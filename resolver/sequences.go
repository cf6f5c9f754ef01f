package resolver

// UsedSequences holds, per deployment, the highest sequence the branch's
// history has ever used (from the Styrmin-Lock trailers of its lock
// commits, and the lockfiles of commits without them). A new sequence is the next after both this and the current
// lockfile's, so a lockfile deleted by hand, or restored to an older
// content, never makes a number be used twice.
type UsedSequences map[ID]int64

// UsedFromTrailers turns the deployment keys of lock trailers and
// lockfiles (as gitsource.Repo.LockedSequences returns them) into
// UsedSequences; keys
// that name no deployment, and numbers outside 1..MaxSequence-1, are
// ignored: any commit message can carry a trailer, and no lock ever
// wrote such a number (one at MaxSequence would leave no next one, and
// stop every lock of the deployment and the commit with it).
func UsedFromTrailers(m map[string]int) UsedSequences {
	out := make(UsedSequences, len(m))
	for k, v := range m {
		if id, err := ParseID(k); err == nil && v >= 1 && int64(v) < MaxSequence {
			out[id] = int64(v)
		}
	}
	return out
}

// next is the sequence of a new instance of id after prev (nil: none).
func (u UsedSequences) next(id ID, prev *Instance) int64 {
	n := u[id]
	if prev != nil && prev.Sequence > n {
		n = prev.Sequence
	}
	return n + 1
}

// record notes that id now uses seq.
func (u UsedSequences) record(id ID, seq int64) {
	if seq > u[id] {
		u[id] = seq
	}
}

// ReusedSequences holds, per deployment, the highest sequence the branch's
// history used for more than one instance (from
// gitsource.Repo.ReusedSequences): two pull requests branched from one
// commit each locked the next number for a change of their own, and both
// were merged. The agent runs the instance it met first at that number and
// refuses the other ("does not follow"), so a lockfile at that number is
// no instance the cluster can be brought to: it is locked again past it,
// as a lockfile behind a used sequence is.
type ReusedSequences map[ID]int64

// ReusedFromHistory turns the deployment keys gitsource.Repo.ReusedSequences
// returns into ReusedSequences, ignoring what UsedFromTrailers ignores.
func ReusedFromHistory(m map[string]int) ReusedSequences {
	return ReusedSequences(UsedFromTrailers(m))
}

// Reuses reports whether lock, the lockfile of id, holds a sequence the
// history used for another instance too.
func (r ReusedSequences) Reuses(id ID, lock *Instance) bool {
	s, ok := r[id]
	return ok && lock != nil && lock.Sequence == s
}
