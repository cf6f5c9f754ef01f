package resolver

import (
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// ErrNotRepository is the error of a folder that holds nothing of a
// desired-state repository.
var ErrNotRepository = errors.New("not a desired-state repository: expected styrmin.cue (or styrmin.yaml), a clusters/ folder, a drivers/ folder or a locks/ folder")

// CheckRepository tells whether fsys looks like a desired-state
// repository: the settings file, or one of the folders the loaders read
// (clusters/, drivers/, locks/: a repository whose deployments were all
// removed holds only their tombstones). An empty or unrelated folder
// resolves to nothing, so a command pointed at the wrong one would
// report "no deployments" instead of the mistake; it returns
// ErrNotRepository.
func CheckRepository(fsys fs.FS) error {
	// A settings file that is there but not readable as one (styrmin.cue
	// beside styrmin.yaml, a link) is the repository's error, not "no
	// repository here".
	if f, err := findSettingsFile(fsys); err != nil || f != "" {
		return err
	}
	for _, dir := range []string{"clusters", "drivers", LocksDir} {
		if st, err := fs.Stat(fsys, dir); err == nil && st.IsDir() {
			return nil
		}
	}
	return ErrNotRepository
}

// ListDeployments lists the deployments the repository defines from its
// folders and file names alone (clusters/<cluster>/environments/<env>/
// deployments/<name>.cue|yaml|yml), reading no file: cheap enough for
// shell completion. Folders and files whose names Load would refuse are
// left out; it is no check of the repository.
func ListDeployments(fsys fs.FS) []ID {
	var out []ID
	clusters, _ := subdirs(fsys, "clusters")
	for _, c := range clusters {
		envs, _ := subdirs(fsys, path.Join("clusters", c, "environments"))
		for _, e := range envs {
			entries, _ := fs.ReadDir(fsys, path.Join("clusters", c, "environments", e, "deployments"))
			for _, ent := range entries {
				ext := path.Ext(ent.Name())
				name := strings.TrimSuffix(ent.Name(), ext)
				if ent.IsDir() || (ext != ".cue" && ext != ".yaml" && ext != ".yml") || !nameRE.MatchString(name) || len(name) > 40 {
					continue
				}
				id := ID{Cluster: c, Environment: e, Name: name}
				if !slices.Contains(out, id) {
					out = append(out, id)
				}
			}
		}
	}
	return out
}
