package gitsource_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// del as a file's content in localRepo.commit deletes the file.
const del = "\x00delete"

// localRepo is a repository on disk driven by the git command, with
// deterministic commit dates (one minute apart).
type localRepo struct {
	t    testing.TB
	dir  string
	home string
	n    int
}

func newLocalRepo(t testing.TB, bare bool) *localRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	r := &localRepo{t: t, dir: t.TempDir(), home: t.TempDir()}
	args := []string{"init", "--quiet", "--initial-branch=main"}
	if bare {
		args = append(args, "--bare")
	}
	r.git(args...)
	return r
}

func (r *localRepo) env() []string {
	date := fmt.Sprintf("%d +0000", 1_700_000_000+60*r.n)
	return []string{
		"HOME=" + r.home,
		"PATH=" + os.Getenv("PATH"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@localhost",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@localhost",
		"GIT_AUTHOR_DATE=" + date, "GIT_COMMITTER_DATE=" + date,
	}
}

// git runs git in the repository and returns its trimmed output.
func (r *localRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = r.env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// write writes (or, with del, removes) files in the worktree.
func (r *localRepo) write(files map[string]string) {
	r.t.Helper()
	for _, p := range slices.Sorted(maps.Keys(files)) {
		full := filepath.Join(r.dir, filepath.FromSlash(p))
		if files[p] == del {
			if err := os.RemoveAll(full); err != nil {
				r.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(files[p]), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
}

// commit writes files, commits everything with message and returns the
// commit hash.
func (r *localRepo) commit(message string, files map[string]string) string {
	r.t.Helper()
	r.n++
	r.write(files)
	r.git("add", "--all", ".")
	r.git("commit", "--quiet", "--allow-empty", "-m", message)
	return r.git("rev-parse", "HEAD")
}

// subjects maps every commit hash to its subject line.
func (r *localRepo) subjects() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(r.git("log", "--all", "--format=%H %s"), "\n") {
		h, s, _ := strings.Cut(line, " ")
		out[h] = s
	}
	return out
}

// gitAllowFail runs git and ignores a non-zero exit (a merge that stops on
// a conflict).
func (r *localRepo) gitAllowFail(args ...string) {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = r.env()
	_ = cmd.Run()
}
