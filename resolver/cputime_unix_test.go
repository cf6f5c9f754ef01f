//go:build unix

package resolver

import "syscall"

// cpuTime returns the CPU time (user+system, in microseconds) this
// process used so far: on a shared machine it varies less than wall time.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	tv := func(t syscall.Timeval) int64 { return int64(t.Sec)*1e6 + int64(t.Usec) }
	return tv(ru.Utime) + tv(ru.Stime)
}
