package source_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/operator/source"
)

// TestALockerWhoseCloneFailsKeepsTryingAndNamesNoCredentials: a remote
// that does not answer when the agent starts must not stop the agent (a
// runnable's error stops the whole manager), and the URL the locker was
// given with a token in it must not reach its logs.
func TestALockerWhoseCloneFailsKeepsTryingAndNamesNoCredentials(t *testing.T) {
	const token = "ghp_lockModeTokenNeverLogged0123456789"
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{})
	l, err := source.NewLocker(source.LockModeOptions{
		// Port 1 on the loopback: refused at once.
		URL:      fmt.Sprintf("https://x-access-token:%s@127.0.0.1:1/acme/desired-state.git", token),
		Branch:   "main",
		Interval: 100 * time.Millisecond,
		Log:      log,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.Start(ctx); err != nil {
		t.Fatalf("Start returned %v: the agent would stop over a remote that does not answer", err)
	}
	mu.Lock()
	defer mu.Unlock()
	failures := 0
	for _, line := range lines {
		if strings.Contains(line, token) {
			t.Errorf("a log line holds the token: %s", line)
		}
		if strings.Contains(line, "no clone yet") {
			failures++
		}
	}
	if failures < 2 {
		t.Errorf("%d clone failures logged in 2 s at a 100 ms interval, want the clone tried again:\n%s", failures, strings.Join(lines, "\n"))
	}
}

// TestALockerWhoseFolderHoldsNoRepositorySaysSo: an agent in lock mode
// whose --path names a folder that holds no desired-state repository (a
// typo, a folder moved in a monorepo) locked nothing, and said every
// deployment was locked, for ever. Its lock now fails naming the folder,
// and pushes nothing.
func TestALockerWhoseFolderHoldsNoRepositorySaysSo(t *testing.T) {
	srv := gitserver.New(t)
	srv.Seed("desired", os.DirFS("../../examples"), "examples")
	head := srv.Head("desired", "main")
	l, err := source.NewLocker(source.LockModeOptions{URL: srv.RepoURL("desired"), Branch: "main", Dir: "deploy", Interval: time.Hour, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.LockHead(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--path deploy: ") || !strings.Contains(err.Error(), "not a desired-state repository") {
		t.Fatalf("a lock of a folder without a repository: %+v, %v; want an error naming the folder", res, err)
	}
	if got := srv.Head("desired", "main"); got != head {
		t.Fatalf("the branch moved to %s", got)
	}
	// Decided for this head, as a configuration that does not resolve:
	// not tried again (and logged as failed) every round until it moves.
	if res, err := l.LockHead(context.Background()); err != nil || !res.Skipped {
		t.Fatalf("the same head again: %+v, %v; want it skipped", res, err)
	}
}
