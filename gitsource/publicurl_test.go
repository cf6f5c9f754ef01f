package gitsource

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestPublicURLDropsCredentials(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://x-access-token:s3cret@github.com/o/r.git", "https://github.com/o/r.git"},
		{"https://s3cret@github.com/o/r.git", "https://github.com/o/r.git"},
		{"http://127.0.0.1:8080/drivers", "http://127.0.0.1:8080/drivers"},
		{"ssh://git:s3cret@github.com/o/r.git", "ssh://git@github.com/o/r.git"},
		{"ssh://git@github.com/o/r.git", "ssh://git@github.com/o/r.git"},
		{"git@github.com:o/r.git", "git@github.com:o/r.git"},
		{"file:///srv/git/r", "file:///srv/git/r"},
	} {
		if got := PublicURL(tc.in); got != tc.want {
			t.Errorf("PublicURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestAURLThatDoesNotParseIsShownAsAPlaceholder: what in a URL url.Parse
// rejects is a credential cannot be told, so neither PublicURL nor the
// errors (redactURL, urlError) show any of it when it may hold one.
func TestAURLThatDoesNotParseIsShownAsAPlaceholder(t *testing.T) {
	const secret = "s3cret"
	for _, raw := range []string{
		"https://user:" + secret + "^x@github.com/o/r.git", // '^' is no userinfo character
		"https://user:" + secret + " x@github.com/o/r.git",
		"https://user:" + secret + "%zz@github.com/o/r.git", // a stray '%'
		"https://" + secret + "^x@github.com/o/r.git",       // a lone token
		"https://user:" + secret + "#x@github.com/o/r.git",  // url.Parse: invalid port ":s3cret"
		"ssh://git:" + secret + "^x@github.com/o/r.git",
	} {
		_, err := url.Parse(raw)
		if err == nil {
			t.Fatalf("%q parses; the test wants one that does not", raw)
		}
		if got := PublicURL(raw); got != unparseableURL {
			t.Errorf("PublicURL(%q) = %q, want %q", raw, got, unparseableURL)
		}
		if got := redactURL(raw); got != unparseableURL {
			t.Errorf("redactURL(%q) = %q, want %q", raw, got, unparseableURL)
		}
		if got := urlError(raw, err).Error(); strings.Contains(got, secret) {
			t.Errorf("urlError(%q) = %q: it shows the secret", raw, got)
		}
	}
	// One that holds no credentials is shown as it is.
	for _, raw := range []string{"git@github.com:o/r.git", "https://github.com/o/100%/r.git"} {
		if got := PublicURL(raw); got != raw {
			t.Errorf("PublicURL(%q) = %q, want it unchanged", raw, got)
		}
	}
}

func TestSameHost(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"https://github.com/o/state.git", "https://github.com/o/drivers.git", true},
		{"https://github.com/o/state.git", "https://GitHub.com/x/y.git", true},
		{"https://github.com/o/state.git", "https://evil.example.com/o/drivers.git", false},
		{"https://github.com/o/state.git", "http://github.com/o/drivers.git", false},
		{"http://127.0.0.1:1/a", "http://127.0.0.1:2/b", false},
		{"git@github.com:o/state.git", "ssh://git@github.com/o/drivers.git", true},
		{"git@github.com:o/state.git", "https://github.com/o/drivers.git", false},
	} {
		if got := SameHost(tc.a, tc.b); got != tc.want {
			t.Errorf("SameHost(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestCredentialsGoOnlyToTheirOwnHostAndNeverOverPlainHTTP(t *testing.T) {
	auth := Auth{Token: "t0ken"}
	for _, tc := range []struct {
		repo, url string
		sent      bool
		err       bool
	}{
		{"https://github.com/o/state.git", "https://github.com/o/drivers.git", true, false},
		{"https://github.com/o/state.git", "https://evil.example.com/o/drivers.git", false, false},
		{"https://github.com/o/state.git", "https://github.com:8443/o/drivers.git", false, false},
		{"https://github.com/o/state.git", "http://github.com/o/drivers.git", false, false},
		{"http://git.internal/o/state.git", "http://git.internal/o/drivers.git", false, true},
		{"http://127.0.0.1:8080/o/state.git", "http://127.0.0.1:8080/o/drivers.git", true, false}, // this machine
		{"http://localhost:8080/o/state.git", "http://localhost:8080/o/drivers.git", true, false},
		{"", "https://github.com/o/drivers.git", false, false},
	} {
		got, err := CredentialsFor(tc.repo, tc.url, auth)
		if (err != nil) != tc.err || (tc.err && !errors.Is(err, ErrPlainHTTPCredentials)) {
			t.Errorf("CredentialsFor(%q, %q): error %v, want error %v", tc.repo, tc.url, err, tc.err)
		}
		if sent := got.Token != ""; sent != tc.sent {
			t.Errorf("CredentialsFor(%q, %q) sends the token: %v, want %v", tc.repo, tc.url, sent, tc.sent)
		}
		if err != nil && strings.Contains(err.Error(), auth.Token) {
			t.Errorf("the error shows the token: %v", err)
		}
	}
}
