package gitsource

import (
	"errors"
	"fmt"
	"net/mail"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/config"
)

// ErrSigning is wrapped by Identity's errors about signing: the
// configuration asks for a signature it cannot make.
var ErrSigning = errors.New("cannot sign")

// IdentityOptions say who lock commits are by and whether they are
// signed; the zero value asks git's configuration.
type IdentityOptions struct {
	// Author is "Name <email>" (a --author flag); it wins over the rest.
	Author string
	// Getenv reads GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL, which come next,
	// as in git; nil reads no environment.
	Getenv func(string) string
	// Sign asks for a signature (--sign); nil leaves it to commit.gpgsign.
	Sign *bool
	// SigningKey is the SSH key file to sign with; "" is user.signingkey.
	SigningKey string
}

// Identity is the author and committer of lock commits and how they are
// signed.
type Identity struct {
	Author Signature
	// From says where Author came from: "--author", "environment", "git
	// config" or "default".
	From string
	// Sign signs each commit; nil for unsigned commits.
	Sign SignFunc
	// SigningKey is the key file Sign uses.
	SigningKey string
}

// Identity chooses the author of lock commits as git does, in this
// order: o.Author, the environment (GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL),
// the repository's git config user.name and user.email, then the global
// one (~/.gitconfig, $XDG_CONFIG_HOME/git/config), else DefaultAuthorName
// and DefaultAuthorEmail. A commit is signed when o.Sign or
// commit.gpgsign says so; only SSH signing (gpg.format ssh) with a key
// file (o.SigningKey or user.signingkey: the private key, or its .pub
// next to it) is supported, and anything else is an error that says so.
func (r *Repo) Identity(o IdentityOptions) (Identity, error) {
	cfg := r.gitConfig()
	id := Identity{From: "default", Author: Signature{Name: DefaultAuthorName, Email: DefaultAuthorEmail}}
	getenv := o.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	switch {
	case o.Author != "":
		a, err := mail.ParseAddress(o.Author)
		if err != nil || a.Name == "" {
			return id, fmt.Errorf("gitsource: author %q: expected \"Name <email>\"", o.Author)
		}
		id.Author, id.From = Signature{Name: a.Name, Email: a.Address}, "--author"
	case getenv("GIT_AUTHOR_NAME") != "" || getenv("GIT_AUTHOR_EMAIL") != "":
		id.Author, id.From = Signature{Name: getenv("GIT_AUTHOR_NAME"), Email: getenv("GIT_AUTHOR_EMAIL")}, "environment"
		if id.Author.Name == "" {
			id.Author.Name = cfg("user", "name")
		}
		if id.Author.Email == "" {
			id.Author.Email = cfg("user", "email")
		}
	case cfg("user", "name") != "" || cfg("user", "email") != "":
		id.Author, id.From = Signature{Name: cfg("user", "name"), Email: cfg("user", "email")}, "git config"
	}
	sign := false
	if o.Sign != nil {
		sign = *o.Sign
	} else if v := cfg("commit", "gpgsign"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return id, fmt.Errorf("gitsource: git config commit.gpgsign %q: not a boolean", v)
		}
		sign = b
	}
	if !sign {
		return id, nil
	}
	if f := cfg("gpg", "format"); f != "ssh" && o.SigningKey == "" {
		if f == "" {
			f = "openpgp"
		}
		return id, fmt.Errorf("gitsource: %w: signing with gpg.format %s is not supported: set gpg.format ssh and user.signingkey to an SSH key file, or pass its path", ErrSigning, f)
	}
	key := o.SigningKey
	if key == "" {
		key = cfg("user", "signingkey")
	}
	if key == "" {
		return id, fmt.Errorf("gitsource: %w: signing needs an SSH key file: set git config user.signingkey or pass its path", ErrSigning)
	}
	key = expandHome(strings.TrimPrefix(key, "key::"))
	signer, path, err := sshSignerFromFile(key)
	if err != nil {
		return id, fmt.Errorf("%w: %w", ErrSigning, err)
	}
	id.Sign, id.SigningKey = signer, path
	return id, nil
}

// sshSignerFromFile reads the private key at path, or next to it when
// path is its public key (id_ed25519.pub → id_ed25519).
func sshSignerFromFile(path string) (SignFunc, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, path, fmt.Errorf("gitsource: signing key: %w", err)
	}
	if isSSHPublicKey(data) {
		priv := strings.TrimSuffix(path, ".pub")
		if priv == path {
			return nil, path, fmt.Errorf("gitsource: signing key %s is a public key and no private key is next to it (signing through ssh-agent is not supported)", path)
		}
		if data, err = os.ReadFile(priv); err != nil {
			return nil, path, fmt.Errorf("gitsource: signing key %s is a public key; its private key: %w (signing through ssh-agent is not supported)", path, err)
		}
		path = priv
	}
	s, err := SSHSigner(data, nil)
	if err != nil {
		return nil, path, fmt.Errorf("%w (%s)", err, path)
	}
	return s, path, nil
}

func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// gitConfig returns a lookup of git config options: the repository's,
// then the global configuration's.
func (r *Repo) gitConfig() func(section, option string) string {
	var scopes []*config.Config
	if c, err := r.repo.Config(); err == nil {
		scopes = append(scopes, c)
	}
	if c, err := config.LoadConfig(config.GlobalScope); err == nil {
		scopes = append(scopes, c)
	}
	return func(section, option string) string {
		for _, c := range scopes {
			if c.Raw == nil {
				continue
			}
			if v := c.Raw.Section(section).Option(option); v != "" {
				return v
			}
		}
		return ""
	}
}
