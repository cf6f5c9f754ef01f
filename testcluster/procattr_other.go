//go:build unix && !linux

package testcluster

import "syscall"

// sysProcAttr puts a component in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
