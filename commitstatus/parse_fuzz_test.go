package commitstatus_test

import (
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/commitstatus"
)

// repositoryURLs are real forms of a repository's address, and ones that
// must not be read as GitHub's.
var repositoryURLs = []string{
	"https://github.com/acme/desired-state.git",
	"https://github.com/acme/desired-state",
	"https://github.com/acme/desired-state/",
	"git@github.com:acme/desired-state.git",
	"ssh://git@ghe.example.com/platform/state.git",
	"https://x-access-token:tok@github.com/a/b",
	"https://glpat-tok@gitlab.example.com/g/sub/repo",
	"https://ghe.example.com:8443/acme/state.git",
	"https://github.com#@evil.example/acme/state",
	"https://github.com?@evil.example/acme/state",
	"http://github.com/acme/state",
	"file:///srv/git/state.git",
	"/srv/git/state.git",
	"https://u:tok@example.com/a/b%zz",
}

// TestARepositoryURLIsReadAsGitReadsItAndItsTokenIsNeverShown: the host
// is the one git connects to (a fragment, query or port is no part of
// it: the token would go to another host's API), and a URL net/url cannot
// read shows no user information in the error.
func TestARepositoryURLIsReadAsGitReadsItAndItsTokenIsNeverShown(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com#@evil.example/acme/state": "",
		"https://github.com?@evil.example/acme/state": "",
		"https://ghe:8443/acme":                       "",
		"https://gh e.example/acme/state":             "",
		"https://github.com/../state":                 "",
		"https://github.com/acme/state?x=1":           "",
		"ssh://root@github.com/acme/state":            "",
		"https://github.com/acme/state.git":           "github.com acme state",
	} {
		h, o, r, err := commitstatus.ParseRepository(in)
		got := ""
		if err == nil {
			got = h + " " + o + " " + r
		}
		if got != want {
			t.Errorf("%s: %q (%v), want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"https://u:SECRET@example.com/a/b%zz",
		"https://u:SECRET@example.com:port/a/b",
		"https://SECRET@example.com/a/b%zz",
		"https://u:SECRET@exa mple.com/a/b",
		"https://u:12/SECRET@example.com/a/b",
		"https://u:SE#CRET@example.com/a/b",
	} {
		_, _, _, err := commitstatus.ParseRepository(in)
		if err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: %v", in, err)
		}
	}
}

var fuzzScheme = regexp.MustCompile(`^[a-z][a-z0-9+.-]{0,10}$`)

// FuzzParseRepository: whatever the address, a repository read from it
// has a plain host, the one net/url reads (so the API asked is the host
// git connects to), and names GitHub accepts; an error never shows the
// user information a URL carries, whatever its password holds ('/', '#',
// '?', '%', '@', ':'), parsed by net/url or not.
func FuzzParseRepository(f *testing.F) {
	for _, u := range repositoryURLs {
		f.Add(u, "https", "u", "tok", "example.com/a/b", false)
	}
	f.Add("", "https", "x-access-token", "tok", "github.com/a/b%zz", false)
	f.Add("", "https", "", "tok", "example.com:x/a/b", true)
	f.Add("", "https", "u", "12/tok", "example.com/a/b", false)
	f.Add("", "https", "u", "a#b", "example.com/a/b", false)
	f.Add("", "https", "u", "?x", "example.com/a b", false)
	f.Add("", "ssh", "git", "p", "host:22/a/b", false)
	const marker = "Zq7SECRETq7Z"
	valid := regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)
	f.Fuzz(func(t *testing.T, raw, scheme, user, secret, rest string, lone bool) {
		if host, owner, repo, err := commitstatus.ParseRepository(raw); err == nil {
			if !valid.MatchString(owner) || !valid.MatchString(repo) || owner == ".." || repo == ".." || owner == "." || repo == "." {
				t.Fatalf("%q: owner %q, repo %q", raw, owner, repo)
			}
			base, perr := url.Parse(commitstatus.BaseURLFor(host))
			if perr != nil || base.Host != host && host != "github.com" || base.Scheme != "https" {
				t.Fatalf("%q: host %q gives the API %q (%v)", raw, host, commitstatus.BaseURLFor(host), perr)
			}
			if !strings.HasPrefix(raw, "git@") {
				if u, perr := url.Parse(raw); perr != nil || u.Host != host {
					t.Fatalf("%q: host %q, net/url reads %v (%v)", raw, host, u, perr)
				}
			}
		}
		// A URL with user information: the error never shows it.
		if !fuzzScheme.MatchString(scheme) || strings.Contains(rest, marker) {
			return
		}
		in := scheme + "://" + user + ":" + secret + marker + "@" + rest
		if lone {
			in = scheme + "://" + secret + marker + "@" + rest
		}
		if _, _, _, err := commitstatus.ParseRepository(in); err != nil && strings.Contains(err.Error(), marker) {
			t.Fatalf("%q: the error shows the user information: %v", in, err)
		}
	})
}
