package drivers

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// inputResults are the results of the evaluations whose inputs
// inputChecks holds, kept beside them for later processes: one file per
// driver version, under the input log's name with resultLogSuffix. An
// input a child evaluated within the limits is evaluated again in-process
// by every later command (evalChecked), and on a fan-out those
// evaluations were most of a repeated command: a plan reviewed and then
// locked, or run again in CI, evaluated every values spec in CUE and
// rendered every chart a second time for the same bytes. The evaluation
// is deterministic in what the input's key holds (the evaluation, its
// input's exact bytes, and under the log's name the driver's files, the
// request's options and limits, the code of both processes and the
// evaluation's environment), so its result is read back instead.
//
// A record is a header line (the input's hexadecimal key, the CRC-32 of
// the result in eight hexadecimal digits, the result's length) and the
// result (encodeKept), then a newline; records are appended in one write
// each, so two processes appending at once do not interleave. A file is
// read up to its first record that does not read (cut short by a process
// stopped mid-write, altered): what precedes it is used, and the file is
// started again, so the reader never looks for a record inside another's
// bytes (a render's text is a chart author's). A file past resultLogMax
// bytes is started again too; a record that would take a file past it is
// not written.
//
// Kept results decide what a lock writes, so only a file this user owns
// and no one else may write to is read, in the folder KeepChecks opened
// (the user's own, writable by no one else, through an os.Root); and the
// applied parameters are never kept (evalChecked): they hold sensitive
// values in clear, which the values and renders never see.
type inputResults struct {
	c    *loadChecks
	name string

	once sync.Once
	mu   sync.Mutex
	// byKey is the result of each key in the file, or added since.
	byKey map[[sha256.Size]byte][]byte
	// size is how many bytes the file holds, as this process knows
	// (resultLogMax: this process writes no more).
	size int64
}

const (
	// resultLogSuffix ends the name of a result log.
	resultLogSuffix = ".results"
	// resultLogMax bounds a result log: a fan-out of 1,000 deployments
	// keeps some 6 MB of values, services and renders, so about five
	// heads of a fleet that size.
	resultLogMax = 32 << 20
	// resultFolderMax bounds the result logs of a checks folder, all
	// driver versions and builds together: a trim removes the least
	// recently used beyond it.
	resultFolderMax = 256 << 20
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

// readRecords calls found with each record of a result log, in order, up
// to the first that does not read, and returns how many bytes the records
// read take: len(data) when every one read.
func readRecords(data []byte, found func(key [sha256.Size]byte, result []byte)) (read int) {
	for read < len(data) {
		at := data[read:]
		nl := bytes.IndexByte(at, '\n')
		if nl < 0 {
			return read
		}
		key, crc, n, ok := parseRecordHeader(at[:nl])
		rest := at[nl+1:]
		if !ok || n >= len(rest) || rest[n] != '\n' || crc32.ChecksumIEEE(rest[:n]) != crc {
			return read
		}
		found(key, rest[:n])
		read += nl + 1 + n + 1
	}
	return read
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
		data, ok := r.read()
		if !ok {
			return
		}
		r.size = int64(len(data))
		if read := readRecords(data, func(key [sha256.Size]byte, result []byte) { r.byKey[key] = result }); read < len(data) {
			// Started again with the records that read.
			_ = r.c.root.Remove(r.name)
			r.size = 0
			r.write(data[:read])
		}
	})
}

// read is the file's content; ok is false for none, one past its bound
// (removed: started again), and one that is not a regular file this user
// owns and no one else may write to (neither read nor written to: a file
// another user planted decides nothing).
func (r *inputResults) read() (data []byte, ok bool) {
	f, err := r.c.root.OpenFile(r.name, os.O_RDONLY|noFollow, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		r.size = r.c.resultLimit() // not this process's to write to
		return nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || ownFile(fi) != nil {
		r.size = r.c.resultLimit()
		return nil, false
	}
	limit := r.c.resultLimit()
	if fi.Size() >= limit {
		_ = r.c.root.Remove(r.name)
		return nil, false
	}
	data, err = io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		r.size = limit
		return nil, false
	}
	if now := time.Now(); now.Sub(fi.ModTime()) > checksTouch {
		_ = r.c.root.Chtimes(r.name, now, now)
	}
	return data, true
}

// get is the result kept for key, an evaluation of kind, as the child
// answered it. One that does not decode as kind's is forgotten, so that
// put keeps the result evaluated again.
func (r *inputResults) get(key [sha256.Size]byte, kind string) (*sandboxResponse, bool) {
	if r == nil {
		return nil, false
	}
	r.load()
	r.mu.Lock()
	defer r.mu.Unlock()
	data, ok := r.byKey[key]
	if !ok {
		return nil, false
	}
	resp, err := decodeKept(data, rendersObjects(kind))
	if err != nil {
		delete(r.byKey, key)
		return nil, false
	}
	return resp, true
}

// put keeps resp, an evaluation of kind's result, under key. One that
// cannot be written is left out: the next process evaluates the input
// again.
func (r *inputResults) put(key [sha256.Size]byte, kind string, resp *sandboxResponse) {
	if r == nil || !resp.Evaluated {
		return
	}
	r.load()
	r.mu.Lock()
	defer r.mu.Unlock()
	limit := r.c.resultLimit()
	if _, ok := r.byKey[key]; ok || r.size >= limit {
		return
	}
	data := encodeKept(resp, rendersObjects(kind))
	if len(data) > maxKeptResult {
		return
	}
	rec := resultRecord(key, data)
	if r.size+int64(len(rec)) > limit {
		return
	}
	if r.write(rec) {
		r.byKey[key] = data
	}
}

// write appends records to the file in one write. After a failed write (a
// disk full) this process writes no more: a record cut short ends what
// the next process reads.
func (r *inputResults) write(records []byte) bool {
	if len(records) == 0 {
		return false
	}
	f, err := r.c.root.OpenFile(r.name, os.O_CREATE|os.O_APPEND|os.O_WRONLY|noFollow, 0o600)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Write(records); err != nil {
		r.size = r.c.resultLimit()
		return false
	}
	r.size += int64(len(records))
	return true
}

// rendersObjects reports whether an evaluation of kind answers a
// render's objects (the others answer JSON).
func rendersObjects(kind string) bool { return kind == evalRender || kind == evalPolicy }

// A kept result is the child's Output after keptOutput, or a render's
// objects after keptObjects: their count, then per object its API
// version, kind, namespace, name, component and canonical text, the
// count of its host claims and each claim's class, host, path and TLS, every
// string after its length (uvarints). Renders are most of what a plan
// keeps, and reading them back as JSON (their text in base64) cost a
// plan a tenth of its time.
const (
	keptOutput  = 'J'
	keptObjects = 'O'
)

// encodeKept is resp's result as a record keeps it: a render's objects
// when objects, else its output.
func encodeKept(resp *sandboxResponse, objects bool) []byte {
	if !objects {
		return append([]byte{keptOutput}, resp.Output...)
	}
	if resp.kept != nil {
		return resp.kept // as the child encoded it
	}
	n := 1 + binary.MaxVarintLen64
	for _, o := range resp.Objects {
		n += len(o.APIVersion) + len(o.Kind) + len(o.Namespace) + len(o.Name) + len(o.Component) + len(o.YAML) + 7*binary.MaxVarintLen64
		for _, h := range o.Hosts {
			n += len(h.Class) + len(h.Host) + len(h.Path) + len(h.TLS) + 4*binary.MaxVarintLen64
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
			str(h.TLS)
		}
	}
	return b
}

// errKept is a kept result that does not decode.
var errKept = errors.New("drivers: a kept result does not decode")

// decodeKept is the child's answer a record keeps: a render's objects
// when objects, else an output; a record of the other form is refused.
func decodeKept(data []byte, objects bool) (*sandboxResponse, error) {
	if len(data) == 0 {
		return nil, errKept
	}
	resp := &sandboxResponse{Evaluated: true}
	switch {
	case data[0] == keptOutput && !objects:
		resp.Output = slices.Clone(data[1:])
		return resp, nil
	case data[0] == keptObjects && objects:
	default:
		return nil, errKept
	}
	d := keptReader{b: data[1:]}
	count := d.count()
	if count > 0 {
		resp.Objects = make([]Object, 0, min(count, len(d.b)))
	}
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
				o.Hosts = append(o.Hosts, HostClaim{Class: d.str(), Host: d.str(), Path: d.str(), TLS: d.str()})
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
