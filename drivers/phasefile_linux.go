package drivers

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// newPhaseFile is the file a sandbox child writes its phase to: in
// memory, so that it needs no writable folder (the agent's container
// has none).
func newPhaseFile() (*os.File, error) {
	fd, err := unix.MemfdCreate("styrmin-driver-phase", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "styrmin-driver-phase"), nil
}

// phaseFromEnv is the child's phase file, when its parent gave it one.
func phaseFromEnv() *os.File {
	if os.Getenv(sandboxPhaseEnv) != strconv.Itoa(phaseFD) {
		return nil
	}
	unix.CloseOnExec(phaseFD) // not the child's own children's
	_ = os.Unsetenv(sandboxPhaseEnv)
	return os.NewFile(phaseFD, "styrmin-driver-phase")
}
