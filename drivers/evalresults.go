package drivers

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// inputResults are the results of the evaluations whose inputs
// inputChecks holds, kept beside them for later processes: one file per
// driver version, under the input log's name with resultLogSuffix, a line
// per input. An input a child evaluated within the limits is evaluated
// again in-process by every later command (evalChecked), and on a fan-out
// those evaluations were most of a repeated command: a plan reviewed and
// then locked, or run again in CI, evaluated every values spec in CUE and
// rendered every chart a second time for the same bytes. The evaluation
// is deterministic in what the input's key holds (the evaluation, its
// input's exact bytes, and under the log's name the driver's files, the
// request's options and limits, the code of both processes and the
// evaluation's environment), so its result is read back instead.
//
// A line is the input's hexadecimal key, the CRC-32 (IEEE) of the result
// in eight hexadecimal digits, and the result as the child answers it (a
// sandboxResponse's Output or Objects, in JSON, which holds no newline),
// separated by spaces. Lines are appended in one write each, as the input
// log's are; a line that does not read, or whose CRC does not match (a
// process stopped mid-write, two writers interleaved), is skipped and
// its input evaluated again. A file grown past resultLogMax bytes is
// started again by the next process that reads it; a result over
// maxKeptResult is not kept. Only what a command may write is read: the
// folder is the load checks', opened as an os.Root, owned by the user and
// writable by no one else (KeepChecks), so a result there is one this
// user's styrminctl wrote.
type inputResults struct {
	c    *loadChecks
	name string

	once sync.Once
	mu   sync.Mutex
	// data is the file as read; byKey the result of each key in it, or
	// added since.
	byKey map[[sha256.Size]byte][]byte
	// size is how many bytes the file holds, as this process knows.
	size int64
	// cut is set when the file ends inside a line.
	cut bool
}

const (
	// resultLogSuffix ends the name of a result log.
	resultLogSuffix = ".results"
	// resultLogMax bounds a result log: a fan-out of 1,000 deployments
	// keeps some 6 MB of values, services and renders, so about five
	// heads of a fleet that size.
	resultLogMax = 32 << 20
	// maxKeptResult bounds one result kept (a chart of thousands of
	// objects is rendered again rather than held).
	maxKeptResult = 1 << 20
)

func (c *loadChecks) resultLimit() int64 {
	if c.resultMax > 0 {
		return c.resultMax
	}
	return resultLogMax
}

// results are the results kept beside the input log ic (nil without one).
func (ic *inputChecks) results() *inputResults {
	if ic == nil {
		return nil
	}
	name, _ := strings.CutSuffix(ic.name, inputLogSuffix)
	return &inputResults{c: ic.c, name: name + resultLogSuffix}
}

// isResultLog reports whether name is a result log's.
func isResultLog(name string) bool {
	k, ok := strings.CutSuffix(name, resultLogSuffix)
	return ok && isKey(k)
}

// resultRecord is the record that keeps result under key: a header line
// (the key, the CRC and the length of the result) and the result, then a
// newline.
func resultRecord(key [sha256.Size]byte, result []byte) []byte {
	rec := make([]byte, 0, 2*sha256.Size+30+len(result))
	rec = hex.AppendEncode(rec, key[:])
	rec = fmt.Appendf(rec, " %08x %d\n", crc32.ChecksumIEEE(result), len(result))
	rec = append(rec, result...)
	return append(rec, '\n')
}

// readRecords calls found with each record of a result log that reads. A
// record that does not (cut short, run into by another, altered) is
// skipped: the next line that reads as a header starts the next record.
func readRecords(data []byte, found func(key [sha256.Size]byte, result []byte)) {
	for len(data) > 0 {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			return
		}
		key, crc, n, ok := parseRecordHeader(data[:nl])
		rest := data[nl+1:]
		if ok && n < len(rest) && rest[n] == '\n' && crc32.ChecksumIEEE(rest[:n]) == crc {
			found(key, rest[:n])
			data = rest[n+1:]
			continue
		}
		data = rest
	}
}

// parseRecordHeader reads a record's header line (without its newline).
func parseRecordHeader(line []byte) (key [sha256.Size]byte, crc uint32, n int, ok bool) {
	const fixed = 2*sha256.Size + 1 + 8 + 1
	if len(line) <= fixed || len(line) > fixed+8 || line[2*sha256.Size] != ' ' || line[fixed-1] != ' ' {
		return key, 0, 0, false
	}
	if _, err := hex.Decode(key[:], line[:2*sha256.Size]); err != nil {
		return key, 0, 0, false
	}
	c, err := strconv.ParseUint(string(line[2*sha256.Size+1:fixed-1]), 16, 32)
	if err != nil {
		return key, 0, 0, false
	}
	size, err := strconv.Atoi(string(line[fixed:]))
	if err != nil || size < 0 || size > maxKeptResult {
		return key, 0, 0, false
	}
	return key, uint32(c), size, true
}

// load reads the file once.
func (r *inputResults) load() {
	r.once.Do(func() {
		r.byKey = map[[sha256.Size]byte][]byte{}
		fi, err := r.c.root.Lstat(r.name)
		if err != nil || !fi.Mode().IsRegular() {
			return
		}
		if fi.Size() >= r.c.resultLimit() {
			// Started again: the results still needed are kept once more.
			_ = r.c.root.Remove(r.name)
			return
		}
		data, err := r.c.root.ReadFile(r.name)
		if err != nil {
			return
		}
		r.size = int64(len(data))
		r.cut = len(data) > 0 && data[len(data)-1] != '\n'
		readRecords(data, func(key [sha256.Size]byte, result []byte) { r.byKey[key] = result })
		if now := time.Now(); now.Sub(fi.ModTime()) > checksTouch {
			_ = r.c.root.Chtimes(r.name, now, now)
		}
	})
}

// get is the result kept for key, as the child answered it.
func (r *inputResults) get(key [sha256.Size]byte) (*sandboxResponse, bool) {
	if r == nil {
		return nil, false
	}
	r.load()
	r.mu.Lock()
	data, ok := r.byKey[key]
	r.mu.Unlock()
	if !ok {
		return nil, false
	}
	resp, err := decodeKept(data)
	if err != nil {
		return nil, false
	}
	return resp, true
}

// put keeps resp, an evaluation's result, under key. One that cannot be
// written is left out: the next process evaluates the input again.
func (r *inputResults) put(key [sha256.Size]byte, resp *sandboxResponse) {
	if r == nil || !resp.Evaluated {
		return
	}
	r.load()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byKey[key]; ok || r.size >= r.c.resultLimit() {
		return
	}
	data := encodeKept(resp)
	if len(data) > maxKeptResult {
		return
	}
	rec := resultRecord(key, data)
	if r.cut {
		rec = append([]byte{'\n'}, rec...)
	}
	f, err := r.c.root.OpenFile(r.name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	if _, err := f.Write(rec); err == nil {
		r.size += int64(len(rec))
		r.cut = false
		r.byKey[key] = data
	}
	_ = f.Close()
}

// A kept result is the child's Output after keptOutput, or a render's
// objects after keptObjects: their count, then per object its API
// version, kind, namespace, name, component and canonical text, the
// count of its host claims and each claim's class, host and path, every
// string after its length (uvarints). Renders are most of what a plan
// keeps, and reading them back as JSON (their text in base64) cost a
// plan a tenth of its time.
const (
	keptOutput  = 'J'
	keptObjects = 'O'
)

// encodeKept is resp's result as a record keeps it.
func encodeKept(resp *sandboxResponse) []byte {
	if resp.Objects == nil {
		return append([]byte{keptOutput}, resp.Output...)
	}
	n := 1 + binary.MaxVarintLen64
	for _, o := range resp.Objects {
		n += len(o.APIVersion) + len(o.Kind) + len(o.Namespace) + len(o.Name) + len(o.Component) + len(o.YAML) + 7*binary.MaxVarintLen64
		for _, h := range o.Hosts {
			n += len(h.Class) + len(h.Host) + len(h.Path) + 3*binary.MaxVarintLen64
		}
	}
	b := make([]byte, 0, n)
	b = append(b, keptObjects)
	b = binary.AppendUvarint(b, uint64(len(resp.Objects)))
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, o := range resp.Objects {
		str(o.APIVersion)
		str(o.Kind)
		str(o.Namespace)
		str(o.Name)
		str(o.Component)
		b = binary.AppendUvarint(b, uint64(len(o.YAML)))
		b = append(b, o.YAML...)
		b = binary.AppendUvarint(b, uint64(len(o.Hosts)))
		for _, h := range o.Hosts {
			str(h.Class)
			str(h.Host)
			str(h.Path)
		}
	}
	return b
}

// errKept is a kept result that does not decode.
var errKept = errors.New("drivers: a kept result does not decode")

// decodeKept is the child's answer a record keeps.
func decodeKept(data []byte) (*sandboxResponse, error) {
	if len(data) == 0 {
		return nil, errKept
	}
	resp := &sandboxResponse{Evaluated: true}
	switch data[0] {
	case keptOutput:
		resp.Output = slices.Clone(data[1:])
		return resp, nil
	case keptObjects:
	default:
		return nil, errKept
	}
	d := keptReader{b: data[1:]}
	count := d.count()
	resp.Objects = make([]Object, 0, min(count, len(d.b)))
	for range count {
		if d.err {
			break
		}
		o := Object{APIVersion: d.str(), Kind: d.str(), Namespace: d.str(), Name: d.str(), Component: d.str()}
		if y := d.bytes(); len(y) > 0 {
			o.YAML = slices.Clone(y) // the caller's to change
		}
		if hosts := d.count(); hosts > 0 && !d.err {
			o.Hosts = make([]HostClaim, 0, min(hosts, len(d.b)))
			for range hosts {
				o.Hosts = append(o.Hosts, HostClaim{Class: d.str(), Host: d.str(), Path: d.str()})
			}
		}
		resp.Objects = append(resp.Objects, o)
	}
	if d.err || len(d.b) != 0 {
		return nil, errKept
	}
	return resp, nil
}

// keptReader reads a kept render; err is set once something does not
// read.
type keptReader struct {
	b   []byte
	err bool
}

func (d *keptReader) count() int {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > uint64(len(d.b)) {
		d.err = true
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *keptReader) bytes() []byte {
	l := d.count()
	if d.err || l > len(d.b) {
		d.err = true
		return nil
	}
	out := d.b[:l:l]
	d.b = d.b[l:]
	return out
}

func (d *keptReader) str() string { return string(d.bytes()) }
