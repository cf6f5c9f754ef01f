package testcluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// processesMentioning returns the pids of the processes whose command line
// contains marker, in increasing order. It reads /proc; where there is none
// (not Linux) it finds nothing.
func processesMentioning(marker string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(cmdline, []byte(marker)) && !isZombie(pid) {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids
}

// isZombie reports whether pid has exited and waits for its parent to reap it.
func isZombie(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// killLeftovers SIGKILLs every process whose command line mentions marker
// and waits briefly for them to go. A clean stop finds none; this is the
// guarantee that a stopped cluster leaves no process behind.
func killLeftovers(marker string) error {
	pids := processesMentioning(marker)
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processesMentioning(marker)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still running after SIGKILL", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
