//go:build unix

package planner

import "syscall"

// cpuTime returns the CPU time (user+system, in microseconds) used so far
// by this process and, separately, by its finished child processes: on a
// shared machine it varies less than wall time.
func cpuTime() (self, children int64) {
	var ru syscall.Rusage
	tv := func(t syscall.Timeval) int64 { return int64(t.Sec)*1e6 + int64(t.Usec) }
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = tv(ru.Utime) + tv(ru.Stime)
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		children = tv(ru.Utime) + tv(ru.Stime)
	}
	return self, children
}
