package gitsource

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrAuth means the remote refused the credentials (or asked for some and
	// none were given).
	ErrAuth = errors.New("authentication failed")
	// ErrConflict means the branch moved on the remote (or locally) on every
	// attempt of CommitLocks.
	ErrConflict = errors.New("branch moved concurrently")
	// ErrBranchLocked: another git process holds the branch's lock (its
	// refs/heads/<branch>.lock) in a local repository.
	ErrBranchLocked = errors.New("the branch is locked by another git process")
	// ErrIndexLocked: another git process holds the lock of the index
	// (its index.lock) of the worktree a local commit updates.
	ErrIndexLocked = errors.New("the index is locked by another git process")
	// ErrNoRemote means the operation needs a remote but the Repo was opened
	// without one.
	ErrNoRemote = errors.New("repository has no remote")
	// ErrCommitNotFound means a commit is not in the repository, for
	// example a commit remembered from before a force push.
	ErrCommitNotFound = errors.New("commit not found")
	// ErrBranchNotFound means the tracked branch does not exist (yet).
	ErrBranchNotFound = errors.New("branch not found")
	// ErrSymlink is returned when an fs.FS operation would follow a symbolic
	// link; links are reported (Lstat, ReadDir, ReadLink), never followed, so
	// that a link cannot lead a reader outside the tree.
	ErrSymlink = errors.New("is a symbolic link; links are not followed")
	// ErrDirtyWorktree means a path CommitLocks must write has uncommitted
	// changes in the index or the worktree.
	ErrDirtyWorktree = errors.New("uncommitted changes")
	// ErrInvalidPath means a path in a Change is not a clean, relative,
	// slash-separated path inside the repository.
	ErrInvalidPath = errors.New("invalid path")
	// ErrNoMergeBase means HEAD and its upstream branch share no commit
	// (UpstreamMergeBase).
	ErrNoMergeBase = errors.New("no common commit")
	// ErrShallow means a commit is missing from a shallow clone: it lies
	// beyond the history the clone fetched. CI checkouts are shallow by
	// default, and the sequences of lock commits are numbered from the
	// branch's whole history, so the message says how to fetch it.
	// ErrPartialClone means an object is missing from a partial clone (git
	// clone --filter): git fetches such objects on demand, go-git cannot,
	// and the sequences are numbered from lockfiles of the whole history.
	ErrPartialClone = errors.New("the clone is partial (cloned with --filter), and the sequences of lock commits are numbered from the lockfiles of the branch's whole history, which styrminctl cannot fetch on demand: clone without a filter (no filter in actions/checkout)")
	ErrShallow      = errors.New("the clone is shallow, and the sequences of lock commits are numbered from the branch's whole history: fetch it (git fetch --unshallow; fetch-depth: 0 in actions/checkout; GIT_DEPTH: 0 in GitLab CI)")
)

// BranchNotFoundError is a branch CommitRequest.ExistingBranch requires
// that does not exist: on the remote (remote mode) or locally. It wraps
// ErrBranchNotFound.
type BranchNotFoundError struct {
	// Remote and URL name the remote ("" in local mode); URL holds no
	// credentials.
	Remote, URL string
	// Branch is the branch that was looked for.
	Branch string
	// Upstream is the branch on Remote that the local branch of the
	// same name tracks (branch.<name>.merge), when it has another name:
	// the branch most likely meant ("" otherwise).
	Upstream string
}

func (e *BranchNotFoundError) Error() string {
	if e.Remote == "" {
		return fmt.Sprintf("gitsource: there is no local branch %s", e.Branch)
	}
	msg := fmt.Sprintf("gitsource: branch %s/%s does not exist: %s has no branch %s", e.Remote, e.Branch, e.URL, e.Branch)
	if e.Upstream != "" {
		msg += fmt.Sprintf(" (the local branch %s tracks %s/%s)", e.Branch, e.Remote, e.Upstream)
	}
	return msg
}

func (e *BranchNotFoundError) Unwrap() error { return ErrBranchNotFound }

// commitError wraps an error reading commit h, mapping a missing object to
// ErrCommitNotFound.
func commitError(h fmt.Stringer, err error) error {
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return fmt.Errorf("gitsource: commit %s: %w", h, ErrCommitNotFound)
	}
	return fmt.Errorf("gitsource: commit %s: %w", h, err)
}

// commitError is commitError that, in a shallow clone, also wraps
// ErrShallow for a missing commit: there a bare "commit not found" would
// name a hash and not the cause. The caller holds r.mu.
func (r *Repo) commitError(h fmt.Stringer, err error) error {
	if errors.Is(err, plumbing.ErrObjectNotFound) && r.shallow() {
		return fmt.Errorf("gitsource: commit %s: %w: %w", h, ErrCommitNotFound, ErrShallow)
	}
	return commitError(h, err)
}

// blobError is the error of a lockfile blob a history walk could not
// read, wrapping ErrPartialClone for one missing from a partial clone:
// there a bare "object not found" names a hash and not the cause.
func (r *Repo) blobError(h plumbing.Hash, err error) error {
	if errors.Is(err, plumbing.ErrObjectNotFound) && r.partial() {
		return fmt.Errorf("gitsource: blob %s: %w: %w", h, err, ErrPartialClone)
	}
	return fmt.Errorf("blob %s: %w", h, err)
}

// partial reports whether the repository is a partial clone: git marks
// one with extensions.partialClone or a promisor remote.
func (r *Repo) partial() bool {
	cfg, err := r.repo.Config()
	if err != nil {
		return false
	}
	if cfg.Raw.Section("extensions").Option("partialclone") != "" {
		return true
	}
	for _, s := range cfg.Raw.Section("remote").Subsections {
		if s.Option("promisor") == "true" {
			return true
		}
	}
	return false
}

// shallow reports whether the repository is a shallow clone (it lists
// shallow commits, .git/shallow). The caller holds r.mu.
func (r *Repo) shallow() bool {
	s, err := r.storer.Shallow()
	return err == nil && len(s) > 0
}

// transportError wraps an error from a remote operation with the operation,
// the remote (credentials removed) and, for refused credentials, ErrAuth.
func transportError(op, remote string, err error) error {
	if errors.Is(err, transport.ErrAuthenticationRequired) ||
		errors.Is(err, transport.ErrAuthorizationFailed) ||
		strings.Contains(err.Error(), "unable to authenticate") {
		return fmt.Errorf("gitsource: %s %s: %w: check the token or key for this remote: %w", op, redactURL(remote), ErrAuth, err)
	}
	return fmt.Errorf("gitsource: %s %s: %w", op, redactURL(remote), err)
}

// unparseableURL is what PublicURL and the errors of this package show
// for a URL that does not parse: what in it is a credential cannot be
// told, so none of it is shown.
const unparseableURL = "<unparseable URL>"

// PublicURL is raw without credentials, fit to be written down (a
// lockfile): the user information of an http(s) URL is removed (a lone
// user name there is often the token itself), the password of any other.
// Credentials come from the Auth of whoever fetches, never from the URL.
// A URL that does not parse (a password holding '^' or a stray '%') is
// "<unparseable URL>", an scp-like ssh address (git@host:path) itself.
func PublicURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || atOutsideUserinfo(u) {
		return unparsed(raw)
	}
	if u.User == nil {
		return raw
	}
	if u.Scheme == "http" || u.Scheme == "https" {
		u.User = nil
	} else {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

// redactURL removes a password or token from a URL so that it can appear in
// errors and logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || atOutsideUserinfo(u) {
		return unparsed(raw)
	}
	if u.User == nil {
		return raw
	}
	switch {
	case u.Scheme == "http" || u.Scheme == "https":
		// A lone user name over HTTP is often the token itself.
		u.User = url.User("REDACTED")
	default:
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
		}
	}
	return u.String()
}

// atOutsideUserinfo reports whether u, parsed, has a '@' outside its user
// information: after its host, where a user name or password holding
// '/', '?' or '#' ends the authority early (https://user:/pw@host parses
// as host "user:" and path "/pw@host", https://u:a@b/c@host as password
// "a" and path "/c@host"), or in a URL without an authority
// (git:pw@host:path). What in it is a credential cannot be told, as in
// one that does not parse.
func atOutsideUserinfo(u *url.URL) bool {
	return strings.Contains(u.Opaque+u.Path+u.RawPath+u.RawQuery+u.Fragment, "@")
}

// unparsed is how a URL that url.Parse rejects, or whose '@' is outside
// its user information, is shown: itself when it can hold no credentials
// (no '@') or is an scp-like ssh address ([user@]host:path, which holds
// no password), unparseableURL otherwise.
func unparsed(raw string) string {
	if !strings.Contains(raw, "@") {
		return raw
	}
	host, path, ok := strings.Cut(raw, ":")
	// A '@' after the first ':' may end a password (user:password@host).
	if ok && !strings.Contains(raw, "://") && !strings.ContainsAny(host, "/\\") && !strings.Contains(path, "@") {
		return raw
	}
	return unparseableURL
}

// errUnparseableUserinfo stands for url.Parse's error on a URL that may
// hold credentials.
var errUnparseableUserinfo = errors.New("it does not parse: percent-encode the characters of its user name and password other than letters, digits and -._~")

// urlError is err, from parsing raw, fit for an error message: never the
// *url.Error itself, which quotes the URL, and, when raw may hold
// credentials (it has a '@'), not url.Parse's words either: they may quote
// a piece of them (`invalid port ":<password>" after host` for a '#' in a
// password).
func urlError(raw string, err error) error {
	if strings.Contains(raw, "@") {
		return errUnparseableUserinfo
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
