package resolver

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
)

// withHostDriver adds driver hostapp 1.0.0 to dir: webapp 1.1.0 whose
// Ingress host is parameter host when set (the driver's own otherwise),
// and whose chart quotes it (a wildcard is YAML's alias otherwise).
func withHostDriver(t *testing.T, dir string) {
	t.Helper()
	src := filepath.Join(dir, "drivers", "webapp", "1.1.0")
	dst := filepath.Join(dir, "drivers", "hostapp", "1.0.0")
	must(t, os.CopyFS(dst, os.DirFS(src)))
	data, err := os.ReadFile(filepath.Join(dst, "driver.cue"))
	must(t, err)
	spec := strings.NewReplacer(
		`name:        "webapp"`, `name:        "hostapp"`,
		`version:     "1.1.0"`, `version:     "1.0.0"`,
		`	size: *"small" | "medium" | "large"`, "\tsize: *\"small\" | \"medium\" | \"large\"\n\thost: *\"\" | string\n\tpath: *\"/\" | string",
		`		host:      "\(context.deployment.name).\(context.environment.name).\(context.cluster.domain)"`,
		`		host:      [if context.parameters.host != "" {context.parameters.host}, "\(context.deployment.name).\(context.environment.name).\(context.cluster.domain)"][0]`+"\n\t\tpath: context.parameters.path",
	).Replace(string(data))
	writeFile(t, dir, "drivers/hostapp/1.0.0/driver.cue", spec)
	tpl := filepath.Join(dst, "chart", "templates", "ingress.yaml")
	data, err = os.ReadFile(tpl)
	must(t, err)
	tplText := strings.NewReplacer("ingress.host }}", "ingress.host | quote }}", "- path: /\n", "- path: {{ .Values.ingress.path | quote }}\n").Replace(string(data))
	must(t, os.WriteFile(tpl, []byte(tplText), 0o644))
}

// site is a hostapp deployment with its Ingress on, at host ("" the
// driver's), and more parameters.
func site(host, more string) string {
	s := "driver: \"hostapp\"\nappVersion: \"1.25.0\"\nparameters: ingress: true\n" + more
	if host != "" {
		s += "parameters: host: \"" + host + "\"\n"
	}
	return s
}

// TestTwoDeploymentsClaimingOneHostFailTheLaterAtLock: a driver taking
// its host from a parameter let dev's and staging's deployments render
// Ingresses of one host on one class; the ingress controller merged them
// and split the traffic, both Ready. The lock now fails the later, naming
// both files, the host and what was expected: of two new ones the later
// by id; against one whose lock claims it, the newcomer, whatever its id;
// a wildcard over the host too. A change that keeps its hosts renders
// only itself and its lock; a host moved from a deployment the lock
// deletes runs after that deletion.
func TestTwoDeploymentsClaimingOneHostFailTheLaterAtLock(t *testing.T) {
	const (
		devSite     = "clusters/local/environments/dev/deployments/site.cue"
		stagingSite = "clusters/local/environments/staging/deployments/site.cue"
		aaSite      = "clusters/local/environments/aa/deployments/site.cue"
		devHost     = "site.dev.local.styrmin.dev"
	)
	refused := func(t *testing.T, res *Result, id string, want ...string) {
		t.Helper()
		msg, ok := errorsByID(res)[id]
		if !ok {
			t.Fatalf("%s resolved (errors: %v)", id, errorsByID(res))
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", id, msg, w)
			}
		}
	}
	dir := exampleCopy(t)
	withHostDriver(t, dir)
	writeFile(t, dir, devSite, site("", ""))
	writeFile(t, dir, stagingSite, site(devHost, ""))

	res, locks, _ := resolveDir(t, dir)
	if res == nil {
		t.Fatal("the repository did not load")
	}
	refused(t, res, "local/staging/site", stagingSite, devSite, "host "+devHost+" path / (ingress class nginx)",
		"deployment local/dev/site", "expected a host and path no other deployment of cluster local claims")
	if errs := errorsByID(res); len(errs) != 1 {
		t.Errorf("errors %v, want staging/site's only", errs)
	}
	if locked := lockedIDs(t, res, locks); !locked["local/dev/site"] || locked["local/staging/site"] {
		t.Fatalf("the lock writes %v, want dev/site and not staging/site", locked)
	}

	// Locked: a new deployment first by id is refused dev's host, and
	// a wildcard over it.
	writeFile(t, dir, stagingSite, site("site.staging.local.styrmin.dev", ""))
	lockDirInto(t, dir)
	writeFile(t, dir, "clusters/local/environments/aa/environment.cue", "namespacePrefix: \"aa\"\n")
	for host, want := range map[string][]string{
		devHost: {devSite, "deployment local/dev/site"},
		// Every host of dev's is under it: one of them is named.
		"*.dev.local.styrmin.dev": {"clusters/local/environments/dev/deployments/", "deployment local/dev/", "claims as ", ".dev.local.styrmin.dev"},
	} {
		writeFile(t, dir, aaSite, site(host, ""))
		res, _, _ = resolveDir(t, dir)
		refused(t, res, "local/aa/site", append([]string{aaSite, "host " + host}, want...)...)
		if errs := errorsByID(res); len(errs) != 1 {
			t.Errorf("errors %v, want aa/site's only", errs)
		}
	}

	// Another path of dev's host (path-based routing of one domain to
	// two deployments) is no collision: it is locked.
	writeFile(t, dir, aaSite, site(devHost, "parameters: path: \"/api\"\n"))
	res, _, _ = resolveDir(t, dir)
	if errs := errorsByID(res); len(errs) != 0 {
		t.Errorf("path /api of dev's host: errors %v, want none", errs)
	}
	must(t, os.Remove(filepath.Join(dir, aaSite)))

	// A change keeping its host renders itself and its lock, no other.
	writeFile(t, dir, devSite, site("", "parameters: replicas: 2\n"))
	rc := drivers.NewRenderCache()
	ws, err := LoadWorkspace(os.DirFS(dir), WorkspaceOptions{RenderCache: rc})
	must(t, err)
	must(t, ws.Resolve().Err())
	if n := rc.Len(); n != 2 {
		t.Errorf("a change keeping its host rendered %d instances, want 2 (it and its lock)", n)
	}

	// dev's deleted, staging takes its host in the same lock: staging's
	// change runs after dev's tombstone, whose uninstall frees the host.
	must(t, os.Remove(filepath.Join(dir, devSite)))
	writeFile(t, dir, stagingSite, site(devHost, ""))
	changes := lockDirInto(t, dir)
	i := slices.IndexFunc(changes, func(c LockChange) bool { return c.ID.String() == "local/staging/site" })
	if i < 0 {
		t.Fatalf("staging/site not locked: %v", changes)
	}
	if after := changes[i].Next.After; !slices.Contains(after, "local/dev/site@2") {
		t.Errorf("staging/site's after %v, want dev/site's tombstone local/dev/site@2", after)
	}
}
