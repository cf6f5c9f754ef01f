package resolver

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
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
		{name: "listed namespace is allowed", params: "parameters: otherNamespace: \"dev-shared\"\n",
			envCUE: "namespacePrefix: \"dev\"\npolicy: namespaces: [\"dev-shared\"]\n"},
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
		{name: "a system namespace in the environment's policy", params: "",
			envCUE: "namespacePrefix: \"dev\"\npolicy: namespaces: [\"dev-shared\", \"kube-system\"]\n",
			want:   []string{env + ":2:", "field policy.namespaces[1]", `namespace "kube-system" is reserved for the cluster or the agent`}},
		{name: "the agent's namespace in the cluster's default policy", params: "",
			clusterCUE: "policy: namespaces: [\"styrmin-system\"]\n",
			want:       []string{"clusters/local/cluster.cue:", "field policy.namespaces[0]", `namespace "styrmin-system" is reserved for the cluster or the agent`}},
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

// TestDeclaredPolicyIsWhatALockRecords: DeclaredPolicy gives what the
// resolver records in an instance's context, for an environment's
// deployment (the environment's policy over the cluster's) and for an
// ingress controller (its own, only when the cluster declares one).
func TestDeclaredPolicyIsWhatALockRecords(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress("policy: {namespaces: [\"shared\"], kinds: [\"*\"]}"))
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\npolicy: namespaces: [\"dev-shared\"]\n")
	res, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	fsys := os.DirFS(dir)
	// requireRecorded checks every instance of res against its files and
	// returns how many are internal.
	requireRecorded := func(res *Result) int {
		t.Helper()
		internal := 0
		for _, r := range res.Resolved {
			got, err := NewLoader(0).DeclaredPolicy(fsys, r.Instance.ID, r.Instance.Internal)
			if err != nil {
				t.Fatalf("%s: %v", r.Instance.ID, err)
			}
			if want := r.Instance.Context.Environment.Policy; !got.Equal(want) {
				t.Errorf("%s: declared %+v, recorded %+v", r.Instance.ID, got, want)
			}
			if r.Instance.Internal != "" {
				internal++
			}
		}
		return internal
	}
	requireRecorded(res)
	dev, err := NewLoader(0).DeclaredPolicy(fsys, ID{Cluster: "local", Environment: "dev", Name: "web"}, "")
	if err != nil || !dev.Equal(&drivers.Policy{Namespaces: []string{"dev-shared"}, Kinds: []string{"*"}}) {
		t.Errorf("dev's policy: %+v, %v", dev, err)
	}
	if _, err := NewLoader(0).DeclaredPolicy(fsys, ID{Cluster: "local", Environment: "dev", Name: "ingress"}, InternalIngress); err == nil || !strings.Contains(err.Error(), "clusters/local/cluster.cue: field ingress: missing") {
		t.Errorf("an ingress controller of a cluster that declares none: %v", err)
	}
	if _, err := NewLoader(0).DeclaredPolicy(fsys, ID{Cluster: "local", Environment: "gone", Name: "web"}, ""); err == nil {
		t.Errorf("the policy of an environment that does not exist: no error")
	}

	// With an ingress controller for the cluster and one for dev.
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress("policy: {namespaces: [\"shared\"], kinds: [\"*\"]}\ningress: driver: \"ingress-nginx\"\ndedicatedIngress: true"))
	res, _, err = resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if internal := requireRecorded(res); internal < 2 {
		t.Fatalf("%d ingress controllers resolved, want the cluster's and dev's", internal)
	}
}

// TestAPolicyNamespaceThatIsADeploymentsOwnIsRefused pins that
// policy.namespaces listing a deployment's own namespace (a sibling's,
// another environment's, an ingress controller's) fails every deployment
// the policy applies to, at plan and lock, with a ConfigError in the file
// and at the field that lists it, naming the deployment that owns the
// namespace; nothing is locked for them. Allowed there, their releases
// would take over that deployment's objects (in a release's own namespace
// no ownership is checked, and every release applies as the same field
// manager) and delete them when uninstalled.
func TestAPolicyNamespaceThatIsADeploymentsOwnIsRefused(t *testing.T) {
	const (
		devEnv  = "clusters/local/environments/dev/environment.cue"
		cluster = "clusters/local/cluster.cue"
	)
	for _, tc := range []struct {
		name string
		// base is cluster.cue as first locked ("": the example's);
		// clusterCUE and envCUE are the change.
		base, clusterCUE, envCUE string
		refused                  []ID
		want                     []string
	}{
		{name: "another environment's deployment", envCUE: "namespacePrefix: \"dev\"\npolicy: namespaces: [\"dev-shared\", \"staging-web\"]\n",
			refused: []ID{{"local", "dev", "web"}, {"local", "dev", "hub"}},
			want:    []string{devEnv + ":2:", "field policy.namespaces[1]", `namespace "staging-web" belongs to local/staging/web (clusters/local/environments/staging/deployments/web.yaml)`, "take over its objects"}},
		{name: "a sibling", envCUE: "namespacePrefix: \"dev\"\npolicy: namespaces: [\"dev-hub\"]\n",
			refused: []ID{{"local", "dev", "web"}, {"local", "dev", "hub"}},
			want:    []string{devEnv + ":2:", "field policy.namespaces[0]", `namespace "dev-hub" belongs to local/dev/hub`}},
		{name: "the shared ingress controller's, in the cluster's default", base: withIngress("ingress: driver: \"ingress-nginx\""),
			clusterCUE: withIngress("ingress: driver: \"ingress-nginx\"\npolicy: namespaces: [\"styrmin-ingress\"]"),
			refused:    []ID{{"local", "dev", "web"}, {"local", "staging", "web"}},
			want:       []string{cluster + ":", "field policy.namespaces[0]", `namespace "styrmin-ingress" belongs to the ingress controller local/styrmin.cluster/styrmin.ingress (clusters/local/cluster.cue)`}},
		{name: "an environment's ingress controller's", base: withIngress("ingress: driver: \"ingress-nginx\"\ndedicatedIngress: true"),
			envCUE:  "namespacePrefix: \"dev\"\npolicy: namespaces: [\"staging-styrmin-ingress\"]\n",
			refused: []ID{{"local", "dev", "web"}},
			want:    []string{devEnv + ":2:", "field policy.namespaces[0]", `namespace "staging-styrmin-ingress" belongs to the ingress controller local/staging/styrmin.ingress`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			if tc.base != "" {
				writeFile(t, dir, cluster, tc.base)
			}
			lockDirInto(t, dir)
			if tc.clusterCUE != "" {
				writeFile(t, dir, cluster, tc.clusterCUE)
			}
			if tc.envCUE != "" {
				writeFile(t, dir, devEnv, tc.envCUE)
			}
			before := snapshot(t, dir)
			res, locks, _ := resolveDir(t, dir)
			if res == nil {
				t.Fatal("the repository did not load")
			}
			errs := map[ID]error{}
			for _, e := range res.Errors {
				errs[e.ID] = e.Err
			}
			for _, id := range tc.refused {
				var ce *ConfigError
				if !errors.As(errs[id], &ce) {
					t.Fatalf("%s: error %v, want a ConfigError", id, errs[id])
				}
				for _, w := range tc.want {
					if !strings.Contains(ce.Error(), w) {
						t.Errorf("%s: error %q does not mention %q", id, ce, w)
					}
				}
			}
			changes, err := PlanLocks(res, locks)
			must(t, err)
			for _, c := range changes {
				if slices.Contains(tc.refused, c.ID) {
					t.Errorf("%s locked under a policy into another deployment's namespace", c.ID)
				}
			}
			if snapshot(t, dir) != before {
				t.Error("bad input changed the repository")
			}
		})
	}
}

// TestADeclaredInstanceMustRunWhereTheConfigurationPlacesIt pins that
// the agent's check of a lockfile against the configuration at its lock
// commit (DeclaredInstancePolicy) refuses an application instance that
// records another namespace than its environment's prefix and its name
// give it, or another release name, naming the environment's file: the
// agent creates (or adopts) the namespace a lockfile names, and enforces
// what it records, so a lockfile written by hand could otherwise make
// another tenant's namespace a deployment's own.
func TestADeclaredInstanceMustRunWhereTheConfigurationPlacesIt(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"team-a\"\n")
	res, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	fsys := os.DirFS(dir)
	var web *Instance
	for _, r := range res.Resolved {
		if _, err := NewLoader(0).DeclaredInstancePolicy(fsys, r.Instance); err != nil {
			t.Errorf("%s, as locked: %v", r.Instance.ID, err)
		}
		if r.Instance.ID.Environment == "dev" && r.Instance.Internal == "" && web == nil {
			web = r.Instance
		}
	}
	if web == nil {
		t.Fatal("no application deployment in dev")
	}
	if got, want := web.Context.Deployment.Namespace, "team-a-"+web.ID.Name; got != want {
		t.Fatalf("%s locked in %q, want %q", web.ID, got, want)
	}
	for _, tc := range []struct {
		name string
		edit func(c *drivers.Context)
		want string
	}{
		{"another tenant's namespace", func(c *drivers.Context) { c.Deployment.Namespace = "cert-manager" },
			`clusters/local/environments/dev/environment.cue: field namespacePrefix: a lockfile records deployment local/dev/` + web.ID.Name + ` in namespace "cert-manager"; the configuration runs it in "team-a-` + web.ID.Name + `"`},
		{"a sibling's namespace", func(c *drivers.Context) { c.Deployment.Namespace = "team-a-other" }, `in namespace "team-a-other"`},
		{"another release name", func(c *drivers.Context) { c.Deployment.Name = "other" }, `records the release name "other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := *web
			ctx := *web.Context
			tc.edit(&ctx)
			in.Context = &ctx
			_, err := NewLoader(0).DeclaredInstancePolicy(fsys, &in)
			if _, ok := errors.AsType[*ConfigError](err); !ok || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a ConfigError containing %q", err, tc.want)
			}
		})
	}
}
