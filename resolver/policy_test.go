package resolver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withTenantDriver adds the operator's tenancy test driver to a copy of
// the example repository and one deployment of it in dev.
func withTenantDriver(t *testing.T, dir, params string) {
	t.Helper()
	src := filepath.Join("..", "operator", "testdata", "drivers", "tenant")
	if err := os.CopyFS(filepath.Join(dir, "drivers", "tenant"), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "clusters/local/environments/dev/deployments/tn.cue", "driver: \"tenant\"\nappVersion: \"1.0.0\"\n"+params)
}

// TestPolicyRefusesWhatLeavesTheEnvironmentAtLockTime pins that a chart
// creating a cluster-scoped kind, or an object in a namespace outside the
// environment's, fails to resolve with an error naming the deployment,
// the object and the policy rule, and that the policy lets through what
// it lists.
func TestPolicyRefusesWhatLeavesTheEnvironmentAtLockTime(t *testing.T) {
	const env = "clusters/local/environments/dev/environment.cue"
	cases := []struct {
		name, params, envCUE, clusterCUE string
		want                             []string // substrings of the error; none: resolves
	}{
		{name: "default policy refuses a ClusterRole", params: "parameters: clusterRole: true\n",
			want: []string{"local/dev/tn", "ClusterRole tn-reader", "cluster-scoped", "environment policy kinds", env}},
		{name: "default policy refuses another namespace", params: "parameters: otherNamespace: \"dev-web\"\n",
			want: []string{"local/dev/tn", "ConfigMap dev-web/tn-elsewhere", `namespace "dev-web" is outside`, "allowed: dev-tn", "environment policy namespaces"}},
		{name: "listed namespace is allowed", params: "parameters: otherNamespace: \"dev-web\"\n",
			envCUE: "namespacePrefix: \"dev\"\npolicy: namespaces: [\"dev-web\"]\n"},
		{name: "listed cluster-scoped kind is allowed", params: "parameters: clusterRole: true\n",
			envCUE: "namespacePrefix: \"dev\"\npolicy: kinds: [\"*\", \"ClusterRole\"]\n"},
		{name: "a kinds list without * refuses other namespaced kinds", params: "",
			envCUE: "namespacePrefix: \"dev\"\npolicy: kinds: [\"Secret\"]\n",
			want:   []string{"ConfigMap dev-tn/tn-config", "kind ConfigMap is not allowed", "allowed: Secret"}},
		{name: "the cluster default applies to the environment", params: "parameters: otherNamespace: \"shared\"\n",
			clusterCUE: "policy: namespaces: [\"shared\"]\n"},
		{name: "the environment replaces the cluster default", params: "parameters: otherNamespace: \"shared\"\n",
			clusterCUE: "policy: namespaces: [\"shared\"]\n", envCUE: "namespacePrefix: \"dev\"\npolicy: namespaces: [\"other\"]\n",
			want: []string{`namespace "shared" is outside`}},
		{name: "a service account outside the namespaces", params: "",
			envCUE: "namespacePrefix: \"dev\"\npolicy: serviceAccountName: \"kube-system/admin\"\n",
			want:   []string{env, "policy.serviceAccountName", `namespace "kube-system"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			withTenantDriver(t, dir, tc.params)
			if tc.envCUE != "" {
				writeFile(t, dir, env, tc.envCUE)
			}
			if tc.clusterCUE != "" {
				data, err := os.ReadFile(filepath.Join(dir, "clusters/local/cluster.cue"))
				must(t, err)
				writeFile(t, dir, "clusters/local/cluster.cue", string(data)+tc.clusterCUE)
			}
			res, _, err := resolveDir(t, dir) // the resolution's errors
			if res == nil {
				t.Fatalf("load: %v", err)
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("want no error, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one mentioning %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			for _, r := range res.Resolved {
				if r.Instance.ID.Name == "tn" {
					t.Error("the refused deployment resolved")
				}
			}
		})
	}
}

// TestPolicyIsInTheInstanceContext pins that the resolved policy is what
// the lockfile carries (the agent enforces it), and that the default
// policy leaves no trace in it.
func TestPolicyIsInTheInstanceContext(t *testing.T) {
	dir := exampleCopy(t)
	withTenantDriver(t, dir, "")
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\npolicy: {namespaces: [\"x\"], serviceAccountName: \"deployer\"}\n")
	res, _, err := resolveDir(t, dir)
	must(t, err)
	for _, r := range res.Resolved {
		p := r.Instance.Context.Environment.Policy
		switch r.Instance.ID.Environment {
		case "dev":
			if p == nil || p.ServiceAccountName != "deployer" || len(p.Namespaces) != 1 {
				t.Errorf("%s: policy %+v, want the environment's", r.Instance.ID, p)
			}
		default:
			if p != nil {
				t.Errorf("%s: policy %+v, want none (the default)", r.Instance.ID, p)
			}
		}
	}
}
