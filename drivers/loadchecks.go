package drivers

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// loadChecks remembers, in a folder, the driver loads a Sandbox's children
// finished within their limits, so that the next process loading the same
// folder under the same options with the same executables loads it
// in-process at once. A sandboxed load is a child's load followed by the
// parent's (load): the parent compiles the same spec and loads the same
// chart, which the child showed to be bounded. The child's answer holds
// for as long as nothing it depended on changes: the folder's files, the
// request's options and limits, the variables of the environment that
// change how CUE and Go evaluate, and the code of both processes (their Go
// build IDs). A command-line lock loads the same drivers again and again,
// and the children's start and loads were an eighth of a 1,000-deployment
// lock's time.
//
// The evaluations of a deployment's input a child made first
// (evalChecked) are remembered alike, in a file per driver version and
// request (inputChecks), a line per input (the evaluation's kind and its
// input's exact bytes): a lock of 1,000 new deployments sent each to a
// child, doubling its time, and the next lock gives most of them again.
//
// Only loads and evaluations that ended within the limits are
// remembered: one over a limit is sent to a child every time. Each check
// is an empty file named by the hexadecimal SHA-256 of what decided it; a
// check not used for checksKeep is removed by a later process, and the
// least recently used beyond checksMax (a long-lived agent meets inputs
// without end). The folder is opened once and used through an os.Root,
// so neither it nor its entries can be swapped for a link elsewhere.
type loadChecks struct {
	root *os.Root
	// code is the build IDs of this executable and the sandbox's, its
	// arguments and the evaluation's environment variables.
	code string
	// added counts the checks this process wrote: every checksTrimAfter
	// it trims the folder, whenever it was trimmed last.
	added atomic.Int64
	// max, when set, replaces checksMax (tests).
	max int
	// resultMax, when set, replaces resultLogMax, and resultFolderMax
	// the folder's (tests).
	resultMax, resultFolderMax int64
}

const (
	// checksKeep is how long a check no load used is kept.
	checksKeep = 30 * 24 * time.Hour
	// checksTouch is how stale a check's time may get before a use renews
	// it (one system call less per load most of the time).
	checksTouch = time.Hour
	// checksTrim is how often a process looks for checks to remove.
	checksTrim = 24 * time.Hour
	// checksTrimmed is the file whose time says when checks were last
	// trimmed.
	checksTrimmed = "trimmed"
	// checksMax bounds the checks kept (empty files: an inode and a
	// directory entry each); a trim removes the least recently used
	// beyond it.
	checksMax = 1 << 16
	// checksTrimAfter is how many checks a process writes before it trims
	// the folder again, so that a busy agent keeps it near checksMax.
	checksTrimAfter = checksMax / 8
)

// evalEnv are the environment variables a child inherits that change how
// a driver evaluates: CUE's debug and experiment flags (sharing,
// definitions left open, the evaluator's version) and Go's runtime
// settings.
var evalEnv = []string{"CUE_DEBUG", "CUE_EXPERIMENT", "GODEBUG"}

// KeepChecks makes the sandbox remember in dir the driver loads its
// children finished within their limits, for later processes (see
// loadChecks). Call it before the sandbox is used. It fails, and nothing
// is remembered, when dir cannot be made or opened, is a symbolic link,
// is not owned by this process's user or is writable by others (a check
// written by someone else would let a driver skip the child), when the
// executables carry no Go build ID that names their content, and outside
// Linux.
func (s *Sandbox) KeepChecks(dir string) error {
	mine, err := selfBuildID()
	if err != nil {
		return fmt.Errorf("drivers: load checks: %w", err)
	}
	theirs, err := goBuildID(s.Path)
	if err != nil {
		return fmt.Errorf("drivers: load checks: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("drivers: load checks: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil {
		return fmt.Errorf("drivers: load checks: %w", err)
	} else if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("drivers: load checks: %s is a symbolic link", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("drivers: load checks: %w", err)
	}
	// The folder opened, not the path: a swap after the Lstat is seen.
	fi, err := root.Stat(".")
	if err != nil {
		_ = root.Close()
		return fmt.Errorf("drivers: load checks: %w", err)
	}
	if err := ownFolder(fi); err != nil {
		_ = root.Close()
		return fmt.Errorf("drivers: load checks: %s %w", dir, err)
	}
	code := []string{mine, theirs, strings.Join(s.Args, "\x00")}
	for _, name := range evalEnv {
		v, set := os.LookupEnv(name)
		code = append(code, fmt.Sprint(set, v))
	}
	c := &loadChecks{root: root, code: strings.Join(code, "\x00\x00")}
	c.trim(time.Now(), false)
	s.checks = c
	return nil
}

// key names the check of a load request of folder f: the request as the
// child reads it, its files by their digest ("" without checks).
func (c *loadChecks) key(req *sandboxRequest, f *folder) string {
	if c == nil {
		return ""
	}
	r := *req
	r.ID, r.Files = 0, nil
	return c.digest("styrmin driver load check 1", &r, f)
}

// digest is the hexadecimal SHA-256 of what a check depends on: its kind
// (version), the code, the request r and the folder's digest; "" when r
// does not encode (not a key: checks nothing).
func (c *loadChecks) digest(version string, r *sandboxRequest, f *folder) string {
	data, err := json.Marshal(struct {
		Version string          `json:"version"`
		Code    string          `json:"code"`
		Request *sandboxRequest `json:"request"`
		Folder  string          `json:"folder"`
	}{version, c.code, r, f.digest()})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// isKey reports whether name is a check's name, the only files trim
// removes.
func isKey(name string) bool {
	if len(name) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil && strings.ToLower(name) == name
}

// has reports whether the load was checked, renewing the check's time.
func (c *loadChecks) has(key string) bool {
	if c == nil || !isKey(key) {
		return false
	}
	fi, err := c.root.Lstat(key)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	if now := time.Now(); now.Sub(fi.ModTime()) > checksTouch {
		_ = c.root.Chtimes(key, now, now)
	}
	return true
}

// add records the load as checked. A check that cannot be written is
// left out: the next process asks a child again.
func (c *loadChecks) add(key string) {
	if c == nil || !isKey(key) {
		return
	}
	f, err := c.root.OpenFile(key, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	_ = f.Close()
	if c.added.Add(1)%int64(c.trimAfter()) == 0 {
		c.trim(time.Now(), true)
	}
}

func (c *loadChecks) limit() int {
	if c.max > 0 {
		return c.max
	}
	return checksMax
}

func (c *loadChecks) trimAfter() int { return max(c.limit()/8, 1) }

// trim removes the checks not used for checksKeep, then the least
// recently used beyond checksMax, at most once every checksTrim unless
// forced (a busy folder is not listed by every process). It removes
// nothing but checks, whatever else the folder holds.
func (c *loadChecks) trim(now time.Time, force bool) {
	if fi, err := c.root.Lstat(checksTrimmed); !force && err == nil && now.Sub(fi.ModTime()) < checksTrim {
		return
	}
	if err := c.root.WriteFile(checksTrimmed, nil, 0o600); err != nil {
		return // a folder that cannot be written to: nothing to trim
	}
	_ = c.root.Chtimes(checksTrimmed, now, now)
	d, err := c.root.Open(".")
	if err != nil {
		return
	}
	entries, err := d.ReadDir(-1)
	_ = d.Close()
	if err != nil {
		return
	}
	type check struct {
		name string
		used time.Time
		size int64
	}
	var kept []check
	for _, e := range entries {
		if !isKey(e.Name()) && !isInputLog(e.Name()) && !isResultLog(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if now.Sub(fi.ModTime()) > checksKeep {
			_ = c.root.Remove(e.Name())
			continue
		}
		kept = append(kept, check{e.Name(), fi.ModTime(), fi.Size()})
	}
	// A use renews a check's time (has, a log's read), so the oldest are
	// the least recently used.
	sort.Slice(kept, func(i, j int) bool { return kept[i].used.Before(kept[j].used) })
	if over := len(kept) - c.limit(); over > 0 {
		for _, k := range kept[:over] {
			_ = c.root.Remove(k.name)
		}
		kept = kept[over:]
	}
	// The result logs hold most of the folder's bytes: each build of
	// styrminctl starts its own, for every driver version it evaluates.
	var results int64
	for _, k := range kept {
		if isResultLog(k.name) {
			results += k.size
		}
	}
	for _, k := range kept {
		if results <= c.resultFolderLimit() {
			break
		}
		if isResultLog(k.name) {
			_ = c.root.Remove(k.name)
			results -= k.size
		}
	}
}

func (c *loadChecks) resultFolderLimit() int64 {
	if c.resultFolderMax > 0 {
		return c.resultFolderMax
	}
	return resultFolderMax
}

// errNoBuildID is an executable without a Go build ID that names its
// content.
var errNoBuildID = errors.New("no Go build ID")

// goBuildID reads the Go build ID an ELF executable carries (the note
// "Go", type 4, in its .note.go.buildid section, as the Go toolchain
// writes and reads it), which changes whenever its code does. An ID set
// by hand at link time (-buildid=…, "redacted" in some build systems) does
// not, and has not the toolchain's form: it is refused.
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
	notes, err := s.Data()
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	const goNoteType = 4
	order := f.ByteOrder
	for len(notes) >= 12 {
		nameSize, descSize, typ := order.Uint32(notes[0:4]), order.Uint32(notes[4:8]), order.Uint32(notes[8:12])
		nameEnd := 12 + (uint64(nameSize)+3)&^3
		descEnd := nameEnd + (uint64(descSize)+3)&^3
		if nameEnd > uint64(len(notes)) || nameEnd+uint64(descSize) > uint64(len(notes)) {
			break
		}
		if typ == goNoteType && nameSize == 4 && string(notes[12:16]) == "Go\x00\x00" {
			id := string(notes[nameEnd : nameEnd+uint64(descSize)])
			if !toolchainBuildID(id) {
				return "", fmt.Errorf("%s: build ID %q: %w", path, id, errNoBuildID)
			}
			return id, nil
		}
		if descEnd > uint64(len(notes)) {
			break
		}
		notes = notes[descEnd:]
	}
	return "", fmt.Errorf("%s: %w", path, errNoBuildID)
}

// toolchainBuildID reports whether id has the form the go command gives
// a build ID: hashes (base64, about 20 characters each) separated by
// slashes, two for a link, four for a build.
func toolchainBuildID(id string) bool {
	parts := strings.Split(id, "/")
	if len(parts) < 2 {
		return false
	}
	for _, p := range parts {
		if len(p) < 8 {
			return false
		}
	}
	return true
}
