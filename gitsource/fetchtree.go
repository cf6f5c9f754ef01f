package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
)

// FetchTree fetches one revision (a tag, a branch or a commit hash) of a
// remote repository into memory and returns the folder dir of its tree
// ("." for the root) with the commit it came from. Driver versions kept in
// other repositories are read this way: a small repository, fetched whole
// once per resolution, nothing written to disk. Without a deadline in ctx
// the fetch gives up after DefaultNetworkTimeout.
func FetchTree(ctx context.Context, url, rev, dir string, auth Auth) (fs.FS, Hash, error) {
	url, method, err := auth.remote(url)
	if err != nil {
		return nil, Hash{}, err
	}
	gr, err := git.Init(memory.NewStorage(), nil)
	if err != nil {
		return nil, Hash{}, err
	}
	remote, err := gr.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{url}})
	if err != nil {
		return nil, Hash{}, err
	}
	fetchCtx, cancel := networkContext(ctx, 0)
	defer cancel()
	err = remote.FetchContext(fetchCtx, &git.FetchOptions{
		Auth: method,
		RefSpecs: []config.RefSpec{
			"+refs/heads/*:refs/remotes/origin/*",
			"+refs/tags/*:refs/tags/*",
		},
		Tags: git.NoTags,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, Hash{}, transportError("fetch", url, err)
	}
	var h *plumbing.Hash
	for _, candidate := range []string{"refs/tags/" + rev, "refs/remotes/origin/" + rev, rev} {
		if h, err = gr.ResolveRevision(plumbing.Revision(candidate)); err == nil {
			break
		}
	}
	if err != nil {
		return nil, Hash{}, fmt.Errorf("gitsource: %s: revision %q is no tag, branch or commit: %w", redactURL(url), rev, ErrCommitNotFound)
	}
	r := &Repo{repo: gr, storer: gr.Storer, remoteName: "origin", remoteURL: url, auth: method}
	fsys, err := r.FS(fromPlumbing(*h))
	if err != nil {
		return nil, Hash{}, err
	}
	if dir == "" || dir == "." {
		return fsys, fromPlumbing(*h), nil
	}
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, Hash{}, fmt.Errorf("gitsource: %s@%s: folder %q: %w", redactURL(url), rev, dir, err)
	}
	if _, err := fs.Stat(fsys, dir); err != nil {
		return nil, Hash{}, fmt.Errorf("gitsource: %s@%s: folder %q: %w", redactURL(url), rev, dir, err)
	}
	return sub, fromPlumbing(*h), nil
}

// FetchCommit fetches a remote repository into memory and returns the tree
// of commit (a full hash): the agent reads a driver version kept in another
// repository at the commit its lock recorded, whatever its ref points at
// now. A commit no branch or tag of the remote reaches any more is
// ErrCommitNotFound.
func FetchCommit(ctx context.Context, url string, commit Hash, auth Auth) (fs.FS, error) {
	fsys, got, err := FetchTree(ctx, url, commit.String(), ".", auth)
	if err != nil {
		return nil, err
	}
	if got != commit {
		// A branch or tag named like the hash: not the commit asked for.
		return nil, fmt.Errorf("gitsource: %s: commit %s: %w", redactURL(url), commit, ErrCommitNotFound)
	}
	return fsys, nil
}

// SameHost reports whether two remote URLs use the same protocol and host
// (and port), so that the credentials of one may be sent to the other.
func SameHost(a, b string) bool {
	ea, err := transport.NewEndpoint(a)
	if err != nil {
		return false
	}
	eb, err := transport.NewEndpoint(b)
	if err != nil {
		return false
	}
	return ea.Protocol == eb.Protocol && strings.EqualFold(ea.Host, eb.Host) && port(ea) == port(eb)
}

// port is e's port, the protocol's default when the URL names none.
func port(e *transport.Endpoint) int {
	if e.Port != 0 {
		return e.Port
	}
	return map[string]int{"http": 80, "https": 443, "ssh": 22}[e.Protocol]
}

// ErrPlainHTTPCredentials is returned by CredentialsFor for credentials
// that would go over plain http.
var ErrPlainHTTPCredentials = errors.New("credentials are never sent over plain http")

// Loopback reports whether host names this machine (localhost, 127.0.0.0/8,
// ::1): plain http to it never crosses a network, so credentials may go
// there (a local git server, the tests' own).
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// CredentialsFor returns the credentials to fetch url with, given auth, the
// credentials of the desired-state repository at repoURL: auth when url is
// on the same protocol, host and port (SameHost), none for any other host
// (a URL in styrmin.cue must not make a token go to a host whoever wrote it
// controls) and none for a local path. A token for a plain http URL is an
// error wrapping ErrPlainHTTPCredentials (it would cross the network in
// clear) unless the host is this machine (Loopback). repoURL "" (no remote) shares credentials with no host.
func CredentialsFor(repoURL, url string, auth Auth) (Auth, error) {
	if auth.isZero() || repoURL == "" || !SameHost(repoURL, url) {
		return Auth{}, nil
	}
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		return Auth{}, nil
	}
	switch ep.Protocol {
	case "http":
		if auth.Token != "" && !Loopback(ep.Host) {
			return Auth{}, fmt.Errorf("gitsource: %s: %w: use an https URL", redactURL(url), ErrPlainHTTPCredentials)
		}
		if auth.Token == "" {
			return Auth{}, nil
		}
	case "file":
		return Auth{}, nil
	}
	return auth, nil
}

// RemoteHead lists the refs of a remote repository (git ls-remote: one
// round trip, nothing fetched) and returns the head of branch, or of the
// branch the remote's HEAD names when branch is "". A missing branch is
// ErrBranchNotFound; refused credentials wrap ErrAuth. Without a deadline
// in ctx it gives up after DefaultNetworkTimeout.
func RemoteHead(ctx context.Context, url, branch string, auth Auth) (Hash, error) {
	url, method, err := auth.remote(url)
	if err != nil {
		return Hash{}, err
	}
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{url}})
	ctx, cancel := networkContext(ctx, 0)
	defer cancel()
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: method})
	if err != nil {
		return Hash{}, transportError("list refs of", url, err)
	}
	byName := map[plumbing.ReferenceName]*plumbing.Reference{}
	for _, ref := range refs {
		byName[ref.Name()] = ref
	}
	want := plumbing.NewBranchReferenceName(branch)
	if branch == "" {
		want = plumbing.HEAD
	}
	ref := byName[want]
	if ref != nil && ref.Type() == plumbing.SymbolicReference {
		// HEAD: the branch it names.
		ref = byName[ref.Target()]
	}
	if ref != nil && ref.Type() == plumbing.HashReference {
		return fromPlumbing(ref.Hash()), nil
	}
	if branch == "" {
		return Hash{}, fmt.Errorf("gitsource: %s: the remote names no HEAD branch: %w", redactURL(url), ErrBranchNotFound)
	}
	return Hash{}, fmt.Errorf("gitsource: %s: branch %q: %w", redactURL(url), branch, ErrBranchNotFound)
}
