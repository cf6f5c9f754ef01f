package testcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	// ModulePath is the module whose go.mod marks the repository root.
	ModulePath = "github.com/styrmin/styrmin"
	// BinDirEnv names an environment variable that overrides the folder
	// holding the control plane binaries.
	BinDirEnv = "STYRMIN_TESTCLUSTER_BIN"
	// binDirInRepo is where `make testcluster` writes the binaries.
	binDirInRepo = ".bin/testcluster"
	// StagesFile is kwok's stage configuration, written next to the binaries.
	StagesFile = "kwok-stages.yaml"
)

// requiredBinaries are the binaries Start needs, by whether workloads run.
func requiredBinaries(workloads bool) []string {
	bins := []string{"etcd", "kube-apiserver"}
	if workloads {
		bins = append(bins, "kube-controller-manager", "kube-scheduler", "kwok", StagesFile)
	}
	return bins
}

// ErrBinariesMissing is wrapped by the error Start returns when the control
// plane has not been built.
var ErrBinariesMissing = errors.New("control plane binaries missing: run `make testcluster` at the repository root")

// RepoRoot walks up from dir to the folder whose go.mod declares ModulePath.
func RepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; {
		if isProjectGoMod(filepath.Join(d, "go.mod")) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod declaring module %s in %s or any parent folder", ModulePath, dir)
		}
		d = parent
	}
}

// isProjectGoMod reports whether path is a go.mod whose module line is ModulePath
// (hack/testcluster has a go.mod of its own that must be skipped).
func isProjectGoMod(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == ModulePath
		}
	}
	return false
}

// BinDir returns the folder holding the control plane binaries: $STYRMIN_TESTCLUSTER_BIN
// if set, else .bin/testcluster under the repository root found from the
// working directory. It does not check that the binaries exist.
func BinDir() (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		return filepath.Abs(d)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := RepoRoot(wd)
	if err != nil {
		return "", fmt.Errorf("finding the control plane binaries (set %s to their folder): %w", BinDirEnv, err)
	}
	return filepath.Join(root, binDirInRepo), nil
}

// checkBinaries returns an error wrapping ErrBinariesMissing that names every
// missing file in dir.
func checkBinaries(dir string, workloads bool) error {
	var missing []string
	for _, b := range requiredBinaries(workloads) {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: %s not found: %w", dir, strings.Join(missing, ", "), ErrBinariesMissing)
	}
	return nil
}
