package resolver

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// errorsByID are the resolution's errors by deployment id.
func errorsByID(res *Result) map[string]string {
	out := map[string]string{}
	for _, e := range res.Errors {
		out[e.ID.String()] = e.Error()
	}
	return out
}

// lockedIDs are the deployments a lock of res would write.
func lockedIDs(t *testing.T, res *Result, locks map[ID]*Instance) map[string]bool {
	t.Helper()
	changes, err := PlanLocks(res, locks)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, c := range changes {
		out[c.ID.String()] = true
	}
	return out
}

// TestANewDeploymentConnectingToOneFailedInTheSecondPassFailsNamingIt: a
// deployment that connects to one failing after its services were known
// (its policy, a connects cycle it is in) fails too, at its connects
// entry, naming that deployment and its error, and is not locked: as when
// the deployment it connects to fails in the first pass. Before, it was
// locked as a create with no after and that deployment's services in its
// context, though that deployment is never locked.
func TestANewDeploymentConnectingToOneFailedInTheSecondPassFailsNamingIt(t *testing.T) {
	const cn = "clusters/local/environments/dev/deployments/cn.cue"
	for _, tc := range []struct {
		name, tn, other string
		want            []string
	}{
		{name: "policy", tn: "parameters: otherNamespace: \"elsewhere\"\n",
			want: []string{`namespace "elsewhere" is outside`}},
		{name: "connects cycle", tn: "connects: [\"cy\"]\n",
			other: "driver: \"webapp\"\nappVersion: \"1.25.0\"\nconnects: [\"tn\"]\n",
			want:  []string{"connects make a cycle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			withTenantDriver(t, dir, tc.tn)
			if tc.other != "" {
				writeFile(t, dir, "clusters/local/environments/dev/deployments/cy.cue", tc.other)
			}
			writeFile(t, dir, cn, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nconnects: [\"tn\"]\n")
			res, locks, _ := resolveDir(t, dir)
			if res == nil {
				t.Fatal("the repository did not load")
			}
			failed := errorsByID(res)
			if _, ok := failed["local/dev/tn"]; !ok {
				t.Fatalf("tn resolved; the test needs it to fail (errors: %v)", failed)
			}
			msg, ok := failed["local/dev/cn"]
			if !ok {
				t.Fatalf("cn resolved, though tn, which it connects to, failed (errors: %v)", failed)
			}
			for _, want := range append([]string{cn + ":3:", "field connects[0]", `deployment "tn" failed to resolve`}, tc.want...) {
				if !strings.Contains(msg, want) {
					t.Errorf("cn's error %q does not say %q", msg, want)
				}
			}
			if got := lockedIDs(t, res, locks); got["local/dev/cn"] || got["local/dev/tn"] {
				t.Errorf("the lock writes %v, with cn or tn", got)
			}
		})
	}
}

// TestADeploymentConnectingToOneFailedInTheFirstPassNamesItsError: the
// error of a deployment whose peer failed before its services were
// known names the peer's error too, so the first thing to fix is in it.
func TestADeploymentConnectingToOneFailedInTheFirstPassNamesItsError(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/environments/dev/deployments/web.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: nope: 1\n")
	res, _, _ := resolveDir(t, dir)
	if res == nil {
		t.Fatal("the repository did not load")
	}
	msg := errorsByID(res)["local/dev/hub"]
	for _, want := range []string{"field connects[0]", `deployment "web" failed to resolve`, `has no parameter "nope"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("hub's error %q does not say %q", msg, want)
		}
	}
}

// TestTwoDeploymentsRenderingOneObjectFailTheLaterAtLock: two deployments
// of a cluster that render one object (a ClusterRole named after the
// release, which is the deployment's name; a ConfigMap in a namespace
// both policies list) cannot both run: the agent refuses the second
// apply, the object belonging to the first's release. The lock fails the
// later one, naming both deployments, their files and the object: of two
// new ones the later by id, and a new one against one locked already
// (resolved unchanged, or failing and standing on its lock), whatever
// their ids; a new deployment connecting to the one failed fails too.
// Deployments that render it alone lock as before.
func TestTwoDeploymentsRenderingOneObjectFailTheLaterAtLock(t *testing.T) {
	const (
		devTn     = "clusters/local/environments/dev/deployments/tn.cue"
		stagingTn = "clusters/local/environments/staging/deployments/tn.cue"
		aaTn      = "clusters/local/environments/aa/deployments/tn.cue"
	)
	tenant := func(params string) string { return "driver: \"tenant\"\nappVersion: \"1.0.0\"\n" + params }
	refused := func(t *testing.T, res *Result, id string, want ...string) {
		t.Helper()
		msg, ok := errorsByID(res)[id]
		if !ok {
			t.Errorf("%s resolved (errors: %v)", id, errorsByID(res))
			return
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", id, msg, w)
			}
		}
	}
	for _, tc := range []struct {
		name, params, cluster, object string
	}{
		{name: "cluster-scoped", params: "parameters: clusterRole: true\n",
			cluster: "policy: kinds: [\"*\", \"ClusterRole\"]\n", object: "ClusterRole tn-reader"},
		{name: "in a namespace both policies list", params: "parameters: otherNamespace: \"shared\"\n",
			cluster: "policy: namespaces: [\"shared\"]\n", object: "ConfigMap shared/tn-elsewhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			withTenantDriver(t, dir, tc.params)
			data, err := os.ReadFile(filepath.Join(dir, "clusters/local/cluster.cue"))
			must(t, err)
			writeFile(t, dir, "clusters/local/cluster.cue", string(data)+tc.cluster)
			writeFile(t, dir, stagingTn, tenant(tc.params))
			writeFile(t, dir, "clusters/local/environments/staging/deployments/cn.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nconnects: [\"tn\"]\n")

			// Both new: staging's, the later by id, fails, and the new
			// deployment connecting to it; dev's locks.
			res, locks, _ := resolveDir(t, dir)
			if res == nil {
				t.Fatal("the repository did not load")
			}
			refused(t, res, "local/staging/tn", stagingTn, "deployment local/staging/tn renders "+tc.object, "deployment local/dev/tn ("+devTn+")", "the agent would refuse")
			refused(t, res, "local/staging/cn", "field connects[0]", `deployment "tn" failed to resolve`, "renders "+tc.object)
			if errs := errorsByID(res); len(errs) != 2 {
				t.Errorf("errors %v, want staging/tn's and staging/cn's only", errs)
			}
			locked := lockedIDs(t, res, locks)
			if !locked["local/dev/tn"] || locked["local/staging/tn"] {
				t.Fatalf("the lock writes %v, want dev/tn and not staging/tn", locked)
			}
			changes, err := PlanLocks(res, locks)
			must(t, err)
			for _, c := range changes {
				writeFile(t, dir, c.Path(), string(c.Data))
			}

			// A new one first by id against dev's, locked and unchanged.
			writeFile(t, dir, "clusters/local/environments/aa/environment.cue", "namespacePrefix: \"aa\"\n")
			writeFile(t, dir, aaTn, tenant(tc.params))
			res, _, _ = resolveDir(t, dir)
			refused(t, res, "local/aa/tn", aaTn, "deployment local/dev/tn ("+devTn+"), locked already,")
			refused(t, res, "local/staging/tn", "deployment local/dev/tn")
			if _, ok := errorsByID(res)["local/dev/tn"]; ok {
				t.Errorf("dev/tn, locked, fails: %v", errorsByID(res))
			}

			// dev's fails now and stands on its lock: it keeps the object.
			writeFile(t, dir, devTn, tenant(tc.params+"parameters: nope: 1\n"))
			res, _, _ = resolveDir(t, dir)
			refused(t, res, "local/aa/tn", "deployment local/dev/tn")
			refused(t, res, "local/staging/tn", "deployment local/dev/tn")

			// Without dev's, the two new ones: aa's first.
			must(t, os.Remove(filepath.Join(dir, devTn)))
			must(t, os.Remove(filepath.Join(dir, "locks/local/dev/tn.lock.yaml")))
			res, _, _ = resolveDir(t, dir)
			refused(t, res, "local/staging/tn", "deployment local/aa/tn ("+aaTn+")")
			if errs := errorsByID(res); len(errs) != 2 {
				t.Errorf("errors %v, want staging/tn's and staging/cn's only", errs)
			}

			// Both locked, only staging's lock rendering the object; aa,
			// first by id, now renders it too: aa is refused, the object
			// being staging's release's already.
			must(t, os.RemoveAll(filepath.Join(dir, "clusters/local/environments/staging/deployments/cn.cue")))
			writeFile(t, dir, aaTn, tenant(""))
			res, locks, _ = resolveDir(t, dir)
			if errs := errorsByID(res); len(errs) != 0 {
				t.Fatalf("aa/tn without the object beside staging/tn with it: errors %v", errs)
			}
			changes, err = PlanLocks(res, locks)
			must(t, err)
			for _, c := range changes {
				writeFile(t, dir, c.Path(), string(c.Data))
			}
			writeFile(t, dir, aaTn, tenant(tc.params))
			res, _, _ = resolveDir(t, dir)
			refused(t, res, "local/aa/tn", aaTn, "deployment local/staging/tn ("+stagingTn+")")
			if _, ok := errorsByID(res)["local/staging/tn"]; ok {
				t.Errorf("staging/tn, whose lock renders the object, fails: %v", errorsByID(res))
			}
		})
	}
}

// TestAnObjectMovingToAnotherDeploymentRunsAfterTheOneGivingItUp: an
// object one deployment's lock renders outside its namespace (a
// ClusterRole; a ConfigMap in a namespace both policies list) that, in
// one lock, that deployment stops rendering (or is deleted) and another
// starts rendering was locked with no order: the taker's task could run
// first, be refused the object (it is the giver's release's until the
// giver's change prunes it) and fail once its step's time was up. The
// taker now runs after the giver's change. Two deployments trading
// objects in one lock would wait for each other: refused, naming both.
func TestAnObjectMovingToAnotherDeploymentRunsAfterTheOneGivingItUp(t *testing.T) {
	const (
		stagingTn = "clusters/local/environments/staging/deployments/tn.cue"
		aaTn      = "clusters/local/environments/aa/deployments/tn.cue"
		role      = "parameters: clusterRole: true\n"
		elsewhere = "parameters: otherNamespace: \"shared\"\n"
	)
	tenant := func(params string) string { return "driver: \"tenant\"\nappVersion: \"1.0.0\"\n" + params }
	lockAll := func(t *testing.T, dir string) map[ID]*Instance {
		t.Helper()
		res, locks, _ := resolveDir(t, dir)
		if res == nil {
			t.Fatal("the repository did not load")
		}
		if errs := errorsByID(res); len(errs) != 0 {
			t.Fatalf("errors %v", errs)
		}
		changes, err := PlanLocks(res, locks)
		must(t, err)
		out := map[ID]*Instance{}
		for _, c := range changes {
			writeFile(t, dir, c.Path(), string(c.Data))
			out[c.ID] = c.Next
		}
		return out
	}
	setup := func(t *testing.T) string {
		dir := exampleCopy(t)
		withTenantDriver(t, dir, "")
		must(t, os.Remove(filepath.Join(dir, "clusters/local/environments/dev/deployments/tn.cue")))
		data, err := os.ReadFile(filepath.Join(dir, "clusters/local/cluster.cue"))
		must(t, err)
		writeFile(t, dir, "clusters/local/cluster.cue", string(data)+"policy: kinds: [\"*\", \"ClusterRole\"]\npolicy: namespaces: [\"shared\"]\n")
		writeFile(t, dir, "clusters/local/environments/aa/environment.cue", "namespacePrefix: \"aa\"\n")
		writeFile(t, dir, stagingTn, tenant(role))
		writeFile(t, dir, aaTn, tenant(""))
		lockAll(t, dir)
		return dir
	}
	staging, aa := ID{Cluster: "local", Environment: "staging", Name: "tn"}, ID{Cluster: "local", Environment: "aa", Name: "tn"}

	t.Run("staging stops rendering it, aa starts", func(t *testing.T) {
		dir := setup(t)
		writeFile(t, dir, stagingTn, tenant(""))
		writeFile(t, dir, aaTn, tenant(role))
		next := lockAll(t, dir)
		if next[staging] == nil || next[aa] == nil {
			t.Fatalf("locked %v, want both", next)
		}
		if want := []string{AfterRef(staging, next[staging].Sequence)}; !slices.Equal(next[aa].After, want) {
			t.Errorf("aa/tn after %v, want %v", next[aa].After, want)
		}
		if len(next[staging].After) != 0 {
			t.Errorf("staging/tn after %v, want nothing", next[staging].After)
		}
	})
	t.Run("staging is deleted, aa starts rendering it", func(t *testing.T) {
		dir := setup(t)
		must(t, os.Remove(filepath.Join(dir, stagingTn)))
		writeFile(t, dir, aaTn, tenant(role))
		next := lockAll(t, dir)
		if next[staging] == nil || !next[staging].Tombstone() {
			t.Fatalf("staging/tn locked %+v, want its tombstone", next[staging])
		}
		if want := []string{AfterRef(staging, next[staging].Sequence)}; !slices.Equal(next[aa].After, want) {
			t.Errorf("aa/tn after %v, want %v (its tombstone)", next[aa].After, want)
		}
	})
	t.Run("an unrelated change waits for nothing", func(t *testing.T) {
		dir := setup(t)
		writeFile(t, dir, stagingTn, tenant(role+"parameters: data: \"two\"\n"))
		writeFile(t, dir, aaTn, tenant(elsewhere))
		next := lockAll(t, dir)
		if len(next[aa].After) != 0 || len(next[staging].After) != 0 {
			t.Errorf("after: aa %v, staging %v; want nothing", next[aa].After, next[staging].After)
		}
	})
	t.Run("a move against the waves' order", func(t *testing.T) {
		dir := setup(t)
		writeFile(t, dir, "styrmin.cue", "rollout: {order: [\"aa\", \"staging\"]}\n")
		lockAll(t, dir)
		writeFile(t, dir, stagingTn, tenant(""))
		writeFile(t, dir, aaTn, tenant(role))
		next := lockAll(t, dir)
		if want := AfterRef(staging, next[staging].Sequence); !slices.Contains(next[aa].After, want) || next[aa].Rollout != nil {
			t.Errorf("aa/tn after %v in wave %+v; want after %s and in no wave (it runs after its giver, whatever wave that is in)", next[aa].After, next[aa].Rollout, want)
		}
	})
	t.Run("the giver refused for another object", func(t *testing.T) {
		dir := setup(t)
		bbTn := "clusters/local/environments/bb/deployments/tn.cue"
		writeFile(t, dir, "clusters/local/environments/bb/environment.cue", "namespacePrefix: \"bb\"\n")
		writeFile(t, dir, bbTn, tenant(elsewhere))
		lockAll(t, dir)
		// Staging gives the role up for bb's ConfigMap (refused: bb's
		// lock holds it) and so keeps its lock and the role: aa may not
		// take it.
		writeFile(t, dir, stagingTn, tenant(elsewhere))
		writeFile(t, dir, aaTn, tenant(role))
		res, _, _ := resolveDir(t, dir)
		errs := errorsByID(res)
		if !strings.Contains(errs["local/staging/tn"], "deployment local/bb/tn") ||
			!strings.Contains(errs["local/aa/tn"], "renders ClusterRole tn-reader, which the lock of deployment local/staging/tn renders: local/staging/tn failed to resolve") {
			t.Fatalf("errors %v; want staging refused for bb's ConfigMap and aa for staging's role", errs)
		}
	})
	t.Run("three deployments moving objects around", func(t *testing.T) {
		dir := setup(t)
		bbTn := "clusters/local/environments/bb/deployments/tn.cue"
		data, err := os.ReadFile(filepath.Join(dir, "clusters/local/cluster.cue"))
		must(t, err)
		writeFile(t, dir, "clusters/local/cluster.cue", strings.Replace(string(data), `policy: namespaces: ["shared"]`, `policy: namespaces: ["shared", "shared2"]`, 1))
		writeFile(t, dir, "clusters/local/environments/bb/environment.cue", "namespacePrefix: \"bb\"\n")
		other := "parameters: otherNamespace: \"shared2\"\n"
		writeFile(t, dir, aaTn, tenant(elsewhere))
		writeFile(t, dir, bbTn, tenant(other))
		lockAll(t, dir)
		// aa takes staging's role, staging bb's ConfigMap, bb aa's.
		writeFile(t, dir, aaTn, tenant(role))
		writeFile(t, dir, stagingTn, tenant(other))
		writeFile(t, dir, bbTn, tenant(elsewhere))
		res, locks, _ := resolveDir(t, dir)
		if errs := errorsByID(res); len(errs) != 0 {
			t.Fatalf("errors %v", errs)
		}
		_, err = PlanLocks(res, locks)
		if err == nil || !strings.Contains(err.Error(), "wait for each other in a cycle") ||
			!strings.Contains(err.Error(), "locks/local/aa/tn.lock.yaml") || !strings.Contains(err.Error(), "locks/local/bb/tn.lock.yaml") || !strings.Contains(err.Error(), "locks/local/staging/tn.lock.yaml") {
			t.Fatalf("a cycle of three moves: %v; want it refused naming the three lockfiles", err)
		}
	})
	t.Run("two deployments trading objects", func(t *testing.T) {
		dir := setup(t)
		writeFile(t, dir, aaTn, tenant(elsewhere))
		lockAll(t, dir)
		writeFile(t, dir, stagingTn, tenant(elsewhere))
		writeFile(t, dir, aaTn, tenant(role))
		res, locks, _ := resolveDir(t, dir)
		if errs := errorsByID(res); len(errs) != 0 {
			t.Fatalf("errors %v", errs)
		}
		_, err := PlanLocks(res, locks)
		if err == nil || !strings.Contains(err.Error(), "locks/local/staging/tn.lock.yaml: deployment local/staging/tn takes ConfigMap shared/tn-elsewhere from deployment local/aa/tn, which takes ClusterRole tn-reader from it") ||
			!strings.Contains(err.Error(), "in two commits") || strings.Count(err.Error(), "takes") != 2 {
			t.Fatalf("a trade in one lock: %v; want it refused, naming both once", err)
		}
	})
}
