package charts_test

import (
	"bytes"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/charts"
	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/secrettest"
)

// What an install must say; the rest has defaults.
func required() map[string]any {
	return map[string]any{
		"cluster":    "local",
		"repository": map[string]any{"url": "https://git.example.com/platform/desired-state.git"},
	}
}

// The secret values of everyOption, which only the created Secret may hold.
var secretValues = []string{"tok-3f9a1c7e5b", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----\n", "pass-77d1e0"}

// everyOption turns on every optional object and flag.
func everyOption() map[string]any {
	return map[string]any{
		"cluster":      "prod-eu",
		"replicaCount": 3,
		"repository": map[string]any{
			"url":          "https://git.example.com/platform/desired-state.git",
			"branch":       "release",
			"path":         "deploy",
			"pollInterval": "2m",
			"secret": map[string]any{
				"name":       "agent-git",
				"create":     true,
				"token":      secretValues[0],
				"identity":   secretValues[1],
				"passphrase": secretValues[2],
				"knownHosts": "git.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
			},
		},
		"webhook":   map[string]any{"port": 9000, "secretName": "gh-hook", "secretKey": "hmac"},
		"metrics":   map[string]any{"port": 9090, "serviceMonitor": map[string]any{"enabled": true, "interval": "30s", "labels": map[string]any{"release": "prometheus"}}},
		"rbac":      map[string]any{"defaultEnvironmentClusterWide": false, "extraSecretNames": []any{"lock-push"}},
		"extraArgs": []any{"--drift-interval=10m"},
	}
}

// TestChartLintsClean pins that `helm lint --strict` finds nothing, not
// even a warning, with the required values and with every option on.
func TestChartLintsClean(t *testing.T) {
	for name, vals := range map[string]map[string]any{"defaults": required(), "every option": everyOption()} {
		lint := action.NewLint()
		lint.Strict = true
		lint.Namespace = config.AgentNamespace
		lint.KubeVersion = kubeVersion(t)
		res := lint.Run([]string{charts.AgentChartDir}, vals)
		for _, m := range res.Messages {
			t.Logf("%s: %s", name, m)
		}
		if len(res.Errors) > 0 || res.TotalChartsLinted != 1 {
			t.Errorf("%s: helm lint --strict: %v", name, res.Errors)
		}
	}
}

// TestChartRendersTheAgent pins what the chart installs with the required
// values and with every option on: the objects by kind and name, the
// agent's flags, the Service's ports, the writable /tmp, and that no
// credential reaches NOTES or any object but its Secret.
func TestChartRendersTheAgent(t *testing.T) {
	base := []string{
		"ClusterRole/styrmin-agent", "ClusterRole/styrmin-agent-default-environment",
		"ClusterRoleBinding/styrmin-agent", "ClusterRoleBinding/styrmin-agent-default-environment",
		"CustomResourceDefinition/styrminbackups.styrmin.io", "CustomResourceDefinition/styrmindeployments.styrmin.io",
		"CustomResourceDefinition/styrminrestores.styrmin.io", "CustomResourceDefinition/styrminsources.styrmin.io",
		"CustomResourceDefinition/styrmintasks.styrmin.io",
		"Deployment/styrmin-agent", "Role/styrmin-agent-leader-election", "RoleBinding/styrmin-agent-leader-election",
		"Role/styrmin-agent-secrets", "RoleBinding/styrmin-agent-secrets",
		"Service/styrmin-agent", "ServiceAccount/styrmin-agent",
		"ValidatingAdmissionPolicy/styrmin-agent-writes-tasks", "ValidatingAdmissionPolicyBinding/styrmin-agent-writes-tasks",
	}
	t.Run("defaults", func(t *testing.T) {
		r := render(t, required())
		r.wantObjects(t, base)
		args := r.agentArgs(t)
		for _, a := range []string{"--cluster=local", "--repo=https://git.example.com/platform/desired-state.git", "--branch=main",
			"--repo-secret=styrmin-repo", "--leader-elect", "--metrics-bind-address=:8080",
			"--webhook-bind-address=:8082", "--webhook-secret-name=styrmin-webhook", "--memory-limit=$(MEMORY_LIMIT_MIB)M"} {
			if !slices.Contains(args, a) {
				t.Errorf("args %v lack %s", args, a)
			}
		}
		r.wantServicePorts(t, map[string]int32{"metrics": 8080, "webhook": 8082})
		r.wantTmp(t)
		if d := r.deployment(t); *d.Spec.Replicas != 2 || !strings.HasSuffix(d.Spec.Template.Spec.Containers[0].Image, ":v0.1.0") {
			t.Errorf("replicas %d, image %s: want 2 and the appVersion", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image)
		}
	})
	t.Run("every option", func(t *testing.T) {
		r := render(t, everyOption())
		want := slices.DeleteFunc(slices.Clone(base), func(s string) bool { return s == "ClusterRoleBinding/styrmin-agent-default-environment" })
		r.wantObjects(t, append(want, "Secret/agent-git", "ServiceMonitor/styrmin-agent"))
		args := r.agentArgs(t)
		for _, a := range []string{"--cluster=prod-eu", "--repo=https://git.example.com/platform/desired-state.git", "--branch=release",
			"--path=deploy", "--poll-interval=2m", "--repo-secret=agent-git", "--leader-elect", "--metrics-bind-address=:9090",
			"--webhook-bind-address=:9000", "--webhook-secret-name=gh-hook", "--webhook-secret-key=hmac", "--drift-interval=10m"} {
			if !slices.Contains(args, a) {
				t.Errorf("args %v lack %s", args, a)
			}
		}
		r.wantServicePorts(t, map[string]int32{"metrics": 9090, "webhook": 9000})
		r.wantTmp(t)
		if d := r.deployment(t); *d.Spec.Replicas != 3 {
			t.Errorf("replicas %d, want 3", *d.Spec.Replicas)
		}
		var s corev1.Secret
		r.decode(t, "Secret/agent-git", &s)
		got := map[string]string{}
		for k, v := range s.Data {
			got[k] = string(v)
		}
		if got["token"] != secretValues[0] || got["identity"] != secretValues[1] || got["passphrase"] != secretValues[2] || got["known_hosts"] == "" {
			t.Errorf("Secret keys %v, want token, identity, passphrase and known_hosts with the values", slices.Sorted(maps.Keys(got)))
		}
		if got := r.secretNames(t); !slices.Equal(got, []string{"agent-git", "gh-hook", "lock-push"}) {
			t.Errorf("the agent reads Secrets %v, want agent-git, gh-hook, lock-push", got)
		}
		if found := secrettest.Find([]byte(r.notes), secretValues...); len(found) > 0 {
			t.Errorf("NOTES holds %v:\n%s", found, r.notes)
		}
		for key, doc := range r.docs {
			if key == "Secret/agent-git" {
				continue
			}
			if found := secrettest.Find(doc, secretValues...); len(found) > 0 {
				t.Errorf("%s holds %v", key, found)
			}
		}
	})
	t.Run("the UI and commit statuses", func(t *testing.T) {
		vals := required()
		vals["ui"] = map[string]any{"enabled": true}
		vals["statuses"] = map[string]any{"enabled": true, "secretName": "gh-status", "repository": "acme/desired-state", "targetURL": "https://styrmin.example.com/"}
		r := render(t, vals)
		args := r.agentArgs(t)
		for _, a := range []string{"--ui-bind-address=127.0.0.1:8090", "--report-statuses", "--status-secret=gh-status", "--status-secret-key=token",
			"--status-repository=acme/desired-state", "--status-target-url=https://styrmin.example.com/"} {
			if !slices.Contains(args, a) {
				t.Errorf("args %v lack %s", args, a)
			}
		}
		if got := r.secretNames(t); !slices.Contains(got, "gh-status") {
			t.Errorf("the agent reads Secrets %v, want gh-status among them", got)
		}
		if d := render(t, required()).agentArgs(t); slices.ContainsFunc(d, func(a string) bool { return strings.HasPrefix(a, "--ui") || strings.HasPrefix(a, "--report") }) {
			t.Errorf("the defaults serve no UI and report nothing: %v", d)
		}
	})
	t.Run("one replica without leader election", func(t *testing.T) {
		vals := required()
		vals["replicaCount"] = 1
		vals["leaderElection"] = false
		vals["webhook"] = map[string]any{"enabled": false}
		vals["metrics"] = map[string]any{"enabled": false}
		vals["repository"].(map[string]any)["secret"] = map[string]any{"name": ""}
		vals["rbac"] = map[string]any{"extraSecretNames": []any{}}
		r := render(t, vals)
		if _, ok := r.docs["Role/styrmin-agent-secrets"]; ok {
			t.Error("a Role for no Secret: an empty resourceNames grants every Secret")
		}
		args := r.agentArgs(t)
		if !slices.Contains(args, "--leader-elect=false") || !slices.Contains(args, "--metrics-bind-address=0") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--webhook") }) {
			t.Errorf("args %v: want --leader-elect=false, metrics off, no webhook", args)
		}
		if d := r.deployment(t); d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("strategy %q: without leader election a rolling update would run two agents", d.Spec.Strategy.Type)
		}
		if _, ok := r.docs["Service/styrmin-agent"]; ok {
			t.Error("a Service with neither metrics nor the webhook")
		}
	})
}

// TestChartRefusesWhatWouldRunTwoAgentsOrNoneRightly pins the values the
// chart refuses, each with a message naming the value.
func TestChartRefusesWhatWouldRunTwoAgentsOrNoneRightly(t *testing.T) {
	for name, c := range map[string]struct {
		set  func(map[string]any)
		want string
	}{
		"no cluster":                       {func(v map[string]any) { delete(v, "cluster") }, "cluster is required"},
		"no repository":                    {func(v map[string]any) { delete(v, "repository") }, "repository.url is required"},
		"replicas without leader election": {func(v map[string]any) { v["leaderElection"] = false }, "leaderElection"},
		"webhook without a branch": {func(v map[string]any) {
			v["repository"] = map[string]any{"url": "https://x.example/r.git", "branch": ""}
		}, "repository.branch"},
		"created Secret without credentials": {func(v map[string]any) {
			v["repository"] = map[string]any{"url": "https://x.example/r.git", "secret": map[string]any{"create": true}}
		}, "repository.secret.token"},
	} {
		vals := required()
		c.set(vals)
		_, err := renderErr(t, vals)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, c.want)
		}
	}
}

// TestChartCRDsAreConfigCRDs pins that the chart's crds/ are the files of
// config/crd, byte for byte, so the two installs never drift.
func TestChartCRDsAreConfigCRDs(t *testing.T) {
	dir := path.Join(charts.AgentChartDir, "crds")
	entries, err := fs.ReadDir(charts.AgentChart(), "crds")
	if err != nil {
		t.Fatal(err)
	}
	want := config.CRDs()
	if len(entries) != len(want) {
		t.Fatalf("%s has %d files, config/crd %d: copy config/crd/*.yaml to %s", dir, len(entries), len(want), dir)
	}
	for i, e := range entries { // both sorted by name
		got, err := fs.ReadFile(charts.AgentChart(), "crds/"+e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[i]) {
			t.Errorf("%s/%s differs from config/crd: copy config/crd/*.yaml to %s", dir, e.Name(), dir)
		}
	}
}

// TestChartGrantsWhatConfigGrants pins that the chart's RBAC rules and
// admission policy are those of config/ (installed in styrmin-system, the
// policy trusts the same account).
func TestChartGrantsWhatConfigGrants(t *testing.T) {
	r := render(t, required())
	base := map[string][]byte{}
	for _, doc := range append(config.RBAC(), splitDocs(config.AdmissionPolicy())...) {
		base[key(t, doc)] = doc
	}
	for k, doc := range base {
		got, ok := r.docs[k]
		if !ok {
			t.Errorf("the chart has no %s", k)
			continue
		}
		field := "rules"
		switch kindOf(k) {
		case "ServiceAccount":
			continue
		case "ClusterRoleBinding", "RoleBinding":
			field = "subjects"
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			field = "spec"
		}
		if a, b := fieldOf(t, got, field), fieldOf(t, doc, field); !equality.Semantic.DeepEqual(a, b) {
			t.Errorf("%s: the chart's %s differ from config's:\nchart:  %v\nconfig: %v", k, field, a, b)
		}
	}
}

// TestChartInstallsTheAgentOfTheKustomizeBase pins that, with the values
// the base is written for, the chart's Deployment runs the same pod as
// config/agent/deployment.yaml (security contexts, probes, volumes and
// mounts, flags, image, resources), and its Service has the same ports.
func TestChartInstallsTheAgentOfTheKustomizeBase(t *testing.T) {
	r := render(t, required())
	var base appsv1.Deployment
	if err := yaml.UnmarshalStrict(config.AgentDeployment(), &base); err != nil {
		t.Fatal(err)
	}
	d := r.deployment(t)
	if !equality.Semantic.DeepEqual(d.Spec.Template.Spec, base.Spec.Template.Spec) {
		a, _ := yaml.Marshal(d.Spec.Template.Spec)
		b, _ := yaml.Marshal(base.Spec.Template.Spec)
		t.Fatalf("the chart's pod differs from the base's:\nchart:\n%s\nbase:\n%s", a, b)
	}
	if !equality.Semantic.DeepEqual(d.Spec.Selector, base.Spec.Selector) || *d.Spec.Replicas != *base.Spec.Replicas {
		t.Errorf("selector %v, replicas %d; the base's %v, %d", d.Spec.Selector, *d.Spec.Replicas, base.Spec.Selector, *base.Spec.Replicas)
	}
	var baseSvc corev1.Service
	if err := yaml.UnmarshalStrict(config.Service(), &baseSvc); err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	r.decode(t, "Service/styrmin-agent", &svc)
	if !equality.Semantic.DeepEqual(svc.Spec, baseSvc.Spec) {
		t.Errorf("the chart's Service %+v, the base's %+v", svc.Spec, baseSvc.Spec)
	}
}

type rendered struct {
	docs  map[string][]byte // by kind/name
	notes string
}

func render(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	r, err := renderErr(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// renderErr renders the chart as `helm template --include-crds` does.
func renderErr(t *testing.T, vals map[string]any) (*rendered, error) {
	t.Helper()
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.IncludeCRDs = true
	install.ReleaseName = "styrmin-agent"
	install.Namespace = config.AgentNamespace
	install.KubeVersion = kubeVersion(t)
	ch, err := charts.LoadAgentChart()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := install.Run(ch, vals)
	if err != nil {
		return nil, err
	}
	rl := rel.(*release.Release)
	r := &rendered{docs: map[string][]byte{}, notes: rl.Info.Notes}
	for _, doc := range splitDocs([]byte(rl.Manifest)) {
		k := key(t, doc)
		if k == "/" {
			continue // only comments: a template that made nothing
		}
		if _, dup := r.docs[k]; dup {
			t.Fatalf("%s rendered twice", k)
		}
		r.docs[k] = doc
	}
	return r, nil
}

func kubeVersion(t *testing.T) *common.KubeVersion {
	t.Helper()
	kv, err := common.ParseKubeVersion(drivers.DefaultKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func (r *rendered) wantObjects(t *testing.T, want []string) {
	t.Helper()
	got := slices.Sorted(maps.Keys(r.docs))
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("rendered %v, want %v", got, want)
	}
}

func (r *rendered) decode(t *testing.T, key string, into any) {
	t.Helper()
	doc, ok := r.docs[key]
	if !ok {
		t.Fatalf("no %s rendered", key)
	}
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

func (r *rendered) deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	r.decode(t, "Deployment/styrmin-agent", &d)
	return &d
}

func (r *rendered) agentArgs(t *testing.T) []string {
	t.Helper()
	return r.deployment(t).Spec.Template.Spec.Containers[0].Args
}

func (r *rendered) wantServicePorts(t *testing.T, want map[string]int32) {
	t.Helper()
	var s corev1.Service
	r.decode(t, "Service/styrmin-agent", &s)
	got := map[string]int32{}
	for _, p := range s.Spec.Ports {
		got[p.Name] = p.Port
		if p.TargetPort.StrVal != p.Name {
			t.Errorf("Service port %s targets %v, want the container port of that name", p.Name, p.TargetPort)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("Service ports %v, want %v", got, want)
	}
}

// secretNames returns the Secrets the agent's secrets Role lets it read.
func (r *rendered) secretNames(t *testing.T) []string {
	t.Helper()
	var role rbacv1.Role
	r.decode(t, "Role/styrmin-agent-secrets", &role)
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) || !slices.Equal(role.Rules[0].Resources, []string{"secrets"}) {
		t.Fatalf("secrets Role rules %+v, want one: get secrets by name", role.Rules)
	}
	return role.Rules[0].ResourceNames
}

// wantTmp checks that /tmp is an emptyDir under a read-only root.
func (r *rendered) wantTmp(t *testing.T) {
	t.Helper()
	spec := r.deployment(t).Spec.Template.Spec
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is not read-only")
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != "/tmp" {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil {
				return
			}
		}
	}
	t.Errorf("no emptyDir mounted at /tmp: mounts %v, volumes %v", c.VolumeMounts, spec.Volumes)
}

func key(t *testing.T, doc []byte) string {
	t.Helper()
	var u unstructured.Unstructured
	if err := yaml.Unmarshal(doc, &u.Object); err != nil {
		t.Fatalf("%v:\n%s", err, doc)
	}
	return u.GetKind() + "/" + u.GetName()
}

func kindOf(key string) string { k, _, _ := strings.Cut(key, "/"); return k }

func fieldOf(t *testing.T, doc []byte, field string) any {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		t.Fatal(err)
	}
	return runtime.DeepCopyJSONValue(obj[field])
}

func splitDocs(b []byte) [][]byte {
	var out [][]byte
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		out = append(out, doc)
	}
	return out
}
