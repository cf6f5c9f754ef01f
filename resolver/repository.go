package resolver

import (
	"errors"
	"io/fs"
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
	if _, err := configFile(fsys, ".", "styrmin"); err == nil {
		return nil
	}
	for _, dir := range []string{"clusters", "drivers", LocksDir} {
		if st, err := fs.Stat(fsys, dir); err == nil && st.IsDir() {
			return nil
		}
	}
	return ErrNotRepository
}
