package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/operator/statusreport"
)

// StatusOptions configure reporting each lock commit's result to the git
// host as GitHub commit statuses.
type StatusOptions struct {
	// Enabled turns reporting on.
	Enabled bool
	// SecretName and SecretKey name the Secret (in the agent's
	// namespace) and key holding the token (default: the repository's
	// Secret, key token).
	SecretName, SecretKey string
	// APIURL is the API's root (default: github.com's for a github.com
	// repository, https://HOST/api/v3 for another host).
	APIURL string
	// TargetURL, when set, links each status (the UI's address).
	TargetURL string
	// Repository is "OWNER/NAME" on the git host (default: read from the
	// repository's URL, which must then be GitHub's form).
	Repository string
}

// addStatusReporter reports lock commits' results (the elected replica
// only). The token is read from its Secret again after tokenTTL, so a
// token replaced there (an installation token expires within the hour)
// is used without a restart. history is the clone the sync walks: a lock
// commit the sync has not made every task of yet stays pending.
func (a *Agent) addStatusReporter(opts Options, history statusreport.LockHistory, poster *commitstatus.Client) error {
	r, err := statusreport.New(statusreport.Options{
		Reader: a.mgr.GetClient(), Writer: a.mgr.GetClient(), Poster: poster, Cluster: opts.Cluster, TargetURL: opts.Statuses.TargetURL, Log: a.log.WithName("statuses"),
		Source: types.NamespacedName{Namespace: opts.Manager.Namespace, Name: opts.SourceName}, History: history,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.log.Info("reporting lock commits' results as commit statuses", "to", poster.String(), "context", "styrmin/"+opts.Cluster)
	return a.mgr.Add(r)
}

// statusPoster is the client of the git host's commit statuses, shared
// by the status reporter and the lock mode (which reports each
// configuration head's lock on it).
func statusPoster(ctx context.Context, direct client.Reader, opts Options) (*commitstatus.Client, error) {
	so := opts.Statuses
	if so.SecretName == "" {
		so.SecretName = opts.SecretName
	}
	if so.SecretKey == "" {
		so.SecretKey = SecretKeyToken
	}
	if so.SecretName == "" {
		return nil, errors.New("agent: reporting commit statuses needs a token: name its Secret (--status-secret, or --repo-secret)")
	}
	key := types.NamespacedName{Namespace: opts.Manager.Namespace, Name: so.SecretName}
	tokens := &secretToken{reader: direct, key: key, field: so.SecretKey, ttl: tokenTTL}
	// Read once now: a missing Secret or key is a mistake to report at
	// start, not at the first lock commit.
	if _, err := tokens.Token(ctx); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	host, owner, repo, err := commitstatus.ParseRepository(opts.URL)
	if so.Repository != "" {
		if owner, repo, err = statusRepository(so.Repository); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("agent: reporting commit statuses: %w (name it with --status-repository)", err)
	}
	if base := so.APIURL; base == "" && host == "" {
		return nil, errors.New("agent: reporting commit statuses: give the API's address (--status-api-url)")
	}
	base := so.APIURL
	if base == "" {
		base = commitstatus.BaseURLFor(host)
	}
	poster, err := commitstatus.New(commitstatus.Options{BaseURL: base, Owner: owner, Repo: repo, TokenSource: tokens.Token})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return poster, nil
}

// tokenTTL is how long a commit status token read from its Secret is used
// before it is read again.
const tokenTTL = time.Minute

// secretToken is a token kept in a Secret's key, read again once older
// than ttl. A failed read is not kept: the next post reads again.
type secretToken struct {
	reader client.Reader
	key    types.NamespacedName
	field  string
	ttl    time.Duration

	mu      sync.Mutex
	token   string
	expires time.Time
}

// Token returns the token, reading the Secret when the one kept expired.
func (s *secretToken) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && time.Now().Before(s.expires) {
		return s.token, nil
	}
	var sec corev1.Secret
	if err := s.reader.Get(ctx, s.key, &sec); err != nil {
		return "", fmt.Errorf("reading the commit status token from Secret %s: %w", s.key, err)
	}
	token := strings.TrimSpace(string(sec.Data[s.field]))
	if token == "" {
		return "", fmt.Errorf("Secret %s has no key %q holding the commit status token", s.key, s.field)
	}
	s.token, s.expires = token, time.Now().Add(s.ttl)
	return token, nil
}

// statusRepository reads the repository the commit statuses go to, given
// as OWNER/NAME (--status-repository): one slash, neither part empty.
// The client would refuse "a/b/c" too, but naming neither the flag nor
// what it expects.
func statusRepository(s string) (owner, repo string, err error) {
	owner, repo, ok := strings.Cut(s, "/")
	if !ok || owner == "" || repo == "" || strings.Contains(repo, "/") {
		return "", "", fmt.Errorf("the commit status repository %q (--status-repository): expected OWNER/NAME, as in acme/desired-state", s)
	}
	return owner, repo, nil
}
