package testcluster

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseArgsKeepsOrderAndAcceptsBothSpellings(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    []arg
		wantErr bool
	}{
		{in: nil, want: []arg{}},
		{in: []string{"--v=4"}, want: []arg{{"v", "4"}}},
		{in: []string{"feature-gates=A=true", "--audit-log-path=-"}, want: []arg{{"feature-gates", "A=true"}, {"audit-log-path", "-"}}},
		{in: []string{"--profiling"}, want: []arg{{"profiling", "true"}}},
		{in: []string{"--=x"}, wantErr: true},
		{in: []string{"--bad name=x"}, wantErr: true},
	} {
		got, err := parseArgs(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseArgs(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseArgs(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestRepoRootSkipsOtherModules(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "// comment\nmodule "+ModulePath+"\n\ngo 1.26.0\n")
	write("hack/testcluster/go.mod", "module "+ModulePath+"/hack/testcluster\n")
	if err := os.MkdirAll(filepath.Join(root, "hack/testcluster/cmd/etcd"), 0o755); err != nil {
		t.Fatal(err)
	}

	for _, start := range []string{".", "hack", "hack/testcluster", "hack/testcluster/cmd/etcd"} {
		got, err := RepoRoot(filepath.Join(root, start))
		if err != nil || got != root {
			t.Errorf("RepoRoot(%s) = %q, %v; want %q", start, got, err, root)
		}
	}

	other := t.TempDir()
	if _, err := RepoRoot(other); err == nil || !strings.Contains(err.Error(), ModulePath) {
		t.Errorf("RepoRoot outside the project: error = %v, want one naming %s", err, ModulePath)
	}
}

func TestCheckBinariesNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkBinaries(dir, false); err != nil {
		t.Errorf("API server only: %v", err)
	}
	err := checkBinaries(dir, true)
	if !errors.Is(err, ErrBinariesMissing) {
		t.Fatalf("with workloads: error = %v, want ErrBinariesMissing", err)
	}
	for _, want := range []string{"kube-controller-manager", "kube-scheduler", "kwok", StagesFile} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestFakeNodeIsManagedByKwokAndSchedulable(t *testing.T) {
	n := fakeNode("kwok-node-7")
	if n.Annotations["kwok.x-k8s.io/node"] != "fake" {
		t.Errorf("annotations = %v, want kwok.x-k8s.io/node=fake", n.Annotations)
	}
	if len(n.Spec.Taints) != 0 {
		t.Errorf("taints = %v, want none (pods need no toleration)", n.Spec.Taints)
	}
	if got := n.Status.Allocatable.Pods().Value(); got != 250 {
		t.Errorf("allocatable pods = %d, want 250", got)
	}
	if n.Labels["kubernetes.io/hostname"] != "kwok-node-7" {
		t.Errorf("hostname label = %q", n.Labels["kubernetes.io/hostname"])
	}
}
