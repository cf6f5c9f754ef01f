package timeline

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/styrmin/styrmin/resolver"
)

// FindDeployment turns "cluster/env/name" or a bare "name" into a
// deployment, looking a bare name up among the lockfiles of fsys (a
// desired-state repository at some commit): it must name exactly one.
func FindDeployment(fsys fs.FS, name string) (resolver.ID, error) {
	if strings.Contains(name, "/") {
		return resolver.ParseID(name)
	}
	matches, err := fs.Glob(fsys, path.Join(resolver.LocksDir, "*", "*", name+".lock.yaml"))
	if err != nil {
		return resolver.ID{}, err
	}
	var ids []string
	for _, m := range matches {
		parts := strings.Split(m, "/")
		ids = append(ids, parts[1]+"/"+parts[2]+"/"+name)
	}
	slices.Sort(ids)
	switch len(ids) {
	case 0:
		return resolver.ID{}, fmt.Errorf("no lockfile of a deployment named %s in the repository", name)
	case 1:
		return resolver.ParseID(ids[0])
	}
	return resolver.ID{}, fmt.Errorf("%s names several deployments (%s): give CLUSTER/ENV/NAME", name, strings.Join(ids, ", "))
}
