package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

func TestZZProfile(t *testing.T) {
	args := strings.Fields(os.Getenv("ZZ_ARGS"))
	if len(args) == 0 {
		t.Skip()
	}
	debug.SetGCPercent(400)
	f, _ := os.Create(os.Getenv("ZZ_PROF"))
	var d time.Duration
	for i := range 4 {
		if i == 1 {
			pprof.StartCPUProfile(f)
		}
		root := newRootCmd(io.Discard, os.Stderr)
		root.SetArgs(args)
		start := time.Now()
		if code := execute(context.Background(), root, os.Stderr); code != 0 {
			t.Fatal(code)
		}
		if i > 0 {
			d += time.Since(start)
		}
		exec.Command("git", "-C", "/tmp/fan/repo", "checkout", "--", "locks").Run()
	}
	pprof.StopCPUProfile()
	t.Logf("%v per run", d/3)
}
