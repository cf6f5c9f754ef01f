// Package sshtest writes SSH keys for tests of SSH commit signing.
package sshtest

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// KeyFiles writes key as an OpenSSH private key file and its .pub in a
// temporary folder and returns their paths and the public key line
// ("ssh-ed25519 AAAA…"), as an allowed_signers file takes it.
func KeyFiles(t testing.TB, key crypto.Signer) (priv, pub, line string) {
	t.Helper()
	block, err := ssh.MarshalPrivateKey(key, "test key")
	if err != nil {
		t.Fatal(err)
	}
	pk, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	priv, pub = filepath.Join(dir, "id"), filepath.Join(dir, "id.pub")
	line = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk)))
	if err := os.WriteFile(priv, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return priv, pub, line
}

// Ed25519 is a new Ed25519 key.
func Ed25519(t testing.TB) crypto.Signer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// AllowedSigners writes an allowed_signers file (gpg.ssh.allowedSignersFile)
// letting email sign git commits with the key of line.
func AllowedSigners(t testing.TB, email, line string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(p, []byte(email+" namespaces=\"git\" "+line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
