//go:build !linux

package atomicfile

import (
	"errors"
	"os"
)

// exchange is not offered here: every write renames.
func exchange(a, b string) error { return errors.ErrUnsupported }

// reopen is never reached: without an exchange there is no spare.
func reopen(path string) (*os.File, error) { return nil, errors.ErrUnsupported }

// soleLink does not matter without an exchange.
func soleLink(os.FileInfo) bool { return false }
