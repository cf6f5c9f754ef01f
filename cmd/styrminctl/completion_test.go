package main

import (
	"slices"
	"strings"
	"testing"
)

// complete runs cobra's hidden __complete command in-process and returns
// the completions and the directive line.
func complete(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	stdout, stderr, code := run(t, append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %v: exit %d\n%s", args, code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func TestCompletionOffersDeploymentsDriversAndOutputFormats(t *testing.T) {
	t.Parallel()
	repo := []string{"--repo", examplesRepo}
	for _, tc := range []struct {
		args      []string
		want      []string
		directive string
	}{
		{[]string{"explain", ""}, []string{"local/dev/hub", "local/dev/web", "local/staging/hub", "local/staging/web"}, ":4"},
		{[]string{"explain", "local/dev/hub", ""}, nil, ":4"},
		{[]string{"diff", "local/st"}, []string{"local/staging/hub", "local/staging/web"}, ":4"},
		{[]string{"retry", "local/dev/web", "local/dev/"}, []string{"local/dev/hub"}, ":4"},
		{[]string{"upgrade", "local/s"}, []string{"local/staging", "local/staging/hub", "local/staging/web"}, ":6"},
		{[]string{"status", "local/dev/w"}, []string{"local/dev/web"}, ":4"},
		{[]string{"history", "local/staging/h"}, []string{"local/staging/hub"}, ":4"},
		{[]string{"tasks", "list", "--deployment", "local/dev/h"}, []string{"local/dev/hub"}, ":4"},
		{[]string{"drivers", "show", "web"}, []string{"webapp", "webapp@1.0.0", "webapp@1.1.0"}, ":4"},
		{[]string{"status", "-o", ""}, []string{"text", "wide", "name", "json", "yaml"}, ":4"},
		{[]string{"plan", "-o", ""}, []string{"text", "markdown", "json", "yaml"}, ":4"},
		{[]string{"version", "-o", "y"}, []string{"text", "json", "yaml"}, ":4"}, // the shell filters fixed lists
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, directive := complete(t, append(repo, tc.args...)...)
			if !slices.Equal(got, tc.want) || directive != tc.directive {
				t.Errorf("completions %q %s, want %q %s", got, directive, tc.want, tc.directive)
			}
		})
	}
}

func TestCompletionScriptsAreOffered(t *testing.T) {
	t.Parallel()
	help, _, _ := run(t, "--help")
	if !strings.Contains(help, "\n  completion ") {
		t.Errorf("completion is not listed in the help:\n%s", help)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, stderr, code := run(t, "completion", shell)
		if code != 0 || !strings.Contains(out, "styrminctl") || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s: exit %d, stderr %s, %d bytes", shell, code, stderr, len(out))
		}
	}
}
