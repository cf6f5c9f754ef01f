package install

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/styrmin/styrmin/version"
)

func agentContainerArgs(t *testing.T, objs []*unstructured.Unstructured) (image string, args []string) {
	t.Helper()
	dep := find(objs, "Deployment", agentDeployment)
	if dep == nil {
		t.Fatal("no agent Deployment rendered")
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		m := c.(map[string]any)
		if m["name"] == agentContainer {
			a, _, _ := unstructured.NestedStringSlice(m, "args")
			return m["image"].(string), a
		}
	}
	t.Fatal("no agent container")
	return "", nil
}

func TestRenderSetsTheAgentsSettingsAndNamespaceInTheObjects(t *testing.T) {
	objs, err := Render(Options{
		Cluster: "prod", Repo: "https://git.example.com/acme/desired.git", Branch: "release",
		Path: "deploy", SecretName: "acme-git", Namespace: "styrmin-prod",
		Image: "registry.example.com/agent:v1.2.3", Version: "v1.2.3",
	})
	if err != nil {
		t.Fatal(err)
	}
	image, args := agentContainerArgs(t, objs)
	if image != "registry.example.com/agent:v1.2.3" {
		t.Errorf("image = %s", image)
	}
	for _, want := range []string{"--cluster=prod", "--repo=https://git.example.com/acme/desired.git", "--branch=release", "--path=deploy", "--repo-secret=acme-git", "--leader-elect"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(args), func(a string) bool { return !strings.HasPrefix(a, "--cluster") })); n != 1 {
		t.Errorf("args %v set --cluster %d times", args, n)
	}
	dep := find(objs, "Deployment", agentDeployment)
	if dep.GetNamespace() != "styrmin-prod" || dep.GetLabels()[LabelVersion] != "v1.2.3" {
		t.Errorf("Deployment namespace %q, labels %v", dep.GetNamespace(), dep.GetLabels())
	}
	if find(objs, "Namespace", "styrmin-prod") == nil {
		t.Error("no Namespace styrmin-prod")
	}
	var buf bytes.Buffer
	if err := Export(&buf, objs); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "styrmin-system") {
		t.Errorf("an object still names styrmin-system:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "system:serviceaccount:styrmin-prod:styrmin-agent") {
		t.Error("the admission policy does not name the agent in styrmin-prod")
	}
	// The agent may read the credentials Secret it was given by name.
	role := find(objs, "Role", secretsRole)
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	if names, _, _ := unstructured.NestedStringSlice(rules[0].(map[string]any), "resourceNames"); !slices.Contains(names, "acme-git") {
		t.Errorf("Role %s grants %v, not the Secret acme-git", secretsRole, names)
	}
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
	}
	want := map[string]int{"CustomResourceDefinition": 5, "Namespace": 1, "ServiceAccount": 1, "ClusterRole": 2, "ClusterRoleBinding": 2,
		"Role": 2, "RoleBinding": 2, "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1, "Deployment": 1, "Service": 1}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s rendered, want %d", kinds[k], k, n)
		}
	}
}

func TestRenderWithoutAPathDropsTheFlagAndADevelVersionStampsNoLabel(t *testing.T) {
	objs, err := Render(Options{Cluster: "local", Repo: "https://git.example.com/d.git", Version: "(devel)", Image: "x:latest"})
	if err != nil {
		t.Fatal(err)
	}
	_, args := agentContainerArgs(t, objs)
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--path") }) {
		t.Errorf("args %v hold --path", args)
	}
	if !slices.Contains(args, "--branch=main") || !slices.Contains(args, "--repo-secret=styrmin-repo") {
		t.Errorf("args %v lack the default branch or Secret", args)
	}
	if _, ok := find(objs, "Deployment", agentDeployment).GetLabels()[LabelVersion]; ok {
		t.Error("a (devel) build stamped a version label")
	}
}

func TestDefaultImageIsTheReleaseVersionOrTheShippedOne(t *testing.T) {
	shipped := shippedImage()
	if !strings.HasPrefix(shipped, ImageRepository+":v") {
		t.Fatalf("the shipped manifest's image %q is no released version of %s", shipped, ImageRepository)
	}
	for v, want := range map[string]string{
		"v0.3.0":                               ImageRepository + ":v0.3.0",
		"(devel)":                              shipped,
		"v0.3.0+x":                             shipped,
		"v0.0.0-20261201150405-abcdef123456":   shipped,
		"v0.3.1-0.20261201150405-abcdef123456": shipped,
		"v0.4.0-rc.1":                          ImageRepository + ":v0.4.0-rc.1",
	} {
		if got := DefaultImage(version.Info{Version: v}); got != want {
			t.Errorf("DefaultImage(%s) = %s, want %s", v, got, want)
		}
	}
	if got := DefaultImage(version.Info{Version: "(devel)", Modified: true}); got != shipped {
		t.Errorf("DefaultImage of a dirty build = %s", got)
	}
}

func TestRenderRefusesBadOptionsNamingEach(t *testing.T) {
	_, err := Render(Options{Repo: "https://user:secret@git.example.com/d.git", Namespace: "Not_A_Name"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--cluster", "holds credentials", `namespace "Not_A_Name"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "secret@") {
		t.Errorf("error %q shows the credentials", err)
	}
}

// The agent reads every Secret its arguments name at start, in either
// form of a flag; the Role grants each, and --extra-secret-names, but not
// a --repo-secret kept in another namespace.
func TestRenderGrantsEverySecretTheAgentsArgumentsNameAndTheExtraOnes(t *testing.T) {
	objs, err := Render(Options{Cluster: "prod", Repo: "https://git.example.com/d.git", SecretName: "acme-git", Version: "v0.2.0",
		ExtraArgs:        []string{"--lock-mode", "--lock-secret", "styrmin-push", "--report-statuses", "--status-secret=gh-status"},
		ExtraSecretNames: []string{"velero-creds", "gh-status"}})
	if err != nil {
		t.Fatal(err)
	}
	role := find(objs, "Role", secretsRole)
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	names, _, _ := unstructured.NestedStringSlice(rules[0].(map[string]any), "resourceNames")
	want := []string{"styrmin-repo", "styrmin-webhook", "backup-credentials", "acme-git", "styrmin-push", "gh-status", "velero-creds"}
	if !slices.Equal(names, want) {
		t.Errorf("Role %s grants %v, want %v", secretsRole, names, want)
	}

	objs, err = Render(Options{Cluster: "prod", Repo: "https://git.example.com/d.git", SecretName: "shared-git", Version: "v0.2.0",
		ExtraArgs: []string{"--repo-secret-namespace=git-credentials"}})
	if err != nil {
		t.Fatal(err)
	}
	if names := grantedSecrets(objs); slices.Contains(names, "shared-git") {
		t.Errorf("Role %s grants %v: a Secret of namespace git-credentials, by name in its own", secretsRole, names)
	}

	_, err = Render(Options{Cluster: "prod", Repo: "https://git.example.com/d.git", ExtraSecretNames: []string{"Not_A_Secret"}})
	if err == nil || !strings.Contains(err.Error(), `--extra-secret-names: secret name "Not_A_Secret"`) {
		t.Errorf("err = %v, want --extra-secret-names refused naming the bad name", err)
	}
}
