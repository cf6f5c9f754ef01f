//go:build !linux

package drivers

import (
	"errors"
	"os"
)

// newPhaseFile fails outside Linux: the child writes its phase to its
// standard error instead.
func newPhaseFile() (*os.File, error) {
	return nil, errors.New("drivers: sandbox: no in-memory file outside Linux")
}

// phaseFromEnv is nil outside Linux: the child writes its phases to its
// standard error.
func phaseFromEnv() *os.File { return nil }
