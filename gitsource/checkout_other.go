//go:build !unix

package gitsource

import (
	"errors"
	"os"
)

// openCheckedOut declines where links and pipes cannot be refused at
// open: files are read from the object store.
func openCheckedOut(string) (*os.File, error) {
	return nil, errors.ErrUnsupported
}
