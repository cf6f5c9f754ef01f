package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/internal/sshtest"
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

	// git config asking for a signature styrminctl cannot make (OpenPGP)
	// stops the commit, and --sign=false makes it unsigned.
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[commit]\n\tgpgsign = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, code, err := styrminctl(t, "--repo", dir, "retry", "local/dev/web", "--commit"); code != 1 || err == nil ||
		!strings.Contains(err.Error(), "gpg.format openpgp is not supported") || !strings.Contains(err.Error(), "--sign=false commits unsigned") {
		t.Errorf("gpgsign with OpenPGP: exit %d, %v", code, err)
	}
	retry("--sign=false")

	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen is not installed")
	}
	keyFile, _, line := sshtest.KeyFiles(t, sshtest.Ed25519(t))
	allowed := sshtest.AllowedSigners(t, "flag@example.com", line)
	if got := retry("--author", "Flag Person <flag@example.com>", "--sign", "--signing-key", keyFile); got != "Flag Person <flag@example.com>" {
		t.Errorf("from --author: %s", got)
	}
	verify := planGit(t, dir, "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", "-v", "HEAD")
	if !strings.Contains(verify, `Good "git" signature for flag@example.com`) {
		t.Errorf("git verify-commit:\n%s", verify)
	}
}
