package gitsource

import (
	"strconv"
	"strings"
	"testing"
)

// credentialMarker ends every password and token FuzzPublicURL writes in
// a URL (ends: a password starting "/" or "12/" must stay reachable):
// upper-case, so that the host and path it builds (lower-case
// letters, digits, '.', '-', '/') and what the functions write
// (REDACTED, the placeholder) cannot hold it.
const credentialMarker = "XQ"

// fromAlphabet maps s to bytes of alphabet (def when s is empty).
func fromAlphabet(s, alphabet, def string) string {
	if s == "" {
		return def
	}
	b := make([]byte, len(s))
	for i := range len(s) {
		b[i] = alphabet[int(s[i])%len(alphabet)]
	}
	return string(b)
}

// FuzzPublicURL: whatever the user name, the password or token (any
// bytes: '^', '%', ' ', '#', '@', '/', '?', ':' included) and whether the
// URL they make parses, neither PublicURL nor redactURL gives out the
// password, nor, over http(s), a lone user name (the token); and over
// http(s) they give either the URL without its user information (with
// REDACTED for redactURL) or the placeholder, so no piece of the
// credentials either.
func FuzzPublicURL(f *testing.F) {
	for _, s := range []struct {
		user, secret, host, path string
		shape, port              uint8
	}{
		{"x-access-token", "s3cret", "github.com", "/o/r.git", 0, 0},
		{"", "ghp_token", "github.com", "/o/r.git", 1, 0},
		{"user", "s3cret^x", "github.com", "/o/r.git", 2, 0},
		{"user", "s3cret%zz", "example.org", "/r", 0, 0},
		{"user", "pass word", "example.org", "/r", 0, 0},
		{"user", "s3cret#x", "example.org", "/r", 0, 0},
		{"user", "#x", "example.org", "/r", 0, 0},
		{"user", "a@b", "example.org", "/r", 0, 0},
		{"user", "a@b/c", "example.org", "/r", 0, 0},
		{"user", "/s3cret", "example.org", "/r", 0, 0},
		{"user", "12/s3cret", "example.org", "/r", 2, 0},
		{"user", "?s3cret", "example.org", "/r", 0, 0},
		{"user", "a:b", "example.org", "/r", 4, 0},
		{"git", "s3cret", "github.com", "/o/r.git", 4, 0},
		{"git", "/s3cret", "github.com", "/o/r.git", 4, 0},
		{"git", "s3cret", "github.com", "o/r.git", 5, 0},
		{"", "tok/en", "github.com", "/o/r.git", 1, 0},
		{"", "tok#en", "github.com", "/o/r.git", 3, 22},
		{"us/er", "s3cret", "github.com", "/o/r.git", 0, 0},
		{"user", "s3cret", "127.0.0.1", "/drivers", 6, 80},
	} {
		f.Add(s.user, s.secret, s.host, s.path, s.shape, s.port)
	}
	f.Fuzz(func(t *testing.T, user, secret, host, path string, shape, port uint8) {
		secret += credentialMarker
		host = fromAlphabet(host, "abcdefghijklmnopqrstuvwxyz0123456789.-", "h")
		path = fromAlphabet(path, "abcdefghijklmnopqrstuvwxyz0123456789.-/_", "")
		if path != "" && path[0] != '/' && shape != 5 {
			path = "/" + path
		}
		if port%2 == 1 {
			host += ":" + strconv.Itoa(int(port))
		}
		scheme := []string{"https", "https", "http", "http", "ssh", "", "HTTPS", "https"}[shape%8]
		lone := shape%8 == 1 || shape%8 == 3
		var raw string
		switch {
		case shape%8 == 5: // scp-like: user:password@host:path
			raw = user + ":" + secret + "@" + host + ":" + path
		case shape%8 == 7: // no user name, a password
			raw = scheme + "://:" + secret + "@" + host + path
		case lone:
			raw = scheme + "://" + secret + "@" + host + path
		default:
			raw = scheme + "://" + user + ":" + secret + "@" + host + path
		}
		web := strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")
		for _, fn := range []struct {
			name   string
			f      func(string) string
			public string // the URL over http(s) without its credentials
		}{
			{"PublicURL", PublicURL, strings.ToLower(scheme) + "://" + host + path},
			{"redactURL", redactURL, strings.ToLower(scheme) + "://REDACTED@" + host + path},
		} {
			got := fn.f(raw)
			if strings.Contains(got, secret) && !strings.Contains(user, secret) {
				t.Errorf("%s(%q) = %q: it holds the password or token %q", fn.name, raw, got, secret)
			}
			if web && got != unparseableURL && got != fn.public {
				t.Errorf("%s(%q) = %q, want %q or %q: it holds a piece of the credentials", fn.name, raw, got, fn.public, unparseableURL)
			}
		}
	})
}
