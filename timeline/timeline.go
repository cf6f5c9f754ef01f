package timeline

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
)

// History is the git history the timeline reads: *gitsource.Repo.
type History interface {
	// LockChanges lists the changes of files under prefix between two
	// commits, oldest first (gitsource.Repo.LockChanges).
	LockChanges(from, to gitsource.Hash, prefix string) ([]gitsource.LockChange, error)
	// Commit tells who made a commit, when, and its message.
	Commit(h gitsource.Hash) (gitsource.CommitInfo, error)
	// Blob reads a file object.
	Blob(h gitsource.Hash) ([]byte, error)
}

var _ History = (*gitsource.Repo)(nil)

// Entry is one lock commit of a deployment.
type Entry struct {
	// Sequence is the instance's sequence (0 when the lockfile was
	// removed or could not be read).
	Sequence int64 `json:"sequence"`
	// Commit is the lock commit; Author, Date and Subject are its.
	Commit  string    `json:"commit"`
	Author  string    `json:"author"`
	Date    time.Time `json:"date"`
	Subject string    `json:"subject"`
	// ConfigCommit is the configuration commit the lock locked (its
	// Styrmin-Config-Commit trailer, else the instance's source commit);
	// ConfigSubject its first line and PullRequest the pull request
	// number a merge commit's subject names (0: none).
	ConfigCommit  string `json:"configCommit,omitempty"`
	ConfigSubject string `json:"configSubject,omitempty"`
	PullRequest   int    `json:"pullRequest,omitempty"`
	// Kind is Instance or Tombstone; Driver ("name@version") and
	// AppVersion describe the instance; Digest is its content digest.
	Kind       string `json:"kind,omitempty"`
	Driver     string `json:"driver,omitempty"`
	AppVersion string `json:"appVersion,omitempty"`
	Digest     string `json:"digest,omitempty"`
	// Workflow is what the change selects against the entry before it
	// (the agent chooses against the active instance, which is that one
	// when every task succeeded).
	Workflow planner.Workflow `json:"workflow,omitempty"`
	// Retry marks a lock commit that retries the deployment
	// (Styrmin-Retry): the same content with a new sequence.
	Retry bool `json:"retry,omitempty"`
	// Removed marks a commit that removed the lockfile (by hand: the
	// engine writes tombstones).
	Removed bool `json:"removed,omitempty"`
	// Error says why the lockfile could not be read (a hand edit).
	Error string `json:"error,omitempty"`
	// Path is the lockfile's path from the git repository's root.
	Path string `json:"path"`

	// instance holds the lockfile's summary fields (not its context
	// and values), nil when Removed or Error.
	instance *resolver.Instance
}

// Reader reads timelines from one repository, remembering each decoded
// lockfile by its object (they never change), so reading a timeline
// again only decodes what is new.
type Reader struct {
	history History
	// dir is the folder of the git repository that holds the
	// desired-state repository ("" for its root).
	dir string

	mu      sync.Mutex
	decoded map[gitsource.Hash]decodedLock
	commits map[gitsource.Hash]gitsource.CommitInfo
	// timelines are the timelines read, by head and deployment: a
	// commit's history never changes.
	timelines map[timelineKey][]Entry
	// latest is the newest head each deployment's timeline was read at.
	latest map[resolver.ID]gitsource.Hash
}

type timelineKey struct {
	head gitsource.Hash
	id   resolver.ID
}

// maxTimelines bounds the remembered timelines.
const maxTimelines = 256

type decodedLock struct {
	in  *resolver.Instance
	err error
}

// lockHeader is what a timeline shows of a lockfile: the fields that
// identify and summarise the instance. Decoding only them (not the
// context and values, nor the checksum over them) keeps a timeline of
// thousands of lock commits fast; the plan between two entries reads
// and checks the whole lockfiles.
type lockHeader struct {
	APIVersion   string      `yaml:"apiVersion"`
	Kind         string      `yaml:"kind"`
	Deployment   resolver.ID `yaml:"deployment"`
	Sequence     int64       `yaml:"sequence"`
	SourceCommit string      `yaml:"sourceCommit"`
	Digest       string      `yaml:"digest"`
	AppVersion   string      `yaml:"appVersion"`
	Driver       struct {
		Name           string `yaml:"name"`
		Version        string `yaml:"version"`
		Digest         string `yaml:"digest"`
		UpgradeRequest string `yaml:"upgradeRequest"`
	} `yaml:"driver"`
	Checksum string `yaml:"checksum"`
}

// maxLockSize bounds a lockfile the timeline reads (the resolver's
// bound).
const maxLockSize = 4 << 20

// bulky are the top-level fields of a lockfile a timeline does not read:
// most of its bytes.
var bulky = [][]byte{[]byte("context:"), []byte("values:")}

// summaryLines is the lockfile without its bulky top-level fields and
// what is under them (lines indented, or list items at column 0), so the
// YAML parser reads a tenth of it. A lockfile that is not in the
// engine's canonical form gives a document the checks below refuse.
func summaryLines(data []byte) []byte {
	out := make([]byte, 0, 512)
	skip := false
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		top := len(line) > 0 && line[0] != ' ' && line[0] != '\t' && line[0] != '-' && line[0] != '#'
		if top {
			skip = false
			for _, b := range bulky {
				if bytes.HasPrefix(line, b) {
					skip = true
				}
			}
		}
		if !skip {
			out = append(out, line...)
		}
	}
	return out
}

// scanHeader reads the summary fields of a lockfile in the engine's
// canonical form (sorted keys, two-space indentation, plain or
// double-quoted scalars) without a YAML parser: a tenth of its time. It
// says false on anything else (a quote of another kind or an escape, a
// block scalar, a comment after a value, a key written twice, a null, an
// unknown nesting, a second document), and Summary then parses the YAML:
// whatever it reads, YAML's parser reads alike (FuzzSummaryFastPathIsWhatYAMLReads).
func scanHeader(summary []byte) (lockHeader, bool) {
	var h lockHeader
	parent := ""
	// deep: the last line at indent 2 opened a block (driver.source);
	// list: the parent holds a list (after), not fields.
	deep, list := false, false
	seen := map[string]bool{}
	for _, line := range bytes.Split(summary, []byte("\n")) {
		if !canonicalLine(line) {
			return h, false
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if line[0] == '-' {
			// A list item under a field the summary does not read (after).
			if parent == "" || headerFields[parent] || deep || seen[parent+"."] || !bytes.HasPrefix(line, []byte("- ")) || !scalar(string(line[2:])) {
				return h, false
			}
			list = true
			continue
		}
		indent := 0
		for indent < len(line) && line[indent] == ' ' {
			indent++
		}
		key, value, found := strings.Cut(string(line[indent:]), ":")
		if !found || !plainKey.MatchString(key) || value != "" && value[0] != ' ' {
			return h, false
		}
		value = strings.TrimLeft(value, " ")
		quoted := strings.HasPrefix(value, `"`)
		if quoted {
			v, err := strconv.Unquote(value)
			if err != nil || strings.Contains(value, `\`) {
				// YAML's escapes are not Go's ("\x80", "\101", "\e").
				return h, false
			}
			value = v
		} else if !plainValue(value) {
			return h, false
		}
		field := key
		if indent > 0 {
			field = parent + "." + key
		}
		if seen[field] {
			return h, false
		}
		seen[field] = true
		switch {
		case indent == 0:
			parent, deep, list = "", false, false
			if value == "" && !quoted {
				if headerFields[key] {
					return h, false // null, or a nested field YAML reads into a scalar
				}
				parent = key
				continue
			}
			switch key {
			case "deployment", "driver":
				return h, false // a scalar where YAML reads a struct
			case "apiVersion":
				h.APIVersion = value
			case "kind":
				h.Kind = value
			case "sequence":
				if !decimal.MatchString(value) {
					return h, false
				}
				n, err := strconv.ParseInt(value, 10, 64)
				if err != nil {
					return h, false
				}
				h.Sequence = n
			case "sourceCommit":
				h.SourceCommit = value
			case "digest":
				h.Digest = value
			case "appVersion":
				h.AppVersion = value
			case "checksum":
				h.Checksum = value
			}
		case indent == 2 && parent != "" && !list:
			seen[parent+"."] = true // the parent holds fields
			deep = value == "" && !quoted
			if deep {
				if headerFields[field] || parent == "deployment" {
					return h, false
				}
				continue
			}
			switch field {
			case "deployment.cluster":
				h.Deployment.Cluster = value
			case "deployment.environment":
				h.Deployment.Environment = value
			case "deployment.name":
				h.Deployment.Name = value
			case "driver.name":
				h.Driver.Name = value
			case "driver.version":
				h.Driver.Version = value
			case "driver.digest":
				h.Driver.Digest = value
			case "driver.upgradeRequest":
				h.Driver.UpgradeRequest = value
			}
		default:
			// Deeper fields (a driver's source, a rollout) are not shown.
			if indent != 4 || !deep || value == "" && !quoted || parent != "driver" && parent != "rollout" && parent != "after" {
				return h, false
			}
		}
	}
	return h, true
}

// headerFields are the fields of lockHeader that hold a scalar, by path.
var headerFields = map[string]bool{
	"apiVersion": true, "kind": true, "sequence": true, "sourceCommit": true, "digest": true, "appVersion": true, "checksum": true,
	"deployment.cluster": true, "deployment.environment": true, "deployment.name": true,
	"driver.name": true, "driver.version": true, "driver.digest": true, "driver.upgradeRequest": true,
}

var (
	// plainKey is a key as the engine writes it.
	plainKey = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)
	// decimal is a sequence as the engine writes it.
	decimal = regexp.MustCompile(`^(0|[1-9][0-9]{0,18})$`)
)

// canonicalLine says whether line holds only what the engine writes in a
// summary: printable ASCII (YAML reads some other characters as line
// breaks, and refuses others).
func canonicalLine(line []byte) bool {
	for _, c := range line {
		if c < ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// scalar says whether v is a plain scalar or a double-quoted one
// without escapes, one YAML reads as the same string either way.
func scalar(v string) bool {
	if strings.HasPrefix(v, `"`) {
		_, err := strconv.Unquote(v)
		return err == nil && !strings.Contains(v, `\`)
	}
	return v != "" && plainValue(v)
}

// plainValue says whether a plain scalar is read by YAML as the same
// string: no indicator first, no comment, no mapping inside, no null.
func plainValue(v string) bool {
	if v == "" {
		return true
	}
	switch v {
	case "~", "null", "Null", "NULL":
		return false
	}
	if strings.ContainsRune("!&*{}[]|>'\"%@`#,?:-", rune(v[0])) {
		return false
	}
	return !strings.Contains(v, " #") && !strings.Contains(v, ": ") && !strings.HasSuffix(v, ":") && !strings.HasSuffix(v, " ")
}

// Summary reads a lockfile's summary fields (kind, deployment, sequence,
// source commit, digest, driver, application version; not the context
// and values), with the checks that need no more: a known apiVersion and
// kind, a positive sequence, the deployment its path names, a checksum
// present. It does not verify the checksum (resolver.DecodeLock does):
// it is for pages that show many lockfiles at once.
func Summary(file string, data []byte) (*resolver.Instance, error) {
	if len(data) > maxLockSize {
		return nil, fmt.Errorf("%s: lockfile is %d bytes, more than the %d allowed", file, len(data), maxLockSize)
	}
	summary := summaryLines(data)
	h, ok := scanHeader(summary)
	if !ok {
		// Not the engine's canonical form: YAML's parser reads it.
		h = lockHeader{}
		if err := yaml.Unmarshal(summary, &h); err != nil {
			return nil, fmt.Errorf("%s: not a valid lockfile: %w", file, err)
		}
	}
	switch {
	case h.APIVersion != resolver.APIVersion:
		return nil, fmt.Errorf("%s: field apiVersion: expected %q, got %q", file, resolver.APIVersion, h.APIVersion)
	case h.Kind != resolver.KindInstance && h.Kind != resolver.KindTombstone:
		return nil, fmt.Errorf("%s: field kind: expected %q or %q, got %q", file, resolver.KindInstance, resolver.KindTombstone, h.Kind)
	case h.Sequence < 1:
		return nil, fmt.Errorf("%s: field sequence: expected a positive integer, got %d", file, h.Sequence)
	case h.Checksum == "":
		return nil, fmt.Errorf("%s: field checksum: missing", file)
	case !strings.HasSuffix(file, h.Deployment.LockPath()):
		return nil, fmt.Errorf("%s: field deployment: the lockfile names %s, whose lockfile is %s", file, h.Deployment, h.Deployment.LockPath())
	}
	in := &resolver.Instance{
		APIVersion: h.APIVersion, Kind: h.Kind, ID: h.Deployment, Sequence: h.Sequence, SourceCommit: h.SourceCommit,
		Digest: h.Digest, AppVersion: h.AppVersion,
		Driver: resolver.DriverRef{Name: h.Driver.Name, Version: h.Driver.Version, Digest: h.Driver.Digest, UpgradeRequest: h.Driver.UpgradeRequest},
	}
	return in, nil
}

// maxRemembered bounds the remembered lockfiles and commits; past it the
// memory is dropped and filled again.
const maxRemembered = 50000

// NewReader returns a Reader of history, for a desired-state repository
// in the folder dir of the git repository ("" or "." for its root).
func NewReader(history History, dir string) *Reader {
	dir = strings.Trim(path.Clean("/"+dir), "/")
	return &Reader{history: history, dir: dir, decoded: map[gitsource.Hash]decodedLock{}, commits: map[gitsource.Hash]gitsource.CommitInfo{}, timelines: map[timelineKey][]Entry{}, latest: map[resolver.ID]gitsource.Hash{}}
}

// LockPath is the path of id's lockfile from the git repository's root.
func (r *Reader) LockPath(id resolver.ID) string {
	if r.dir == "" {
		return id.LockPath()
	}
	return r.dir + "/" + id.LockPath()
}

// Read returns every lock commit of id reachable from head, oldest first.
// The entries are shared with later calls: read them, do not change them.
//
// A timeline read at an earlier head that head descends from (the
// branch moved forward) is extended with the new commits only, when the
// history can tell descent (Descender, as *gitsource.Repo does).
func (r *Reader) Read(head gitsource.Hash, id resolver.ID) ([]Entry, error) {
	key := timelineKey{head, id}
	r.mu.Lock()
	out, ok := r.timelines[key]
	prev, hasPrev := r.latest[id]
	r.mu.Unlock()
	if ok {
		return out, nil
	}
	from := gitsource.Hash{}
	var before []Entry
	if d, can := r.history.(Descender); can && hasPrev {
		if forward, err := d.Descends(head, prev); err == nil && forward {
			r.mu.Lock()
			before, ok = r.timelines[timelineKey{prev, id}]
			r.mu.Unlock()
			if ok {
				from = prev
			}
		}
	}
	out, err := r.read(from, head, id, before)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if len(r.timelines) >= maxTimelines {
		clear(r.timelines)
		clear(r.latest)
	}
	r.timelines[key] = out
	r.latest[id] = head
	r.mu.Unlock()
	return out, nil
}

// Remembered returns id's timeline at head when it was read already (by
// Read, and not dropped since): without reading git.
func (r *Reader) Remembered(head gitsource.Hash, id resolver.ID) ([]Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out, ok := r.timelines[timelineKey{head, id}]
	return out, ok
}

// Descender tells whether head descends from (or is) an earlier commit:
// *gitsource.Repo.
type Descender interface {
	Descends(head, from gitsource.Hash) (bool, error)
}

var _ Descender = (*gitsource.Repo)(nil)

// read walks the lock commits after from (zero: the root) up to head,
// after the entries before (read up to from).
func (r *Reader) read(from, head gitsource.Hash, id resolver.ID, before []Entry) ([]Entry, error) {
	file := r.LockPath(id)
	changes, err := r.history.LockChanges(from, head, path.Dir(file))
	if err != nil {
		return nil, fmt.Errorf("timeline of %s: %w", id, err)
	}
	// A new slice: the entries before are shared with earlier callers.
	out := slices.Clone(before)
	var prev *resolver.Instance
	for i := len(out) - 1; i >= 0 && prev == nil; i-- {
		prev = out[i].instance
	}
	for _, ch := range changes {
		if ch.Path != file {
			continue
		}
		e, err := r.entry(ch, id)
		if err != nil {
			return nil, fmt.Errorf("timeline of %s: %w", id, err)
		}
		if e.instance != nil {
			e.Workflow = planner.SelectWorkflow(prev, e.instance)
			prev = e.instance
		}
		out = append(out, e)
	}
	return out, nil
}

// pullRequest finds the number in GitHub's and GitLab's merge subjects
// ("Merge pull request #12 from …", "… (#12)", "See merge request !12").
var pullRequest = regexp.MustCompile(`(?:pull request #|\(#|merge request !)(\d+)`)

func (r *Reader) entry(ch gitsource.LockChange, id resolver.ID) (Entry, error) {
	e := Entry{
		Commit: ch.Commit.String(), Author: ch.Author.Name, Date: ch.AuthorTime.UTC(),
		Subject: ch.Subject, Path: ch.Path, Removed: ch.Deleted,
	}
	config := ""
	for _, t := range ch.Trailers {
		switch t.Key {
		case resolver.ConfigCommitTrailer:
			config = t.Value
		case resolver.RetryTrailer:
			if t.Value == id.String() {
				e.Retry = true
			}
		}
	}
	if seq, ok := ch.Locks[id.String()]; ok {
		e.Sequence = int64(seq)
	}
	if !ch.Deleted {
		in, err := r.decode(ch.Blob, ch.Path)
		switch {
		case err != nil:
			e.Error = err.Error()
		default:
			e.instance = in
			e.Sequence, e.Kind, e.Digest, e.AppVersion = in.Sequence, in.Kind, in.Digest, in.AppVersion
			if in.Driver.Name != "" {
				e.Driver = in.Driver.String()
			}
			if config == "" {
				config = in.SourceCommit
			}
		}
	}
	if config != "" && strings.Trim(config, "0") != "" {
		e.ConfigCommit = config
		if h, err := gitsource.ParseHash(config); err == nil {
			if ci, err := r.commit(h); err == nil {
				e.ConfigSubject = ci.Subject
			}
		}
	}
	for _, s := range []string{e.ConfigSubject, e.Subject} {
		if m := pullRequest.FindStringSubmatch(s); m != nil {
			fmt.Sscan(m[1], &e.PullRequest)
			break
		}
	}
	return e, nil
}

func (r *Reader) commit(h gitsource.Hash) (gitsource.CommitInfo, error) {
	r.mu.Lock()
	info, ok := r.commits[h]
	r.mu.Unlock()
	if ok {
		return info, nil
	}
	info, err := r.history.Commit(h)
	if err != nil {
		return info, err
	}
	r.mu.Lock()
	if len(r.commits) >= maxRemembered {
		clear(r.commits)
	}
	r.commits[h] = info
	r.mu.Unlock()
	return info, nil
}

func (r *Reader) decode(blob gitsource.Hash, file string) (*resolver.Instance, error) {
	r.mu.Lock()
	d, ok := r.decoded[blob]
	r.mu.Unlock()
	if ok {
		return d.in, d.err
	}
	data, err := r.history.Blob(blob)
	if err != nil {
		// The object may come with the next fetch: not remembered.
		return nil, err
	}
	d.in, d.err = Summary(file, data)
	r.mu.Lock()
	if len(r.decoded) >= maxRemembered {
		clear(r.decoded)
	}
	r.decoded[blob] = d
	r.mu.Unlock()
	return d.in, d.err
}

// ErrNoEntry is returned by Find for a sequence the timeline does not
// hold.
var ErrNoEntry = errors.New("no lock commit of that sequence")

// Find returns the entry of sequence seq (the last one, should a hand
// edit have used a number twice).
func Find(entries []Entry, seq int64) (*Entry, error) {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Sequence == seq {
			return &entries[i], nil
		}
	}
	return nil, fmt.Errorf("sequence %d: %w", seq, ErrNoEntry)
}
