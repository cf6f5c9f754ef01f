package agenttest

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"

	"github.com/styrmin/styrmin/testcluster"
)

// Binaries are commands of the module built once per test process with
// `go build` into the repository's ignored .bin/Dir folder. A test
// package declares one Binaries value and asks it for paths.
type Binaries struct {
	// Dir is the folder under .bin; test packages that run at the same
	// time use different ones.
	Dir string
	// Packages are the main packages to build, e.g. "./cmd/styrmin-agent".
	Packages []string

	once  sync.Once
	paths map[string]string
	err   error
}

// Path returns the built command named name (the last element of its
// package path), building all of them first when needed.
func (b *Binaries) Path(t testing.TB, name string) string {
	t.Helper()
	b.once.Do(b.build)
	if b.err != nil {
		t.Fatal(b.err)
	}
	p, ok := b.paths[name]
	if !ok {
		t.Fatalf("agenttest: %s is not among the built commands %v", name, b.Packages)
	}
	return p
}

func (b *Binaries) build() {
	wd, err := os.Getwd()
	if err != nil {
		b.err = err
		return
	}
	root, err := testcluster.RepoRoot(wd)
	if err != nil {
		b.err = err
		return
	}
	out := filepath.Join(root, ".bin", b.Dir)
	cmd := exec.Command("go", append([]string{"build", "-o", out + string(filepath.Separator)}, b.Packages...)...)
	cmd.Dir = root
	if o, err := cmd.CombinedOutput(); err != nil {
		b.err = fmt.Errorf("go build %v: %v\n%s", b.Packages, err, o)
		return
	}
	b.paths = map[string]string{}
	for _, p := range b.Packages {
		b.paths[path.Base(p)] = filepath.Join(out, path.Base(p))
	}
}
