package resolver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestADeploymentDoesNotMoveToAnotherNamespace pins that changing an
// environment's namespacePrefix under deployments that are locked fails
// them with a ConfigError in the environment file at namespacePrefix,
// naming both namespaces, and locks nothing for them: the agent would
// install each afresh in the new namespace and leave the old one's
// release running with no lock to delete it. A deployment deleted first
// (its lock a tombstone) is added back in the new namespace, and one
// never locked is placed there at once.
func TestADeploymentDoesNotMoveToAnotherNamespace(t *testing.T) {
	const devEnv = "clusters/local/environments/dev/environment.cue"
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	env, err := os.ReadFile(filepath.Join(dir, devEnv))
	must(t, err)
	moved := strings.Replace(string(env), `namespacePrefix: "dev"`, `namespacePrefix: "develop"`, 1)
	if moved == string(env) {
		t.Fatal("the example's dev environment sets no namespacePrefix \"dev\"")
	}
	writeFile(t, dir, devEnv, moved)
	// A deployment never locked moves nothing.
	writeFile(t, dir, "clusters/local/environments/dev/deployments/fresh.cue",
		readExample(t, dir, "clusters/local/environments/dev/deployments/web.cue"))

	before := snapshot(t, dir)
	res, locks, _ := resolveDir(t, dir)
	if res == nil {
		t.Fatal("the repository did not load")
	}
	web := ID{Cluster: "local", Environment: "dev", Name: "web"}
	var got error
	for _, e := range res.Errors {
		if e.ID == web {
			got = e.Err
		}
	}
	var ce *ConfigError
	if !errors.As(got, &ce) {
		t.Fatalf("%s: error %v, want a ConfigError", web, got)
	}
	for _, w := range []string{devEnv + ":1:", "field namespacePrefix", `from namespace "dev-web"`, `to "develop-web"`, "tombstone"} {
		if !strings.Contains(ce.Error(), w) {
			t.Errorf("error %q does not mention %q", ce, w)
		}
	}
	if _, ok := res.Get(web); ok {
		t.Errorf("%s resolved in its new namespace", web)
	}
	fresh, ok := res.Get(ID{Cluster: "local", Environment: "dev", Name: "fresh"})
	if !ok {
		t.Fatalf("a deployment never locked failed: %v", res.Err())
	}
	if ns := fresh.Instance.Context.Deployment.Namespace; ns != "develop-fresh" {
		t.Errorf("a new deployment's namespace %q, want develop-fresh", ns)
	}
	changes, err := PlanLocks(res, locks)
	must(t, err)
	for _, c := range changes {
		if c.ID == web {
			t.Errorf("%s locked: %s", web, c.Data)
		}
	}
	if snapshot(t, dir) != before {
		t.Error("bad input changed the repository")
	}

	// Deleted (a tombstone), then added back: placed in the new namespace.
	webFile := filepath.Join(dir, "clusters/local/environments/dev/deployments/web.cue")
	webSrc, err := os.ReadFile(webFile)
	must(t, err)
	must(t, os.Remove(webFile))
	must(t, os.Remove(filepath.Join(dir, "clusters/local/environments/dev/deployments/hub.cue")))
	lockDirInto(t, dir)
	writeFile(t, dir, "clusters/local/environments/dev/deployments/web.cue", string(webSrc))
	res, _, _ = resolveDir(t, dir)
	r, ok := res.Get(web)
	if !ok {
		t.Fatalf("%s, added back after its tombstone, failed: %v", web, res.Err())
	}
	if ns := r.Instance.Context.Deployment.Namespace; ns != "develop-web" {
		t.Errorf("added back in namespace %q, want develop-web", ns)
	}
}

func readExample(t *testing.T, dir, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	must(t, err)
	return string(b)
}

// TestANamespaceARefusedMoveKeepsIsNoOtherDeployments: the namespace a
// deployment refused a move keeps (its lock's) is still its own: another
// deployment that the configuration now places there (an environment
// taking the old prefix) fails naming it, where it was locked into a
// namespace the agent finds taken.
func TestANamespaceARefusedMoveKeepsIsNoOtherDeployments(t *testing.T) {
	const devEnv = "clusters/local/environments/dev/environment.cue"
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	env := readExample(t, dir, devEnv)
	writeFile(t, dir, devEnv, strings.Replace(env, `namespacePrefix: "dev"`, `namespacePrefix: "develop"`, 1))
	writeFile(t, dir, "clusters/local/environments/qa/environment.cue", "namespacePrefix: \"dev\"\n")
	writeFile(t, dir, "clusters/local/environments/qa/deployments/web.cue", readExample(t, dir, "clusters/local/environments/dev/deployments/web.cue"))
	res, _, _ := resolveDir(t, dir)
	if res == nil {
		t.Fatal("the repository did not load")
	}
	errs := map[ID]error{}
	for _, e := range res.Errors {
		errs[e.ID] = e.Err
	}
	qa := ID{Cluster: "local", Environment: "qa", Name: "web"}
	if err := errs[qa]; err == nil || !strings.Contains(err.Error(), `namespace "dev-web" is also the namespace of local/dev/web`) {
		t.Fatalf("%s: %v, want an error naming local/dev/web, which keeps dev-web", qa, err)
	}
	dev := ID{Cluster: "local", Environment: "dev", Name: "web"}
	if err := errs[dev]; err == nil || !strings.Contains(err.Error(), "would move from namespace") {
		t.Fatalf("%s: %v, want its move refused", dev, err)
	}
}

// TestANewDeploymentIsRefusedTheNamespaceOfOneTheLockDeletes pins that a
// deployment added in the namespace of one whose configuration is gone
// but whose lock is no tombstone yet (an environment folder renamed, its
// namespacePrefix kept) fails with a ConfigError in its own file naming
// that deployment, its lockfile and the way out (delete first, add it in
// a later commit), while the lock writes the other's tombstone: locked
// together, the tombstone's task and the new deployment's create would
// run in one namespace unordered, and the agent names a task after the
// deployment's name and sequence only, so the create (web-1 in dev-web)
// would be the deleted deployment's old task and never run. Locked after
// the tombstone, the new deployment takes the namespace.
func TestANewDeploymentIsRefusedTheNamespaceOfOneTheLockDeletes(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	envs := filepath.Join(dir, "clusters", "local", "environments")
	must(t, os.Rename(filepath.Join(envs, "dev"), filepath.Join(envs, "qa")))
	if env := readExample(t, dir, "clusters/local/environments/qa/environment.cue"); !strings.Contains(env, `namespacePrefix: "dev"`) {
		t.Fatal("the example's dev environment sets no namespacePrefix \"dev\"")
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
	for _, name := range []string{"web", "hub"} {
		id := ID{Cluster: "local", Environment: "qa", Name: name}
		old := ID{Cluster: "local", Environment: "dev", Name: name}
		var ce *ConfigError
		if !errors.As(errs[id], &ce) {
			t.Fatalf("%s: error %v, want a ConfigError", id, errs[id])
		}
		for _, w := range []string{
			"clusters/local/environments/qa/deployments/" + name + ".",
			`namespace "dev-` + name + `" is also the namespace of local/dev/` + name + " (" + old.LockPath() + ", sequence 1), which is being deleted",
			"lock local/dev/" + name + "'s deletion alone and add local/qa/" + name + " in a later commit",
		} {
			if !strings.Contains(ce.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", id, ce, w)
			}
		}
		if errs[old] != nil {
			t.Errorf("%s, being deleted, has an error: %v", old, errs[old])
		}
	}
	changes, err := PlanLocks(res, locks)
	must(t, err)
	tombstones := 0
	for _, c := range changes {
		switch {
		case c.ID.Environment == "qa":
			t.Errorf("%s locked in the namespace of a deployment the lock deletes", c.ID)
		case c.ID.Environment == "dev" && c.Next.Tombstone():
			tombstones++
		}
	}
	if tombstones != 2 {
		t.Errorf("%d tombstones for dev, want 2 (web and hub): %v", tombstones, changes)
	}
	if snapshot(t, dir) != before {
		t.Error("bad input changed the repository")
	}

	// The deletion locked first, the new deployments take the namespaces.
	for _, c := range changes {
		writeFile(t, dir, c.Path(), string(c.Data))
	}
	res, _, err = resolveDir(t, dir)
	if err != nil {
		t.Fatalf("after the tombstones: %v", err)
	}
	r, ok := res.Get(ID{Cluster: "local", Environment: "qa", Name: "web"})
	if !ok {
		t.Fatal("local/qa/web did not resolve after the tombstones")
	}
	if ns := r.Instance.Context.Deployment.Namespace; ns != "dev-web" {
		t.Errorf("local/qa/web in namespace %q, want dev-web", ns)
	}
}
