package ociimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// VersionVariable is the linker variable a release version is stamped
// into (see package version).
const VersionVariable = "github.com/styrmin/styrmin/version.stamped"

// Compile is how a command is built for an image.
type Compile struct {
	// Go is the go command ("" is "go" on $PATH).
	Go string
	// Dir is the module's root.
	Dir string
	// Package is the main package, e.g. "./cmd/styrmin-agent".
	Package string
	// Version is stamped into VersionVariable.
	Version string
}

// Args are the go build arguments for out. -trimpath drops the build
// machine's folders; -buildvcs=auto records the commit when git is there
// (what --version shows), overriding a GOFLAGS that turns it off; -s -w
// drop the symbol table and DWARF, a third of the file, while stack
// traces and profiles keep working (they use the pclntab).
func (c Compile) Args(out string) []string {
	return []string{"build", "-trimpath", "-buildvcs=auto",
		"-ldflags", "-s -w -X " + VersionVariable + "=" + c.Version,
		"-o", out, c.Package}
}

// Env is the build's environment for p: the caller's, with no cgo (a
// static binary for a base without libc) and the architecture levels
// pinned to Go's defaults, so a builder's GOAMD64=v3 does not change
// the image.
func (c Compile) Env(p v1.Platform) []string {
	return append(os.Environ(),
		"CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture,
		"GOAMD64=v1", "GOARM64=v8.0")
}

// Build compiles the package for p into out.
func (c Compile) Build(ctx context.Context, p v1.Platform, out string) error {
	goCmd := c.Go
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, c.Args(out)...)
	cmd.Dir = c.Dir
	cmd.Env = c.Env(p)
	var o bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &o
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", c.Package, p, err, o.Bytes())
	}
	return nil
}
