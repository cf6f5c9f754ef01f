package testcluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Images of the real node. No registry is reachable from the tests, so the
// node's images are made on the machine from one static busybox and
// imported into the container runtime before the node is Ready.
const (
	// PauseImage is the sandbox ("pause") image of the real node's pods.
	PauseImage = "testcluster.local/pause:v1"
	// BusyboxImage is a plain busybox image (a shell and the usual tools
	// under /bin) for workloads on the real node.
	BusyboxImage = "testcluster.local/busybox:v1"
)

// Image is one more image for the real node: busybox with Files added,
// under the reference Name. Its pods pull nothing, so Name must match the
// image of the pod exactly (with a tag other than latest, or
// imagePullPolicy IfNotPresent or Never).
type Image struct {
	// Name is the reference, for example docker.io/library/redis:7-alpine.
	Name string
	// Entrypoint and Cmd are the image's defaults, as in an image config.
	Entrypoint []string
	Cmd        []string
	// Files maps an absolute path in the image to its content (mode 0755,
	// so scripts run); it may replace a busybox applet.
	Files map[string]string
}

// builtinImages are the images every real node has.
func builtinImages() []Image {
	return []Image{
		// The sandbox holds the pod's namespaces and waits; it ends at once
		// on SIGTERM (as PID 1, a process without a handler ignores it).
		{Name: PauseImage, Entrypoint: []string{"/bin/sh", "-c", `trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done`}},
		{Name: BusyboxImage, Cmd: []string{"/bin/sh"}},
	}
}

// writeImageArchive writes images as one archive in the format `docker
// save` writes (which `ctr images import` reads): each image is the busybox
// layer (busybox with a link per applet) and, with Files, a layer of its own.
func writeImageArchive(w io.Writer, busybox string, applets []string, images []Image) error {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	// A fixed time: the same inputs give the same layers.
	mtime := time.Unix(0, 0)
	base, err := layerTar(mtime, func(tw *tar.Writer) error {
		for _, d := range []string{"bin", "dev", "etc", "proc", "sys", "data"} {
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: mtime}); err != nil {
			return err
		}
		if err := writeFile(tw, "bin/busybox", bb, mtime); err != nil {
			return err
		}
		for _, a := range applets {
			if a == "busybox" || strings.ContainsAny(a, "/ ") {
				continue
			}
			if err := tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777, ModTime: mtime}); err != nil {
				return err
			}
		}
		etc := map[string]string{
			"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
			"etc/group":  "root:x:0:\nnobody:x:65534:\n",
		}
		for _, name := range []string{"etc/group", "etc/passwd"} {
			if err := writeFile(tw, name, []byte(etc[name]), mtime); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}

	type manifestEntry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	blobs := map[string][]byte{}
	add := func(b []byte) string {
		sum := sha256.Sum256(b)
		name := hex.EncodeToString(sum[:]) + ".tar"
		blobs[name] = b
		return name
	}
	baseName := add(base)
	var manifest []manifestEntry
	for _, img := range images {
		layers := []string{baseName}
		diffIDs := []string{"sha256:" + strings.TrimSuffix(baseName, ".tar")}
		if len(img.Files) > 0 {
			l, err := layerTar(mtime, func(tw *tar.Writer) error {
				paths := make([]string, 0, len(img.Files))
				for p := range img.Files {
					paths = append(paths, p)
				}
				sort.Strings(paths)
				for _, p := range paths {
					if err := writeFile(tw, strings.TrimPrefix(p, "/"), []byte(img.Files[p]), mtime); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			n := add(l)
			layers = append(layers, n)
			diffIDs = append(diffIDs, "sha256:"+strings.TrimSuffix(n, ".tar"))
		}
		cfg, err := json.Marshal(map[string]any{
			"architecture": runtime.GOARCH,
			"os":           "linux",
			"created":      mtime.UTC().Format(time.RFC3339),
			"config": map[string]any{
				"Entrypoint": img.Entrypoint,
				"Cmd":        img.Cmd,
				"Env":        []string{"PATH=/bin"},
			},
			"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
		})
		if err != nil {
			return err
		}
		sum := sha256.Sum256(cfg)
		cfgName := hex.EncodeToString(sum[:]) + ".json"
		blobs[cfgName] = cfg
		manifest = append(manifest, manifestEntry{Config: cfgName, RepoTags: []string{img.Name}, Layers: layers})
	}
	mb, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	blobs["manifest.json"] = mb

	tw := tar.NewWriter(w)
	names := make([]string, 0, len(blobs))
	for n := range blobs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := writeFile(tw, n, blobs[n], mtime); err != nil {
			return err
		}
	}
	return tw.Close()
}

// layerTar returns the tar archive that fill writes.
func layerTar(mtime time.Time, fill func(*tar.Writer) error) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := fill(tw); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, name string, b []byte, mtime time.Time) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b)), ModTime: mtime}); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	_, err := tw.Write(b)
	return err
}
