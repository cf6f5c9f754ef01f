package ociimage

import (
	"fmt"
	"path"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The OCI annotation keys the image's labels use
// (https://github.com/opencontainers/image-spec/blob/main/annotations.md).
const (
	LabelTitle    = "org.opencontainers.image.title"
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelSource   = "org.opencontainers.image.source"
	LabelLicenses = "org.opencontainers.image.licenses"
	LabelCreated  = "org.opencontainers.image.created"
)

// Metadata is what an image says about itself, in its labels (and the
// index's annotations).
type Metadata struct {
	// Title names the image, e.g. "styrmin-agent".
	Title string
	// Version is the release version ("v0.3.0", or git describe's output).
	Version string
	// Revision is the commit the image was built from.
	Revision string
	// Source is the repository's URL.
	Source string
	// Licenses is an SPDX expression; "" leaves the label out.
	Licenses string
	// Created is the image's creation time and every file's time: the
	// commit's time (or SOURCE_DATE_EPOCH), never the clock, so that a
	// rebuild gives the same digest.
	Created time.Time
}

// Stamp is what the binaries are stamped with: the version, the
// revision and the creation time, so --version and the labels agree.
func (m Metadata) Stamp() Stamp {
	return Stamp{Version: m.Version, Commit: m.Revision, Date: m.Created.UTC().Format(time.RFC3339)}
}

// Labels are the OCI labels of m; empty fields are left out.
func (m Metadata) Labels() map[string]string {
	l := map[string]string{LabelCreated: m.Created.UTC().Format(time.RFC3339)}
	for k, v := range map[string]string{
		LabelTitle: m.Title, LabelVersion: m.Version, LabelRevision: m.Revision,
		LabelSource: m.Source, LabelLicenses: m.Licenses,
	} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

// Binary is one platform's build of the command.
type Binary struct {
	Platform v1.Platform
	// Path is the executable's file.
	Path string
}

// Spec describes an image index: one image per platform, each the base
// layer and that platform's binary.
type Spec struct {
	// Name is the binary's file in the image (/Name) and the entrypoint.
	Name     string
	Binaries []Binary
	Metadata Metadata
}

// Entrypoint is the image's command: the binary at the root.
func (s Spec) Entrypoint() []string { return []string{"/" + s.Name} }

// User is the image's user and group, the non-root user.
func User() string { return strconv.Itoa(NonRootUID) + ":" + strconv.Itoa(NonRootUID) }

// Index assembles the image index of s. The layers are compressed once
// and kept in memory until the index is written.
func Index(s Spec) (v1.ImageIndex, error) {
	if s.Name == "" || path.Base(s.Name) != s.Name {
		return nil, fmt.Errorf("image: %q is not a file name", s.Name)
	}
	if len(s.Binaries) == 0 {
		return nil, fmt.Errorf("image %s: no binaries", s.Name)
	}
	created := s.Metadata.Created.UTC().Truncate(time.Second)
	base, err := BaseLayer(created)
	if err != nil {
		return nil, err
	}
	labels := s.Metadata.Labels()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	for _, b := range s.Binaries {
		p := b.Platform
		if seen[p.String()] {
			return nil, fmt.Errorf("image %s: platform %s twice", s.Name, p)
		}
		seen[p.String()] = true
		img, err := platformImage(s, b, base, created, labels)
		if err != nil {
			return nil, fmt.Errorf("image %s for %s: %w", s.Name, p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	// The labels again as the index's annotations: a registry's UI shows
	// those of the index without reading a platform's config.
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

// platformImage is one platform's image: base, then the binary.
func platformImage(s Spec, b Binary, base v1.Layer, created time.Time, labels map[string]string) (v1.Image, error) {
	bin, err := BinaryLayer(b.Path, s.Name, created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: b.Platform.Architecture,
		OS:           b.Platform.OS,
		Variant:      b.Platform.Variant,
		Created:      v1.Time{Time: created},
		// mutate.Append fills in the diff IDs, not the type, which
		// runtimes check.
		RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User:       User(),
			Entrypoint: s.Entrypoint(),
			WorkingDir: "/",
			Labels:     labels,
		},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "styrmin: base (CA certificates, users, /tmp)", Comment: "ociimage.BaseLayer"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "styrmin: /" + s.Name, Comment: "ociimage.BinaryLayer"}},
	)
}
