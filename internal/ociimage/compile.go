package ociimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The linker variables of package version a build is stamped with.
const (
	VersionVariable = "github.com/styrmin/styrmin/version.stamped"
	CommitVariable  = "github.com/styrmin/styrmin/version.stampedCommit"
	DateVariable    = "github.com/styrmin/styrmin/version.stampedDate"
)

// Stamp is what a build links into package version, for --version.
type Stamp struct {
	// Version is the release version; Commit and Date the commit and its
	// time (RFC 3339).
	Version, Commit, Date string
}

// Compile is how a command is built for an image.
type Compile struct {
	// Go is the go command ("" is "go" on $PATH).
	Go string
	// Dir is the module's root.
	Dir string
	// Package is the main package, e.g. "./cmd/styrmin-agent".
	Package string
}

// Args are the go build arguments for a build stamped s into out.
// -trimpath drops the build machine's folders. -buildvcs=false: the
// commit is stamped instead, because the toolchain's record depends on
// the checkout (none from a git worktree, golang/go#58218) and would
// change the digest. -s -w drop the symbol table and DWARF, a third of
// the file, while stack traces and profiles keep working (they use the
// pclntab).
func (c Compile) Args(s Stamp, out string) []string {
	ldflags := fmt.Sprintf("-s -w -X %s=%s -X %s=%s -X %s=%s",
		VersionVariable, s.Version, CommitVariable, s.Commit, DateVariable, s.Date)
	return []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, c.Package}
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

// Build compiles the package for p, stamped s, into out.
func (c Compile) Build(ctx context.Context, p v1.Platform, s Stamp, out string) error {
	goCmd := c.Go
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, c.Args(s, out)...)
	cmd.Dir = c.Dir
	cmd.Env = c.Env(p)
	var o bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &o
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", c.Package, p, err, o.Bytes())
	}
	return nil
}
