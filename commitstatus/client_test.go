package commitstatus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/styrmin/styrmin/commitstatus"
)

const token = "ghp_test-token-0123456789abcdef"

// fakeGitHub implements the documented endpoint POST
// /repos/{owner}/{repo}/statuses/{sha}: it checks the headers and the
// body as GitHub does and records what it accepted.
type fakeGitHub struct {
	t        *testing.T
	mu       sync.Mutex
	statuses map[string][]commitstatus.Status // by sha
	failWith int
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"message":%q,"documentation_url":"https://docs.github.com/rest/commits/statuses"}`, msg)
	}
	if r.Method != http.MethodPost {
		fail(http.StatusNotFound, "Not Found")
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) != 5 || parts[0] != "repos" || parts[3] != "statuses" {
		fail(http.StatusNotFound, "Not Found")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+token {
		fail(http.StatusUnauthorized, "Bad credentials")
		return
	}
	if r.Header.Get("Accept") != "application/vnd.github+json" || r.Header.Get("X-GitHub-Api-Version") == "" || r.Header.Get("Content-Type") != "application/json" {
		fail(http.StatusBadRequest, "missing headers")
		return
	}
	if f.failWith != 0 {
		fail(f.failWith, "Validation Failed")
		return
	}
	var s map[string]any
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&s); err != nil {
		fail(http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	for k := range s {
		switch k {
		case "state", "target_url", "description", "context":
		default:
			fail(http.StatusUnprocessableEntity, "unknown field "+k)
			return
		}
	}
	st := commitstatus.Status{State: commitstatus.State(fmt.Sprint(s["state"])), Context: fmt.Sprint(s["context"])}
	if d, ok := s["description"].(string); ok {
		st.Description = d
	}
	if u, ok := s["target_url"].(string); ok {
		st.TargetURL = u
	}
	switch st.State {
	case "pending", "success", "failure", "error":
	default:
		fail(http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	f.mu.Lock()
	f.statuses[parts[4]] = append(f.statuses[parts[4]], st)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"state":%q,"context":%q}`, st.State, st.Context)
}

func newFake(t *testing.T) (*fakeGitHub, *httptest.Server) {
	f := &fakeGitHub{t: t, statuses: map[string][]commitstatus.Status{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

const sha = "0123456789abcdef0123456789abcdef01234567"

func TestPostSendsTheDocumentedRequest(t *testing.T) {
	f, srv := newFake(t)
	c, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired-state", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 200)
	for _, s := range []commitstatus.Status{
		{State: commitstatus.Pending, Context: "styrmin/prod", Description: "2 of 3 deployments applied"},
		{State: commitstatus.Success, Context: "styrmin/prod", Description: long, TargetURL: "https://styrmin.example.com/"},
	} {
		if err := c.Post(context.Background(), sha, s); err != nil {
			t.Fatal(err)
		}
	}
	got := f.statuses[sha]
	if len(got) != 2 || got[0].State != "pending" || got[1].State != "success" || got[1].TargetURL != "https://styrmin.example.com/" || got[0].Context != "styrmin/prod" {
		t.Fatalf("the server recorded %+v", got)
	}
	if n := len([]rune(got[1].Description)); n != 140 {
		t.Errorf("a long description is cut to GitHub's 140 characters, got %d", n)
	}
}

func TestRefusalsNameTheAPIsMessageAndNeverTheToken(t *testing.T) {
	f, srv := newFake(t)
	bad, _ := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "r", Token: "wrong-" + token})
	err := bad.Post(context.Background(), sha, commitstatus.Status{State: commitstatus.Success, Context: "styrmin/x"})
	var he *commitstatus.HTTPError
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "Bad credentials") || strings.Contains(err.Error(), token) {
		t.Errorf("a bad token: %v", err)
	}
	f.failWith = http.StatusServiceUnavailable
	good, _ := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "r", Token: token})
	err = good.Post(context.Background(), sha, commitstatus.Status{State: commitstatus.Success, Context: "styrmin/x"})
	if !asHTTP(err, &he) || !he.Retryable() {
		t.Errorf("a 503 is retryable: %v", err)
	}
	for _, s := range []string{fmt.Sprint(good), fmt.Sprintf("%v %+v %#v", good, good, good)} {
		if strings.Contains(s, token) {
			t.Errorf("the client prints its token: %s", s)
		}
	}
	if err := good.Post(context.Background(), "main", commitstatus.Status{State: commitstatus.Success}); err == nil {
		t.Error("a ref that is no commit hash: no error")
	}
	if err := good.Post(context.Background(), sha, commitstatus.Status{State: "done"}); err == nil {
		t.Error("an unknown state: no error")
	}
}

func asHTTP(err error, he **commitstatus.HTTPError) bool {
	e, ok := err.(*commitstatus.HTTPError)
	*he = e
	return ok
}

func TestTheTokenGoesOnlyOverHTTPSAndNoRedirectCarriesIt(t *testing.T) {
	if _, err := commitstatus.New(commitstatus.Options{BaseURL: "http://github.example.com/api/v3", Owner: "a", Repo: "b", Token: token}); err == nil {
		t.Error("plain http to another host: no error")
	}
	if _, err := commitstatus.New(commitstatus.Options{BaseURL: "https://x:y@github.example.com", Owner: "a", Repo: "b", Token: token}); err == nil {
		t.Error("credentials in the base URL: no error")
	}
	var leaked sync.Map
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store("auth", r.Header.Get("Authorization"))
	}))
	defer elsewhere.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	c, err := commitstatus.New(commitstatus.Options{BaseURL: redirect.URL, Owner: "a", Repo: "b", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Post(context.Background(), sha, commitstatus.Status{State: commitstatus.Success, Context: "styrmin/x"}); err == nil {
		t.Error("a redirect: no error")
	}
	if v, ok := leaked.Load("auth"); ok {
		t.Errorf("the redirect's target got %q", v)
	}
}

func TestParseRepositoryReadsGitHubURLs(t *testing.T) {
	for url, want := range map[string]string{
		"https://github.com/acme/desired-state.git":    "github.com acme desired-state",
		"https://github.com/acme/desired-state":        "github.com acme desired-state",
		"git@github.com:acme/desired-state.git":        "github.com acme desired-state",
		"ssh://git@ghe.example.com/platform/state.git": "ghe.example.com platform state",
		"https://x-access-token:SECRET@github.com/a/b": "github.com a b",
	} {
		h, o, r, err := commitstatus.ParseRepository(url)
		if got := h + " " + o + " " + r; err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", url, got, err, want)
		}
	}
	// A token as the URL's lone user name (GitLab's, say) is no more shown.
	if _, _, _, err := commitstatus.ParseRepository("https://glpat-SECRET@gitlab.example.com/g/sub/repo"); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("a repository URL with a token as its user name: %v", err)
	}
	if _, _, _, err := commitstatus.ParseRepository("https://u:SECRET@example.com/only"); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("a URL that is no repository: %v", err)
	}
	if commitstatus.BaseURLFor("github.com") != "https://api.github.com" || commitstatus.BaseURLFor("ghe.example.com") != "https://ghe.example.com/api/v3" {
		t.Error("BaseURLFor")
	}
}

// TestATokenSourceGivesTheTokenOfEachPost: a token replaced while the
// agent runs is used from the next post on; a token and a source at once
// is a mistake, and a source that fails posts nothing.
func TestATokenSourceGivesTheTokenOfEachPost(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	if _, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", Token: token,
		TokenSource: func(context.Context) (string, error) { return token, nil }}); err == nil {
		t.Fatal("a token and a token source at once were accepted")
	}
	tokens := []string{"ghs_one", "ghs_two", ""}
	c, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired",
		TokenSource: func(context.Context) (string, error) {
			next := tokens[0]
			tokens = tokens[1:]
			if next == "" {
				return "", fmt.Errorf("the Secret is gone")
			}
			return next, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	sha := strings.Repeat("a", 40)
	for range 2 {
		if err := c.Post(context.Background(), sha, commitstatus.Status{State: commitstatus.Success, Context: "styrmin/x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Post(context.Background(), sha, commitstatus.Status{State: commitstatus.Success, Context: "styrmin/x"}); err == nil || !strings.Contains(err.Error(), "the Secret is gone") {
		t.Fatalf("a source that fails: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "Bearer ghs_one,Bearer ghs_two" {
		t.Fatalf("the posts carried %v, want each post the source's token of the moment and none when it failed", seen)
	}
}

// TestCurrentReadsTheNewestStatusOfItsContext reads a commit's combined
// status as GitHub documents it: the newest status of each context.
func TestCurrentReadsTheNewestStatusOfItsContext(t *testing.T) {
	var path, auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
			return
		}
		path, auth = r.URL.RequestURI(), r.Header.Get("Authorization")
		fmt.Fprint(w, `{"state":"failure","sha":"`+sha+`","total_count":2,"statuses":[
			{"state":"success","context":"ci/build","description":"ok"},
			{"state":"failure","context":"styrmin/prod","description":"prod: prod/dev/hub failed","target_url":"https://styrmin.example.com/"}]}`)
	}))
	defer srv.Close()
	c, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	s, ok, err := c.Current(context.Background(), sha, "styrmin/prod")
	if err != nil || !ok || s.State != commitstatus.Failure || s.Description != "prod: prod/dev/hub failed" || s.TargetURL != "https://styrmin.example.com/" {
		t.Fatalf("styrmin/prod: %+v %v %v", s, ok, err)
	}
	if path != "/repos/acme/desired/commits/"+sha+"/status?per_page=100" || auth != "Bearer "+token {
		t.Errorf("asked %s with %q", path, auth)
	}
	if _, ok, err := c.Current(context.Background(), sha, "styrmin/edge"); ok || err != nil {
		t.Errorf("a context the commit has no status of: %v %v", ok, err)
	}
	if _, _, err := c.Current(context.Background(), "main", "styrmin/prod"); err == nil {
		t.Error("a ref that is no commit hash: no error")
	}
}

// TestARateLimitsRefusalSaysHowLongToWait: GitHub's rate limits answer
// 429 or 403 and name the wait in Retry-After, or in x-ratelimit-reset
// once x-ratelimit-remaining is 0.
func TestARateLimitsRefusalSaysHowLongToWait(t *testing.T) {
	reset := time.Now().Add(10 * time.Minute).Unix()
	for _, tc := range []struct {
		name    string
		code    int
		headers map[string]string
		message string
		limited bool
		wait    time.Duration
	}{
		{"429 with Retry-After", http.StatusTooManyRequests, map[string]string{"Retry-After": "30"}, "Too many requests", true, 30 * time.Second},
		{"the hour's limit spent", http.StatusForbidden, map[string]string{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": fmt.Sprint(reset)}, "API rate limit exceeded for user ID 1.", true, 10 * time.Minute},
		{"the secondary limit", http.StatusForbidden, map[string]string{"Retry-After": "60"}, "You have exceeded a secondary rate limit.", true, time.Minute},
		{"a 403 of permissions", http.StatusForbidden, map[string]string{"X-Ratelimit-Remaining": "4999"}, "Resource not accessible by integration", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.headers {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.code)
				fmt.Fprintf(w, `{"message":%q}`, tc.message)
			}))
			defer srv.Close()
			c, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", Token: token})
			if err != nil {
				t.Fatal(err)
			}
			var he *commitstatus.HTTPError
			err = c.Post(context.Background(), sha, commitstatus.Status{State: commitstatus.Success, Context: "styrmin/x"})
			if !asHTTP(err, &he) {
				t.Fatalf("%v is no HTTPError", err)
			}
			if he.RateLimited() != tc.limited || he.Retryable() != tc.limited {
				t.Errorf("rate limited %v, retryable %v, want %v", he.RateLimited(), he.Retryable(), tc.limited)
			}
			if d := tc.wait - he.RetryAfter; d < 0 || d > 2*time.Second {
				t.Errorf("wait %s, want %s", he.RetryAfter, tc.wait)
			}
		})
	}
}

// TestARateLimitsWaitIsAMinuteWhenUnnamedAndAnHourAtMost: the wait every
// user of the client honours after a rate limit (the commit status
// reporter and the lock mode alike) is the one the answer named, a
// minute when it named none, an hour at most (a wrong clock or header),
// and none after a refusal that is no rate limit.
func TestARateLimitsWaitIsAMinuteWhenUnnamedAndAnHourAtMost(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  commitstatus.HTTPError
		want time.Duration
	}{
		{"the wait named", commitstatus.HTTPError{Code: http.StatusTooManyRequests, RetryAfter: 30 * time.Second}, 30 * time.Second},
		{"none named", commitstatus.HTTPError{Code: http.StatusForbidden, Message: "You have exceeded a secondary rate limit."}, time.Minute},
		{"a day named", commitstatus.HTTPError{Code: http.StatusTooManyRequests, RetryAfter: 24 * time.Hour}, time.Hour},
		{"no rate limit", commitstatus.HTTPError{Code: http.StatusForbidden, Message: "Resource not accessible by integration", RetryAfter: time.Minute}, 0},
		{"a refused token", commitstatus.HTTPError{Code: http.StatusUnauthorized, Message: "Bad credentials"}, 0},
	} {
		if got := tc.err.RateLimitWait(); got != tc.want {
			t.Errorf("%s: wait %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestATokenWatchTellsWhenRefusalsStartAndEnd: a poller logs a bad token
// when the host starts refusing it and when it takes one again, not at
// each of the refusals between; a host that does not answer says
// nothing of the token.
func TestATokenWatchTellsWhenRefusalsStartAndEnd(t *testing.T) {
	refused := fmt.Errorf("posting: %w", &commitstatus.HTTPError{Code: http.StatusUnauthorized, Message: "Bad credentials"})
	down := &commitstatus.HTTPError{Code: http.StatusBadGateway}
	var w commitstatus.TokenWatch
	for i, step := range []struct {
		err            error
		started, ended bool
	}{
		{nil, false, false},
		{refused, true, false},
		{refused, false, false},
		{down, false, false},
		{refused, false, false},
		{nil, false, true},
		{nil, false, false},
		{down, false, false},
		{refused, true, false},
	} {
		if started, ended := w.Observe(step.err); started != step.started || ended != step.ended {
			t.Errorf("step %d (%v): started %v ended %v, want %v %v", i, step.err, started, ended, step.started, step.ended)
		}
	}
}
