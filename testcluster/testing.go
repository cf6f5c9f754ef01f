package testcluster

import (
	"context"
	"os"
	"testing"
	"time"
)

// StartTimeout bounds StartT: building nothing, it covers a loaded machine.
const StartTimeout = 2 * time.Minute

// StartT starts a cluster for a test or benchmark and stops it in
// t.Cleanup. It fails the test at once if the cluster does not start (for
// example when the binaries were not built: run `make testcluster`). When the
// test fails, the component logs are kept and their folder is printed.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		failed := t.Failed()
		err := c.shutdown(failed)
		if failed {
			t.Logf("testcluster: component logs in %s", c.LogDir)
		}
		if err != nil {
			t.Errorf("stopping test cluster: %v", err)
		}
	})
	return c
}

// RequireRealNode skips t when this machine cannot run the real node
// (RealNodeAvailable says why), or fails it when the environment variable
// CI is set: CI installs the container runtime, so a skip there would hide
// a broken setup.
func RequireRealNode(t testing.TB) {
	t.Helper()
	err := RealNodeAvailable("")
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set, so the real node must run: %v", err)
	}
	t.Skipf("skipped: %v", err)
}
