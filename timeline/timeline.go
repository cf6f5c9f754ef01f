package timeline

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

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

	instance *resolver.Instance
}

// Instance returns the entry's instance (nil when Removed or Error), with
// the placeholders of its sensitive values.
func (e *Entry) Instance() *resolver.Instance { return e.instance }

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
}

type decodedLock struct {
	in  *resolver.Instance
	err error
}

// maxRemembered bounds the remembered lockfiles and commits; past it the
// memory is dropped and filled again.
const maxRemembered = 50000

// NewReader returns a Reader of history, for a desired-state repository
// in the folder dir of the git repository ("" or "." for its root).
func NewReader(history History, dir string) *Reader {
	dir = strings.Trim(path.Clean("/"+dir), "/")
	return &Reader{history: history, dir: dir, decoded: map[gitsource.Hash]decodedLock{}, commits: map[gitsource.Hash]gitsource.CommitInfo{}}
}

// LockPath is the path of id's lockfile from the git repository's root.
func (r *Reader) LockPath(id resolver.ID) string {
	if r.dir == "" {
		return id.LockPath()
	}
	return r.dir + "/" + id.LockPath()
}

// Read returns every lock commit of id reachable from head, oldest first.
func (r *Reader) Read(head gitsource.Hash, id resolver.ID) ([]Entry, error) {
	file := r.LockPath(id)
	changes, err := r.history.LockChanges(gitsource.Hash{}, head, path.Dir(file))
	if err != nil {
		return nil, fmt.Errorf("timeline of %s: %w", id, err)
	}
	var out []Entry
	var prev *resolver.Instance
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
	info, err := r.commit(ch.Commit)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{
		Commit: ch.Commit.String(), Author: info.Author.Name, Date: info.AuthorTime.UTC(),
		Subject: info.Subject, Path: ch.Path, Removed: ch.Deleted,
	}
	config := ""
	for _, t := range gitsource.ParseTrailers(info.Message) {
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
	d.in, d.err = resolver.DecodeLock(file, data)
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
