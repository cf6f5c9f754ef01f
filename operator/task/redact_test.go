package task

import (
	"strings"
	"testing"
)

func TestBoundOutputKeepsTheTailAndSaysItWasCut(t *testing.T) {
	if got := boundOutput("short", 64); got != "short" {
		t.Errorf("short output changed: %q", got)
	}
	long := strings.Repeat("a", 100) + "THE END"
	got := boundOutput(long, 64)
	if len(got) > 64 || !strings.HasPrefix(got, "[truncated: the last 64 of 107 bytes]") || !strings.HasSuffix(got, "THE END") {
		t.Errorf("boundOutput = %q (%d bytes), want at most 64 bytes, a marker and the tail", got, len(got))
	}
}
