// Package checksfolder gives a test binary's styrminctl commands a folder
// of driver checks of their own (STYRMIN_DRIVER_CHECKS), not the user's:
// what one test run's children checked must neither reach the next run
// nor the user's cache folder. It leaves XDG_CACHE_HOME alone, where the
// go command keeps its build cache. Tests only.
package checksfolder

import (
	"fmt"
	"os"
	"testing"
)

// Run runs m's tests with STYRMIN_DRIVER_CHECKS naming a new folder,
// which it removes after, and returns their exit code.
func Run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "styrmin-test-driver-checks")
	if err != nil {
		fmt.Fprintln(os.Stderr, "checksfolder:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Setenv("STYRMIN_DRIVER_CHECKS", dir); err != nil {
		fmt.Fprintln(os.Stderr, "checksfolder:", err)
		return 1
	}
	return m.Run()
}
