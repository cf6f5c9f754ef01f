// Package gitserver serves bare git repositories over real HTTP for tests:
// `git http-backend` behind net/http/cgi in an httptest.Server, with pushes
// enabled and optional basic-auth token checking. It needs the git command.
//
// It imports nothing from this module, so any package's tests can use it.
package gitserver

import (
	"bytes"
	"crypto/subtle"
	"io/fs"
	"maps"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Server is a git smart-HTTP server for one test.
type Server struct {
	// URL is the server's base URL; a repository is at URL + "/" + name.
	URL string

	t     testing.TB
	root  string // GIT_PROJECT_ROOT
	home  string // HOME for every git process
	token atomic.Pointer[string]
	srv   *httptest.Server
	reqs  atomic.Int64
	down  atomic.Bool
	hang  atomic.Pointer[chan struct{}]
	// hangPack holds only the pack downloads (HangPack); held counts the
	// requests a hang holds now.
	hangPack atomic.Pointer[chan struct{}]
	held     atomic.Int64
	refused  atomic.Int64
	// losePush drops the answer of the next push (LosePushAnswer).
	losePush atomic.Bool
	stderr   lockedBuffer
	backend  string
}

// Option configures New.
type Option func(*Server)

// WithToken makes the server require HTTP basic auth whose password is
// token (any user name), answering 401 otherwise.
func WithToken(token string) Option { return func(s *Server) { s.token.Store(&token) } }

// New starts a server, stopped when the test ends. The test is skipped when
// git or git-http-backend is missing.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("gitserver: git is not installed")
	}
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("gitserver: git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("gitserver: git-http-backend: %v", err)
	}
	s := &Server{t: t, root: t.TempDir(), home: t.TempDir(), backend: backend}
	for _, o := range opts {
		o(s)
	}
	h := &cgi.Handler{
		Path:   backend,
		Dir:    s.root,
		Env:    append(s.gitEnv(), "GIT_PROJECT_ROOT="+s.root, "GIT_HTTP_EXPORT_ALL=1"),
		Stderr: &s.stderr,
	}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.reqs.Add(1)
		hung := s.hang.Load()
		if hung == nil && isPackDownload(r) {
			hung = s.hangPack.Load()
		}
		if hung != nil {
			// A host that takes the connection and never answers: the
			// request waits until Start, or until its client gives up.
			s.held.Add(1)
			select {
			case <-*hung:
				s.held.Add(-1)
			case <-r.Context().Done():
				s.held.Add(-1)
				return
			}
		}
		if s.down.Load() {
			// What a git host answers in an outage or a deploy: clients
			// see a server error, not a refused connection, and retry.
			s.refused.Add(1)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "gitserver: down for the test", http.StatusServiceUnavailable)
			return
		}
		if token := s.Token(); token != "" {
			_, pass, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(pass), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="gitserver"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if isPush(r) && s.losePush.CompareAndSwap(true, false) {
			s.serveLost(w, r, h)
			return
		}
		h.ServeHTTP(w, r)
	}))
	s.URL = s.srv.URL
	t.Cleanup(func() {
		s.Start() // Close waits for the requests a Hang holds
		s.srv.Close()
		if t.Failed() && s.stderr.Len() > 0 {
			t.Logf("gitserver: git-http-backend stderr:\n%s", s.stderr.String())
		}
	})
	return s
}

// Token returns the token the server requires ("" when none).
func (s *Server) Token() string {
	if t := s.token.Load(); t != nil {
		return *t
	}
	return ""
}

// SetToken makes the server require token from now on, refusing the one
// before (a token rotated on the git host).
func (s *Server) SetToken(token string) { s.token.Store(&token) }

// Requests returns how many HTTP requests the server has answered.
func (s *Server) Requests() int64 { return s.reqs.Load() }

// Stop makes the server answer every request 503 Service Unavailable
// until Start, as a git host in an outage does. The repositories stay as
// they are and the test's own Commit, Seed and Reset keep working (they
// write the bare repositories directly).
func (s *Server) Stop() { s.down.Store(true) }

// Hang makes the server take every request and answer none until Start
// (or until its client gives up), as a git host that hangs does.
func (s *Server) Hang() {
	ch := make(chan struct{})
	s.hang.CompareAndSwap(nil, &ch)
}

// HangPack makes the server answer the ref advertisement but hold every
// pack download (POST git-upload-pack) until Start, answering none: a
// host that stalls while it sends a fetch's objects. Pushes are served.
func (s *Server) HangPack() {
	ch := make(chan struct{})
	s.hangPack.CompareAndSwap(nil, &ch)
}

// LosePushAnswer makes the server store the next push (POST
// git-receive-pack) and drop its answer, the connection closed without a
// response, then answer every request 503 until Start: a push whose
// answer a proxy or the network lost after the host stored it, the host
// away for the client's look at the branch after.
func (s *Server) LosePushAnswer() { s.losePush.Store(true) }

// isPush reports whether r sends a push's objects and ref updates.
func isPush(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack")
}

// serveLost serves r into a recorder (the push is stored), stops the
// server and closes the connection without an answer.
func (s *Server) serveLost(w http.ResponseWriter, r *http.Request, h http.Handler) {
	h.ServeHTTP(httptest.NewRecorder(), r)
	s.Stop()
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("gitserver: the connection cannot be hijacked to drop a push's answer")
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// Held returns how many requests a Hang or HangPack holds now.
func (s *Server) Held() int64 { return s.held.Load() }

// isPackDownload reports whether r asks for a fetch's objects.
func isPackDownload(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack")
}

// Start ends a Stop, a Hang or a HangPack: requests are served again,
// those a hang held too.
func (s *Server) Start() {
	s.down.Store(false)
	for _, h := range []*atomic.Pointer[chan struct{}]{&s.hang, &s.hangPack} {
		if ch := h.Swap(nil); ch != nil {
			close(*ch)
		}
	}
}

// Refused returns how many requests were answered 503 while stopped.
func (s *Server) Refused() int64 { return s.refused.Load() }

// Reset points branch of repository name at commit, whatever it held: a
// force push that rewinds or rewrites the branch. The commits it leaves
// behind stay in the repository until collected, as on a real host.
func (s *Server) Reset(name, branch, commit string) {
	s.t.Helper()
	s.Git(s.Dir(name), "update-ref", path.Join("refs/heads", branch), commit)
}

// gitEnv isolates git from the user's and the system's configuration.
func (s *Server) gitEnv() []string {
	return []string{
		"HOME=" + s.home,
		"PATH=" + os.Getenv("PATH"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_AUTHOR_NAME=gitserver", "GIT_AUTHOR_EMAIL=gitserver@localhost",
		"GIT_COMMITTER_NAME=gitserver", "GIT_COMMITTER_EMAIL=gitserver@localhost",
		"GIT_TERMINAL_PROMPT=0",
	}
}

// Git runs git with args in dir under the server's isolated environment and
// returns its trimmed standard output; a failure fails the test.
func (s *Server) Git(dir string, args ...string) string {
	s.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = s.gitEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		s.t.Fatalf("gitserver: git %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// CreateRepo creates an empty bare repository (default branch main) that
// accepts pushes, and returns its URL and directory.
func (s *Server) CreateRepo(name string) (url, dir string) {
	s.t.Helper()
	if name == "" || !fs.ValidPath(name) || strings.Contains(name, "..") {
		s.t.Fatalf("gitserver: bad repository name %q", name)
	}
	dir = filepath.Join(s.root, filepath.FromSlash(name))
	if _, err := os.Stat(dir); err == nil {
		s.t.Fatalf("gitserver: repository %q exists", name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	s.Git(dir, "init", "--quiet", "--bare", "--initial-branch=main")
	s.Git(dir, "config", "http.receivepack", "true")
	return s.RepoURL(name), dir
}

// RepoURL returns the URL of repository name.
func (s *Server) RepoURL(name string) string { return s.URL + "/" + name }

// Dir returns the directory of the bare repository name.
func (s *Server) Dir(name string) string { return filepath.Join(s.root, filepath.FromSlash(name)) }

// Seed commits the whole of files as the tree of a new commit on main of
// repository name (created if missing) and returns the commit hash.
func (s *Server) Seed(name string, files fs.FS, message string) string {
	s.t.Helper()
	contents := map[string][]byte{}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(files, p)
		contents[p] = data
		return err
	})
	if err != nil {
		s.t.Fatalf("gitserver: seed %s: %v", name, err)
	}
	return s.commit(name, message, contents, true)
}

// Commit adds a commit to main of repository name (created if missing)
// that writes files (a nil value deletes the file) and returns its hash.
func (s *Server) Commit(name, message string, files map[string][]byte) string {
	s.t.Helper()
	return s.commit(name, message, files, false)
}

func (s *Server) commit(name, message string, files map[string][]byte, replace bool) string {
	s.t.Helper()
	dir := s.Dir(name)
	if _, err := os.Stat(dir); err != nil {
		s.CreateRepo(name)
	}
	work := s.t.TempDir()
	s.Git(work, "init", "--quiet", "--initial-branch=main")
	s.Git(work, "fetch", "--quiet", dir, "+refs/heads/*:refs/remotes/origin/*")
	if s.Git(work, "ls-remote", dir, "refs/heads/main") != "" {
		s.Git(work, "reset", "--quiet", "--hard", "origin/main")
	}
	if replace {
		s.Git(work, "rm", "-r", "--quiet", "--ignore-unmatch", ".")
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		full := filepath.Join(work, filepath.FromSlash(p))
		if files[p] == nil {
			if err := os.Remove(full); err != nil && !os.IsNotExist(err) {
				s.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	s.Git(work, "add", "--all", ".")
	s.Git(work, "commit", "--quiet", "--allow-empty", "-m", message)
	s.Git(work, "push", "--quiet", dir, "HEAD:refs/heads/main")
	return s.Git(work, "rev-parse", "HEAD")
}

// Head returns the commit branch points to in repository name ("" when the
// branch does not exist).
func (s *Server) Head(name, branch string) string {
	s.t.Helper()
	out := s.Git(s.Dir(name), "for-each-ref", "--format=%(objectname)", path.Join("refs/heads", branch))
	return out
}

// lockedBuffer collects the CGI's stderr from concurrent requests.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
