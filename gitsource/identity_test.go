package gitsource_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/sshtest"
)

// globalGitConfig points the global git configuration at a file of the
// test holding content.
func globalGitConfig(t *testing.T, content string) {
	t.Helper()
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
}

func TestIdentityTakesTheFlagThenTheEnvironmentThenGitConfig(t *testing.T) {
	globalGitConfig(t, "[user]\n\tname = Global\n\temail = global@example.com\n")
	lr := newLocalRepo(t, false)
	lr.commit("config", map[string]string{"styrmin.cue": "x: 1\n"})
	lr.git("config", "user.name", "Local")
	lr.git("config", "user.email", "local@example.com")
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GIT_AUTHOR_NAME": "Env", "GIT_AUTHOR_EMAIL": "env@example.com"}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		name string
		o    gitsource.IdentityOptions
		want gitsource.Signature
		from string
	}{
		{"the flag wins", gitsource.IdentityOptions{Author: "Flag Person <flag@example.com>", Getenv: getenv}, gitsource.Signature{Name: "Flag Person", Email: "flag@example.com"}, "--author"},
		{"then the environment", gitsource.IdentityOptions{Getenv: getenv}, gitsource.Signature{Name: "Env", Email: "env@example.com"}, "environment"},
		{"then the repository's config", gitsource.IdentityOptions{}, gitsource.Signature{Name: "Local", Email: "local@example.com"}, "git config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := r.Identity(tc.o)
			if err != nil || id.Author != tc.want || id.From != tc.from || id.Sign != nil {
				t.Errorf("identity %+v from %s (%v), want %+v from %s", id.Author, id.From, err, tc.want, tc.from)
			}
		})
	}
	t.Run("then the global config", func(t *testing.T) {
		lr.git("config", "--unset", "user.name")
		lr.git("config", "--unset", "user.email")
		r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		id, err := r.Identity(gitsource.IdentityOptions{})
		if err != nil || id.Author != (gitsource.Signature{Name: "Global", Email: "global@example.com"}) {
			t.Errorf("identity %+v (%v)", id.Author, err)
		}
	})
	t.Run("a malformed --author is an error", func(t *testing.T) {
		if _, err := r.Identity(gitsource.IdentityOptions{Author: "just-a-name"}); err == nil || !strings.Contains(err.Error(), `expected "Name <email>"`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("signing without gpg.format ssh names what is supported", func(t *testing.T) {
		yes := true
		if _, err := r.Identity(gitsource.IdentityOptions{Sign: &yes}); err == nil || !strings.Contains(err.Error(), "gpg.format openpgp is not supported") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestSignedLockCommitsPassGitVerifyCommit(t *testing.T) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen is not installed")
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]crypto.Signer{"ed25519": sshtest.Ed25519(t), "rsa": rsaKey} {
		t.Run(name, func(t *testing.T) {
			globalGitConfig(t, "")
			_, pub, line := sshtest.KeyFiles(t, key)
			lr := newLocalRepo(t, false)
			lr.commit("config", map[string]string{"styrmin.cue": "x: 1\n"})
			// As a user sets it up: the public key named, signing on.
			lr.git("config", "gpg.format", "ssh")
			lr.git("config", "user.signingkey", pub)
			lr.git("config", "commit.gpgsign", "true")
			lr.git("config", "gpg.ssh.allowedSignersFile", sshtest.AllowedSigners(t, "signer@example.com", line))

			r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			id, err := r.Identity(gitsource.IdentityOptions{Author: "Signer <signer@example.com>"})
			if err != nil || id.Sign == nil {
				t.Fatalf("identity %+v: %v", id, err)
			}
			res, err := r.CommitLocks(context.Background(), gitsource.CommitRequest{Build: bumpSequence, Author: id.Author, Sign: id.Sign})
			if err != nil || !res.Committed {
				t.Fatalf("commit: %+v, %v", res, err)
			}
			cmd := exec.Command("git", "verify-commit", "-v", res.Commit.String())
			cmd.Dir, cmd.Env = lr.dir, lr.env()
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), `Good "git" signature for signer@example.com`) {
				t.Fatalf("git verify-commit: %v\n%s", err, out)
			}
			if got := lr.git("log", "-1", "--format=%an <%ae> / %cn <%ce>", res.Commit.String()); got != "Signer <signer@example.com> / Signer <signer@example.com>" {
				t.Errorf("author / committer: %s", got)
			}
		})
	}
}
