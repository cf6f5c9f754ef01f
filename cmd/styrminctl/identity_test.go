package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// TestCommitsTakeTheAuthorFromTheFlagTheEnvironmentOrGitConfigAndCanBeSigned
// runs retry --commit (the same identity flags as lock and upgrade) with
// each source of the author, and with --sign checked by git verify-commit.
func TestCommitsTakeTheAuthorFromTheFlagTheEnvironmentOrGitConfigAndCanBeSigned(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[user]\n\tname = Global Person\n\temail = global@example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("GIT_AUTHOR_NAME", "")
	t.Setenv("GIT_AUTHOR_EMAIL", "")
	dir := upgradeGitRepo(t)
	retry := func(args ...string) string {
		t.Helper()
		out, code, err := styrminctl(t, append([]string{"--repo", dir, "retry", "local/dev/web", "--commit"}, args...)...)
		if code != 0 {
			t.Fatalf("retry %v: exit %d, %v\n%s", args, code, err, out)
		}
		return planGit(t, dir, "log", "-1", "--format=%an <%ae>")
	}
	if got := retry(); got != "Global Person <global@example.com>" {
		t.Errorf("from git config: %s", got)
	}
	t.Setenv("GIT_AUTHOR_NAME", "Env Person")
	t.Setenv("GIT_AUTHOR_EMAIL", "env@example.com")
	if got := retry(); got != "Env Person <env@example.com>" {
		t.Errorf("from the environment: %s", got)
	}

	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen is not installed")
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	keys := t.TempDir()
	keyFile, allowed := filepath.Join(keys, "id_ed25519"), filepath.Join(keys, "allowed_signers")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(allowed, append([]byte("flag@example.com "), ssh.MarshalAuthorizedKey(pub)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := retry("--author", "Flag Person <flag@example.com>", "--sign", "--signing-key", keyFile); got != "Flag Person <flag@example.com>" {
		t.Errorf("from --author: %s", got)
	}
	verify := planGit(t, dir, "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", "-v", "HEAD")
	if !strings.Contains(verify, `Good "git" signature for flag@example.com`) {
		t.Errorf("git verify-commit:\n%s", verify)
	}
}
