package resolver_test

import (
	"testing"

	"github.com/styrmin/styrmin/resolver"
)

func TestDeletionRuleRefusesMoreThanTheThresholdAndTheAllowance(t *testing.T) {
	two, zero := 2, 0
	for _, tc := range []struct {
		name      string
		settings  resolver.RepoSettings
		override  *int
		allowed   int
		count     int
		threshold int
		refused   bool
	}{
		{"one deletion, the default threshold", resolver.RepoSettings{}, nil, 0, 1, 1, false},
		{"two deletions, the default threshold", resolver.RepoSettings{}, nil, 0, 2, 1, true},
		{"two deletions allowed", resolver.RepoSettings{}, nil, 2, 2, 1, false},
		{"an allowance below the count does not do", resolver.RepoSettings{}, nil, 1, 2, 1, true},
		{"the repository's threshold", resolver.RepoSettings{DeletionThreshold: &two}, nil, 0, 2, 2, false},
		{"an override wins", resolver.RepoSettings{DeletionThreshold: &two}, &zero, 0, 1, 0, true},
		{"nothing deleted", resolver.RepoSettings{DeletionThreshold: &zero}, nil, 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := resolver.DeletionRule(tc.settings, tc.override, tc.allowed, tc.count)
			if d.Threshold != tc.threshold || d.Refused != tc.refused || d.Count != tc.count {
				t.Errorf("DeletionRule = %+v, want threshold %d refused %v", d, tc.threshold, tc.refused)
			}
		})
	}
}

func TestDeletedCountsOnlyNewTombstones(t *testing.T) {
	id := func(n string) resolver.ID { return resolver.ID{Cluster: "c", Environment: "e", Name: n} }
	live := &resolver.Instance{Kind: resolver.KindInstance}
	tomb := &resolver.Instance{Kind: resolver.KindTombstone}
	got := resolver.Deleted([]resolver.LockChange{
		{ID: id("gone"), Previous: live, Next: tomb},
		{ID: id("again"), Previous: tomb, Next: tomb},
		{ID: id("new"), Next: live},
		{ID: id("back"), Previous: tomb, Next: live},
	})
	if len(got) != 1 || got[0] != id("gone") {
		t.Fatalf("Deleted = %v, want only gone", got)
	}
}
