// Package config holds the Kubernetes manifests of Styrmin: the CRDs
// generated from operator/api/v1alpha1, the agent's RBAC and its
// Deployment. They are embedded so tests and the agent install exactly the
// files in the repository.
package config

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
)

//go:embed crd/*.yaml
var crds embed.FS

// CRDs returns the CustomResourceDefinitions of the styrmin.io API, one
// YAML document each, sorted by file name.
func CRDs() [][]byte {
	return mustReadAll(crds, "crd")
}

func mustReadAll(fsys fs.FS, dir string) [][]byte {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		// The files are embedded at build time: a failure is a build defect.
		panic(fmt.Sprintf("config: reading embedded %s: %v", dir, err))
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	out := make([][]byte, 0, len(names))
	for _, n := range names {
		b, err := fs.ReadFile(fsys, path.Join(dir, n))
		if err != nil {
			panic(fmt.Sprintf("config: reading embedded %s: %v", n, err))
		}
		out = append(out, b)
	}
	return out
}
