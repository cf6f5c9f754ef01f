package install

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/testcluster"
)

// installed is an Installed whose agent is what Render makes of o, with
// args added to its arguments and the CRDs stamped by o.Version.
func installed(t *testing.T, o Options, args ...string) *Installed {
	t.Helper()
	objs, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(objs, "Deployment", agentDeployment).Object, &dep); err != nil {
		t.Fatal(err)
	}
	c := agentContainerOf(&dep)
	c.Args = append(c.Args, args...)
	in := &Installed{Agent: &dep, CRDVersions: map[string]string{}, SecretNames: grantedSecrets(objs)}
	for _, u := range objs {
		if isCRD(u) {
			in.CRDVersions[u.GetName()] = u.GetAnnotations()[operator.AnnotationCRDVersion]
		}
	}
	return in
}

func hasNote(notes []string, prefix string) bool {
	return slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, prefix) })
}

// Re-running install over an agent keeps what the command line does not
// set: the image (unless this is a newer release), the branch, folder and
// Secret, and the arguments install does not manage; it resets the ones
// it manages and says which.
func TestPlanUpgradeKeepsTheInstalledImageSettingsAndUnmanagedArgs(t *testing.T) {
	was := Options{Cluster: "prod", Repo: "https://git.example.com/d.git", Branch: "release", Path: "deploy", SecretName: "acme-git",
		Image: "mirror.example.com/agent:v0.2.0", Version: "v0.2.0", WithoutDefaultEnvironmentBinding: true}
	hand := []string{"--lock-mode", "--lock-secret", "styrmin-lock", "--ui-bind-address=127.0.0.1:8090", "--report-statuses"}
	in := installed(t, was, hand...)
	c := agentContainerOf(in.Agent)
	c.Args = setArg(c.Args, "metrics-bind-address", ":9090") // a managed flag edited by hand

	again := Options{Cluster: "prod", Repo: "https://git.example.com/d.git", Branch: DefaultBranch, SecretName: DefaultSecretName, Version: "v0.2.0"}
	up, err := PlanUpgrade(again, in, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(up.Options)
	if err != nil {
		t.Fatal(err)
	}
	image, args := renderedAgent(objs)
	if image != was.Image {
		t.Errorf("image %s, want the installed %s", image, was.Image)
	}
	for _, want := range []string{"--branch=release", "--path=deploy", "--repo-secret=acme-git", "--lock-mode", "--ui-bind-address=127.0.0.1:8090", "--report-statuses", "--metrics-bind-address=:8080"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	if i := slices.Index(args, "--lock-secret"); i < 0 || i+1 >= len(args) || args[i+1] != "styrmin-lock" {
		t.Errorf("args %v lost --lock-secret styrmin-lock", args)
	}
	if slices.Contains(args, "--metrics-bind-address=:9090") {
		t.Errorf("args %v keep a managed flag's hand-set value", args)
	}
	if !up.Options.WithoutDefaultEnvironmentBinding || find(objs, "ClusterRoleBinding", defaultEnvironment) != nil {
		t.Error("the default environment's binding, left out at install, is back")
	}
	for _, want := range []string{
		"kept the agent's image mirror.example.com/agent:v0.2.0 (pass --image",
		"kept the agent's --branch=release",
		"kept the agent's --path=deploy",
		"kept the agent's --repo-secret=acme-git",
		"kept --default-environment-cluster-wide=false",
		"kept the agent's arguments install does not set: --lock-mode --lock-secret styrmin-lock --ui-bind-address=127.0.0.1:8090 --report-statuses",
		"agent argument --metrics-bind-address=:8080 replaces --metrics-bind-address=:9090",
	} {
		if !hasNote(up.Notes, want) {
			t.Errorf("no note %q in:\n%s", want, strings.Join(up.Notes, "\n"))
		}
	}

	// Flags given win over the installed agent's settings.
	given := map[string]bool{"branch": true, "image": true}
	again.Branch, again.Image = "main", "agent:pinned"
	up, err = PlanUpgrade(again, in, UpgradeOptions{Given: func(f string) bool { return given[f] }})
	if err != nil {
		t.Fatal(err)
	}
	if up.Options.Branch != "main" || up.Options.Image != "agent:pinned" {
		t.Errorf("given flags lost: branch %s, image %s", up.Options.Branch, up.Options.Image)
	}
	if !hasNote(up.Notes, "agent argument --branch=main replaces --branch=release") {
		t.Errorf("no note of the branch change in:\n%s", strings.Join(up.Notes, "\n"))
	}

	// A newer release upgrades the image; a build without a release
	// version keeps it.
	again.Image = ""
	up, err = PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: "v0.3.0"}, in, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "mirror.example.com/agent:v0.3.0"; up.Options.Image != want || !hasNote(up.Notes, "agent image mirror.example.com/agent:v0.2.0 → "+want+" (v0.2.0 → v0.3.0)") {
		t.Errorf("upgrade: image %s, notes:\n%s", up.Options.Image, strings.Join(up.Notes, "\n"))
	}
	pseudo := "v0.3.1-0.20261201150405-abcdef123456"
	up, err = PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: pseudo}, in, UpgradeOptions{})
	if err != nil || up.Options.Image != was.Image {
		t.Errorf("a pseudo-version, newer but with no image of its own: image %s, %v; want %s kept", up.Options.Image, err, was.Image)
	}
	devel := installed(t, Options{Cluster: "prod", Repo: was.Repo, Image: "agent:dev", Version: "(devel)"})
	up, err = PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: "(devel)"}, devel, UpgradeOptions{})
	if err != nil || up.Options.Image != "agent:dev" {
		t.Errorf("a development build over a development install: image %s, %v; want agent:dev kept", up.Options.Image, err)
	}
}

// An agent scaled out and given more memory by hand keeps both through an
// upgrade, and the notes say so; an agent as the manifest made it gets no
// such note.
func TestPlanUpgradeKeepsTheAgentsReplicasAndResources(t *testing.T) {
	was := Options{Cluster: "prod", Repo: "https://git.example.com/d.git", Version: "v0.2.0"}
	in := installed(t, was)
	up, err := PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: "v0.3.0"}, in, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hasNote(up.Notes, "kept the agent's replicas") || hasNote(up.Notes, "kept the agent's resources") {
		t.Errorf("an agent as the manifest made it: notes of kept scale:\n%s", strings.Join(up.Notes, "\n"))
	}

	three := int32(3)
	in.Agent.Spec.Replicas = &three
	c := agentContainerOf(in.Agent)
	c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
	c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("512Mi")
	up, err = PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: "v0.3.0"}, in, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(up.Options)
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(objs, "Deployment", agentDeployment).Object, &dep); err != nil {
		t.Fatal(err)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want the installed 3", dep.Spec.Replicas)
	}
	res := agentContainerOf(&dep).Resources
	if l := res.Limits[corev1.ResourceMemory]; l.String() != "1Gi" {
		t.Errorf("memory limit %s, want the installed 1Gi", l.String())
	}
	if r := res.Requests[corev1.ResourceMemory]; r.String() != "512Mi" {
		t.Errorf("memory request %s, want the installed 512Mi", r.String())
	}
	for _, want := range []string{
		"kept the agent's replicas: 3 (the manifest's 2; kubectl scale to change it)",
		"kept the agent's resources: requests cpu=100m memory=512Mi, limits memory=1Gi (the manifest's requests cpu=100m memory=128Mi, limits memory=256Mi; kubectl edit to change them)",
	} {
		if !hasNote(up.Notes, want) {
			t.Errorf("no note %q in:\n%s", want, strings.Join(up.Notes, "\n"))
		}
	}
}

// An agent or a CRD installed by a newer version (or by a release, when
// this build has none) is refused, naming what and what to do, unless
// --allow-downgrade; an allowed downgrade says so.
func TestPlanUpgradeRefusesANewerAgentOrCRDUnlessDowngradeIsAllowed(t *testing.T) {
	o := Options{Cluster: "prod", Repo: "https://git.example.com/d.git"}
	newer := installed(t, Options{Cluster: "prod", Repo: o.Repo, Image: ImageRepository + ":v0.5.0", Version: "v0.5.0"})

	for _, self := range []string{"v0.4.0", "v0.5.0-rc.1", "(devel)"} {
		o.Version = self
		_, err := PlanUpgrade(o, newer, UpgradeOptions{})
		var de *DowngradeError
		if !errors.As(err, &de) {
			t.Fatalf("%s over v0.5.0: err = %v, want a DowngradeError", self, err)
		}
		for _, want := range []string{"agent Deployment styrmin-system/styrmin-agent (v0.5.0)", "CRD styrmindeployments.styrmin.io (v0.5.0)", "nothing was applied", "v0.5.0", "--allow-downgrade"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", self, err, want)
			}
		}
		up, err := PlanUpgrade(o, newer, UpgradeOptions{AllowDowngrade: true})
		if err != nil || !hasNote(up.Notes, "downgrading (--allow-downgrade)") {
			t.Errorf("%s allowed: %v, notes %v", self, err, up.Notes)
		}
	}
	o.Version = "v0.4.0"
	up, err := PlanUpgrade(o, newer, UpgradeOptions{AllowDowngrade: true})
	if err != nil || up.Options.Image != ImageRepository+":v0.4.0" {
		t.Errorf("an allowed downgrade installs this version's image: %s, %v", up.Options.Image, err)
	}

	// CRDs alone (the agent's Deployment older, or gone) are enough.
	crdsOnly := installed(t, Options{Cluster: "prod", Repo: o.Repo, Image: ImageRepository + ":v0.4.0", Version: "v0.4.0"})
	crdsOnly.CRDVersions["styrmintasks.styrmin.io"] = "v0.6.0-3-gabcdef1"
	_, err = PlanUpgrade(o, crdsOnly, UpgradeOptions{})
	if err == nil || !strings.Contains(err.Error(), "CRD styrmintasks.styrmin.io (v0.6.0-3-gabcdef1)") || !strings.Contains(err.Error(), "Use styrminctl v0.6.0-3-gabcdef1 or newer") {
		t.Errorf("CRDs of a newer build: err = %v", err)
	}

	// The same version, a newer one, and installs whose version is
	// unknown are no downgrade.
	for _, self := range []string{"v0.5.0", "v0.5.1", "v0.5.0-1-g0123456-dirty"} {
		o.Version = self
		if _, err := PlanUpgrade(o, newer, UpgradeOptions{}); err != nil {
			t.Errorf("%s over v0.5.0: %v", self, err)
		}
	}
	unknown := installed(t, Options{Cluster: "prod", Repo: o.Repo, Image: "agent:latest", Version: "(devel)"})
	o.Version = "v0.1.0"
	if _, err := PlanUpgrade(o, unknown, UpgradeOptions{}); err != nil {
		t.Errorf("over an install of unknown version: %v", err)
	}
}

// An agent installed without --branch (it follows the remote's HEAD) or
// --repo-secret (a public repository), as the chart allows, keeps them
// absent when install runs again without those flags: install's defaults
// would switch its branch or name a Secret that does not exist.
func TestPlanUpgradeKeepsAnAbsentBranchAndRepoSecretAbsent(t *testing.T) {
	o := Options{Cluster: "prod", Repo: "https://git.example.com/d.git", Image: "mirror.example.com/agent:v0.2.0", Version: "v0.2.0"}
	in := installed(t, o)
	c := agentContainerOf(in.Agent)
	c.Args = setArg(setArg(c.Args, "branch", ""), "repo-secret", "")

	again := Options{Cluster: "prod", Repo: o.Repo, Branch: DefaultBranch, SecretName: DefaultSecretName, Version: "v0.2.0"}
	up, err := PlanUpgrade(again, in, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(up.Options)
	if err != nil {
		t.Fatal(err)
	}
	_, args := renderedAgent(objs)
	for _, a := range args {
		if name := flagName(a); name == "branch" || name == "repo-secret" {
			t.Errorf("args %v: %s added to an agent that had none", args, a)
		}
	}
	for _, want := range []string{"kept the agent without --branch", "kept the agent without --repo-secret"} {
		if !hasNote(up.Notes, want) {
			t.Errorf("no note %q in:\n%s", want, strings.Join(up.Notes, "\n"))
		}
	}
	if hasNote(up.Notes, "agent argument --branch") || hasNote(up.Notes, "agent argument --repo-secret") {
		t.Errorf("notes announce a change of branch or Secret:\n%s", strings.Join(up.Notes, "\n"))
	}

	// Given, the flags set them.
	given := map[string]bool{"branch": true, "secret-name": true}
	again.Branch, again.SecretName = "release", "acme-git"
	up, err = PlanUpgrade(again, in, UpgradeOptions{Given: func(f string) bool { return given[f] }})
	if err != nil {
		t.Fatal(err)
	}
	objs, err = Render(up.Options)
	if err != nil {
		t.Fatal(err)
	}
	_, args = renderedAgent(objs)
	if !slices.Contains(args, "--branch=release") || !slices.Contains(args, "--repo-secret=acme-git") {
		t.Errorf("given flags lost: args %v", args)
	}
}

// An upgrade keeps an agent image named by digest (or by a tag that is
// not its version) rather than swap it for the published image, which an
// air-gapped cluster pulling from a mirror cannot reach; it says so.
func TestPlanUpgradeKeepsADigestPinnedImageAndSaysSo(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for image, why := range map[string]string{
		"mirror.example.com/agent@" + digest:             "by digest",
		"mirror.example.com/agent:v0.2.0@" + digest:      "by digest",
		"mirror.example.com/agent:stable":                "tag stable, not the agent's version v0.2.0",
		"registry.internal:5000/styrmin/agent@" + digest: "by digest",
	} {
		in := installed(t, Options{Cluster: "prod", Repo: "https://git.example.com/d.git", Image: image, Version: "v0.2.0"})
		up, err := PlanUpgrade(Options{Cluster: "prod", Repo: "https://git.example.com/d.git", Version: "v0.3.0"}, in, UpgradeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if up.Options.Image != image {
			t.Errorf("%s: upgraded to %s, want it kept", image, up.Options.Image)
		}
		if want := "the agent runs " + image + " (" + why + "): pass --image to change it"; !slices.Contains(up.Notes, want) {
			t.Errorf("%s: no note %q in:\n%s", image, want, strings.Join(up.Notes, "\n"))
		}
	}
}

// What the installed manifest set is not kept: a release that raises the
// agent's memory limit applies it to an agent nobody changed by hand (the
// Deployment's AnnotationManifestScale records the manifest it was
// installed with); an agent without that record (the chart's, an older
// styrminctl's) keeps what differs from this manifest.
func TestPlanUpgradeAppliesANewManifestsResourcesToAnAgentNotChangedByHand(t *testing.T) {
	was := Options{Cluster: "prod", Repo: "https://git.example.com/d.git", Version: "v0.2.0"}
	in := installed(t, was)
	// As an older release's manifest had it, and recorded so.
	c := agentContainerOf(in.Agent)
	c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("128Mi")
	var rec manifestScale
	if err := json.Unmarshal([]byte(in.Agent.Annotations[AnnotationManifestScale]), &rec); err != nil {
		t.Fatalf("annotation %s: %v", AnnotationManifestScale, err)
	}
	rec.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("128Mi")
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	in.Agent.Annotations[AnnotationManifestScale] = string(b)

	limit := func(o Options) string {
		t.Helper()
		objs, err := Render(o)
		if err != nil {
			t.Fatal(err)
		}
		var dep appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(objs, "Deployment", agentDeployment).Object, &dep); err != nil {
			t.Fatal(err)
		}
		l := agentContainerOf(&dep).Resources.Limits[corev1.ResourceMemory]
		return l.String()
	}
	up, err := PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: "v0.3.0"}, in, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := limit(up.Options); got != "256Mi" || hasNote(up.Notes, "kept the agent's resources") {
		t.Errorf("an agent at its manifest's 128Mi: limit %s after the upgrade, notes:\n%s\nwant this manifest's 256Mi", got, strings.Join(up.Notes, "\n"))
	}

	// Installed without the record: 128Mi may have been set by hand.
	delete(in.Agent.Annotations, AnnotationManifestScale)
	up, err = PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: "v0.3.0"}, in, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := limit(up.Options); got != "128Mi" || !hasNote(up.Notes, "kept the agent's resources") {
		t.Errorf("an agent without the record at 128Mi: limit %s, want it kept and said", got)
	}
}

// A release whose manifest adds a resource (here requests.cpu, absent from
// the record and from the agent as installed) applies it: the agent was
// not changed by hand, and the notes say nothing was kept.
func TestPlanUpgradeAppliesAResourceANewManifestAdds(t *testing.T) {
	was := Options{Cluster: "prod", Repo: "https://git.example.com/d.git", Version: "v0.2.0"}
	in := installed(t, was)
	delete(agentContainerOf(in.Agent).Resources.Requests, corev1.ResourceCPU)
	var rec manifestScale
	if err := json.Unmarshal([]byte(in.Agent.Annotations[AnnotationManifestScale]), &rec); err != nil {
		t.Fatal(err)
	}
	delete(rec.Resources.Requests, corev1.ResourceCPU)
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	in.Agent.Annotations[AnnotationManifestScale] = string(b)
	up, err := PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: "v0.3.0"}, in, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(up.Options)
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(objs, "Deployment", agentDeployment).Object, &dep); err != nil {
		t.Fatal(err)
	}
	if cpu := agentContainerOf(&dep).Resources.Requests[corev1.ResourceCPU]; cpu.String() != "100m" || hasNote(up.Notes, "kept the agent's resources") {
		t.Errorf("requests.cpu %s after the upgrade, notes:\n%s\nwant the new manifest's 100m and nothing kept", cpu.String(), strings.Join(up.Notes, "\n"))
	}
}

// roleNames are the Secrets Role styrmin-agent-secrets of objs grants.
func roleNames(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	if find(objs, "Role", secretsRole) == nil {
		t.Fatalf("no Role %s rendered", secretsRole)
	}
	return grantedSecrets(objs)
}

// An upgrade keeps the agent's --lock-secret and --status-secret, so its
// Role must grant them: under strict tenancy it has no other way to read
// them and would crash-loop. Names an administrator added to the Role (a
// backup's credentials) stay, and --extra-secret-names adds to them.
func TestPlanUpgradeGrantsTheSecretsItsKeptArgumentsName(t *testing.T) {
	was := Options{Cluster: "prod", Repo: "https://git.example.com/d.git", SecretName: "acme-git", Image: "mirror.example.com/agent:v0.2.0", Version: "v0.2.0", WithoutDefaultEnvironmentBinding: true}
	in := installed(t, was, "--lock-mode", "--lock-secret", "styrmin-push", "--report-statuses", "--status-secret=gh-status")
	in.SecretNames = append(in.SecretNames, "styrmin-push", "gh-status", "velero-creds")

	up, err := PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: "v0.3.0", ExtraSecretNames: []string{"restic-creds"}}, in, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(up.Options)
	if err != nil {
		t.Fatal(err)
	}
	names := roleNames(t, objs)
	for _, want := range []string{"acme-git", "styrmin-webhook", "styrmin-push", "gh-status", "velero-creds", "restic-creds"} {
		if !slices.Contains(names, want) {
			t.Errorf("Role %s grants %v, not %s", secretsRole, names, want)
		}
	}
	if want := "kept the Secrets Role " + secretsRole + " grants besides the agent's own: velero-creds ("; !hasNote(up.Notes, want) {
		t.Errorf("no note %q in:\n%s", want, strings.Join(up.Notes, "\n"))
	}

	// Again over what that upgrade applied: nothing more is kept or said.
	in.SecretNames = names
	again, err := PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: "v0.3.0"}, in, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err = Render(again.Options)
	if err != nil {
		t.Fatal(err)
	}
	if got := roleNames(t, objs); !slices.Equal(got, names) {
		t.Errorf("a second upgrade grants %v, the first %v", got, names)
	}
}

// Upgrading an agent installed for strict tenancy, on a real API server:
// the agent can still read its lock and status Secrets and the backup
// credentials an administrator granted it, and nothing else.
func TestUpgradeKeepsTheAgentsAccessToItsSecretsUnderStrictTenancy(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	ctx := context.Background()
	admin, err := newClient(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	was := Options{Cluster: "prod", Repo: "https://git.example.com/d.git", Image: "agent:v0.2.0", Version: "v0.2.0", WithoutDefaultEnvironmentBinding: true}
	objs, err := Render(was)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, c.RESTConfig, objs, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	// By hand: lock mode with its own push credentials, commit statuses
	// with their token, and a backup's credentials granted in the Role.
	var dep appsv1.Deployment
	if err := admin.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: agentDeployment}, &dep); err != nil {
		t.Fatal(err)
	}
	cont := agentContainerOf(&dep)
	cont.Args = append(cont.Args, "--lock-mode", "--lock-secret=styrmin-push", "--report-statuses", "--status-secret=gh-status")
	if err := admin.Update(ctx, &dep); err != nil {
		t.Fatal(err)
	}
	var role rbacv1.Role
	if err := admin.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: secretsRole}, &role); err != nil {
		t.Fatal(err)
	}
	role.Rules[0].ResourceNames = append(role.Rules[0].ResourceNames, "styrmin-push", "gh-status", "velero-creds")
	// A rule of the administrator's own: the upgrade applies the Role
	// whole, so it goes, and the plan says so.
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}})
	if err := admin.Update(ctx, &role); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"styrmin-push", "gh-status", "velero-creds", "someone-else"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: name}}
		if err := admin.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	live, err := Inspect(ctx, c.RESTConfig, DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	up, err := PlanUpgrade(Options{Cluster: "prod", Repo: was.Repo, Version: "v0.3.0"}, live, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Role " + secretsRole + " holds rules install does not make, which the upgrade replaces: get,list configmaps;"; !hasNote(up.Notes, want) {
		t.Errorf("no note %q in:\n%s", want, strings.Join(up.Notes, "\n"))
	}
	objs, err = Render(up.Options)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, c.RESTConfig, objs, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate.UserName = "system:serviceaccount:" + DefaultNamespace + ":" + config.AgentServiceAccount
	agent, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"styrmin-push", "gh-status", "velero-creds"} {
		if err := agent.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: name}, &corev1.Secret{}); err != nil {
			t.Errorf("after the upgrade, the agent reading Secret %s: %v", name, err)
		}
	}
	err = agent.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: "someone-else"}, &corev1.Secret{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the agent reading a Secret nobody granted: %v, want forbidden", err)
	}
}
