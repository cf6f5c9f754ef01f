package gitsource

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/net/proxy"
)

// sshDeadlineScheme names the dialer given to go-git's ssh transport, as a
// proxy, to bound a connection by the operation's deadline. go-git dials
// ssh with context.Background() (bounded only by a ClientConfig.Timeout,
// which no auth method of ours sets) and runs the ssh handshake, the
// session and the command's start with no deadline, before it ever sees
// the operation's context: a host that accepts the connection and says
// nothing held a fetch or a push forever. The proxy option is the one
// place go-git takes a dialer.
const sshDeadlineScheme = "gitsource-ssh-deadline"

func init() {
	proxy.RegisterDialerType(sshDeadlineScheme, newDeadlineDialer)
}

// sshDeadline returns the proxy options that make go-git's connection to
// rawURL end at ctx's deadline: its TCP connect, its ssh handshake and
// everything read or written on it afterwards. A URL that is not ssh, or a
// ctx without a deadline, gets none (go-git's http transport takes the
// context itself).
func sshDeadline(ctx context.Context, rawURL string) transport.ProxyOptions {
	d, ok := ctx.Deadline()
	if !ok {
		return transport.ProxyOptions{}
	}
	if ep, err := transport.NewEndpoint(rawURL); err != nil || ep.Protocol != "ssh" {
		return transport.ProxyOptions{}
	}
	u := url.URL{Scheme: sshDeadlineScheme, Host: "deadline", RawQuery: "until=" + strconv.FormatInt(d.UnixNano(), 10)}
	return transport.ProxyOptions{URL: u.String()}
}

// deadlineDialer dials as go-git does without a proxy, and sets its
// deadline on the connection.
type deadlineDialer struct {
	until time.Time
}

func newDeadlineDialer(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
	n, err := strconv.ParseInt(u.Query().Get("until"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("gitsource: ssh deadline %q: %w", u.RawQuery, err)
	}
	return deadlineDialer{until: time.Unix(0, n)}, nil
}

// Dial is DialContext without a context of its own.
func (d deadlineDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

// DialContext connects to addr by the dialer ALL_PROXY and NO_PROXY name,
// as go-git's own dial does, within the deadline, and leaves the deadline
// on the connection.
func (d deadlineDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithDeadline(ctx, d.until)
	defer cancel()
	conn, err := proxy.Dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(d.until); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("gitsource: set the deadline of the connection to %s: %w", addr, err)
	}
	return conn, nil
}
