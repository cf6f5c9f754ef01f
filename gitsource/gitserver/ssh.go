package gitserver

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHServer serves the Server's repositories over ssh (git-upload-pack and
// git-receive-pack through exec requests) to clients holding an authorized
// key. It is stopped when the test ends.
type SSHServer struct {
	// Addr is the listening address, host:port.
	Addr string

	s       *Server
	hostKey ssh.Signer
	ln      net.Listener
	wg      sync.WaitGroup
}

// StartSSH starts an ssh server over the same repositories that accepts the
// given client public keys.
func (s *Server) StartSSH(authorized ...ssh.PublicKey) *SSHServer {
	t := s.t
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			for _, a := range authorized {
				if string(a.Marshal()) == string(key.Marshal()) {
					return &ssh.Permissions{}, nil
				}
			}
			return nil, errors.New("unauthorized key")
		},
	}
	cfg.AddHostKey(hostKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := &SSHServer{Addr: ln.Addr().String(), s: s, hostKey: hostKey, ln: ln}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			x.wg.Add(1)
			go func() {
				defer x.wg.Done()
				x.serveConn(conn, cfg)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		x.wg.Wait()
	})
	return x
}

// RepoURL returns the ssh URL of repository name.
func (x *SSHServer) RepoURL(name string) string { return "ssh://git@" + x.Addr + "/" + name }

// KnownHosts returns a known_hosts line for the server's host key.
func (x *SSHServer) KnownHosts() []byte {
	return []byte(knownhosts.Line([]string{knownhosts.Normalize(x.Addr)}, x.hostKey.PublicKey()) + "\n")
}

func (x *SSHServer) serveConn(conn net.Conn, cfg *ssh.ServerConfig) {
	defer conn.Close()
	sc, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			return
		}
		go x.serveSession(ch, chReqs)
	}
}

func (x *SSHServer) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			_ = req.Reply(false, nil) // env, pty-req, …
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
			_ = req.Reply(false, nil)
			return
		}
		service, arg, _ := strings.Cut(payload.Command, " ")
		if service != "git-upload-pack" && service != "git-receive-pack" {
			_ = req.Reply(false, nil)
			return
		}
		name := path.Clean("/" + strings.Trim(arg, "'\""))
		dir := filepath.Join(x.s.root, filepath.FromSlash(name))
		_ = req.Reply(true, nil)

		cmd := exec.Command("git", strings.TrimPrefix(service, "git-"), dir)
		cmd.Env = x.s.gitEnv()
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		stdin, err := cmd.StdinPipe()
		status := uint32(1)
		if err == nil && cmd.Start() == nil {
			// Not waited for: the client may keep its side open after the
			// command is done.
			go func() { _, _ = io.Copy(stdin, ch); _ = stdin.Close() }()
			if cmd.Wait() == nil {
				status = 0
			}
		}
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		return
	}
}
