package ociimage_test

import (
	"archive/tar"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/styrmin/styrmin/internal/ociimage"
)

var created = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// files reads a layer's tar stream: each entry's header and content.
func files(t *testing.T, l v1.Layer) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return readTar(t, rc)
}

func readTar(t *testing.T, r io.Reader) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	hs, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hs[h.Name], data[h.Name] = h, b
	}
}

func TestBaseLayerHasCertificatesTheNonRootUserAndAWritableTmpButNoShell(t *testing.T) {
	l, err := ociimage.BaseLayer(created)
	if err != nil {
		t.Fatal(err)
	}
	hs, data := files(t, l)
	for name, h := range hs {
		if !h.ModTime.Equal(created) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: time %v, owner names %q %q; want the fixed time and no names", name, h.ModTime, h.Uname, h.Gname)
		}
	}
	for _, shell := range []string{"bin/sh", "bin/", "usr/"} {
		if hs[shell] != nil {
			t.Errorf("the base has %s", shell)
		}
	}
	if tmp := hs["tmp/"]; tmp == nil || tmp.Typeflag != tar.TypeDir || tmp.Mode != 0o1777 {
		t.Errorf("tmp/: %+v, want a folder with mode 1777", tmp)
	}
	if home := hs["home/nonroot/"]; home == nil || home.Uid != ociimage.NonRootUID || home.Gid != ociimage.NonRootUID {
		t.Errorf("home/nonroot/: %+v, want owned by %d", home, ociimage.NonRootUID)
	}
	if got := string(data["etc/passwd"]); !containsLine(got, "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin") {
		t.Errorf("etc/passwd:\n%s", got)
	}
	if got := string(data["etc/group"]); !containsLine(got, "nonroot:x:65532:") {
		t.Errorf("etc/group:\n%s", got)
	}
	n := 0
	for rest := data[ociimage.CACertificatesPath]; ; n++ {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Fatalf("certificate %d: %v", n, err)
		}
	}
	if n < 100 {
		t.Errorf("%s holds %d certificates, want the NSS roots (more than 100)", ociimage.CACertificatesPath, n)
	}
}

func containsLine(s, line string) bool { return slices.Contains(strings.Split(s, "\n"), line) }

func TestIndexDigestDependsOnlyOnItsInputs(t *testing.T) {
	dir := t.TempDir()
	spec := ociimage.Spec{Name: "tool", Metadata: ociimage.Metadata{Title: "tool", Version: "v1.2.3", Created: created}}
	for _, arch := range []string{"amd64", "arm64"} {
		p := filepath.Join(dir, arch)
		if err := os.WriteFile(p, []byte("a binary for "+arch), 0o600); err != nil {
			t.Fatal(err)
		}
		spec.Binaries = append(spec.Binaries, ociimage.Binary{Platform: v1.Platform{OS: "linux", Architecture: arch}, Path: p})
	}
	digest := func(s ociimage.Spec) v1.Hash {
		t.Helper()
		idx, err := ociimage.Index(s)
		if err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := digest(spec)
	// The binaries' own times and modes are not inputs: only their bytes.
	for _, b := range spec.Binaries {
		if err := os.Chtimes(b.Path, time.Now(), time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(b.Path, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if again := digest(spec); again != first {
		t.Errorf("the same inputs gave %s, then %s", first, again)
	}
	later := spec
	later.Metadata.Created = created.Add(time.Second)
	if digest(later) == first {
		t.Error("another creation time gave the same digest")
	}
	if _, err := ociimage.Index(ociimage.Spec{Name: "../tool", Binaries: spec.Binaries}); err == nil {
		t.Error("a name with a folder was accepted")
	}
}
