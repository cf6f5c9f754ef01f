package ui

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/timeline"
)

// headState is what the overview reads from git at one head: the locked
// instances (their summaries) and the deployments on hold.
type headState struct {
	head  gitsource.Hash
	locks map[resolver.ID]*resolver.Instance
	held  map[resolver.ID]string
	// invalid says, per lockfile skipped, why (its path first): a hand
	// edit, a merge conflict's markers, a newer apiVersion. The agent
	// skips such a file too; the other rows keep git's data.
	invalid []string
	fsys    fs.FS
	err     error
}

// headState reads git's head, once per head commit.
func (h *Handler) headState() *headState {
	if h.o.Repo == nil {
		return nil
	}
	head, err := h.o.Repo.Head()
	if err != nil {
		return &headState{err: fmt.Errorf("reading the repository's head: %w", err)}
	}
	h.headMu.Lock()
	defer h.headMu.Unlock()
	if h.head != nil && h.head.head == head {
		return h.head
	}
	gs := &headState{head: head}
	gs.fsys, err = h.o.Repo.TreeAt(head, h.o.Dir)
	if err == nil {
		gs.locks, gs.held, gs.invalid, err = readHead(gs.fsys, h.o.PlanOptions.ConfigSandbox)
	}
	if err != nil {
		gs.err = fmt.Errorf("reading the repository at %s: %w", head.Short(), err)
	}
	h.head = gs
	return gs
}

// readHead reads the summary of every lockfile (timeline.Summary: the
// overview needs no context or values, and decoding 500 whole lockfiles
// would cost a quarter of a second per new commit) and the holds of the
// deployment files that mention one. A lockfile that cannot be read or
// is invalid is skipped and said in invalid, as the agent skips it: one
// bad file must not take git's data from every other row.
func readHead(fsys fs.FS, config *resolver.ConfigSandbox) (locks map[resolver.ID]*resolver.Instance, held map[resolver.ID]string, invalid []string, err error) {
	files, err := fs.Glob(fsys, path.Join(resolver.LocksDir, "*", "*", "*.lock.yaml"))
	if err != nil {
		return nil, nil, nil, err
	}
	locks = make(map[resolver.ID]*resolver.Instance, len(files))
	for _, f := range files {
		// Within the resolver's bound, refused before it is read: a
		// file of gigabytes (a few kilobytes in git's compressed form)
		// must not be read into memory for every new head.
		data, err := resolver.ReadLockFile(fsys, f)
		if err != nil {
			// Its errors start with the file's path.
			invalid = append(invalid, err.Error())
			continue
		}
		in, err := timeline.Summary(f, data)
		if err != nil {
			// Summary's errors start with the file's path.
			invalid = append(invalid, err.Error())
			continue
		}
		locks[in.ID] = in
	}
	held = map[resolver.ID]string{}
	var loader *resolver.Loader
	for _, id := range resolver.ListDeployments(fsys) {
		for _, ext := range []string{".cue", ".yaml", ".yml"} {
			file := path.Join("clusters", id.Cluster, "environments", id.Environment, "deployments", id.Name+ext)
			data, err := readUpTo(fsys, file, resolver.DefaultMaxFileSize)
			if err != nil || !bytes.Contains(data, []byte("hold")) {
				// A file the loader would refuse (too large) holds
				// nothing: the plan reports it.
				continue
			}
			// Only a file that mentions a hold is parsed (with the
			// repository's schema, as the resolver reads it).
			if loader == nil {
				loader = resolver.NewLoader(0).WithSandbox(config)
			}
			var raw map[string]any
			if err := loader.LoadFile(fsys, file, "#Deployment", &raw); err != nil {
				// The plan reports a broken file; the overview shows the
				// rest.
				continue
			}
			if hold, _ := raw["hold"].(string); strings.TrimSpace(hold) != "" {
				held[id] = hold
			}
		}
	}
	return locks, held, invalid, nil
}

// namespaceOf reads a locked deployment's namespace from its whole
// lockfile (the summary does not hold it): for the few deployments git
// locks that the cluster does not have yet.
func (gs *headState) namespaceOf(id resolver.ID) string {
	if gs.fsys == nil {
		return ""
	}
	in, err := resolver.ReadLock(gs.fsys, id.LockPath())
	if err != nil || in.Context == nil {
		return ""
	}
	return in.Context.Deployment.Namespace
}

// readUpTo reads a file of at most limit bytes, refusing a larger one
// before it is read.
func readUpTo(fsys fs.FS, file string, limit int64) ([]byte, error) {
	if up, ok := fsys.(gitsource.ReadFileUpToFS); ok {
		data, size, err := up.ReadFileUpTo(file, limit)
		if err == nil && data == nil && size > limit {
			err = fmt.Errorf("%s: file is %d bytes, more than the %d allowed", file, size, limit)
		}
		return data, err
	}
	fi, err := fs.Stat(fsys, file)
	if err != nil {
		return nil, err
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: file is %d bytes, more than the %d allowed", file, fi.Size(), limit)
	}
	return fs.ReadFile(fsys, file)
}
