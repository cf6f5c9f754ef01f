package drivers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"time"
)

// inputChecks are the inputs of one driver version, under one set of
// options, limits and code, that sandbox children evaluated within the
// limits (evalChecked), kept for later processes: one file of lines in
// the load checks' folder, each the hexadecimal key of an input, read
// once by a process and appended to. A check per file, as loads are kept,
// cost a fan-out's plan a request encoded for its name and three system
// calls per input, about a fifth of the command with 8,000 inputs.
//
// The file's name says what the lines were checked under (the code, the
// request but its input, the folder's digest: loadChecks.digest); a line,
// which evaluation and which input (the key evalChecked holds them by in
// memory). Lines are appended in one write each, so two
// processes appending at once interleave whole lines; a line that does
// not read (a process stopped mid-write) is skipped. A file grown past
// inputLogMax lines is started again by the next process that reads it,
// and one unused for checksKeep is removed with the load checks (trim).
type inputChecks struct {
	c    *loadChecks
	name string

	once sync.Once
	mu   sync.Mutex
	keys map[[sha256.Size]byte]struct{}
	// lines is how many lines the file holds, as this process knows.
	lines int
	// cut is set when the file ends inside a line: the next line
	// written starts with a newline, so that it is not lost too.
	cut bool
}

// inputLogMax bounds the lines of an input log (65 bytes each): a
// long-lived process meets inputs without end.
const inputLogMax = 1 << 16

// inputLogSuffix ends the name of an input log.
const inputLogSuffix = ".inputs"

// inputs are the input checks of the driver in folder f requested as req
// (nil without checks: nothing is remembered).
func (c *loadChecks) inputs(req *sandboxRequest, f *folder) *inputChecks {
	if c == nil {
		return nil
	}
	r := *req
	r.ID, r.Files, r.Eval, r.Input = 0, nil, "", nil
	name := c.digest("styrmin driver input checks 1", &r, f)
	if name == "" {
		return nil
	}
	return &inputChecks{c: c, name: name + inputLogSuffix}
}

// isInputLog reports whether name is an input log's.
func isInputLog(name string) bool {
	k, ok := strings.CutSuffix(name, inputLogSuffix)
	return ok && isKey(k)
}

// load reads the file once.
func (ic *inputChecks) load() {
	ic.once.Do(func() {
		ic.keys = map[[sha256.Size]byte]struct{}{}
		fi, err := ic.c.root.Lstat(ic.name)
		if err != nil || !fi.Mode().IsRegular() {
			return
		}
		if fi.Size() >= int64(inputLogMax)*(2*sha256.Size+1) {
			// Started again: the inputs still met are checked once more.
			_ = ic.c.root.Remove(ic.name)
			return
		}
		data, err := ic.c.root.ReadFile(ic.name)
		if err != nil {
			return
		}
		ic.cut = len(data) > 0 && data[len(data)-1] != '\n'
		for line := range bytes.Lines(data) {
			var k [sha256.Size]byte
			if len(line) != 2*sha256.Size+1 || line[len(line)-1] != '\n' {
				continue
			}
			if _, err := hex.Decode(k[:], line[:2*sha256.Size]); err != nil {
				continue
			}
			ic.keys[k] = struct{}{}
			ic.lines++
		}
		if now := time.Now(); now.Sub(fi.ModTime()) > checksTouch {
			_ = ic.c.root.Chtimes(ic.name, now, now)
		}
	})
}

// has reports whether the input of key was checked.
func (ic *inputChecks) has(key [sha256.Size]byte) bool {
	if ic == nil {
		return false
	}
	ic.load()
	ic.mu.Lock()
	defer ic.mu.Unlock()
	_, ok := ic.keys[key]
	return ok
}

// add records the input of key as checked. One that cannot be written is
// left out: the next process asks a child again.
func (ic *inputChecks) add(key [sha256.Size]byte) {
	if ic == nil {
		return
	}
	ic.load()
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if _, ok := ic.keys[key]; ok || ic.lines >= inputLogMax {
		return
	}
	if len(ic.keys) < inputLogMax {
		ic.keys[key] = struct{}{}
	}
	// Opened for each line, which only follows a child's evaluation: no
	// file stays open for as long as the driver is held.
	f, err := ic.c.root.OpenFile(ic.name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	line := make([]byte, 0, 2*sha256.Size+2)
	if ic.cut {
		line = append(line, '\n')
	}
	line = hex.AppendEncode(line, key[:])
	line = append(line, '\n')
	if _, err := f.Write(line); err == nil {
		ic.lines++
		ic.cut = false
	}
	_ = f.Close()
}
