package drivers

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
)

// A sandbox child says which request it began and which file it
// evaluates (the phase: what a limit hit names) in a file it shares with
// its parent, overwritten at each phase, which the parent reads only when
// it needs it (a child killed at its deadline, or dead). Written as lines
// to its standard error, the phases woke the parent twice per request: a
// fan-out's first lock sends 4,000 checks (without the wakeups it takes
// about 0.9× the time). Outside Linux, and for a child started without
// the file, the lines remain (phaseWriter reads both).

// sandboxPhaseEnv names, to the child, the descriptor of its phase file.
const sandboxPhaseEnv = "STYRMIN_DRIVER_SANDBOX_PHASE"

// phaseFD is the phase file's descriptor in the child: the first of
// exec.Cmd's ExtraFiles.
const phaseFD = 3

// maxPhaseRecord bounds what the parent reads of a phase record.
const maxPhaseRecord = 64 << 10

// writePhase overwrites f with the phase record of request id: a length,
// then the request's ID and the file, tab-separated.
func writePhase(f *os.File, id uint64, file string) {
	rec := make([]byte, 4, 4+24+len(file))
	rec = strconv.AppendUint(rec, id, 10)
	rec = append(rec, '\t')
	rec = append(rec, file...)
	binary.BigEndian.PutUint32(rec, uint32(len(rec)-4))
	_, _ = f.WriteAt(rec, 0)
}

// readPhase reads the phase record in f: the request's ID and the file
// ("" when none was named yet); ok is false when there is none.
func readPhase(f *os.File) (id, file string, ok bool) {
	var head [4]byte
	if n, _ := f.ReadAt(head[:], 0); n != len(head) {
		return "", "", false
	}
	size := binary.BigEndian.Uint32(head[:])
	if size == 0 || size > maxPhaseRecord {
		return "", "", false
	}
	rec := make([]byte, size)
	if n, _ := f.ReadAt(rec, 4); n != len(rec) {
		return "", "", false
	}
	id, file, ok = strings.Cut(string(rec), "\t")
	return id, file, ok
}
