package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/timeline"
)

// runHistoryFromGit prints a deployment's whole timeline from the
// repository's git history (every lock commit reachable from HEAD), no
// cluster needed.
func runHistoryFromGit(repoDir string, w io.Writer, output, name string) error {
	dir, err := filepath.Abs(repoDir)
	if err != nil {
		return err
	}
	repo, err := gitsource.Open(dir, gitsource.OpenOptions{})
	if err != nil {
		return fmt.Errorf("--from-git reads the history of --repo %s, which must be a git repository: %w", repoDir, err)
	}
	sub, err := repo.Subdir(dir)
	if err != nil {
		return err
	}
	head, err := repo.Resolve("HEAD")
	if err != nil {
		return err
	}
	fsys, err := repo.TreeAt(head, sub)
	if err != nil {
		return err
	}
	id, err := timeline.FindDeployment(fsys, name)
	if err != nil {
		return err
	}
	entries, err := timeline.NewReader(repo, sub).Read(head, id)
	if err != nil {
		return err
	}
	if entries == nil {
		entries = []timeline.Entry{}
	}
	switch output {
	case outJSON, outYAML:
		return writeData(w, output, struct {
			Deployment string           `json:"deployment"`
			Head       string           `json:"head"`
			Entries    []timeline.Entry `json:"entries"`
		}{id.String(), head.String(), entries})
	case outName:
		for _, e := range entries {
			fmt.Fprintf(w, "%s@%d\n", id, e.Sequence)
		}
		return nil
	}
	if len(entries) == 0 {
		_, err := fmt.Fprintf(w, "%s: no lock commit in the history of %s\n", id, head.Short())
		return err
	}
	fmt.Fprintf(w, "%s (git history at %s: %d lock commits)\n\n", id, head.Short(), len(entries))
	return gitHistoryTable(entries).print(w, output)
}

func gitHistoryTable(entries []timeline.Entry) table {
	t := table{
		header: []string{"SEQUENCE", "COMMIT", "DATE", "AUTHOR", "WORKFLOW", "DRIVER", "APP", "CONFIG COMMIT"},
		wide:   []string{"PR", "SUBJECT"},
	}
	for _, e := range entries {
		wf := string(e.Workflow)
		switch {
		case e.Removed:
			wf = "(lockfile removed)"
		case e.Error != "":
			wf = "(unreadable)"
		case e.Retry:
			wf += " (retry)"
		}
		pr := ""
		if e.PullRequest > 0 {
			pr = fmt.Sprintf("#%d", e.PullRequest)
		}
		subject := e.ConfigSubject
		if subject == "" {
			subject = e.Subject
		}
		t.rows = append(t.rows, row{
			key: e.Commit, name: e.Commit, data: e,
			cells: []string{fmt.Sprint(e.Sequence), shortCommit(e.Commit), e.Date.Format("2006-01-02 15:04Z"), e.Author, wf, e.Driver, e.AppVersion, shortCommit(e.ConfigCommit)},
			wide:  []string{pr, firstLine(subject)},
		})
	}
	return t
}
