package gitsource

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"slices"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
)

// DefaultMaxFetchBytes bounds what one fetch of FetchTree or FetchCommit
// holds in memory: the objects the remote's pack inflates to (the pack
// itself is read as it streams in, not kept). A driver repository holds
// CUE and charts (the example repository's drivers/ folder, every version
// of four drivers, is 140 KB); the bound is the agent's defence against a
// repository that is no such thing, or a multi-GB blob that packs to a
// few MB, which otherwise inflated into its memory (256 Mi by default) at
// every restart.
const DefaultMaxFetchBytes = 32 << 20

// FetchLimitError reports a fetch refused because the remote's answer
// would hold more than its limit in memory. Nothing of it is kept.
type FetchLimitError struct {
	// URL is the remote, without credentials.
	URL string
	// Limit is the bound, in bytes.
	Limit int64
	// What says what went over it.
	What string
	// History says what history was fetched to reach the commit ("the
	// branches to depth 50"): no branch or tag points at it and the
	// server would not send it alone. "" when only the commit was.
	History string

	stage int // of the fetchSpec refused
}

func (e *FetchLimitError) Error() string {
	limit := fmt.Sprintf("%d bytes", e.Limit)
	if e.Limit >= 1<<20 && e.Limit%(1<<20) == 0 {
		limit = fmt.Sprintf("%d MiB", e.Limit>>20)
	}
	if e.History == "" {
		return fmt.Sprintf("gitsource: fetch %s: %s, over the limit of %s one fetch may hold in memory: the commit's own files exceed it; keep large files out of driver repositories",
			e.URL, e.What, limit)
	}
	return fmt.Sprintf("gitsource: fetch %s: %s, over the limit of %s one fetch may hold in memory: no branch or tag points at the commit and it was not sent alone by its hash, so %s was fetched, and the repository's history up to the commit exceeds the limit; a tag on the commit, or a server that sends commits by hash (uploadpack.allowReachableSHA1InWant; GitHub and GitLab do), would fetch the commit alone",
		e.URL, e.What, limit, e.History)
}

// FetchTree fetches one revision (a tag, a branch or a commit hash) of a
// remote repository into memory and returns the folder dir of its tree
// ("." for the root) with the commit it came from, within
// DefaultMaxFetchBytes (FetchTreeWithin). Driver versions kept in other
// repositories are read this way, nothing written to disk. Without a
// deadline in ctx the fetch gives up after DefaultNetworkTimeout.
func FetchTree(ctx context.Context, url, rev, dir string, auth Auth) (fs.FS, Hash, error) {
	return FetchTreeWithin(ctx, url, rev, dir, auth, 0)
}

// FetchTreeWithin is FetchTree holding at most maxBytes in memory
// (DefaultMaxFetchBytes when ≤ 0); more is a *FetchLimitError. When a
// branch or tag of the remote points at rev (or is rev), only that commit
// is fetched, without history (depth 1). Another commit hash is asked for
// by its hash, alone, and when the server refuses that, found in the
// history of the branches, fetched deeper and deeper (historyDepths),
// then in that of the tags: each fetch within maxBytes. The tree returned
// keeps only the objects of its commit.
func FetchTreeWithin(ctx context.Context, url, rev, dir string, auth Auth, maxBytes int64) (fs.FS, Hash, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxFetchBytes
	}
	url, method, err := auth.remote(url)
	if err != nil {
		return nil, Hash{}, err
	}
	fetchCtx, cancel := networkContext(ctx, 0)
	defer cancel()
	lister := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{url}})
	refs, err := lister.ListContext(fetchCtx, &git.ListOptions{Auth: method, PeelingOption: git.AppendPeeled, ProxyOptions: sshDeadline(fetchCtx, url)})
	if err != nil {
		return nil, Hash{}, transportError("list refs of", url, err)
	}
	var h plumbing.Hash
	var store *boundedStorage
	var over *FetchLimitError // of a stage of history ended by the limit
	for _, spec := range fetchSpecs(refs, rev) {
		if over != nil && spec.stage == over.stage {
			continue
		}
		store = &boundedStorage{Storage: memory.NewStorage(), url: PublicURL(url), max: maxBytes}
		gr, err := git.Init(store, nil)
		if err != nil {
			return nil, Hash{}, err
		}
		remote, err := gr.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{url}})
		if err != nil {
			return nil, Hash{}, err
		}
		err = remote.FetchContext(fetchCtx, &git.FetchOptions{Auth: method, RefSpecs: spec.refSpecs, Depth: spec.depth, Tags: git.NoTags, ProxyOptions: sshDeadline(fetchCtx, url)})
		var limit *FetchLimitError
		if errors.As(err, &limit) && spec.history == "" {
			// The commit alone is over the limit: nothing else helps.
			return nil, Hash{}, limit
		}
		if errors.As(err, &limit) {
			// The commit may be in the next stage's refs, within it.
			limit.History, limit.stage = spec.history, spec.stage
			over = limit
			continue
		}
		if err != nil && spec.byHash {
			// The server does not send commits by hash
			// (ErrExactSHA1NotSupported) or not this one (only its
			// refs' heads): look for it in the history.
			continue
		}
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil, Hash{}, transportError("fetch", url, err)
		}
		var found *plumbing.Hash
		for _, candidate := range []string{"refs/tags/" + rev, "refs/remotes/origin/" + rev, rev} {
			if found, err = gr.ResolveRevision(plumbing.Revision(candidate)); err == nil {
				break
			}
		}
		if err == nil {
			h = *found
			break
		}
		// Not in this fetch (the ref moved on between the listing and
		// the fetch, or the commit is deeper in the history): the next
		// spec fetches more.
	}
	if h.IsZero() && over != nil {
		return nil, Hash{}, over
	}
	if h.IsZero() {
		return nil, Hash{}, fmt.Errorf("gitsource: %s: revision %q is no tag, branch or commit: %w", redactURL(url), rev, ErrCommitNotFound)
	}
	snap, err := keepCommit(store.Storage, h)
	if err != nil {
		return nil, Hash{}, fmt.Errorf("gitsource: %s@%s: %w", redactURL(url), rev, err)
	}
	gr, err := git.Init(snap, nil)
	if err != nil {
		return nil, Hash{}, err
	}
	r := &Repo{repo: gr, storer: snap, remoteName: "origin", remoteURL: url, rawURL: url, auth: method}
	fsys, err := r.FS(fromPlumbing(h))
	if err != nil {
		return nil, Hash{}, err
	}
	if dir == "" || dir == "." {
		return fsys, fromPlumbing(h), nil
	}
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, Hash{}, fmt.Errorf("gitsource: %s@%s: folder %q: %w", redactURL(url), rev, dir, err)
	}
	if _, err := fs.Stat(fsys, dir); err != nil {
		return nil, Hash{}, fmt.Errorf("gitsource: %s@%s: folder %q: %w", redactURL(url), rev, dir, err)
	}
	return sub, fromPlumbing(h), nil
}

// fetchSpec is one way to fetch a revision.
type fetchSpec struct {
	refSpecs []config.RefSpec
	depth    int    // 0: the whole history
	byHash   bool   // wants the commit by its hash, which a server may refuse
	history  string // what history it fetches (FetchLimitError.History), "" for none
	stage    int    // of commitSpecs: the fetches of the same refs, deeper and deeper
}

// everyRef fetches every branch and tag: what any revision may need.
func everyRef() fetchSpec {
	return fetchSpec{refSpecs: []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"}, history: "every branch and tag"}
}

// historyDepths are the depths a branch is fetched at in turn for a
// commit no ref points at, 0 being the whole history: a locked commit is
// most often a few commits behind its branch, and a repository with
// charts' .tgz files in its history may not fit in one fetch whole.
var historyDepths = []int{50, 500, 0}

// commitSpecs are the fetches to try for commit hash rev that no branch or
// tag points at: the commit alone, by its hash (GitHub, GitLab and a git
// server with uploadpack.allowReachableSHA1InWant send it); then the
// branch HEAD names (head) at each of historyDepths, without the other
// branches (a gh-pages branch, say); then, unless that is the only one of
// the remote's branches, every branch at each depth; then, as a tag may
// reach a commit no branch does, the tags' whole history. Each set of refs
// is a stage: a fetch over the limit ends its stage, deeper being larger.
func commitSpecs(rev, head string, branches int) []fetchSpec {
	specs := []fetchSpec{{refSpecs: []config.RefSpec{config.RefSpec(rev + ":refs/remotes/origin/wanted")}, depth: 1, byHash: true}}
	stage := func(n int, refSpec config.RefSpec, what string) {
		for _, depth := range historyDepths {
			history := "the history of " + what
			if depth > 0 {
				history = fmt.Sprintf("%s to depth %d", what, depth)
			}
			specs = append(specs, fetchSpec{refSpecs: []config.RefSpec{refSpec}, depth: depth, history: history, stage: n})
		}
	}
	if b, ok := strings.CutPrefix(head, "refs/heads/"); ok {
		stage(1, config.RefSpec("+"+head+":refs/remotes/origin/"+b), "branch "+b)
	}
	if branches > 1 || !strings.HasPrefix(head, "refs/heads/") {
		stage(2, "+refs/heads/*:refs/remotes/origin/*", "every branch")
	}
	return append(specs, fetchSpec{refSpecs: []config.RefSpec{"+refs/tags/*:refs/tags/*"}, history: "the history of every tag", stage: 3})
}

// fetchSpecs are the fetches to try for rev, given the remote's refs: the
// tag or branch named rev, or one pointing at the commit rev, at depth 1
// (only its commit, no history, no other branch); for a commit hash,
// then its commitSpecs (the ref may have moved on since the listing);
// for anything else, every ref. Where the names are the same, tags come
// first, as ResolveRevision's candidates do.
func fetchSpecs(refs []*plumbing.Reference, rev string) []fetchSpec {
	tips := map[string]string{} // ref name -> the commit (or tag) hash it points at
	var names []string
	for _, ref := range refs {
		if ref.Type() != plumbing.HashReference {
			continue
		}
		name := ref.Name().String()
		tips[name] = ref.Hash().String()
		names = append(names, name)
	}
	slices.Sort(names)
	var rest []fetchSpec
	if plumbing.IsHash(rev) {
		var head string
		branches := 0
		for _, ref := range refs {
			if ref.Name() == plumbing.HEAD && ref.Type() == plumbing.SymbolicReference {
				head = ref.Target().String()
			}
			if ref.Name().IsBranch() {
				branches++
			}
		}
		rest = commitSpecs(rev, head, branches)
	}
	shallow := func(name string) []fetchSpec {
		dst := name
		if b, ok := strings.CutPrefix(name, "refs/heads/"); ok {
			dst = "refs/remotes/origin/" + b
		}
		return append([]fetchSpec{{refSpecs: []config.RefSpec{config.RefSpec("+" + name + ":" + dst)}, depth: 1}}, rest...)
	}
	for _, name := range []string{"refs/tags/" + rev, "refs/heads/" + rev} {
		if _, ok := tips[name]; ok {
			return shallow(name)
		}
	}
	if plumbing.IsHash(rev) {
		for _, name := range names {
			base := strings.TrimSuffix(name, "^{}")
			if tips[name] == rev && (strings.HasPrefix(base, "refs/heads/") || strings.HasPrefix(base, "refs/tags/")) {
				return shallow(base)
			}
		}
		return rest
	}
	return []fetchSpec{everyRef()}
}

// FetchCommit fetches commit (a full hash) of a remote repository into
// memory and returns its tree within DefaultMaxFetchBytes
// (FetchCommitWithin).
func FetchCommit(ctx context.Context, url string, commit Hash, auth Auth) (fs.FS, error) {
	return FetchCommitWithin(ctx, url, commit, auth, 0)
}

// FetchCommitWithin fetches commit (a full hash) of a remote repository
// into memory, holding at most maxBytes (FetchTreeWithin), and returns its
// tree: the agent reads a driver version kept in another repository at the
// commit its lock recorded, whatever its ref points at now. A commit no
// branch or tag of the remote reaches any more is ErrCommitNotFound.
func FetchCommitWithin(ctx context.Context, url string, commit Hash, auth Auth, maxBytes int64) (fs.FS, error) {
	fsys, got, err := FetchTreeWithin(ctx, url, commit.String(), ".", auth, maxBytes)
	if err != nil {
		return nil, err
	}
	if got != commit {
		// A branch or tag named like the hash: not the commit asked for.
		return nil, fmt.Errorf("gitsource: %s: commit %s: %w", redactURL(url), commit, ErrCommitNotFound)
	}
	return fsys, nil
}

// boundedStorage is the memory storage of one fetch. go-git's memory
// storage inflates every object of the pack it is sent, each whole before
// it is stored, so a small pack (a multi-GB blob of zeros packs to a few
// MB) could fill the agent's memory. So it takes the pack itself
// (storer.PackfileWriter) and stores its objects as they stream in, adding
// up the sizes they declare (a delta's in its own header, as a small delta
// can copy its base over and over) and refusing the fetch before
// inflating the one that would pass max bytes; each object's content is
// allocated once, at its declared size.
type boundedStorage struct {
	*memory.Storage
	url string // without credentials
	max int64
}

var _ storer.PackfileWriter = (*boundedStorage)(nil)

// PackfileWriter takes the pack a fetch receives; its Close reports
// whether it was stored.
func (s *boundedStorage) PackfileWriter() (io.WriteCloser, error) {
	pr, pw := io.Pipe()
	w := &packWriter{pw: pw, done: make(chan error, 1)}
	go func() {
		err := s.store(pr)
		if err == nil {
			if n, _ := io.Copy(io.Discard, pr); n > 0 {
				err = fmt.Errorf("gitsource: %d bytes after the pack's checksum: %w", n, packfile.ErrMalformedPackFile)
			}
		}
		if err != nil {
			// The fetch's next write fails with it.
			_ = pr.CloseWithError(err)
		}
		w.done <- err
	}()
	return w, nil
}

// packWriter hands a pack to boundedStorage.store.
type packWriter struct {
	pw   *io.PipeWriter
	done chan error
}

func (w *packWriter) Write(p []byte) (int, error) { return w.pw.Write(p) }

func (w *packWriter) Close() error {
	_ = w.pw.Close()
	return <-w.done
}

// objectOverhead is what storing an object costs besides its content:
// the object, its entries in the storage's maps and, while the pack is
// read, its offset. A pack of millions of empty objects is refused too.
const objectOverhead = 256

// store reads the pack from r and stores its objects.
func (s *boundedStorage) store(r io.Reader) error {
	sc := packfile.NewScanner(r)
	_, count, err := sc.Header()
	if err != nil {
		return err
	}
	var total int64
	charge := func(n int64, what string) error {
		if total += objectOverhead + n; n > s.max || total > s.max {
			return &FetchLimitError{URL: s.url, Limit: s.max, What: what}
		}
		return nil
	}
	byOffset := make(map[int64]plumbing.Hash)
	var waiting []*delta // whose base is further on (a ref delta)
	for range count {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return err
		}
		if !oh.Type.IsDelta() {
			if err := charge(oh.Length, fmt.Sprintf("its objects inflate to at least %d bytes", total+oh.Length)); err != nil {
				return err
			}
			o, err := inflate(sc, oh.Type, oh.Length)
			if err != nil {
				return err
			}
			if _, err := s.Storage.SetEncodedObject(o); err != nil {
				return err
			}
			byOffset[oh.Offset] = o.h
			continue
		}
		// The delta's own text, held until it is applied.
		if err := charge(oh.Length, fmt.Sprintf("a delta in its pack inflates to %d bytes", oh.Length)); err != nil {
			return err
		}
		d := &delta{header: oh}
		if d.data, err = inflateBytes(sc, oh.Length); err != nil {
			return err
		}
		size, err := d.targetSize()
		if err != nil {
			return err
		}
		if err := charge(size, fmt.Sprintf("its objects inflate to at least %d bytes", total+size)); err != nil {
			return err
		}
		if ok, err := s.apply(d, byOffset); err != nil {
			return err
		} else if !ok {
			waiting = append(waiting, d)
		}
	}
	if _, err := sc.Checksum(); err != nil {
		return err
	}
	// Ref deltas whose bases came after them, until none is left.
	for len(waiting) > 0 {
		rest := waiting[:0]
		for _, d := range waiting {
			ok, err := s.apply(d, byOffset)
			if err != nil {
				return err
			}
			if !ok {
				rest = append(rest, d)
			}
		}
		if len(rest) == len(waiting) {
			return fmt.Errorf("gitsource: %d deltas of the pack have no base in it: %w", len(rest), packfile.ErrMalformedPackFile)
		}
		waiting = rest
	}
	return nil
}

// apply stores the object d makes when its base is stored already.
func (s *boundedStorage) apply(d *delta, byOffset map[int64]plumbing.Hash) (bool, error) {
	base, ok := d.header.Reference, true
	if d.header.Type == plumbing.OFSDeltaObject {
		base, ok = byOffset[d.header.OffsetReference]
	}
	if !ok || s.Storage.HasEncodedObject(base) != nil {
		return false, nil
	}
	b, err := s.Storage.EncodedObject(plumbing.AnyObject, base)
	if err != nil {
		return false, err
	}
	size, _ := d.targetSize()
	rc, err := packfile.ReaderFromDelta(b, bytes.NewReader(d.data))
	if err != nil {
		return false, err
	}
	defer rc.Close()
	data := make([]byte, size)
	if _, err := io.ReadFull(rc, data); err != nil {
		return false, fmt.Errorf("gitsource: applying a delta: %w", err)
	}
	o := newFetchedObject(b.Type(), data)
	if _, err := s.Storage.SetEncodedObject(o); err != nil {
		return false, err
	}
	byOffset[d.header.Offset] = o.h
	d.data = nil
	return true, nil
}

// delta is a delta object of a pack, inflated.
type delta struct {
	header *packfile.ObjectHeader
	data   []byte
}

// targetSize is the size of the object d makes: the second number of its
// header, after its base's size (git's varints, as encoding/binary's).
func (d *delta) targetSize() (int64, error) {
	_, n := binary.Uvarint(d.data)
	if n > 0 {
		size, m := binary.Uvarint(d.data[n:])
		if m > 0 && size <= math.MaxInt64 {
			return int64(size), nil
		}
	}
	return 0, fmt.Errorf("gitsource: a delta without a valid header: %w", packfile.ErrMalformedPackFile)
}

// inflate reads the next object of sc, of size bytes, as an object of
// type t.
func inflate(sc *packfile.Scanner, t plumbing.ObjectType, size int64) (*fetchedObject, error) {
	data, err := inflateBytes(sc, size)
	if err != nil {
		return nil, err
	}
	return newFetchedObject(t, data), nil
}

// inflateBytes reads the next object of sc into a slice of its declared
// size (the scanner refuses more).
func inflateBytes(sc *packfile.Scanner, size int64) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, size))
	if _, _, err := sc.NextObject(buf); err != nil {
		return nil, err
	}
	if int64(buf.Len()) != size {
		return nil, fmt.Errorf("gitsource: an object of %d bytes declares %d: %w", buf.Len(), size, packfile.ErrMalformedPackFile)
	}
	return buf.Bytes(), nil
}

// fetchedObject is an object of a fetch: its content allocated once, at
// its size (a plumbing.MemoryObject grows its content as it is written, to
// up to twice that). Read only.
type fetchedObject struct {
	t    plumbing.ObjectType
	h    plumbing.Hash
	data []byte
}

var _ plumbing.EncodedObject = (*fetchedObject)(nil)

func newFetchedObject(t plumbing.ObjectType, data []byte) *fetchedObject {
	return &fetchedObject{t: t, h: plumbing.ComputeHash(t, data), data: data}
}

func (o *fetchedObject) Hash() plumbing.Hash           { return o.h }
func (o *fetchedObject) Type() plumbing.ObjectType     { return o.t }
func (o *fetchedObject) SetType(t plumbing.ObjectType) { o.t = t }
func (o *fetchedObject) Size() int64                   { return int64(len(o.data)) }
func (o *fetchedObject) SetSize(int64)                 {}

func (o *fetchedObject) Reader() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(o.data)), nil
}

func (o *fetchedObject) Writer() (io.WriteCloser, error) {
	return nil, errors.New("gitsource: a fetched object is read only")
}

// keepCommit copies the objects of commit h and of its tree from src into
// a new storage: a fetch of every ref holds their history too, which the
// tree does not need and a kept tree would otherwise keep. The objects are
// shared, not copied.
func keepCommit(src *memory.Storage, h plumbing.Hash) (*memory.Storage, error) {
	dst := memory.NewStorage()
	c, err := object.GetCommit(src, h)
	if err != nil {
		return nil, commitError(fromPlumbing(h), err)
	}
	if err := copyObject(src, dst, plumbing.CommitObject, h); err != nil {
		return nil, err
	}
	return dst, copyTree(src, dst, c.TreeHash)
}

// copyTree copies tree h and everything below it (not submodules: their
// commits live in other repositories).
func copyTree(src, dst *memory.Storage, h plumbing.Hash) error {
	if dst.HasEncodedObject(h) == nil {
		return nil
	}
	t, err := object.GetTree(src, h)
	if err != nil {
		return err
	}
	if err := copyObject(src, dst, plumbing.TreeObject, h); err != nil {
		return err
	}
	for _, e := range t.Entries {
		switch {
		case e.Mode == filemode.Dir:
			err = copyTree(src, dst, e.Hash)
		case e.Mode == filemode.Submodule:
		default:
			err = copyObject(src, dst, plumbing.BlobObject, e.Hash)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func copyObject(src, dst *memory.Storage, t plumbing.ObjectType, h plumbing.Hash) error {
	o, err := src.EncodedObject(t, h)
	if err != nil {
		return fmt.Errorf("object %s: %w", h, err)
	}
	_, err = dst.SetEncodedObject(o)
	return err
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
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: method, ProxyOptions: sshDeadline(ctx, url)})
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
