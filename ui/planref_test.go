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
