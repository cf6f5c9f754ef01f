package resolver

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const devHub = "clusters/local/environments/dev/deployments/hub.cue"

// changeOf is the lock change of deployment name in dev.
func changeOf(t *testing.T, changes []LockChange, name string) LockChange {
	t.Helper()
	for _, c := range changes {
		if c.ID == (ID{"local", "dev", name}) {
			return c
		}
	}
	t.Fatalf("no change of local/dev/%s in %d changes", name, len(changes))
	return LockChange{}
}

// TestNewDeploymentRunsAfterWhatItConnectsTo pins the create order: a new
// deployment's instance runs after the instances of the deployments it
// connects to (in the same lock, or their current one), an update after
// nothing, a re-created deployment after its peers again; the lockfile
// records it.
func TestNewDeploymentRunsAfterWhatItConnectsTo(t *testing.T) {
	dir := exampleCopy(t)
	first := lockDirInto(t, dir)
	if got := changeOf(t, first, "hub").Next.After; !slices.Equal(got, []string{"local/dev/web@1"}) {
		t.Errorf("the new hub runs after %v, want [local/dev/web@1]", got)
	}
	if got := changeOf(t, first, "web").Next.After; got != nil {
		t.Errorf("web connects to nothing but runs after %v", got)
	}
	b, err := os.ReadFile(filepath.Join(dir, "locks/local/dev/hub.lock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if in, err := DecodeLock("locks/local/dev/hub.lock.yaml", b); err != nil || !slices.Equal(in.After, []string{"local/dev/web@1"}) {
		t.Fatalf("the hub's lockfile: after %v, %v", in, err)
	}

	writeFile(t, dir, devHub, hubWith(`connects: ["web"]`+"\nparameters: workers: 3"))
	if got := changeOf(t, lockDirInto(t, dir), "hub").Next.After; got != nil {
		t.Errorf("an update of the hub runs after %v, want nothing", got)
	}

	// Web moves on, the hub goes and comes back: after web's current one.
	writeFile(t, dir, "clusters/local/environments/dev/deployments/web.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	lockDirInto(t, dir)
	if err := os.Remove(filepath.Join(dir, devHub)); err != nil {
		t.Fatal(err)
	}
	lockDirInto(t, dir)
	writeFile(t, dir, devHub, hubWith(`connects: ["web"]`))
	if got := changeOf(t, lockDirInto(t, dir), "hub").Next.After; !slices.Equal(got, []string{"local/dev/web@2"}) {
		t.Errorf("the re-created hub runs after %v, want [local/dev/web@2]", got)
	}
}

// TestConnectsCycleIsAnErrorNamingTheFiles: deployments that connect to
// each other cannot be created in order; each of them is refused, naming
// the field and every file of the cycle, and nothing else is.
func TestConnectsCycleIsAnErrorNamingTheFiles(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/environments/dev/deployments/web.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nconnects: [\"hub\"]\n")
	res, _, err := resolveDir(t, dir)
	if res == nil {
		t.Fatal(err)
	}
	failed := map[string]string{}
	for _, e := range res.Errors {
		failed[e.ID.String()] = e.Error()
	}
	for _, id := range []string{"local/dev/web", "local/dev/hub"} {
		msg, ok := failed[id]
		if !ok {
			t.Errorf("%s resolved despite the cycle", id)
			continue
		}
		for _, want := range []string{"connects", "cycle", "deployments/web.cue", "deployments/hub.cue"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q does not say %q", id, msg, want)
			}
		}
	}
	if len(failed) != 2 {
		t.Errorf("%d deployments failed, want the two of the cycle: %v", len(failed), failed)
	}
}

// TestLockfileWithABadAfterIsRefused: an after entry that is no
// ID@SEQUENCE, names the deployment itself or another cluster is refused
// by name of the field, even with a matching checksum.
func TestLockfileWithABadAfterIsRefused(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	path := "locks/local/dev/hub.lock.yaml"
	b, err := os.ReadFile(filepath.Join(dir, path))
	if err != nil {
		t.Fatal(err)
	}
	in, err := DecodeLock(path, b)
	if err != nil {
		t.Fatal(err)
	}
	for after, want := range map[string]string{
		"local/dev/web":     "field after[0]: \"local/dev/web\": expected CLUSTER/ENVIRONMENT/NAME@SEQUENCE",
		"local/dev/web@0":   "expected a positive sequence",
		"local/web@1":       "expected CLUSTER/ENVIRONMENT/NAME",
		"local/dev/hub@1":   "cannot run after its own deployment",
		"remote/dev/web@1":  "expected a deployment of cluster local",
		"local/dev/web@two": "expected a positive sequence",
	} {
		bad := *in
		bad.After = []string{after}
		data, err := EncodeLock(&bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeLock(path, data); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), path) {
			t.Errorf("after %q: %v, want %q naming the file", after, err, want)
		}
	}
}
