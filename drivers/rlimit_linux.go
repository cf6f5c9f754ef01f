package drivers

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// limitAddressSpace caps the process's address space at what it maps now
// plus twice the memory limit: the Go runtime reserves address space ahead
// of use, so the cap leaves it room, and only an evaluation far over the
// limit (one the heap watchdog did not see in time) meets it, as a fatal
// out-of-memory the parent reports as the memory limit. The child also
// offers itself first to the kernel's out-of-memory killer, so that in a
// container whose limit is below the cap the child dies, not the agent.
func limitAddressSpace(limit int64) {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	var mapped uint64
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if pages, err := strconv.ParseUint(f[0], 10, 64); err == nil {
				mapped = pages * uint64(os.Getpagesize())
			}
		}
	}
	max := mapped + 2*uint64(limit) + 256<<20
	_ = syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: max, Max: max})
}
