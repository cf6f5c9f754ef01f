package operator_test

import (
	"os"
	"testing"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

// TestMain serves as the driver sandbox's child when a test's Sandbox
// starts this test binary (drivers.SelfSandbox).
func TestMain(m *testing.M) {
	if drivers.IsSandboxChild() {
		os.Exit(drivers.ServeSandbox(os.Stdin, os.Stdout, os.Stderr, resolver.SandboxFuncs()))
	}
	os.Exit(m.Run())
}
