package commitstatus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// State is a commit status's state.
type State string

// The states GitHub accepts.
const (
	Pending State = "pending"
	Success State = "success"
	Failure State = "failure"
	Error   State = "error"
)

// Status is one commit status.
type Status struct {
	State State `json:"state"`
	// Context names the reporter: "styrmin/<cluster>".
	Context string `json:"context"`
	// Description is one line (GitHub keeps 140 characters).
	Description string `json:"description,omitempty"`
	// TargetURL links to more (the UI's page), optional.
	TargetURL string `json:"target_url,omitempty"`
}

// maxDescription is GitHub's limit of a status description.
const maxDescription = 140

// DefaultBaseURL is github.com's API.
const DefaultBaseURL = "https://api.github.com"

// Options configure New.
type Options struct {
	// BaseURL is the API's root (DefaultBaseURL; GitHub Enterprise:
	// https://HOST/api/v3).
	BaseURL string
	// Owner and Repo name the repository.
	Owner, Repo string
	// Token authenticates (a fine-grained token with "Commit statuses:
	// write", or a GitHub App's installation token).
	Token string
	// TokenSource, when set instead of Token, gives the token for each
	// post: a token that is replaced while the agent runs (an
	// installation token expires within the hour) is used once replaced.
	TokenSource func(ctx context.Context) (string, error)
	// HTTP is the client (nil: one with a 30 s timeout).
	HTTP *http.Client
}

// Client posts commit statuses to one repository. It is safe for
// concurrent use.
type Client struct {
	base        *url.URL
	owner, repo string
	token       func(ctx context.Context) (string, error)
	http        *http.Client
}

// New checks the options and builds the client.
func New(o Options) (*Client, error) {
	if o.BaseURL == "" {
		o.BaseURL = DefaultBaseURL
	}
	base, err := url.Parse(strings.TrimSuffix(o.BaseURL, "/"))
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("commitstatus: base URL %q is not an absolute URL", o.BaseURL)
	}
	if base.Scheme != "https" && !(base.Scheme == "http" && isLoopback(base.Hostname())) {
		return nil, fmt.Errorf("commitstatus: base URL %s: the token is sent only over https", base.Redacted())
	}
	if base.User != nil {
		return nil, errors.New("commitstatus: the base URL must not hold credentials")
	}
	if !validName.MatchString(o.Owner) || !validName.MatchString(o.Repo) {
		return nil, fmt.Errorf("commitstatus: %q/%q is not a GitHub repository name", o.Owner, o.Repo)
	}
	token := o.TokenSource
	switch {
	case token != nil && o.Token != "":
		return nil, errors.New("commitstatus: give a token or a token source, not both")
	case token == nil && o.Token == "":
		return nil, errors.New("commitstatus: a token is required")
	case token == nil:
		fixed := o.Token
		token = func(context.Context) (string, error) { return fixed, nil }
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	// Redirects would carry the Authorization header elsewhere: refused.
	hc := *o.HTTP
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{base: base, owner: o.Owner, repo: o.Repo, token: token, http: &hc}, nil
}

// String names the repository, never the token.
func (c *Client) String() string {
	return "commitstatus " + c.owner + "/" + c.repo + " at " + c.base.Host
}

// GoString is String, so %#v prints no token either.
func (c *Client) GoString() string { return c.String() }

var (
	validName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)
	validSHA  = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// Post sets status s on commit sha.
func (c *Client) Post(ctx context.Context, sha string, s Status) error {
	if !validSHA.MatchString(sha) {
		return fmt.Errorf("commitstatus: %q is not a full commit hash", sha)
	}
	switch s.State {
	case Pending, Success, Failure, Error:
	default:
		return fmt.Errorf("commitstatus: state %q is not pending, success, failure or error", s.State)
	}
	s.Description = truncate(s.Description, maxDescription)
	body, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, http.MethodPost, sha, c.base.JoinPath("repos", c.owner, c.repo, "statuses", sha), body)
	return err
}

// Current is the newest status of context statusContext on commit sha,
// as the host shows it (GET /repos/{owner}/{repo}/commits/{sha}/status,
// which lists the newest status of each context); ok is false when the
// commit has none of that context.
func (c *Client) Current(ctx context.Context, sha, statusContext string) (s Status, ok bool, err error) {
	if !validSHA.MatchString(sha) {
		return Status{}, false, fmt.Errorf("commitstatus: %q is not a full commit hash", sha)
	}
	u := c.base.JoinPath("repos", c.owner, c.repo, "commits", sha, "status")
	// GitHub's most: a commit with more contexts may not list ours.
	u.RawQuery = "per_page=100"
	body, err := c.do(ctx, http.MethodGet, sha, u, nil)
	if err != nil {
		return Status{}, false, err
	}
	var combined struct {
		Statuses []Status `json:"statuses"`
	}
	if err := json.Unmarshal(body, &combined); err != nil {
		return Status{}, false, fmt.Errorf("commitstatus: the statuses of %s for %s/%s: %w", sha[:12], c.owner, c.repo, err)
	}
	for _, st := range combined.Statuses {
		if st.Context == statusContext {
			return st, true, nil
		}
	}
	return Status{}, false, nil
}

// maxAnswer bounds the answer read: the combined status of 100 contexts.
const maxAnswer = 256 << 10

// do sends one authenticated request about commit sha and returns the
// answer's body, or the API's refusal as an *HTTPError.
func (c *Client) do(ctx context.Context, method, sha string, u *url.URL, body []byte) ([]byte, error) {
	token, err := c.token(ctx)
	if err != nil {
		return nil, fmt.Errorf("commitstatus: the token: %w", err)
	}
	if token == "" {
		return nil, errors.New("commitstatus: the token is empty")
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("commitstatus: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "styrmin-agent")
	resp, err := c.http.Do(req)
	if err != nil {
		// url.Error holds the URL only, which holds no credential.
		return nil, fmt.Errorf("commitstatus: status of %s for %s/%s: %w", sha[:12], c.owner, c.repo, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return nil, &HTTPError{Code: resp.StatusCode, Message: apiMessage(msg), RetryAfter: retryAfter(resp.Header, time.Now())}
	}
	return msg, nil
}

// HTTPError is the API's refusal.
type HTTPError struct {
	Code    int
	Message string
	// RetryAfter is how long the API asked to wait before the next
	// request (its Retry-After, or until x-ratelimit-reset once
	// x-ratelimit-remaining is 0); 0 when it did not say.
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("commitstatus: the API answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// Unauthorized says the token was refused (expired, revoked): a request
// with the token that replaces it may succeed.
func (e *HTTPError) Unauthorized() bool { return e.Code == http.StatusUnauthorized }

// TokenWatch follows whether the host refuses the token, for a poller
// to log a bad token when the refusals start and when they end rather
// than at every request (a round every 10 s would log it for ever). The
// zero value is a token not refused. It is not safe for concurrent use.
type TokenWatch struct{ refused bool }

// Observe records a request's outcome, err nil for one the host took:
// started is true at the first refusal of the token (401) since it was
// last taken, ended at the first request taken after refusals. Other
// errors say nothing of the token.
func (w *TokenWatch) Observe(err error) (started, ended bool) {
	var he *HTTPError
	switch {
	case err == nil:
		ended, w.refused = w.refused, false
	case errors.As(err, &he) && he.Unauthorized():
		started, w.refused = !w.refused, true
	}
	return started, ended
}

// RateLimited says the API refused for a rate limit (GitHub answers 429,
// or 403 with a message naming the primary or secondary rate limit):
// every request is refused alike until RetryAfter has passed.
func (e *HTTPError) RateLimited() bool {
	return e.Code == http.StatusTooManyRequests || e.Code == http.StatusForbidden && strings.Contains(strings.ToLower(e.Message), "rate limit")
}

// The bounds of a rate limit's wait: GitHub's advice when its answer
// names no time, and the longest wait (its hourly limit resets within the
// hour), should a clock or a header be wrong.
const (
	minRateLimitWait = time.Minute
	maxRateLimitWait = time.Hour
)

// RateLimitWait is how long to send no request at all after this
// refusal: RetryAfter, a minute when the answer named no time, an hour at
// most; 0 when the refusal is no rate limit. Every user of the client
// waits the same: a request sent sooner is refused alike, and GitHub may
// ban an integration that keeps asking.
func (e *HTTPError) RateLimitWait() time.Duration {
	if !e.RateLimited() {
		return 0
	}
	wait := e.RetryAfter
	if wait <= 0 {
		wait = minRateLimitWait
	}
	return min(wait, maxRateLimitWait)
}

// Retryable says whether the same request may succeed later (rate
// limits, the host's own errors), not a refusal of the token or request.
func (e *HTTPError) Retryable() bool {
	return e.RateLimited() || e.Code >= 500
}

// retryAfter is the wait an answer asks for: Retry-After (seconds or a
// date), else, when no request is left, until x-ratelimit-reset (Unix
// seconds); 0 when it asks for none.
func retryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			d = time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	} else if strings.TrimSpace(h.Get("X-Ratelimit-Remaining")) == "0" {
		if n, err := strconv.ParseInt(strings.TrimSpace(h.Get("X-Ratelimit-Reset")), 10, 64); err == nil {
			d = time.Unix(n, 0).Sub(now)
		}
	}
	return max(d, 0)
}

// apiMessage is the "message" of GitHub's error body, else its text.
func apiMessage(b []byte) string {
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &m) == nil && m.Message != "" {
		return m.Message
	}
	return truncate(strings.TrimSpace(string(b)), 200)
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// scpRepo matches GitHub's scp-like repository address
// ("git@github.com:acme/desired-state.git"); repoPath the path of its URL
// forms; hostName a host the API may be asked at (no port, user, query or
// fragment: those would make the host read here differ from the one git
// connects to).
var (
	scpRepo  = regexp.MustCompile(`^git@([A-Za-z0-9.-]+):([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$`)
	repoPath = regexp.MustCompile(`^/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$`)
	hostName = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$`)
)

// ParseRepository finds the host, owner and name in a repository URL
// ("https://github.com/acme/desired-state.git",
// "ssh://git@github.com/acme/desired-state.git",
// "git@github.com:acme/desired-state.git"). The host is the one git
// connects to, as net/url reads the URL: the token goes to its API.
func ParseRepository(repoURL string) (host, owner, repo string, err error) {
	if m := scpRepo.FindStringSubmatch(repoURL); m != nil {
		host, owner, repo = m[1], m[2], m[3]
	} else if u, perr := url.Parse(repoURL); perr == nil && u.Opaque == "" && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" &&
		(u.Scheme == "https" || u.Scheme == "ssh" && u.User != nil && u.User.String() == "git") {
		if m := repoPath.FindStringSubmatch(u.EscapedPath()); m != nil {
			host, owner, repo = u.Host, m[1], m[2]
		}
	}
	if !hostName.MatchString(host) || owner == "." || owner == ".." || repo == "." || repo == ".." {
		return "", "", "", fmt.Errorf("commitstatus: %q is not a repository URL of the form https://HOST/OWNER/REPO", redact(repoURL))
	}
	return host, owner, repo, nil
}

// BaseURLFor is the API of a host: DefaultBaseURL for github.com, the
// GitHub Enterprise path otherwise.
func BaseURLFor(host string) string {
	if host == "github.com" {
		return DefaultBaseURL
	}
	return "https://" + host + "/api/v3"
}

// redact drops what may be user information from a repository URL, should
// it hold a token: all before the last '@' after the scheme, unless that
// is ssh's user "git". It reads the text, not the URL net/url makes of it:
// a password holding '/', '#' or '?' ("https://u:12/x@host/…") is no user
// information to net/url, yet is the credential git sends.
func redact(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	start := 0
	if i := strings.Index(s, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	if s[start:at] == "git" {
		return s
	}
	return s[:start] + "REDACTED" + s[at:]
}
