//go:build unix

package gitsource

import (
	"os"
	"syscall"
)

// openCheckedOut opens a working tree's file for fromCheckout: never
// through a link at its name, never blocking on a pipe or a device.
func openCheckedOut(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}
