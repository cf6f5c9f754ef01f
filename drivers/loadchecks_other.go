//go:build !linux

package drivers

import (
	"errors"
	"io/fs"
)

// selfBuildID is not read outside Linux: load checks are Linux's only.
func selfBuildID() (string, error) {
	return "", errors.ErrUnsupported
}

// ownFolder is not checked outside Linux (selfBuildID fails first).
func ownFolder(fs.FileInfo) error { return errors.ErrUnsupported }

// ownFile is not checked outside Linux (selfBuildID fails first).
func ownFile(fs.FileInfo) error { return errors.ErrUnsupported }

// noFollow is not asked for outside Linux, where nothing is kept.
const noFollow = 0
