package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// main^{/text} makes git match the regular expression text against every
// commit message, main~N walks N commits, each under the repository's
// lock: the plan page takes a branch, tag or commit only, and refuses
// anything else (400, naming the field) before git reads anything.
func TestAPlanOfARevisionExpressionIsRefusedBeforeGitReadsIt(t *testing.T) {
	repo, h := boundedWorld(t, 0)
	for _, tc := range []struct{ field, query string }{
		{"head", "head=" + url.QueryEscape("main^{/(a+)+no commit says this}")},
		{"head", "head=" + url.QueryEscape("main~100000")},
		{"base", "head=main&base=" + url.QueryEscape("main^{/x}")},
		{"head", "head=" + url.QueryEscape("HEAD@{1}")},
		{"head", "head=" + url.QueryEscape("main:locks")},
		{"head", "head=" + url.QueryEscape("main..HEAD")},
		{"head", "head=" + strings.Repeat("a", 300)},
	} {
		rec := getHost(h, "localhost", "/plan?"+tc.query)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("GET /plan?%s: %d, want 400\n%s", tc.query, rec.Code, rec.Body)
			continue
		}
		if body := rec.Body.String(); !strings.Contains(body, tc.field+"=") || !strings.Contains(body, "expected a branch, tag or commit") {
			t.Errorf("GET /plan?%s does not name the field %s and what is expected:\n%s", tc.query, tc.field, body)
		}
	}
	if n := repo.resolves.Load(); n != 0 {
		t.Errorf("%d refs resolved for refused requests, want none", n)
	}
	// A branch, a ref's full name and a commit are planned.
	commit, err := repo.Head()
	if err != nil {
		t.Fatal(err)
	}
	before := repo.resolves.Load()
	for _, q := range []string{"head=main", "head=main&base=" + commit.String(), "head=" + url.QueryEscape("refs/heads/main"), "head=" + commit.Short()} {
		if rec := getHost(h, "localhost", "/plan?"+q); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `<section class="plan">`) {
			t.Errorf("GET /plan?%s: %d, want the plan\n%s", q, rec.Code, rec.Body)
		}
	}
	if repo.resolves.Load() == before {
		t.Error("the accepted refs were not resolved")
	}
}

// go-git tries a ref as a hash prefix of whole bytes before it reads it
// as a name: "a" is the empty prefix and "abc" one byte, so it listed
// every object of the clone (or one in 256) and read each as a commit
// until one was, holding the repository's lock the agent's syncer waits
// for, as often as pages asked. Hex digits shorter than git's shortest
// abbreviation (4) are refused before git reads anything, saying what is
// expected; an abbreviation of 4 or more and a whole hash are planned,
// and a tag of such a name by its full name.
func TestAShortHexRefIsRefusedBeforeGitReadsIt(t *testing.T) {
	repo, h := boundedWorld(t, 0)
	for _, tc := range []struct{ field, query string }{
		{"head", "head=a"},
		{"head", "head=ab"},
		{"head", "head=abc"},
		{"head", "head=1"},
		{"base", "head=main&base=F0"},
	} {
		rec := getHost(h, "localhost", "/plan?"+tc.query)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("GET /plan?%s: %d, want 400\n%s", tc.query, rec.Code, rec.Body)
			continue
		}
		if body := rec.Body.String(); !strings.Contains(body, tc.field+"=") || !strings.Contains(body, "at least 4 hex digits") {
			t.Errorf("GET /plan?%s does not name the field %s and what is expected:\n%s", tc.query, tc.field, body)
		}
	}
	if n := repo.resolves.Load(); n != 0 {
		t.Errorf("%d refs resolved for refused requests, want none", n)
	}
	commit, err := repo.Head()
	if err != nil {
		t.Fatal(err)
	}
	full := commit.String()
	for _, q := range []string{"head=" + full[:4], "head=" + full[:7], "head=" + full, "head=main&base=" + full[:7]} {
		if rec := getHost(h, "localhost", "/plan?"+q); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `<section class="plan">`) {
			t.Errorf("GET /plan?%s: %d, want the plan\n%s", q, rec.Code, rec.Body)
		}
	}
}
