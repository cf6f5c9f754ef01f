package gitsource_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// newSSHKey returns an OpenSSH private key (encrypted when passphrase is
// set) and its public key.
func newSSHKey(t *testing.T, passphrase string) ([]byte, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if passphrase == "" {
		block, err = ssh.MarshalPrivateKey(priv, "")
	} else {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), sshPub
}

func TestSSHCloneFetchAndPushWithKeyAndKnownHosts(t *testing.T) {
	ctx := context.Background()
	key, pub := newSSHKey(t, "key-pass")
	srv := gitserver.New(t)
	srv.CreateRepo("cfg.git")
	srv.Commit("cfg.git", "seed", map[string][]byte{"styrmin.cue": []byte("x: 1\n")})
	sshd := srv.StartSSH(pub)
	url := sshd.RepoURL("cfg.git")
	auth := gitsource.Auth{SSHKey: key, SSHKeyPassphrase: "key-pass", KnownHosts: sshd.KnownHosts()}

	r, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Head("cfg.git", "main"); got != res.Commit.String() {
		t.Fatalf("remote main = %s, want %s", got, res.Commit)
	}
	if f, err := r.Fetch(ctx); err != nil || f.Moved {
		t.Fatalf("Fetch = %+v, %v", f, err)
	}

	otherKey, _ := newSSHKey(t, "")
	other := srv.StartSSH(pub) // a server with another host key
	// other's host key, claimed for sshd's address.
	port := func(addr string) string { return addr[strings.LastIndex(addr, ":"):] }
	wrongHostKey := strings.Replace(string(other.KnownHosts()), "]"+port(other.Addr), "]"+port(sshd.Addr), 1)
	tests := []struct {
		name    string
		auth    gitsource.Auth
		wantErr string
		wantIs  error
	}{
		{"unknown client key", gitsource.Auth{SSHKey: otherKey, KnownHosts: sshd.KnownHosts()}, "check the token or key", gitsource.ErrAuth},
		{"host key mismatch", gitsource.Auth{SSHKey: key, SSHKeyPassphrase: "key-pass", KnownHosts: []byte(wrongHostKey)}, "key mismatch", nil},
		{"host not in known_hosts", gitsource.Auth{SSHKey: key, SSHKeyPassphrase: "key-pass", KnownHosts: other.KnownHosts()}, "key is unknown", nil},
		{"wrong passphrase", gitsource.Auth{SSHKey: key, SSHKeyPassphrase: "nope", KnownHosts: sshd.KnownHosts()}, "parse SSHKey", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Auth: tt.auth})
			if err == nil {
				t.Fatal("clone succeeded")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("err = %v, want %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "key-pass") {
				t.Fatalf("error leaks the passphrase: %v", err)
			}
		})
	}
}
