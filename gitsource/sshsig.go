package gitsource

import (
	"bytes"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// SignFunc signs a commit: payload is the commit encoded without its
// signature; the armored signature goes in its gpgsig header, as git
// writes it.
type SignFunc func(payload []byte) (string, error)

// sshsigNamespace is the namespace git signs commits in.
const sshsigNamespace = "git"

// SSHSigner signs with an SSH private key (OpenSSH or PEM format; a
// passphrase when it is encrypted) in the SSHSIG format git writes for
// gpg.format ssh (OpenSSH's PROTOCOL.sshsig, namespace "git", SHA-512),
// so `git verify-commit` and `ssh-keygen -Y verify` check it.
func SSHSigner(privateKey, passphrase []byte) (SignFunc, error) {
	var signer ssh.Signer
	var err error
	if len(passphrase) > 0 {
		signer, err = ssh.ParsePrivateKeyWithPassphrase(privateKey, passphrase)
	} else {
		signer, err = ssh.ParsePrivateKey(privateKey)
	}
	if err != nil {
		return nil, fmt.Errorf("gitsource: signing key: %w", err)
	}
	return func(payload []byte) (string, error) { return sshSign(signer, payload) }, nil
}

// sshSign makes an armored SSHSIG signature of message.
func sshSign(signer ssh.Signer, message []byte) (string, error) {
	const magic = "SSHSIG"
	h := sha512.Sum512(message)
	signed := struct {
		Namespace, Reserved, Hash string
		Digest                    []byte
	}{sshsigNamespace, "", "sha512", h[:]}
	toSign := append([]byte(magic), ssh.Marshal(signed)...)
	var sig *ssh.Signature
	var err error
	if as, ok := signer.(ssh.AlgorithmSigner); ok && signer.PublicKey().Type() == ssh.KeyAlgoRSA {
		sig, err = as.SignWithAlgorithm(nil, toSign, ssh.KeyAlgoRSASHA512) // ssh-rsa (SHA-1) is refused by verifiers
	} else {
		sig, err = signer.Sign(nil, toSign)
	}
	if err != nil {
		return "", fmt.Errorf("gitsource: sign: %w", err)
	}
	blob := struct {
		Version                              uint32
		PublicKey, Namespace, Reserved, Hash string
		Signature                            []byte
	}{1, string(signer.PublicKey().Marshal()), sshsigNamespace, "", "sha512", ssh.Marshal(sig)}
	raw := append([]byte(magic), ssh.Marshal(blob)...)
	enc := base64.StdEncoding.EncodeToString(raw)
	var b strings.Builder
	b.WriteString("-----BEGIN SSH SIGNATURE-----\n")
	for len(enc) > 70 {
		b.WriteString(enc[:70] + "\n")
		enc = enc[70:]
	}
	b.WriteString(enc + "\n-----END SSH SIGNATURE-----\n")
	return b.String(), nil
}

// isSSHPublicKey reports whether data is an SSH public key line
// (user.signingkey may name the .pub file or hold the key itself).
func isSSHPublicKey(data []byte) bool {
	_, _, _, _, err := ssh.ParseAuthorizedKey(bytes.TrimSpace(data))
	return err == nil
}
