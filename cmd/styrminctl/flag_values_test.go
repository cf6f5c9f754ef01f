package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
)

// countingCluster is a restConfigFunc whose API server counts the
// requests it gets (answering each 500), so a test tells a refusal made
// before any cluster contact from one made after.
func countingCluster(t *testing.T) (restConfigFunc, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		http.Error(w, "no cluster in this test", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return func(genericclioptions.RESTClientGetter) (*rest.Config, error) {
		return &rest.Config{Host: srv.URL}, nil
	}, &n
}

// runCmd runs cmd with args and returns its stdout and error.
func runCmd(t *testing.T, cmd *cobra.Command, out *bytes.Buffer, args ...string) (string, error) {
	t.Helper()
	cmd.SetArgs(args)
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func TestBackupAndRestoreWithWaitRefuseANonPositiveTimeoutBeforeCreatingAnything(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cmd  func(restConfigFunc, *bytes.Buffer) *cobra.Command
		args []string
	}{
		{"backup create", func(l restConfigFunc, w *bytes.Buffer) *cobra.Command { return newBackupCmd(l, time.Now, w) }, []string{"create", "local/dev", "--wait"}},
		{"restore", func(l restConfigFunc, w *bytes.Buffer) *cobra.Command { return newRestoreCmd(l, time.Now, w) }, []string{"local/dev", "--from", "dev-20261201-0300", "--wait"}},
	}
	for _, c := range cases {
		for _, timeout := range []string{"0", "0s", "-1s"} {
			t.Run(c.name+" --timeout "+timeout, func(t *testing.T) {
				load, requests := countingCluster(t)
				var out bytes.Buffer
				stdout, err := runCmd(t, c.cmd(load, &out), &out, append(c.args, "--timeout", timeout)...)
				var ue usageError
				if err == nil || !errors.As(err, &ue) {
					t.Fatalf("err = %v, want a usage error", err)
				}
				want := "--timeout " + (map[string]string{"0": "0s", "0s": "0s", "-1s": "-1s"})[timeout] + ": expected a positive duration"
				if err.Error() != want {
					t.Errorf("err = %q, want %q", err, want)
				}
				if got := requests.Load(); got != 0 {
					t.Errorf("%d requests to the API server before the refusal, want none", got)
				}
				if stdout != "" {
					t.Errorf("stdout = %q, want nothing", stdout)
				}
			})
		}
	}
}

func TestUninstallRefusesANegativeTimeoutBeforeContactingTheCluster(t *testing.T) {
	t.Parallel()
	load, requests := countingCluster(t)
	var out bytes.Buffer
	stdout, err := runCmd(t, newUninstallCmd(load, &out), &out, "--timeout", "-1s")
	if err == nil || !strings.Contains(err.Error(), "--timeout -1s: expected a positive duration") {
		t.Fatalf("err = %v, want a refusal of --timeout -1s", err)
	}
	if got := requests.Load(); got != 0 {
		t.Errorf("%d requests to the API server before the refusal, want none (the agent would have been scaled to 0)", got)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
}

func TestInstallRefusesMalformedClusterRepoBranchAndImageBeforeReadingTheCluster(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"--cluster": "local",
		"--repo":    "https://git.example.com/platform/desired-state.git",
		"--branch":  "main",
		"--image":   "ghcr.io/styrmin/agent:v1.2.3",
	}
	bad := []struct{ flag, value, want string }{
		{"--cluster", "Local/../x", "expected a cluster name"},
		{"--cluster", "Local", "expected a cluster name"},
		{"--cluster", "-x", "expected a cluster name"},
		{"--cluster", strings.Repeat("a", 41), "expected a cluster name"},
		{"--repo", "not a url", "expected a repository URL"},
		{"--repo", "ftp://git.example.com/d.git", "expected a repository URL"},
		{"--repo", "https://", "expected a repository URL"},
		{"--repo", "git.example.com/d.git", "expected a repository URL"},
		{"--branch", "-bad branch", "expected a branch name"},
		{"--branch", "bad branch", "expected a branch name"},
		{"--branch", "a..b", "expected a branch name"},
		{"--branch", "release/", "expected a branch name"},
		{"--branch", "topic.lock", "expected a branch name"},
		{"--branch", "a\tb", "expected a branch name"},
		{"--image", " foo", "expected an image reference"},
		{"--image", "foo bar:v1", "expected an image reference"},
		{"--image", "Agent:v1", "expected an image reference"},
		{"--image", "agent:", "expected an image reference"},
	}
	for _, export := range []bool{true, false} {
		for _, b := range bad {
			name := b.flag + "=" + b.value
			if export {
				name += " --export"
			}
			t.Run(name, func(t *testing.T) {
				load, requests := countingCluster(t)
				var args []string
				for flag, v := range good {
					if flag == b.flag {
						v = b.value
					}
					args = append(args, flag+"="+v)
				}
				if export {
					args = append(args, "--export")
				}
				var out bytes.Buffer
				stdout, err := runCmd(t, newInstallCmd(load, &out), &out, args...)
				var ue usageError
				if err == nil || !errors.As(err, &ue) {
					t.Fatalf("err = %v, want a usage error", err)
				}
				if prefix := b.flag + " " + strconv.Quote(b.value) + ": " + b.want; !strings.HasPrefix(err.Error(), prefix) {
					t.Errorf("err = %q, want it to start %q", err, prefix)
				}
				if got := requests.Load(); got != 0 {
					t.Errorf("%d requests to the API server before the refusal, want none", got)
				}
				if stdout != "" {
					t.Errorf("stdout = %q, want nothing rendered", stdout)
				}
			})
		}
	}
}

func TestInstallExportAcceptsTheUsualFormsOfRepoBranchAndImage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--repo", "https://git.example.com/platform/desired-state.git"},
		{"--repo", "http://127.0.0.1:3000/platform/desired-state"},
		{"--repo", "ssh://git@git.example.com:2222/platform/mono.git"},
		{"--repo", "git@github.com:acme/desired.git"},
		{"--repo", "file:///srv/git/desired.git"},
		{"--repo", "https://git.example.com/d.git", "--branch", "release/2026-12"},
		{"--repo", "https://git.example.com/d.git", "--branch", "feature/x.y_z"},
		{"--repo", "https://git.example.com/d.git", "--image", "agent:test"},
		{"--repo", "https://git.example.com/d.git", "--image", "registry.example.com:5000/team/styrmin-agent:v1.2.3"},
		{"--repo", "https://git.example.com/d.git", "--image", "ghcr.io/styrmin/agent@sha256:" + strings.Repeat("ab", 32)},
		{"--repo", "https://git.example.com/d.git", "--image", "ghcr.io/styrmin/agent:v1@sha256:" + strings.Repeat("ab", 32)},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			load, requests := countingCluster(t)
			var out bytes.Buffer
			stdout, err := runCmd(t, newInstallCmd(load, &out), &out, append([]string{"--cluster", "prod-eu-1", "--export"}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(stdout, "kind: Deployment") {
				t.Errorf("no Deployment rendered:\n%.400s", stdout)
			}
			if got := requests.Load(); got != 0 {
				t.Errorf("%d requests to the API server with --export, want none", got)
			}
		})
	}
}

func TestInstallExtraSecretNamesAreGrantedInTheAgentsSecretsRole(t *testing.T) {
	t.Parallel()
	load, _ := countingCluster(t)
	var out bytes.Buffer
	stdout, err := runCmd(t, newInstallCmd(load, &out), &out, "--cluster", "prod", "--repo", "https://git.example.com/d.git", "--export",
		"--extra-secret-names", "velero-creds,restic-creds")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "- velero-creds\n") || !strings.Contains(stdout, "- restic-creds\n") {
		t.Errorf("the exported manifests do not grant velero-creds and restic-creds:\n%s", stdout)
	}
}
