package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/ociimage"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

// readmeMarker precedes each README code block this test runs.
const readmeMarker = "<!-- run by e2e TestReadmeInstallCommandsInstallAWorkingAgent -->"

// readmeBlocks returns the shell lines of the README's code blocks that
// follow readmeMarker, in order.
func readmeBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	marked, in := false, false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.TrimSpace(l) == readmeMarker:
			marked = true
		case marked && !in && strings.HasPrefix(l, "```"):
			in = true
		case in && strings.HasPrefix(l, "```"):
			in, marked = false, false
		case in && strings.TrimSpace(l) != "" && !strings.HasPrefix(strings.TrimSpace(l), "#"):
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) == 0 {
		t.Fatalf("README.md has no code block after %s", readmeMarker)
	}
	return lines
}

// TestReadmeInstallCommandsInstallAWorkingAgent runs the README's "Install
// on a cluster" commands as a new user would, against a bare local control
// plane (no CRDs, no RBAC) and a git server holding the examples, with the
// repository's URL, cluster name and token put in: `styrminctl check --pre`,
// the Secret, `styrminctl install`, then `styrminctl check`. Before that last
// check the test plays the kubelet: it starts the agent binary with the
// installed Deployment's own arguments and as the installed service
// account (so the shipped RBAC is what it runs with), and `check` must
// pass, the agent having synced and applied the locked deployments.
func TestReadmeInstallCommandsInstallAWorkingAgent(t *testing.T) {
	t.Parallel()
	runAsNewUser(t, readmeBlocks(t))
}

// TestInstallExportPipedToKubectlInstallsAWorkingAgent is a new user's
// other way in, as with `flux install --export`: the objects printed by
// `styrminctl install --export` and applied by kubectl, then the agent
// from the image, and `styrminctl check` all ✔.
func TestInstallExportPipedToKubectlInstallsAWorkingAgent(t *testing.T) {
	t.Parallel()
	runAsNewUser(t, []string{
		"kubectl create namespace styrmin-system",
		`kubectl -n styrmin-system create secret generic styrmin-repo --from-literal=token="$TOKEN"`,
		"styrminctl install --cluster prod --repo https://git.example.com/platform/desired-state.git --export | kubectl apply -f -",
		"styrminctl check",
	})
}

// runAsNewUser runs shell lines as a new user would, against a bare local
// control plane and a git server holding the locked examples, with the
// repository's URL, the cluster's name and the token put in. Before the
// first `styrminctl check` that is not --pre, it plays the kubelet: it
// starts the agent binary taken out of the image with the installed
// Deployment's own arguments, as its service account, and waits until it
// synced. The example web deployment must end applied.
func runAsNewUser(t *testing.T, lines []string) {
	t.Helper()
	ctl, _ := buildBinaries(t)
	agentBin := imageAgent(t)
	cluster, c := agenttest.StartCluster(t, testcluster.Options{Workloads: true})
	srv := gitserver.New(t, gitserver.WithToken(gitToken))
	srv.Seed(repoName, examples.Repo(), "examples")
	url := srv.RepoURL(repoName)
	e := &env{cluster: cluster, c: c, git: srv, url: url, ctl: ctl, bin: agentBin}
	e.lockPush(t, e.newClone(t))

	// The user's shell: styrminctl and kubectl on PATH, the cluster's
	// kubeconfig, the token.
	bin := t.TempDir()
	clusterBin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"styrminctl": ctl, "kubectl": filepath.Join(clusterBin, "kubectl")} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	shellEnv := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+cluster.KubeconfigPath, "TOKEN="+gitToken, "STYRMIN_GIT_TOKEN=")
	replacer := strings.NewReplacer("https://git.example.com/platform/desired-state.git", url, "--cluster prod", "--cluster "+clusterName)
	started := false
	for _, line := range lines {
		line = replacer.Replace(line)
		if strings.Contains(line, "styrminctl check") && !strings.Contains(line, "--pre") && !started {
			e.agent = startInstalledAgent(t, c, cluster.KubeconfigPath, agentBin)
			started = true
			waitSourceReady(t, c)
			waitAgentDeploymentReady(t, c)
		}
		begin := time.Now()
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", line)
		cmd.Env = shellEnv
		out, err := cmd.CombinedOutput()
		t.Logf("$ %s  (%s)\n%s", line, time.Since(begin).Round(time.Millisecond), out)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	if !started {
		t.Fatal("the commands end without `styrminctl check` after the install")
	}
	requirePhase(t, e.waitTask(t, "dev-web", "web", 1), v1alpha1.TaskSucceeded)
}

// imageAgent builds the agent's image for this machine's platform, as
// `make image` does, and returns its binary taken out of the image's
// layers: what a node would run.
func imageAgent(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := testcluster.RepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	platform := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	res, err := ociimage.Build(context.Background(), ociimage.Options{
		Compile:   ociimage.Compile{Dir: root, Package: "./cmd/styrmin-agent"},
		Name:      "styrmin-agent",
		Platforms: []v1.Platform{platform},
		Metadata:  ociimage.Metadata{Title: "styrmin-agent", Version: "v0.0.0-e2e", Created: time.Unix(0, 0).UTC()},
		Out:       t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "styrmin-agent")
	if err := ociimage.ExtractBinary(res.Layout, platform, "styrmin-agent", bin); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "v0.0.0-e2e") {
		t.Fatalf("the image's agent --version: %q, %v", out, err)
	}
	t.Logf("agent from image %s: %s", res.Digest, strings.TrimSpace(string(out)))
	return bin
}

// startInstalledAgent starts the agent binary as the installed Deployment
// would run it: its container's arguments, as its service account; the
// addresses and the clone folder are moved to this machine's.
func startInstalledAgent(t *testing.T, c client.Client, adminKubeconfig, bin string) *agenttest.Proc {
	t.Helper()
	var d appsv1.Deployment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: config.AgentNamespace, Name: "styrmin-agent"}, &d); err != nil {
		t.Fatalf("the installed agent Deployment: %v", err)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	vars := containerEnv(t, ctr)
	var args []string
	if len(ctr.Command) > 0 {
		// The image's entrypoint is the agent; a command would replace it.
		t.Fatalf("the installed agent container sets a command %v: the image's entrypoint should run", ctr.Command)
	}
	for _, a := range ctr.Args {
		a = os.Expand(strings.NewReplacer("$(", "${", ")", "}").Replace(a), func(k string) string {
			v, ok := vars[k]
			if !ok {
				t.Fatalf("argument %q names $(%s), which the container does not define", a, k)
			}
			return v
		})
		switch {
		case strings.HasPrefix(a, "--clone-dir="):
			a = "--clone-dir=" + filepath.Join(t.TempDir(), "repo")
		case strings.HasPrefix(a, "--metrics-bind-address="), strings.HasPrefix(a, "--health-probe-bind-address="), strings.HasPrefix(a, "--webhook-bind-address="):
			a = a[:strings.Index(a, "=")+1] + "127.0.0.1:0"
		}
		args = append(args, a)
	}
	sa := "system:serviceaccount:" + d.Namespace + ":" + d.Spec.Template.Spec.ServiceAccountName
	args = append(args, "--kubeconfig="+agenttest.ImpersonatingKubeconfig(t, adminKubeconfig, sa), pollFlag)
	t.Logf("agent %s", strings.Join(args, " "))
	return agenttest.StartAgent(t, bin, args...)
}

// containerEnv is what the kubelet gives the container's $(VAR)
// references: plain values, the pod's namespace, and resource fields of
// its limits in their divisor's unit.
func containerEnv(t *testing.T, ctr corev1.Container) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, ev := range ctr.Env {
		switch {
		case ev.ValueFrom == nil:
			vars[ev.Name] = ev.Value
		case ev.ValueFrom.FieldRef != nil && ev.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			vars[ev.Name] = config.AgentNamespace
		case ev.ValueFrom.ResourceFieldRef != nil:
			ref := ev.ValueFrom.ResourceFieldRef
			q, ok := ctr.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(ref.Resource, "limits."))]
			if !ok {
				t.Fatalf("env %s: no %s", ev.Name, ref.Resource)
			}
			div := ref.Divisor
			if div.IsZero() {
				div = resource.MustParse("1")
			}
			vars[ev.Name] = strconv.FormatInt((q.Value()+div.Value()-1)/div.Value(), 10)
		}
	}
	return vars
}

// waitSourceReady waits until the agent's StyrminSource is Ready.
// waitAgentDeploymentReady waits for a ready replica of the installed
// agent's Deployment, which styrminctl check requires: kwok readies its
// pod on its own schedule, the agent's sync (waitSourceReady) on another.
func waitAgentDeploymentReady(t *testing.T, c client.Client) {
	t.Helper()
	agenttest.WaitUntil(t, waitLimit, "the installed agent's Deployment to have a ready replica", func(ctx context.Context) (bool, string, error) {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: config.AgentNamespace, Name: "styrmin-agent"}, &d); err != nil {
			return false, err.Error(), nil
		}
		return d.Status.ReadyReplicas > 0, fmt.Sprintf("%d/%d ready", d.Status.ReadyReplicas, d.Status.Replicas), nil
	})
}

func waitSourceReady(t *testing.T, c client.Client) {
	t.Helper()
	agenttest.WaitUntil(t, waitLimit, "the agent's StyrminSource to be Ready", func(ctx context.Context) (bool, string, error) {
		var list v1alpha1.StyrminSourceList
		if err := c.List(ctx, &list, client.InNamespace(config.AgentNamespace)); err != nil {
			return false, err.Error(), nil
		}
		for _, s := range list.Items {
			if apimeta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady) {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d sources", len(list.Items)), nil
	})
}
