package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The non-root user the image runs as: the number distroless and ko use,
// which config/agent's runAsUser names.
const (
	NonRootUID  = 65532
	NonRootName = "nonroot"
)

// CACertificatesPath is where Go (and most other TLS stacks) look for the
// trusted roots on Linux.
const CACertificatesPath = "etc/ssl/certs/ca-certificates.crt"

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
)

// entry is one file or folder of a layer.
type entry struct {
	name     string
	mode     int64
	uid, gid int
	dir      bool
	data     []byte
	// src, when set, is a file read for the content (of size bytes)
	// instead of data.
	src  string
	size int64
}

// CACertificates is the PEM bundle of the Mozilla NSS trust store as the
// Go module golang.org/x/crypto/x509roots/fallback pins it: the same
// module version gives the same bytes on every machine, unlike the build
// machine's /etc/ssl/certs.
func CACertificates() []byte {
	var b bytes.Buffer
	for root := range bundle.Roots() {
		// A constrained root (NSS's distrust-after date) cannot be said in
		// a PEM file: added plainly it would trust certificates NSS no
		// longer does, so it is left out.
		if root.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
	}
	return b.Bytes()
}

// BaseLayer is the image's base, the same for every platform: CA
// certificates, /etc/passwd and /etc/group naming root and the non-root
// user 65532, that user's home and a /tmp anyone may write (sticky, as on
// any Linux). No shell, no package manager: nothing to exec into.
func BaseLayer(mtime time.Time) (v1.Layer, error) {
	return layer(mtime, []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: CACertificatesPath, mode: 0o644, data: CACertificates()},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, dir: true, uid: NonRootUID, gid: NonRootUID},
		{name: "tmp/", mode: 0o1777, dir: true},
	})
}

// BinaryLayer is one file, the executable at path, as /name (owned by
// root, so the non-root user cannot replace it). The file is read each
// time the layer is, rather than held in memory.
func BinaryLayer(path, name string, mtime time.Time) (v1.Layer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("binary layer: %w", err)
	}
	return layer(mtime, []entry{{name: name, mode: 0o755, src: path, size: fi.Size()}})
}

// layer makes a gzipped OCI layer of entries, in their order. Every
// header field that could vary between machines is fixed: the time is
// mtime, no user or group names, no access or change times.
func layer(mtime time.Time, entries []entry) (v1.Layer, error) {
	mtime = mtime.UTC().Truncate(time.Second)
	open := func() (io.ReadCloser, error) {
		r, w := io.Pipe()
		go func() { w.CloseWithError(writeTar(w, mtime, entries)) }()
		return r, nil
	}
	l, err := tarball.LayerFromOpener(open, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return l, nil
}

// writeTar writes entries as a tar stream.
func writeTar(w io.Writer, mtime time.Time, entries []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if err := writeEntry(tw, mtime, e); err != nil {
			return fmt.Errorf("layer: %s: %w", e.name, err)
		}
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, mtime time.Time, e entry) error {
	// USTAR: no extended records, so nothing but these fields is written.
	h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime, Format: tar.FormatUSTAR}
	switch {
	case e.dir:
		h.Typeflag = tar.TypeDir
	case e.src != "":
		h.Typeflag, h.Size = tar.TypeReg, e.size
	default:
		h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if e.src == "" {
		_, err := tw.Write(e.data)
		return err
	}
	f, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer f.Close()
	// A file whose size changed since the layer was made fails here
	// (tar's write too long, or Close's missed bytes).
	_, err = io.Copy(tw, f)
	return err
}
