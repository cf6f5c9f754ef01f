package webhook

import (
	"net"
	"net/url"
	"strings"
)

// repository names a git repository as a push and a remote can both be
// compared by: its host and its path (owner/name on GitHub), lower case,
// without scheme, user, port or ".git".
type repository struct {
	host, path string
}

func (r repository) String() string { return r.host + "/" + r.path }

// name is the repository's last two path segments: owner/name, what a
// push's repository.full_name holds (a Gitea served under a sub-path
// has more segments in its URLs than in full_name).
func (r repository) name() string {
	seg := strings.Split(r.path, "/")
	return strings.Join(seg[len(seg)-2:], "/")
}

// parseRepository reads a remote URL (https://, ssh://, git://, or the
// scp-like git@host:owner/name) as a repository; ok is false for one that
// names none this receiver can compare a push with: a plain path or
// file:// URL, a path of fewer than two segments, or a host a git host
// would not announce in its payloads (see usualHost). Credentials in the
// URL are dropped, never kept.
func parseRepository(raw string) (r repository, ok bool) {
	raw = strings.TrimSpace(raw)
	var host, p string
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			return repository{}, false
		}
		switch strings.ToLower(u.Scheme) {
		case "http", "https", "ssh", "git", "git+ssh", "ssh+git":
		default:
			return repository{}, false
		}
		host, p = u.Hostname(), u.Path
	} else {
		// scp-like: [user@]host:path, the host free of '/' (a relative
		// path "dir/x:y" is not one) and longer than a Windows drive.
		h, rest, found := strings.Cut(raw, ":")
		if !found || strings.ContainsAny(h, `/\`) {
			return repository{}, false
		}
		if i := strings.LastIndex(h, "@"); i >= 0 {
			h = h[i+1:]
		}
		if len(h) < 2 {
			return repository{}, false
		}
		host, p = h, rest
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if !usualHost(host) {
		return repository{}, false
	}
	if host == "ssh.github.com" {
		// GitHub's SSH over port 443 (ssh://git@ssh.github.com:443/…)
		// is github.com's repositories.
		host = "github.com"
	}
	var seg []string
	for _, s := range strings.Split(strings.ToLower(p), "/") {
		switch s {
		case "":
		case ".", "..":
			return repository{}, false
		default:
			seg = append(seg, s)
		}
	}
	if len(seg) < 2 {
		return repository{}, false
	}
	seg[len(seg)-1] = strings.TrimSuffix(seg[len(seg)-1], ".git")
	if seg[len(seg)-1] == "" {
		return repository{}, false
	}
	return repository{host: host, path: strings.Join(seg, "/")}, true
}

// usualHost reports whether host is one a git host may announce in its
// payloads' URLs: an IP address or a name with a dot, other than a
// cluster-internal one. A name without a dot (an SSH alias from
// ~/.ssh/config, a Service's short name) or a Service's cluster name
// (….svc, ….cluster.local) is how the agent reaches a server, not how
// that server names itself, so a push could not be matched with it.
func usualHost(host string) bool {
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil {
		return true
	}
	if !strings.Contains(host, ".") {
		return false
	}
	for _, internal := range []string{".svc", ".cluster.local", ".local", ".internal"} {
		if strings.HasSuffix(host, internal) {
			return false
		}
	}
	return true
}

// otherRepository reports whether push p is for another repository than
// the receiver's, and which. Repositories are compared by owner/name (the
// last two path segments), whatever the host: the agent may reach a
// server by another name than the one it announces in its payloads (a
// Service's name inside the cluster, where Gitea's payloads carry its
// ROOT_URL), and the names of one server's repositories are unique. The
// push's URLs (clone, SSH, HTML, git) and its full_name are each compared;
// one that matches makes it the receiver's. A push that names no
// repository is not refused: it cannot be told apart.
func otherRepository(want repository, p Push) (string, bool) {
	r := p.Repository
	var first string
	for _, raw := range []string{r.CloneURL, r.SSHURL, r.HTMLURL, r.GitURL} {
		got, ok := parseRepository(raw)
		if !ok {
			continue
		}
		if got.name() == want.name() {
			return "", false
		}
		if first == "" {
			first = got.String()
		}
	}
	if name := strings.Trim(strings.ToLower(r.FullName), "/"); name != "" {
		if name == want.name() {
			return "", false
		}
		if first == "" {
			first = r.FullName
		}
	}
	return first, first != ""
}
