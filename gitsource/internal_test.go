package gitsource

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"
)

// TestNetworkContextDefaultsToDefaultNetworkTimeout: a NetworkTimeout of 0
// bounds an operation without deadline by DefaultNetworkTimeout, which
// leaves a large clone over a slow link room (at least 10 minutes: it
// bounds the whole clone, not idle time); a set NetworkTimeout is used as
// it is, and a deadline the caller's context has is kept.
func TestNetworkContextDefaultsToDefaultNetworkTimeout(t *testing.T) {
	if DefaultNetworkTimeout < 10*time.Minute {
		t.Errorf("DefaultNetworkTimeout = %s, want at least 10m: it bounds a whole clone", DefaultNetworkTimeout)
	}
	for _, tc := range []struct {
		timeout, want time.Duration
	}{
		{0, DefaultNetworkTimeout},
		{-time.Second, DefaultNetworkTimeout},
		{30 * time.Minute, 30 * time.Minute},
	} {
		start := time.Now()
		ctx, cancel := networkContext(context.Background(), tc.timeout)
		dl, ok := ctx.Deadline()
		cancel()
		if got := dl.Sub(start); !ok || got < tc.want-time.Second || got > tc.want+time.Second {
			t.Errorf("networkContext(%s): deadline in %s (set: %v), want %s", tc.timeout, got, ok, tc.want)
		}
	}
	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	want, _ := parent.Deadline()
	ctx, cancel2 := networkContext(parent, time.Second)
	defer cancel2()
	if dl, _ := ctx.Deadline(); !dl.Equal(want) {
		t.Errorf("networkContext with the caller's deadline: %s, want the caller's %s", dl, want)
	}
}

// TestWrittenByCommitLocksKnowsTheMessagesCommitLocksWrites: the messages
// FormatMessage writes (a generated summary, more than three locks, extra
// trailers, a retry's summary) are taken at their trailers' word; a
// squash's, an edited subject, a line added, a different committer are
// not.
func TestWrittenByCommitLocksKnowsTheMessagesCommitLocksWrites(t *testing.T) {
	locks := map[string]int{"c/e/a": 3, "c/e/b": 10, "c/f/a": 1, "d/e/z": 7}
	extra := []Trailer{{Key: "Styrmin-Retry", Value: "c/e/b"}, {Key: "Styrmin-Config-Commit", Value: "0123abcd"}}
	sig := object.Signature{Name: "styrmin", Email: "styrmin@localhost", When: time.Unix(1_700_000_000, 0)}
	commit := func(msg string) *object.Commit { return &object.Commit{Author: sig, Committer: sig, Message: msg} }
	generated, err := FormatMessage("", locks, extra)
	if err != nil {
		t.Fatal(err)
	}
	retry, err := FormatMessage("retry c/e/b=10, c/e/a=3, d/e/z=7, c/f/a=1", locks, nil)
	if err != nil {
		t.Fatal(err)
	}
	single, _ := FormatMessage("", map[string]int{"c/e/a": 3}, nil)
	for _, msg := range []string{generated, retry, single} {
		if !writtenByCommitLocks(commit(msg), locks0(msg)) {
			t.Errorf("not recognised as CommitLocks': %q", msg)
		}
	}
	rewritten := commit(single)
	rewritten.Committer.When = sig.When.Add(time.Hour)
	for name, c := range map[string]*object.Commit{
		"squash":            commit("Lock a and b (#12)\n\n* styrmin: lock c/e/b=10\n\nStyrmin-Lock: c/e/a=3\n"),
		"subject suffixed":  commit(strings.Replace(single, "\n", " (#12)\n", 1)),
		"summary not locks": commit(strings.Replace(single, "c/e/a=3\n\n", "c/e/a=2\n\n", 1)),
		"line added":        commit(strings.Replace(single, "\n\n", "\n\n* styrmin: lock c/e/b=10\n\n", 1)),
		"no final newline":  commit(strings.TrimSuffix(single, "\n")),
		"retry missing one": commit(strings.Replace(retry, ", c/f/a=1", "", 1)),
		"rewritten":         rewritten,
	} {
		if writtenByCommitLocks(c, locks0(c.Message)) {
			t.Errorf("%s: taken for CommitLocks': %q", name, c.Message)
		}
	}
}

func locks0(msg string) map[string]int {
	locks, _ := LockTrailers(msg)
	return locks
}
