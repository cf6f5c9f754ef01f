package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// procStat returns the fields of /proc/<pid>/stat after the command name:
// state is field 0, session id field 3.
func procStat(pid int) ([][]byte, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	return bytes.Fields(b[i+1:]), true
}

func isZombie(pid int) bool {
	f, ok := procStat(pid)
	return ok && len(f) > 0 && string(f[0]) == "Z"
}

// alive reports whether pid runs (a zombie does not count).
func alive(pid int) bool {
	_, ok := procStat(pid)
	return ok && !isZombie(pid)
}

// sessionMembers returns the live processes whose session id is sid.
func sessionMembers(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, ok := procStat(pid)
		if !ok || len(f) < 4 || string(f[0]) == "Z" {
			continue
		}
		if s, err := strconv.Atoi(string(f[3])); err == nil && s == sid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killSession SIGKILLs every process of session sid and waits for them to go.
func killSession(sid int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := sessionMembers(sid)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of session %d still run after SIGKILL", left, sid)
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
