package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/install"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/testcluster"
	"github.com/styrmin/styrmin/version"
)

// runCheck runs `styrminctl check` with getenv's environment and returns
// its lines and exit code.
func runCheck(t *testing.T, env map[string]string, args ...string) ([]string, int) {
	t.Helper()
	var out bytes.Buffer
	cmd := newCheckCmd(kubeRESTConfig, func(k string) string { return env[k] }, &out)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(context.Background())
	code := 0
	if err != nil {
		var ec exitCoder
		if !asExitCoder(err, &ec) {
			t.Fatalf("check %v: %v", args, err)
		}
		code = ec.ExitCode()
	}
	return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"), code
}

// line is the line of lines that starts with prefix ("" when none).
func line(lines []string, prefix string) string {
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
	if i < 0 {
		return ""
	}
	return lines[i]
}

// install, check and version against one control plane without workloads
// (the agent's Deployment never gets a ready pod) and a git server.
func TestInstallCheckAndVersionOnALocalControlPlane(t *testing.T) {
	t.Parallel()
	c := testcluster.StartT(t, testcluster.Options{})
	kc := c.KubeconfigPath
	git := gitserver.New(t, gitserver.WithToken("right-token"))
	head := git.Seed("desired", fstest.MapFS{"styrmin.cue": {Data: []byte("version: 1\n")}}, "seed")
	repo := git.RepoURL("desired")
	installArgs := []string{"install", "--cluster", "local", "--repo", repo, "--path", "deploy", "--image", "agent:test"}
	cl, err := client.New(c.RESTConfig, client.Options{}) // client-go's scheme: Secrets; CRDs as unstructured
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("check --pre passes on an empty cluster", func(t *testing.T) {
		lines, code := runCheck(t, nil, "--pre", "--kubeconfig", kc)
		if code != 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "✔ Kubernetes v1.") {
			t.Fatalf("exit %d:\n%s", code, strings.Join(lines, "\n"))
		}
	})

	t.Run("install --export prints each object with the agent's settings and changes nothing", func(t *testing.T) {
		out, err := runCluster(t, kc, append(installArgs, "--export")...)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		var args []string
		for _, doc := range strings.Split(out, "---\n")[1:] {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("document does not parse: %v\n%s", err, doc)
			}
			kinds = append(kinds, u.GetKind()+" "+u.GetName())
			if u.GetKind() == "Deployment" {
				cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
				args, _, _ = unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
				if img := cs[0].(map[string]any)["image"]; img != "agent:test" {
					t.Errorf("image %v", img)
				}
			}
		}
		for _, want := range []string{"CustomResourceDefinition styrmintasks.styrmin.io", "Namespace styrmin-system", "ServiceAccount styrmin-agent",
			"ClusterRole styrmin-agent", "ClusterRoleBinding styrmin-agent", "Role styrmin-agent-leader-election",
			"ValidatingAdmissionPolicy styrmin-agent-writes-tasks", "Deployment styrmin-agent"} {
			if !slices.Contains(kinds, want) {
				t.Errorf("no %s in %v", want, kinds)
			}
		}
		for _, want := range []string{"--cluster=local", "--repo=" + repo, "--branch=main", "--path=deploy", "--repo-secret=styrmin-repo"} {
			if !slices.Contains(args, want) {
				t.Errorf("agent args %v lack %s", args, want)
			}
		}
		crds := &unstructured.UnstructuredList{}
		crds.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinitionList"))
		if err := cl.List(ctx, crds); err != nil || len(crds.Items) != 0 {
			t.Errorf("export changed the cluster: %d CRDs (%v)", len(crds.Items), err)
		}
	})

	t.Run("install applies everything and a second install reports it unchanged", func(t *testing.T) {
		out, err := runCluster(t, kc, installArgs...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if lines[0] != "CustomResourceDefinition styrminbackups.styrmin.io created" || line(lines, "CustomResourceDefinition styrmindeployments") != "CustomResourceDefinition styrmindeployments.styrmin.io created" ||
			line(lines, "Deployment ") != "Deployment styrmin-system/styrmin-agent created" ||
			!strings.HasPrefix(lines[len(lines)-1], "installed the agent for cluster local") {
			t.Errorf("first install:\n%s", out)
		}
		again, err := runCluster(t, kc, installArgs...)
		if err != nil {
			t.Fatal(err)
		}
		agained := strings.Split(strings.TrimSpace(again), "\n")
		if len(agained) != len(lines) {
			t.Fatalf("second install:\n%s", again)
		}
		for i, l := range agained[:len(agained)-1] {
			if want := strings.TrimSuffix(lines[i], "created") + "unchanged"; l != want {
				t.Errorf("second install line %d: %q, want %q", i, l, want)
			}
		}
	})

	t.Run("check without the credentials Secret says how to create it", func(t *testing.T) {
		lines, code := runCheck(t, nil, "--kubeconfig", kc)
		l := line(lines, "✗ repository "+repo)
		if code != 1 || !strings.Contains(l, "kubectl -n styrmin-system create secret generic styrmin-repo") {
			t.Fatalf("exit %d:\n%s", code, strings.Join(lines, "\n"))
		}
	})

	if err := cl.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "styrmin-repo", Namespace: "styrmin-system"},
		Data:       map[string][]byte{operator.SecretKeyToken: []byte("right-token")},
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("check reports the agent not ready and the rest installed, with the repository reachable through the Secret", func(t *testing.T) {
		lines, code := runCheck(t, nil, "--kubeconfig", kc)
		out := strings.Join(lines, "\n")
		t.Log("\n" + out)
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		for _, want := range []string{
			"✔ Kubernetes v1.",
			"✔ CRD styrmindeployments.styrmin.io established, serving v1alpha1",
			"✔ CRD styrminsources.styrmin.io established",
			"✔ CRD styrmintasks.styrmin.io established",
			"✔ ClusterRole styrmin-agent",
			"✔ ClusterRoleBinding styrmin-agent-default-environment",
			"✔ RoleBinding styrmin-system/styrmin-agent-leader-election",
			"✔ ValidatingAdmissionPolicyBinding styrmin-agent-writes-tasks",
			"✗ agent Deployment styrmin-system/styrmin-agent: 0/2 replicas ready",
			"✗ no StyrminSource in styrmin-system",
			"✔ repository " + repo + " reachable with the credentials in Secret styrmin-system/styrmin-repo: main at " + head[:12],
		} {
			if line(lines, want) == "" {
				t.Errorf("no line %q in:\n%s", want, out)
			}
		}
		if n := len(slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return !strings.HasPrefix(l, "✗") })); n != 2 {
			t.Errorf("%d checks failed, want 2 (the agent and its source):\n%s", n, out)
		}
	})

	t.Run("check with a wrong token reports the repository unreachable", func(t *testing.T) {
		lines, code := runCheck(t, map[string]string{"STYRMIN_GIT_TOKEN": "wrong-token"}, "--kubeconfig", kc)
		l := line(lines, "✗ repository "+repo+" unreachable with the token in STYRMIN_GIT_TOKEN")
		if code != 1 || l == "" || !strings.Contains(l, "authentication failed") {
			t.Fatalf("exit %d:\n%s", code, strings.Join(lines, "\n"))
		}
		if strings.Contains(l, "wrong-token") {
			t.Errorf("the token is shown: %s", l)
		}
	})

	t.Run("check reports a Ready StyrminSource with its last fetch", func(t *testing.T) {
		src := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "styrmin.io/v1alpha1", "kind": "StyrminSource",
			"metadata": map[string]any{"name": "styrmin", "namespace": "styrmin-system"},
			"spec":     map[string]any{"url": repo, "branch": "main", "cluster": "local"},
		}}
		// A new client: the first one's REST mapper knew no styrmin.io.
		cl, err := client.New(c.RESTConfig, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Create(ctx, src); err != nil {
			t.Fatal(err)
		}
		src.Object["status"] = map[string]any{
			"lastFetchedCommit": head, "lastSyncTime": "2026-11-01T10:00:00Z",
			"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Synced", "message": "synced", "lastTransitionTime": "2026-11-01T10:00:00Z"}},
		}
		if err := cl.Status().Update(ctx, src); err != nil {
			t.Fatal(err)
		}
		lines, _ := runCheck(t, nil, "--kubeconfig", kc)
		want := "✔ StyrminSource styrmin-system/styrmin Ready: fetched " + head[:12] + ", last sync 2026-11-01T10:00:00Z"
		if line(lines, want) == "" {
			t.Fatalf("no line %q in:\n%s", want, strings.Join(lines, "\n"))
		}
	})

	t.Run("check --pre with --repo reaches the repository with the token", func(t *testing.T) {
		lines, code := runCheck(t, map[string]string{"STYRMIN_GIT_TOKEN": "right-token"}, "--pre", "--repo", repo, "--kubeconfig", kc)
		if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], "✔ repository "+repo+" reachable") {
			t.Fatalf("exit %d:\n%s", code, strings.Join(lines, "\n"))
		}
	})

	t.Run("version -o json has the client's version and the agent's image", func(t *testing.T) {
		out, err := runCluster(t, kc, "version", "-o", "json")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var v versions
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if v.Client.Version != version.Get().Version || v.Agent == nil || v.Agent.Image != "agent:test" || v.Agent.Tag != "test" ||
			!strings.HasPrefix(v.Kubernetes, "v1.") {
			t.Errorf("version: %s", out)
		}
	})

	t.Run("version of an unreachable cluster prints the client and fails; --client reads no cluster", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "missing")
		out, err := runCluster(t, missing, "version")
		var ec exitCoder
		if !asExitCoder(err, &ec) || ec.ExitCode() != 1 || !strings.HasPrefix(out, "client: "+version.Get().Version) ||
			!strings.Contains(out, "agent: unknown: kubernetes config") {
			t.Errorf("err %v:\n%s", err, out)
		}
		out, err = runCluster(t, missing, "version", "--client")
		if err != nil || strings.Count(out, "\n") != 1 {
			t.Errorf("--client: err %v:\n%s", err, out)
		}
	})
}

// --default-environment-cluster-wide=false, the chart's
// rbac.defaultEnvironmentClusterWide: false, leaves the binding out (the
// role stays) and records the choice on the agent for check.
func TestInstallWithoutTheDefaultEnvironmentClusterWideLeavesItsBindingOut(t *testing.T) {
	t.Parallel()
	out, err := runCluster(t, filepath.Join(t.TempDir(), "missing"), "install", "--cluster", "local", "--repo", "https://git.example.com/d.git",
		"--default-environment-cluster-wide=false", "--export")
	if err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, doc := range strings.Split(out, "---\n")[1:] {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("document does not parse: %v\n%s", err, doc)
		}
		objs = append(objs, u.GetKind()+" "+u.GetName())
		if u.GetKind() == "Deployment" {
			if v := u.GetAnnotations()[install.AnnotationDefaultEnvironmentClusterWide]; v != "false" {
				t.Errorf("the agent's Deployment records %s=%q, want false", install.AnnotationDefaultEnvironmentClusterWide, v)
			}
		}
	}
	if slices.Contains(objs, "ClusterRoleBinding styrmin-agent-default-environment") || !slices.Contains(objs, "ClusterRole styrmin-agent-default-environment") ||
		!slices.Contains(objs, "ClusterRoleBinding styrmin-agent") {
		t.Errorf("want the role and the agent's own binding, not the default environment's binding: %v", objs)
	}
}

func TestInstallNeedsAClusterAndARepository(t *testing.T) {
	t.Parallel()
	_, err := runCluster(t, filepath.Join(t.TempDir(), "missing"), "install", "--export")
	if err == nil || !strings.Contains(err.Error(), "--cluster") || !strings.Contains(err.Error(), "--repo") {
		t.Fatalf("err = %v", err)
	}
	var ec exitCoder
	if errors.As(err, &ec) {
		t.Fatalf("err = %v, want a plain error", err)
	}
}

// Re-running install over an installed agent (an upgrade, or the same
// command again) keeps the agent's image, its --branch and --path and the
// arguments added by hand that install has no flags for, says what it
// kept and which managed argument it resets; an agent of a newer version
// (or any release, from a build without one) is refused, applying
// nothing, unless --allow-downgrade.
func TestInstallAgainKeepsTheAgentsImageAndHandAddedArgsAndRefusesANewerAgent(t *testing.T) {
	t.Parallel()
	c := testcluster.StartT(t, testcluster.Options{})
	kc := c.KubeconfigPath
	ctx := context.Background()
	cl, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	repo := "https://git.example.com/platform/desired-state.git"
	const image = "mirror.example.com/styrmin-agent:pinned"
	if out, err := runCluster(t, kc, "install", "--cluster", "local", "--repo", repo, "--branch", "release", "--path", "deploy", "--image", image); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	agent := func() *appsv1.Deployment {
		t.Helper()
		var dep appsv1.Deployment
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "styrmin-system", Name: "styrmin-agent"}, &dep); err != nil {
			t.Fatal(err)
		}
		return &dep
	}
	// kubectl edit: what the README documents and install has no flag for,
	// and a managed flag changed.
	edit := func(f func(*appsv1.Deployment)) {
		t.Helper()
		dep := agent()
		f(dep)
		if err := cl.Update(ctx, dep); err != nil {
			t.Fatal(err)
		}
	}
	hand := []string{"--lock-mode", "--lock-secret=styrmin-lock", "--ui-bind-address=127.0.0.1:8090", "--report-statuses"}
	metrics := func(v string) func(*appsv1.Deployment) {
		return func(dep *appsv1.Deployment) {
			args := dep.Spec.Template.Spec.Containers[0].Args
			for i, a := range args {
				if strings.HasPrefix(a, "--metrics-bind-address=") {
					args[i] = "--metrics-bind-address=" + v
				}
			}
		}
	}
	three := int32(3)
	edit(func(dep *appsv1.Deployment) {
		dep.Spec.Template.Spec.Containers[0].Args = append(dep.Spec.Template.Spec.Containers[0].Args, hand...)
		metrics(":9090")(dep)
		// A larger fleet's agent: scaled out, more memory.
		dep.Spec.Replicas = &three
		dep.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
	})
	assertKept := func(what string) {
		t.Helper()
		ct := agent().Spec.Template.Spec.Containers[0]
		if ct.Image != image {
			t.Errorf("%s: image %s, want the installed %s", what, ct.Image, image)
		}
		for _, want := range append([]string{"--branch=release", "--path=deploy"}, hand...) {
			if !slices.Contains(ct.Args, want) {
				t.Errorf("%s: the agent's args %v lack %s", what, ct.Args, want)
			}
		}
		if r := agent().Spec.Replicas; r == nil || *r != 3 {
			t.Errorf("%s: replicas %v, want the 3 it was scaled to", what, r)
		}
		if l := ct.Resources.Limits[corev1.ResourceMemory]; l.String() != "1Gi" {
			t.Errorf("%s: memory limit %s, want the 1Gi it was given", what, l.String())
		}
	}

	out, err := runCluster(t, kc, "install", "--cluster", "local", "--repo", repo)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log("\n" + out)
	assertKept("install again")
	if args := agent().Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--metrics-bind-address=:8080") {
		t.Errorf("the managed --metrics-bind-address was not reset: %v", args)
	}
	for _, want := range []string{
		"kept the agent's --branch=release (pass --branch to change it)",
		"kept the agent's --path=deploy (pass --path to change it)",
		"kept the agent's image " + image + " (pass --image to change it)",
		"kept the agent's arguments install does not set: " + strings.Join(hand, " "),
		"kept the agent's replicas: 3 (the manifest's 2; kubectl scale to change it)",
		"kept the agent's resources: requests cpu=100m memory=128Mi, limits memory=1Gi (the manifest's requests cpu=100m memory=128Mi, limits memory=256Mi; kubectl edit to change them)",
		"agent argument --metrics-bind-address=:8080 replaces --metrics-bind-address=:9090",
		"Deployment styrmin-system/styrmin-agent configured",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("install again does not say %q", want)
		}
	}

	// Installed by a newer version: refused, nothing applied.
	edit(func(dep *appsv1.Deployment) {
		dep.Labels[install.LabelVersion] = "v99.0.0"
		metrics(":9090")(dep)
	})
	out, err = runCluster(t, kc, "install", "--cluster", "local", "--repo", repo)
	if err == nil || !strings.Contains(err.Error(), "agent Deployment styrmin-system/styrmin-agent (v99.0.0)") || !strings.Contains(err.Error(), "nothing was applied") ||
		!strings.Contains(err.Error(), "--allow-downgrade") {
		t.Fatalf("install over a newer agent: err = %v\n%s", err, out)
	}
	if args := agent().Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--metrics-bind-address=:9090") {
		t.Errorf("a refused install changed the agent: %v", args)
	}
	out, err = runCluster(t, kc, "install", "--cluster", "local", "--repo", repo, "--allow-downgrade")
	if err != nil || !strings.Contains(out, "downgrading (--allow-downgrade): agent Deployment styrmin-system/styrmin-agent (v99.0.0)") {
		t.Fatalf("install --allow-downgrade: %v\n%s", err, out)
	}
	assertKept("install --allow-downgrade")
}
