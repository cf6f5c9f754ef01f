package gitsource

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
)

// Auth holds the credentials for one remote. Which fields apply depends on
// the URL: Token (and Username) for http(s), SSHKey and the host key settings
// for ssh, nothing for local paths. Giving credentials that do not fit the
// URL is an error rather than being ignored, so a misconfigured secret shows
// up at once.
//
// Auth never prints its secrets: String redacts them.
type Auth struct {
	// Username goes with Token over http(s) (default "x-access-token", which
	// GitHub, Gitea and most forges accept with a token) and is the ssh user
	// when the URL names none (default "git").
	Username string
	// Token is an http(s) access token, sent as the basic-auth password.
	Token string
	// SSHKey is a PEM or OpenSSH private key.
	SSHKey []byte
	// SSHKeyPassphrase decrypts SSHKey when it is encrypted.
	SSHKeyPassphrase string
	// KnownHosts is the content of a known_hosts file used to check the ssh
	// server's host key. Empty means the files named by $SSH_KNOWN_HOSTS, or
	// ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts.
	KnownHosts []byte
	// InsecureIgnoreHostKey accepts any ssh host key. For tests only.
	InsecureIgnoreHostKey bool
}

// Equal reports whether a and b are the same credentials.
func (a Auth) Equal(b Auth) bool {
	return a.Username == b.Username && a.Token == b.Token && a.SSHKeyPassphrase == b.SSHKeyPassphrase &&
		a.InsecureIgnoreHostKey == b.InsecureIgnoreHostKey && bytes.Equal(a.SSHKey, b.SSHKey) && bytes.Equal(a.KnownHosts, b.KnownHosts)
}

// String describes a without revealing the token, key or passphrase.
func (a Auth) String() string {
	var parts []string
	if a.Username != "" {
		parts = append(parts, "Username:"+a.Username)
	}
	if a.Token != "" {
		parts = append(parts, "Token:REDACTED")
	}
	if len(a.SSHKey) > 0 {
		parts = append(parts, "SSHKey:REDACTED")
	}
	if a.SSHKeyPassphrase != "" {
		parts = append(parts, "SSHKeyPassphrase:REDACTED")
	}
	if len(a.KnownHosts) > 0 {
		parts = append(parts, fmt.Sprintf("KnownHosts:%d bytes", len(a.KnownHosts)))
	}
	if a.InsecureIgnoreHostKey {
		parts = append(parts, "InsecureIgnoreHostKey")
	}
	return "Auth{" + strings.Join(parts, " ") + "}"
}

// GoString is String, so that %#v does not print secrets either.
func (a Auth) GoString() string { return a.String() }

func (a Auth) isZero() bool {
	return a.Username == "" && a.Token == "" && len(a.SSHKey) == 0 && a.SSHKeyPassphrase == "" &&
		len(a.KnownHosts) == 0 && !a.InsecureIgnoreHostKey
}

// remote returns rawURL as go-git is to be given it, without credentials,
// and the go-git auth method for it. Credentials written in an http(s) URL
// (https://user:password@host/..., or https://<token>@host/... as GitHub
// documents) become a's Username and Token: go-git would keep them in the
// request URL, which Go's HTTP client quotes in its errors (a lone user
// name unredacted), and so in a StyrminSource's status, events and logs.
func (a Auth) remote(rawURL string) (string, transport.AuthMethod, error) {
	clean, a, err := a.withURLCredentials(rawURL)
	if err != nil {
		return "", nil, err
	}
	m, err := a.method(clean)
	if err != nil {
		return "", nil, err
	}
	return clean, m, nil
}

// withURLCredentials moves the user information of an http(s) URL into a.
// A lone user name is a token: sent as the password with the default user
// name, as GitHub expects it (and any forge that takes a token as the
// password). When a has credentials (Token or Username) they win and the
// URL's user information is dropped.
func (a Auth) withURLCredentials(rawURL string) (string, Auth, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok || !strings.EqualFold(scheme, "http") && !strings.EqualFold(scheme, "https") {
		return rawURL, a, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// Not err itself: a *url.Error quotes the URL, credentials and all.
		return "", a, fmt.Errorf("gitsource: remote URL %s: %w", redactURL(rawURL), urlError(rawURL, err))
	}
	if u.User == nil {
		return rawURL, a, nil
	}
	user := u.User.Username()
	pass, _ := u.User.Password()
	u.User = nil
	clean := u.String()
	if user == "" && pass == "" {
		return clean, a, nil
	}
	if a.Token != "" || a.Username != "" {
		// Auth wins, as it did when go-git was given the URL as it was:
		// a CI's origin (https://gitlab-ci-token:…@host/…) or a forge's
		// https://user@host/… URL with the agent's Secret. The URL's
		// user information is dropped: never sent, never shown.
		return clean, a, nil
	}
	if pass == "" {
		a.Token = user
	} else {
		a.Username, a.Token = user, pass
	}
	return clean, a, nil
}

// method builds the go-git auth method for rawURL. nil means "no explicit
// credentials": go-git then uses the ssh agent (or credentials in an ssh
// URL; those of an http(s) URL are taken out by remote first).
func (a Auth) method(rawURL string) (transport.AuthMethod, error) {
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return nil, fmt.Errorf("gitsource: remote URL %q: %w", redactURL(rawURL), urlError(rawURL, err))
	}
	switch ep.Protocol {
	case "http", "https":
		if len(a.SSHKey) > 0 || len(a.KnownHosts) > 0 {
			return nil, fmt.Errorf("gitsource: remote %s is %s but an ssh key or known_hosts was given; use Token", redactURL(rawURL), ep.Protocol)
		}
		if a.Token == "" {
			if a.Username != "" {
				return nil, fmt.Errorf("gitsource: remote %s: a Username was given without a Token", redactURL(rawURL))
			}
			return nil, nil
		}
		if ep.Protocol == "http" && !Loopback(ep.Host) {
			// A token over plain http crosses the network in clear.
			return nil, fmt.Errorf("gitsource: remote %s: %w: use an https URL", redactURL(rawURL), ErrPlainHTTPCredentials)
		}
		user := a.Username
		if user == "" {
			user = "x-access-token"
		}
		return &githttp.BasicAuth{Username: user, Password: a.Token}, nil
	case "ssh":
		if a.Token != "" {
			return nil, fmt.Errorf("gitsource: remote %s is ssh but a Token was given; use SSHKey", redactURL(rawURL))
		}
		if len(a.SSHKey) == 0 {
			if len(a.KnownHosts) > 0 || a.InsecureIgnoreHostKey {
				return nil, fmt.Errorf("gitsource: remote %s: host key settings given without an SSHKey", redactURL(rawURL))
			}
			return nil, nil // go-git falls back to the ssh agent
		}
		user := ep.User
		if user == "" {
			user = a.Username
		}
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, a.SSHKey, a.SSHKeyPassphrase)
		if err != nil {
			return nil, fmt.Errorf("gitsource: remote %s: parse SSHKey: %w", redactURL(rawURL), err)
		}
		switch {
		case a.InsecureIgnoreHostKey:
			keys.HostKeyCallback = ssh.InsecureIgnoreHostKey() //nolint:gosec // explicitly requested, documented as test-only
		case len(a.KnownHosts) > 0:
			hostport := net.JoinHostPort(ep.Host, fmt.Sprint(ep.Port))
			if ep.Port == 0 {
				hostport = net.JoinHostPort(ep.Host, "22")
			}
			if err := setKnownHosts(keys, a.KnownHosts, hostport); err != nil {
				return nil, fmt.Errorf("gitsource: remote %s: KnownHosts: %w", redactURL(rawURL), err)
			}
		}
		return keys, nil
	case "file":
		if !a.isZero() {
			return nil, fmt.Errorf("gitsource: remote %s is a local path; it takes no credentials", redactURL(rawURL))
		}
		return nil, nil
	default:
		if !a.isZero() {
			return nil, fmt.Errorf("gitsource: remote %s: credentials are not supported for %s://", redactURL(rawURL), ep.Protocol)
		}
		return nil, nil
	}
}

// setKnownHosts installs a host key check from the content of a known_hosts
// file. The knownhosts packages only read files, so the content goes through
// a temporary file that is removed once parsed.
func setKnownHosts(keys *gitssh.PublicKeys, content []byte, hostport string) (err error) {
	f, err := os.CreateTemp("", "gitsource-known-hosts-*")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.Remove(f.Name())) }()
	if _, err := f.Write(content); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	db, err := gitssh.NewKnownHostsDb(f.Name())
	if err != nil {
		return err
	}
	keys.HostKeyCallback = db.HostKeyCallback()
	keys.HostKeyAlgorithms = db.HostKeyAlgorithms(hostport)
	return nil
}
