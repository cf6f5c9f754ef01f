package testcluster

import "syscall"

// sysProcAttr puts a component in its own process group and kills it if the
// process that started it dies without stopping it (a test binary killed on
// timeout, a crashed supervisor).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
