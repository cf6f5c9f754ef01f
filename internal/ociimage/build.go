package ociimage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Options describe an image build: what to compile, for which
// platforms, and where to write it.
type Options struct {
	Compile Compile
	// Name is the command's name: its file in the image and the
	// output's names.
	Name      string
	Platforms []v1.Platform
	Metadata  Metadata
	// Out is the output folder: the binaries in Out/<os>-<arch>/, the
	// layout in Out/<Name>-oci and, with Archive, Out/<Name>-oci.tar.
	Out     string
	Archive bool
}

// Result is a written image.
type Result struct {
	// Digest is the image index's.
	Digest v1.Hash
	// Manifests are the index's entries: each platform and its image's
	// digest.
	Manifests []v1.Descriptor
	// Binaries are the compiled commands the images hold.
	Binaries []Binary
	// Layout is the OCI layout's folder; Archive its tar file ("" when
	// not asked for).
	Layout, Archive string
}

// LayoutDir is the layout's folder under out.
func LayoutDir(out, name string) string { return filepath.Join(out, name+"-oci") }

// Build compiles the command for every platform, in turn (each go build
// uses every core), and writes the image index.
func Build(ctx context.Context, o Options) (*Result, error) {
	if len(o.Platforms) == 0 {
		return nil, fmt.Errorf("image %s: no platforms", o.Name)
	}
	spec := Spec{Name: o.Name, Metadata: o.Metadata}
	for _, p := range o.Platforms {
		// An empty GOOS or GOARCH would build for this machine under
		// another platform's name.
		if p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("image %s: platform %q needs an OS and an architecture", o.Name, p.String())
		}
		dir := p.OS + "-" + p.Architecture
		if p.Variant != "" {
			dir += "-" + p.Variant
		}
		out := filepath.Join(o.Out, dir, o.Name)
		if err := o.Compile.Build(ctx, p, o.Metadata.Stamp(), out); err != nil {
			return nil, err
		}
		spec.Binaries = append(spec.Binaries, Binary{Platform: p, Path: out})
	}
	idx, err := Index(spec)
	if err != nil {
		return nil, err
	}
	r := &Result{Binaries: spec.Binaries, Layout: LayoutDir(o.Out, o.Name)}
	if err := WriteLayout(r.Layout, idx, o.Metadata.Version); err != nil {
		return nil, err
	}
	if r.Digest, err = idx.Digest(); err != nil {
		return nil, fmt.Errorf("image %s: %w", o.Name, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", o.Name, err)
	}
	r.Manifests = m.Manifests
	if o.Archive {
		r.Archive = r.Layout + ".tar"
		if err := writeArchiveFile(r.Archive, r.Layout, o.Metadata); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func writeArchiveFile(file, dir string, m Metadata) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	if err := WriteArchive(f, dir, m.Created); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	return nil
}
