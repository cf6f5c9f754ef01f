package resolver

import (
	"os"
	"testing"

	"github.com/styrmin/styrmin/drivers"
)

// TestMain serves as the driver sandbox's child when a test's Sandbox
// starts this test binary.
func TestMain(m *testing.M) {
	if drivers.IsSandboxChild() {
		os.Exit(drivers.ServeSandbox(os.Stdin, os.Stdout, os.Stderr, SandboxFuncs()))
	}
	os.Exit(m.Run())
}
