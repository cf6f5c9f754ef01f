package ociimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// PlatformImage reads the image of platform p from the OCI layout in dir.
func PlatformImage(dir string, p v1.Platform) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", dir, err)
	}
	top, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", dir, err)
	}
	for _, d := range top.Manifests {
		// The layout's index names the image index; its entries are the
		// platforms.
		inner, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("image layout %s: %w", dir, err)
		}
		m, err := inner.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("image layout %s: %w", dir, err)
		}
		for _, e := range m.Manifests {
			if e.Platform != nil && e.Platform.OS == p.OS && e.Platform.Architecture == p.Architecture {
				return inner.Image(e.Digest)
			}
		}
	}
	return nil, fmt.Errorf("image layout %s: no image for %s", dir, p.String())
}

// ExtractFile writes the file at name (an absolute path in the image) of
// img's flattened file system to w: how a test takes the binary out of
// the image to run exactly what a cluster would.
func ExtractFile(img v1.Image, name string, w io.Writer) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	want := path.Clean(name)[1:]
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("image: no file %s", name)
		}
		if err != nil {
			return fmt.Errorf("image: reading its file system: %w", err)
		}
		if path.Clean(h.Name) == want && h.Typeflag == tar.TypeReg {
			_, err := io.Copy(w, tr)
			return err
		}
	}
}

// ExtractBinary writes the command name of platform p's image in the OCI
// layout dir (its entrypoint, see Spec) to the executable file dst.
func ExtractBinary(dir string, p v1.Platform, name, dst string) error {
	img, err := PlatformImage(dir, p)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if err := ExtractFile(img, Spec{Name: name}.Entrypoint()[0], f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
