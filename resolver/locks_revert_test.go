package resolver

import (
	"testing"
)

// TestALockBehindAUsedSequenceIsLockedAgain pins nextInstances' rule for
// a lockfile a revert or a rewind brought back: unchanged content is left
// alone while its lock holds the highest sequence used, and locked again
// past that sequence when a higher one was used (the agent ran it and
// never applies the older one); the same for a tombstone brought back
// over a re-created deployment, and for a lock (or a tombstone) at a
// sequence the history used for another instance too (two merged pull
// requests locked it). In a step of a chain the head's lockfile decides:
// one a retry committed after the step is no revert.
func TestALockBehindAUsedSequenceIsLockedAgain(t *testing.T) {
	web := ID{Cluster: "local", Environment: "dev", Name: "web"}
	in := func(seq int64) *Instance {
		return &Instance{APIVersion: APIVersion, Kind: KindInstance, ID: web, Sequence: seq, Digest: "sha256:aa"}
	}
	tomb := &Instance{APIVersion: APIVersion, Kind: KindTombstone, ID: web, Sequence: 3, Digest: "sha256:dead"}
	for _, c := range []struct {
		name    string
		present bool
		current *Instance
		used    UsedSequences
		reused  ReusedSequences
		head    map[ID]int64 // the head's lockfiles, for a step of a chain
		want    int64        // the sequence locked; 0: nothing
		tomb    bool
	}{
		{"unchanged, nothing used past it", true, in(2), UsedSequences{web: 2}, nil, nil, 0, false},
		{"unchanged, no record of used sequences (a plan)", true, in(2), nil, nil, nil, 0, false},
		{"reverted: a higher sequence was used", true, in(1), UsedSequences{web: 2}, nil, nil, 3, false},
		{"a step of a chain behind a retry committed after it (the head's lock)", true, in(1), UsedSequences{web: 2}, nil, map[ID]int64{web: 2}, 0, false},
		{"a step of a chain of a reverted branch", true, in(1), UsedSequences{web: 2}, nil, map[ID]int64{web: 1}, 3, false},
		{"unchanged at a sequence used for two instances", true, in(2), UsedSequences{web: 2}, ReusedSequences{web: 2}, nil, 3, false},
		{"a tombstone, nothing used past it", false, tomb, UsedSequences{web: 3}, nil, nil, 0, false},
		{"a tombstone brought back over a re-creation", false, tomb, UsedSequences{web: 4}, nil, nil, 5, true},
		{"a tombstone at a sequence used for two instances", false, tomb, UsedSequences{web: 3}, ReusedSequences{web: 3}, nil, 4, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := &Result{Present: map[ID]bool{}}
			if c.present {
				res.Present[web] = true
				res.Resolved = []*Resolved{{Instance: in(0)}}
			}
			changes, err := nextInstances(res, map[ID]*Instance{web: c.current}, c.used, c.reused, c.head)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.want == 0 && len(changes) != 0:
				t.Fatalf("locked %s at %d; want nothing", changes[0].ID, changes[0].Next.Sequence)
			case c.want == 0:
			case len(changes) != 1:
				t.Fatalf("%d changes; want web at %d", len(changes), c.want)
			case changes[0].Next.Sequence != c.want || changes[0].Next.Tombstone() != c.tomb:
				t.Fatalf("web at %d (tombstone %v); want %d (tombstone %v)", changes[0].Next.Sequence, changes[0].Next.Tombstone(), c.want, c.tomb)
			}
		})
	}
}
