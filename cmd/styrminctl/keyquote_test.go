package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// rawControl reports a control character in s other than newline and
// tab: what a terminal or a CI log acts on.
func rawControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool {
		return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0)
	})
}

// forgedLine reports a line of s a CI runner takes for a workflow command
// (GitHub Actions' ::error::, ::add-mask::).
func forgedLine(s string) bool {
	for line := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "::") {
			return true
		}
	}
	return false
}

// TestKeysWithControlCharactersAreQuotedInErrorsAndCauses: a key an
// author writes reached the plan's errors and its causes as written: one
// holding newlines printed GitHub Actions workflow commands of its own
// (::add-mask::, ::error::) on lines of their own, one holding ESC and CR
// cleared the terminal's line, and "a.b" read as a: b:. Such a key is
// shown as ["…"], quoted as Go quotes a string, in errors and in every
// format's causes, as the plan's changes show it.
func TestKeysWithControlCharactersAreQuotedInErrorsAndCauses(t *testing.T) {
	t.Parallel()
	const envFile = "clusters/local/environments/dev/environment.cue"
	appendTo := func(t *testing.T, dir, rel, text string) {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(dir, rel), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(text); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct{ name, cue, want string }{
		{"newlines", `"x\n::add-mask::hidden\n::error title=ok::all good": 1` + "\n", `field ["x\n::add-mask::hidden\n::error title=ok::all good"]: unknown field`},
		{"escape and carriage return", `"bad\u001b[2K\rXX": 1` + "\n", `field ["bad\x1b[2K\rXX"]: unknown field`},
	} {
		t.Run("an error: "+tc.name, func(t *testing.T) {
			t.Parallel()
			dir := lockedGitRepo(t)
			appendTo(t, dir, envFile, tc.cue)
			stdout, stderr, code := run(t, "--repo", dir, "plan")
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("plan: exit %d; want 1 and %q on stderr:\n%s", code, tc.want, stderr)
			}
			if rawControl(stderr+stdout) || forgedLine(stderr+stdout) {
				t.Errorf("plan printed a raw control character or a workflow command:\n%q\n%q", stderr, stdout)
			}
		})
	}

	t.Run("causes", func(t *testing.T) {
		t.Parallel()
		dir := lockedGitRepo(t)
		appendTo(t, dir, devWebFile, "config: \"k\\n::error::forged\": 1\nconfig: \"a.b\": 1\nconfig: \"esc\\u001b[2K\\r\": 1\n")
		for _, tc := range []struct {
			format string
			want   []string
		}{
			{"text", []string{`config["k\n::error::forged"]`, `config["a.b"]`, `config["esc\x1b[2K\r"]`}},
			{"markdown", []string{"`" + `config["k\n::error::forged"]` + "`", "`" + `config["a.b"]` + "`"}},
			{"json", []string{`"config[\"k\\n::error::forged\"]"`, `"config[\"a.b\"]"`, `"config[\"esc\\x1b[2K\\r\"]"`}},
		} {
			stdout, stderr, code := run(t, "--repo", dir, "plan", "-o", tc.format, "--color", "never")
			if code != 0 {
				t.Fatalf("plan -o %s: exit %d\n%s%s", tc.format, code, stdout, stderr)
			}
			if rawControl(stdout) || forgedLine(stdout) {
				t.Errorf("plan -o %s printed a raw control character or a workflow command:\n%s", tc.format, stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("plan -o %s: want %s in:\n%s", tc.format, w, stdout)
				}
			}
			if strings.Contains(stdout, "config.a.b") {
				t.Errorf("plan -o %s shows the key \"a.b\" as a: b:\n%s", tc.format, stdout)
			}
		}
	})
}

// TestTheCLIEscapesControlCharactersInTheErrorsItPrints: an error's text
// is not all Styrmin's (a git or CUE message, a path): what reaches stderr
// holds no control character but its lines' newlines, so no message can
// drive the terminal (ESC, CR) or the 8-bit CSI (0x9b) a reader's
// terminal or CI log acts on.
func TestTheCLIEscapesControlCharactersInTheErrorsItPrints(t *testing.T) {
	root := &cobra.Command{Use: "styrminctl", SilenceErrors: true, SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error { return errors.New("bad\x1b[2K\rXX\nsecond line\u0085 \x9b") }}
	root.SetArgs(nil)
	var stderr bytes.Buffer
	if code := execute(context.Background(), root, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if got, want := stderr.String(), "error: bad\\x1b[2K\\rXX\nsecond line\\u0085 \\x9b\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	var out bytes.Buffer
	printDeploymentError(&out, "local/dev/web", "field x\x1b[2K: wrong\nnext")
	if got, want := out.String(), "error: local/dev/web: field x\\x1b[2K: wrong\nerror: local/dev/web: next\n"; got != want {
		t.Errorf("printDeploymentError = %q, want %q", got, want)
	}
}

// TestExplainQuotesTheKeysAnAuthorWrites: explain listed each resolved
// path as its keys joined with dots, so a key holding a newline printed a
// workflow command on a line of its own, and "a.b" and a: b: were one
// path. It writes them as the plan and the errors do, and a path given
// in that form is found.
func TestExplainQuotesTheKeysAnAuthorWrites(t *testing.T) {
	t.Parallel()
	dir := exampleRepo(t)
	f, err := os.OpenFile(filepath.Join(dir, devWebFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("config: \"k\\n::error::forged\": 1\nconfig: \"a.b\": 2\nconfig: a: b: 3\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"explain", "local/dev/web", "config"}, []string{`config["k\n::error::forged"] = 1`, `config["a.b"] = 2`, "config.a.b = 3"}},
		{[]string{"explain", "local/dev/web", `config["a.b"]`}, []string{`config["a.b"] = 2`}},
	} {
		stdout, stderr, code := run(t, append([]string{"--repo", dir}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", tc.args, code, stderr)
		}
		if rawControl(stdout) || forgedLine(stdout) {
			t.Errorf("%s printed a raw control character or a workflow command:\n%s", tc.args, stdout)
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("%s: want %s in:\n%s", tc.args, w, stdout)
			}
		}
	}
}
