package drivers

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// selfBuildID is the Go build ID of the code this process runs: read
// through /proc/self/exe, which is the running executable even when its
// path now names another (an upgrade while it runs).
func selfBuildID() (string, error) {
	return goBuildID("/proc/self/exe")
}

// ownFolder checks that fi is a folder owned by this process's user that
// no one else may write to.
func ownFolder(fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return errors.New("is not a folder")
	case !ok || int(st.Uid) != os.Geteuid():
		return errors.New("is not owned by this process's user")
	case fi.Mode().Perm()&0o022 != 0:
		return errors.New("may be written to by other users (" + fi.Mode().String() + ")")
	}
	return nil
}

// noFollow makes an open refuse a symbolic link at the name.
const noFollow = syscall.O_NOFOLLOW

// ownFile checks that fi is a regular file owned by this process's user
// that no one else may write to: a kept result decides what a lock writes.
func ownFile(fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return errors.New("is not a regular file")
	case !ok || int(st.Uid) != os.Geteuid():
		return errors.New("is not owned by this process's user")
	case fi.Mode().Perm()&0o022 != 0:
		return errors.New("may be written to by other users (" + fi.Mode().String() + ")")
	}
	return nil
}
