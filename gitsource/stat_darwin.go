//go:build darwin

package gitsource

import (
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// fillStat copies the stat data git keeps in an index entry (as git and
// go-git do), so git does not take the file for changed.
func fillStat(e *index.Entry, sys any) {
	if st, ok := sys.(*syscall.Stat_t); ok {
		e.CreatedAt = time.Unix(st.Ctimespec.Unix())
		e.Dev = uint32(st.Dev)
		e.Inode = uint32(st.Ino)
		e.GID = st.Gid
		e.UID = st.Uid
	}
}
