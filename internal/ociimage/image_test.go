package ociimage_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/ociimage"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

const testVersion = "v0.0.0-imagetest"

var platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// TestAgentImage builds the agent's image as make image does (both
// platforms, compiled by go build), reads it back from the OCI layout,
// and runs the host platform's binary taken from its layer: --version
// says the stamped version, and against a control plane it starts and
// answers /healthz and /readyz, and syncs the repository.
func TestAgentImage(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := testcluster.RepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	md := ociimage.Metadata{Title: "styrmin-agent", Version: testVersion, Revision: "0123456789abcdef", Source: "https://github.com/styrmin/styrmin", Created: created}
	ctx := context.Background()
	start := time.Now()
	res, err := ociimage.Build(ctx, ociimage.Options{
		Compile:   ociimage.Compile{Dir: root, Package: "./cmd/styrmin-agent"},
		Name:      "styrmin-agent",
		Platforms: platforms,
		Metadata:  md,
		Out:       out,
		Archive:   true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %v", res.Digest, time.Since(start).Round(time.Millisecond))

	idx := readLayout(t, res.Layout, res.Digest)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Annotations[ociimage.LabelVersion]; got != testVersion {
		t.Errorf("index annotation version %q, want %q", got, testVersion)
	}
	var got []string
	var host v1.Image
	for _, d := range m.Manifests {
		got = append(got, d.Platform.String())
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkConfig(t, img, *d.Platform)
		if d.Platform.Architecture == runtime.GOARCH {
			host = img
		}
	}
	if !slices.Equal(got, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", got)
	}
	checkReproducible(t, res, md)

	if host == nil {
		t.Fatalf("no image for this machine's %s", runtime.GOARCH)
	}
	bin := extractBinary(t, host)
	o, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	if want := testVersion + " (commit 0123456789ab, 2026-12-01T10:00:00Z, "; !strings.HasPrefix(string(o), want) {
		t.Errorf("--version printed %q, want the stamped version, commit and date: %q…", o, want)
	}
	runAgent(t, bin)
}

// readLayout opens the layout's one entry, the image index, and checks
// its digest is the one Build reported.
func readLayout(t *testing.T, dir string, want v1.Hash) v1.ImageIndex {
	t.Helper()
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := l.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != want || !top.Manifests[0].MediaType.IsIndex() {
		t.Fatalf("index.json lists %+v, want the one image index %s", top.Manifests, want)
	}
	if ref := top.Manifests[0].Annotations[ociimage.RefNameAnnotation]; ref != testVersion {
		t.Errorf("index.json tags the index %q, want %q", ref, testVersion)
	}
	idx, err := l.ImageIndex(want)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func checkConfig(t *testing.T, img v1.Image, p v1.Platform) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("%s: config says %s/%s", p, cf.OS, cf.Architecture)
	}
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/styrmin-agent"}) {
		t.Errorf("%s: user %q entrypoint %q, want 65532:65532 and /styrmin-agent", p, c.User, c.Entrypoint)
	}
	for k, v := range map[string]string{
		ociimage.LabelVersion: testVersion, ociimage.LabelTitle: "styrmin-agent", ociimage.LabelRevision: "0123456789abcdef",
		ociimage.LabelSource: "https://github.com/styrmin/styrmin", ociimage.LabelCreated: "2026-12-01T10:00:00Z",
	} {
		if c.Labels[k] != v {
			t.Errorf("%s: label %s = %q, want %q", p, k, c.Labels[k], v)
		}
	}
	if cf.RootFS.Type != "layers" || len(cf.RootFS.DiffIDs) != 2 {
		t.Errorf("%s: rootfs %+v, want type layers and two layers", p, cf.RootFS)
	}
	if !cf.Created.Equal(created) {
		t.Errorf("%s: created %v, want %v", p, cf.Created, created)
	}
}

// checkReproducible assembles the index again from the same binaries
// and writes it again: same digest, same layout archive, byte for byte.
func checkReproducible(t *testing.T, res *ociimage.Result, meta ociimage.Metadata) {
	t.Helper()
	spec := ociimage.Spec{Name: "styrmin-agent", Binaries: res.Binaries, Metadata: meta}
	idx, err := ociimage.Index(spec)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := idx.Digest(); err != nil || d != res.Digest {
		t.Fatalf("the same binaries gave index %s (%v), then %s", res.Digest, err, d)
	}
	dir := filepath.Join(t.TempDir(), "again")
	if err := ociimage.WriteLayout(dir, idx, meta.Version); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := ociimage.WriteArchive(&again, dir, meta.Created); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(res.Archive)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(first) != sha256.Sum256(again.Bytes()) {
		t.Errorf("the layout archive differs between two writes of the same index (%d and %d bytes)", len(first), again.Len())
	}
}

// extractBinary flattens img's file system and writes /styrmin-agent
// into a temporary folder; it also checks there is no shell.
func extractBinary(t *testing.T, img v1.Image) string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	hs, data := readTar(t, rc)
	for _, name := range []string{"bin/sh", "etc/passwd", "styrmin-agent"} {
		if (hs[name] != nil) != (name != "bin/sh") {
			t.Errorf("the image's file system has %s: %v", name, hs[name] != nil)
		}
	}
	h := hs["styrmin-agent"]
	if h == nil {
		t.FailNow()
	}
	if h.Mode&0o111 == 0 || h.Uid != 0 {
		t.Errorf("/styrmin-agent: mode %o owner %d, want executable and root's", h.Mode, h.Uid)
	}
	p := filepath.Join(t.TempDir(), "styrmin-agent")
	if err := os.WriteFile(p, data["styrmin-agent"], 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// runAgent runs bin against a control plane and the example repository
// until it answers its probes and has synced.
func runAgent(t *testing.T, bin string) {
	t.Helper()
	const secret, token = "repo-creds", "image-test-token"
	w := agenttest.Start(t, agenttest.Options{Repo: examples.Repo(), RepoName: "desired", Token: token, SecretName: secret})
	addr := agenttest.FreeAddr(t)
	agent := agenttest.StartAgent(t, bin,
		"--cluster=local", "--repo="+w.URL, "--branch=main", "--repo-secret="+secret,
		"--namespace="+config.AgentNamespace, "--poll-interval=500ms", "--metrics-bind-address=0",
		"--health-probe-bind-address="+addr, "--kubeconfig="+w.Kubeconfig)
	for _, probe := range []string{"/healthz", "/readyz"} {
		agenttest.WaitUntil(t, 60*time.Second, "the agent's "+probe, func(ctx context.Context) (bool, string, error) {
			select {
			case <-agent.Done():
				return false, "", fmt.Errorf("the agent exited: %s", agent.ExitState())
			default:
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+probe, nil)
			if err != nil {
				return false, "", err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, err.Error(), nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status, nil
		})
	}
	agenttest.WaitUntil(t, 60*time.Second, "the StyrminSource to be Ready", func(ctx context.Context) (bool, string, error) {
		var src v1alpha1.StyrminSource
		if err := w.Client.Get(ctx, client.ObjectKey{Namespace: config.AgentNamespace, Name: "styrmin"}, &src); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		return meta.IsStatusConditionTrue(src.Status.Conditions, v1alpha1.ConditionReady), fmt.Sprint(src.Status.Conditions), nil
	})
}
