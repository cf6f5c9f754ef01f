package resolver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/resolver"
)

func TestRetryLocksTheSameInstanceWithTheNextSequence(t *testing.T) {
	a := resolver.ID{Cluster: "c", Environment: "e", Name: "a"}
	b := resolver.ID{Cluster: "c", Environment: "e", Name: "b"}
	gone := resolver.ID{Cluster: "c", Environment: "e", Name: "gone"}
	current := map[resolver.ID]*resolver.Instance{
		a:    {APIVersion: resolver.APIVersion, Kind: resolver.KindInstance, ID: a, Sequence: 4, Digest: "sha256:a", SourceCommit: "abc", AppVersion: "1.0.0"},
		b:    {APIVersion: resolver.APIVersion, Kind: resolver.KindInstance, ID: b, Sequence: 1, Digest: "sha256:b"},
		gone: {APIVersion: resolver.APIVersion, Kind: resolver.KindTombstone, ID: gone, Sequence: 7, Digest: "sha256:t"},
	}
	changes, err := resolver.RetryLocks(current, []resolver.ID{b, a, a})
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 2 || changes[0].ID != a || changes[1].ID != b {
		t.Fatalf("changes %v, want a then b, once each", changes)
	}
	c := changes[0]
	if c.Next.Sequence != 5 || c.Next.Digest != "sha256:a" || c.Next.SourceCommit != "abc" || c.Previous.Sequence != 4 || current[a].Sequence != 4 {
		t.Fatalf("retry of a: %+v (previous %d); want sequence 5, the same digest and source, the current lock untouched", c.Next, c.Previous.Sequence)
	}
	back, err := resolver.DecodeLock(c.Path(), c.Data)
	if err != nil || back.Sequence != 5 || back.Digest != "sha256:a" {
		t.Fatalf("the retry's lockfile decodes to %+v, %v", back, err)
	}
	ch := resolver.RetryChange(changes)
	if ch.Locks["c/e/a"] != 5 || ch.Locks["c/e/b"] != 2 || len(ch.Trailers) != 2 || ch.Trailers[0].Key != resolver.RetryTrailer || ch.Trailers[0].Value != "c/e/a" {
		t.Fatalf("retry change: locks %v trailers %v", ch.Locks, ch.Trailers)
	}

	for _, tc := range []struct {
		id   resolver.ID
		want string
	}{
		{resolver.ID{Cluster: "c", Environment: "e", Name: "never"}, "no lockfile (locks/c/e/never.lock.yaml)"},
		{gone, "it was deleted"},
	} {
		if _, err := resolver.RetryLocks(current, []resolver.ID{a, tc.id}); !errors.Is(err, resolver.ErrNothingToRetry) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.id.String()) {
			t.Errorf("retry %s: %v, want ErrNothingToRetry naming it and %q", tc.id, err, tc.want)
		}
	}
}

func TestUnchangedLeavesOutWhatIsLockedAnew(t *testing.T) {
	a := resolver.ID{Cluster: "c", Environment: "e", Name: "a"}
	b := resolver.ID{Cluster: "c", Environment: "e", Name: "b"}
	got := resolver.Unchanged([]resolver.ID{a, b}, []resolver.LockChange{{ID: b}})
	if len(got) != 1 || got[0] != a {
		t.Fatalf("Unchanged = %v, want [a]", got)
	}
}

func TestStillAtKeepsOnlyLocksThatDidNotMoveOn(t *testing.T) {
	id := func(n string) resolver.ID { return resolver.ID{Cluster: "c", Environment: "e", Name: n} }
	current := map[resolver.ID]*resolver.Instance{
		id("same"):    {Kind: resolver.KindInstance, ID: id("same"), Sequence: 3},
		id("moved"):   {Kind: resolver.KindInstance, ID: id("moved"), Sequence: 5},
		id("deleted"): {Kind: resolver.KindTombstone, ID: id("deleted"), Sequence: 4},
	}
	still, moved := resolver.StillAt(current, map[resolver.ID]int64{id("same"): 3, id("moved"): 4, id("deleted"): 3, id("unknown"): 1})
	if len(still) != 1 || still[0] != id("same") {
		t.Errorf("still %v, want [same]", still)
	}
	if len(moved) != 3 || moved[0] != id("deleted") || moved[1] != id("moved") || moved[2] != id("unknown") {
		t.Errorf("moved %v, want deleted, moved, unknown", moved)
	}
}
