package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// RefNameAnnotation tags an entry of an OCI layout's index.json (what
// skopeo's oci:DIR:TAG selects).
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes idx as an OCI image layout in dir, replacing what
// was there (so no blob of an earlier build stays behind). Its index.json
// has one entry, idx, tagged ref: `crane push DIR REF` pushes it as the
// multi-platform index it is, and so does `skopeo copy --all oci:DIR`.
func WriteLayout(dir string, idx v1.ImageIndex, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image layout: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image layout: %w", err)
	}
	var opts []layout.Option
	if ref != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{RefNameAnnotation: ref}))
	}
	if err := p.AppendIndex(idx, opts...); err != nil {
		return fmt.Errorf("image layout: %w", err)
	}
	return nil
}

// WriteArchive writes the OCI layout in dir as a tar stream (skopeo's
// oci-archive: transport), its entries in lexical order and every time
// mtime, so the archive is as reproducible as the layout.
func WriteArchive(w io.Writer, dir string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	mtime = mtime.UTC().Truncate(time.Second)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatUSTAR})
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: fi.Size(), ModTime: mtime, Format: tar.FormatUSTAR}); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("image archive of %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("image archive of %s: %w", dir, err)
	}
	return nil
}
