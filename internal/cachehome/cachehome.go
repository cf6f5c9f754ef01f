// Package cachehome gives a test binary's commands a cache folder of their
// own, not the user's: what styrminctl keeps there (the driver checks)
// must neither leak from one test run into the next nor into the user's
// folder. Tests only.
package cachehome

import (
	"fmt"
	"os"
	"testing"
)

// Run runs m's tests with XDG_CACHE_HOME set to a new folder, which it
// removes after, and returns their exit code.
func Run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "styrmin-test-cache")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cachehome:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Setenv("XDG_CACHE_HOME", dir); err != nil {
		fmt.Fprintln(os.Stderr, "cachehome:", err)
		return 1
	}
	return m.Run()
}
