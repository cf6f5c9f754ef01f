package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestImageNeedsAVersionAndAFixedTimeNotTheClock(t *testing.T) {
	for _, c := range []struct {
		args  []string
		epoch string
	}{
		{[]string{"--version=v0.1.0"}, ""},
		{nil, "1796138609"},
	} {
		err := run(context.Background(), c.args, c.epoch, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "must not depend on the clock") {
			t.Errorf("run(%q, SOURCE_DATE_EPOCH=%q) = %v, want --version and --created asked for", c.args, c.epoch, err)
		}
	}
	if err := run(context.Background(), []string{"--version=v0.1.0", "--created=yesterday"}, "", io.Discard, io.Discard); err == nil {
		t.Error("a creation time that is not a number of seconds was accepted")
	}
	if err := run(context.Background(), []string{"--version=v0.1.0", "--platforms=linux"}, "1796138609", io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "needs an OS and an architecture") {
		t.Errorf("a platform without an architecture: %v, want it refused", err)
	}
}
