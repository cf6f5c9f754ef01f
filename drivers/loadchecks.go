package drivers

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// loadChecks remembers, in a folder, the driver loads a Sandbox's children
// finished within their limits, so that the next process loading the same
// folder under the same limits with the same executables loads it
// in-process at once. A sandboxed load is a child's evaluation followed by
// the same evaluation in-process (load); the child only says the work is
// bounded, and evaluation is deterministic, so its answer holds for as
// long as nothing it depended on changes: the folder's files, the options
// the load was asked with (kube version, API versions, limits) and the
// code of both processes (their Go build IDs). A command-line lock runs
// the same drivers again and again, and the children's start and load were
// an eighth of a 1,000-deployment lock's time.
//
// Only loads that succeeded are remembered: a driver over a limit is sent
// to a child every time. Each check is an empty file named by the digest
// of what decided it; an entry not used for checksKeep is removed by a
// later process.
type loadChecks struct {
	dir string
	// code is the build IDs of this executable and the sandbox's.
	code string
}

// checksKeep is how long a check no load used is kept; checksTouch is how
// stale its time may get before a use renews it (one system call less per
// load most of the time); checksTrim is how often a process looks for
// checks to remove.
const (
	checksKeep  = 30 * 24 * time.Hour
	checksTouch = time.Hour
	checksTrim  = 24 * time.Hour
	// checksTrimmed is the file whose time says when checks were last
	// trimmed.
	checksTrimmed = "trimmed"
)

// KeepChecks makes the sandbox remember in dir the driver loads its
// children finished within their limits, for later processes (see
// loadChecks). Call it before the sandbox is used. It fails, and nothing
// is remembered, when dir cannot be made, is writable by other users (a
// check written there by someone else would let a driver skip the child),
// or the executables carry no Go build ID.
func (s *Sandbox) KeepChecks(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("drivers: load checks: %w", err)
	}
	mine, err := goBuildID(self)
	if err != nil {
		return fmt.Errorf("drivers: load checks: %w", err)
	}
	theirs := mine
	if s.Path != self {
		if theirs, err = goBuildID(s.Path); err != nil {
			return fmt.Errorf("drivers: load checks: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("drivers: load checks: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("drivers: load checks: %w", err)
	}
	if !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("drivers: load checks: %s is not a folder only its owner may write to (%s)", dir, fi.Mode())
	}
	s.checks = &loadChecks{dir: dir, code: mine + "\x00" + theirs}
	go s.checks.trim(time.Now())
	return nil
}

// key names the check of a load request of folder f.
func (c *loadChecks) key(req *sandboxRequest, f *folder) string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("styrmin driver load check 1")
	field(c.code)
	field(req.Op)
	field(req.Source)
	field(f.digest())
	field(req.KubeVersion)
	field(fmt.Sprint(len(req.APIVersions)))
	for _, v := range req.APIVersions {
		field(v)
	}
	l := req.Limits
	field(fmt.Sprint(int64(l.Timeout), l.Memory, l.RenderedBytes, l.ChartBytes))
	return hex.EncodeToString(h.Sum(nil))
}

// has reports whether the load was checked, renewing the check's time.
func (c *loadChecks) has(key string) bool {
	if c == nil {
		return false
	}
	p := filepath.Join(c.dir, key)
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	if now := time.Now(); now.Sub(fi.ModTime()) > checksTouch {
		_ = os.Chtimes(p, now, now)
	}
	return true
}

// add records the load as checked. A check that cannot be written is
// left out: the next process asks a child again.
func (c *loadChecks) add(key string) {
	if c == nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(c.dir, key), os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		_ = f.Close()
	}
}

// trim removes the checks not used for checksKeep, at most once every
// checksTrim (a busy folder is not listed by every process).
func (c *loadChecks) trim(now time.Time) {
	marker := filepath.Join(c.dir, checksTrimmed)
	if fi, err := os.Stat(marker); err == nil && now.Sub(fi.ModTime()) < checksTrim {
		return
	}
	if f, err := os.OpenFile(marker, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
		_ = f.Close()
		_ = os.Chtimes(marker, now, now)
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() == checksTrimmed || !e.Type().IsRegular() {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > checksKeep {
			_ = os.Remove(filepath.Join(c.dir, e.Name()))
		}
	}
}

// errNoBuildID is an executable without a Go build ID note.
var errNoBuildID = errors.New("no Go build ID")

// goBuildID reads the Go build ID an ELF executable carries (the
// .note.go.buildid section the Go linker writes), which changes whenever
// its code does.
func goBuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	s := f.Section(".note.go.buildid")
	if s == nil {
		return "", fmt.Errorf("%s: %w", path, errNoBuildID)
	}
	note, err := s.Data()
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	// An ELF note: name size, description size, type, the name "Go"
	// padded to four bytes, then the description, the build ID.
	if len(note) < 16 {
		return "", fmt.Errorf("%s: %w", path, errNoBuildID)
	}
	order := f.ByteOrder
	nameSize, descSize := order.Uint32(note[0:4]), order.Uint32(note[4:8])
	start := 12 + uint64(nameSize+3)&^3
	if nameSize != 4 || string(note[12:14]) != "Go" || start+uint64(descSize) > uint64(len(note)) || descSize == 0 {
		return "", fmt.Errorf("%s: %w", path, errNoBuildID)
	}
	return string(note[start : start+uint64(descSize)]), nil
}
