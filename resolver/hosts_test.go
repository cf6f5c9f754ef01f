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
// whose path is parameter path, whose TLS Secret is parameter tls when
// set ("none": no TLS; "<deployment>-tls" otherwise),
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
		`	size: *"small" | "medium" | "large"`, "\tsize: *\"small\" | \"medium\" | \"large\"\n\thost: *\"\" | string\n\tpath: *\"/\" | string\n\ttls: *\"\" | string",
		`		tlsSecret: "\(context.deployment.name)-tls"`,
		`		tlsSecret: [if context.parameters.tls == "none" {""}, if context.parameters.tls != "" {context.parameters.tls}, "\(context.deployment.name)-tls"][0]`,
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

// TestTwoDeploymentsServingOneHostOverTLSApartFailTheLaterAtLock: two
// deployments routing other paths of one host on one class passed
// whatever TLS each named for it; the ingress controller serves one
// certificate per host (the oldest Ingress's) and TLS for every path
// once one names it, so one's clients got the other's certificate, or
// TLS it never set up. The lock now fails the later, naming both files,
// the host and both Secrets: a newcomer naming another Secret, or none;
// a locked deployment changing its Secret alone (a change of one
// deployment, which renders its lock and then the cluster); both
// changing it together, or naming one Secret, lock.
func TestTwoDeploymentsServingOneHostOverTLSApartFailTheLaterAtLock(t *testing.T) {
	const (
		devSite = "clusters/local/environments/dev/deployments/site.cue"
		aaSite  = "clusters/local/environments/aa/deployments/site.cue"
		devHost = "site.dev.local.styrmin.dev"
		api     = "parameters: path: \"/api\"\n"
	)
	dir := exampleCopy(t)
	withHostDriver(t, dir)
	writeFile(t, dir, devSite, site("", ""))
	writeFile(t, dir, "clusters/local/environments/aa/environment.cue", "namespacePrefix: \"aa\"\n")
	lockDirInto(t, dir)

	for tls, want := range map[string]string{"api-tls": "with TLS Secret api-tls", "none": "with no TLS"} {
		writeFile(t, dir, aaSite, site(devHost, api+"parameters: tls: \""+tls+"\"\n"))
		res, _, _ := resolveDir(t, dir)
		errs := errorsByID(res)
		msg, ok := errs["local/aa/site"]
		if !ok || len(errs) != 1 {
			t.Fatalf("aa/site on dev's host with TLS %s: errors %v, want aa/site's only", tls, errs)
		}
		for _, w := range []string{aaSite, devSite, "host " + devHost + " path /api (ingress class nginx)", want,
			"deployment local/dev/site", "with TLS Secret site-tls on its Ingress", "(path /)", "one certificate for a host",
			"name the same TLS Secret for host " + devHost + " in both"} {
			if !strings.Contains(msg, w) {
				t.Errorf("TLS %s: %q does not say %q", tls, msg, w)
			}
		}
	}

	// The same Secret's name: locked.
	writeFile(t, dir, aaSite, site(devHost, api))
	lockDirInto(t, dir)

	// dev changing its Secret alone is the later: aa's lock serves the
	// host as it does.
	writeFile(t, dir, devSite, site("", "parameters: tls: \"new-tls\"\n"))
	res, _, _ := resolveDir(t, dir)
	errs := errorsByID(res)
	if msg := errs["local/dev/site"]; len(errs) != 1 || !strings.Contains(msg, "with TLS Secret new-tls, which deployment local/aa/site") {
		t.Fatalf("dev/site changing its Secret alone: errors %v, want dev/site's naming aa/site", errs)
	}

	// Both changing it together: locked.
	writeFile(t, dir, aaSite, site(devHost, api+"parameters: tls: \"new-tls\"\n"))
	res, _, _ = resolveDir(t, dir)
	if errs := errorsByID(res); len(errs) != 0 {
		t.Errorf("both changing their Secret: errors %v, want none", errs)
	}
}

// TestAnIngressWithoutAClassMeetsOneOnTheDefaultClassAtLock: the API
// server names the default IngressClass on an Ingress made without one,
// and the agent judges them one class; the lock compared the names as
// written, so dev's Ingress without a class and staging's on nginx, the
// cluster's default, both locked one host and the agent stalled the
// later in the cluster. With cluster.cue's defaultIngressClass the lock
// refuses the later, naming both files, the host, path and class and
// why; without it classes are compared as written (the lock cannot see
// the cluster's classes); a bad value is an error naming the file, the
// field and what was expected.
func TestAnIngressWithoutAClassMeetsOneOnTheDefaultClassAtLock(t *testing.T) {
	const (
		cluster     = "clusters/local/cluster.cue"
		devEnv      = "clusters/local/environments/dev/environment.cue"
		devSite     = "clusters/local/environments/dev/deployments/site.cue"
		stagingSite = "clusters/local/environments/staging/deployments/site.cue"
		host        = "shop.local.styrmin.dev"
		clusterCUE  = "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\n"
	)
	dir := exampleCopy(t)
	withHostDriver(t, dir)
	// dev's Ingresses name no class (the chart leaves ingressClassName
	// empty), staging's name nginx.
	writeFile(t, dir, devEnv, "namespacePrefix: \"dev\"\ningressClass: \"\"\n")
	writeFile(t, dir, devSite, site(host, ""))
	writeFile(t, dir, stagingSite, site(host, ""))

	writeFile(t, dir, cluster, clusterCUE)
	res, _, err := resolveDir(t, dir)
	must(t, err)
	if errs := errorsByID(res); len(errs) != 0 {
		t.Fatalf("without defaultIngressClass: errors %v, want none (classes as written)", errs)
	}

	writeFile(t, dir, cluster, clusterCUE+"defaultIngressClass: \"nginx\"\n")
	res, locks, _ := resolveDir(t, dir)
	errs := errorsByID(res)
	msg, ok := errs["local/staging/site"]
	if !ok || len(errs) != 1 {
		t.Fatalf("errors %v, want local/staging/site's only", errs)
	}
	for _, want := range []string{stagingSite, devSite, "deployment local/dev/site", "host " + host + " path / (ingress class nginx)",
		"its Ingress site names no class: it is on the cluster's default class nginx, defaultIngressClass of " + cluster} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	if locked := lockedIDs(t, res, locks); !locked["local/dev/site"] || locked["local/staging/site"] {
		t.Fatalf("the lock writes %v, want dev/site and not staging/site", locked)
	}

	// Locked, dev's holds the host: aa's, first by id and without a
	// class, is refused as well.
	writeFile(t, dir, stagingSite, site("", ""))
	lockDirInto(t, dir)
	writeFile(t, dir, "clusters/local/environments/aa/environment.cue", "namespacePrefix: \"aa\"\ningressClass: \"nginx\"\n")
	writeFile(t, dir, "clusters/local/environments/aa/deployments/site.cue", site(host, ""))
	res, _, _ = resolveDir(t, dir)
	if msg := errorsByID(res)["local/aa/site"]; !strings.Contains(msg, "deployment local/dev/site") || !strings.Contains(msg, "names no class") {
		t.Errorf("aa/site against dev's lock: %q, want refused naming dev/site", msg)
	}

	for _, tc := range []struct{ value, want string }{
		{`"Nginx_1"`, `"Nginx_1" is no IngressClass name: expected the name of the cluster's default IngressClass`},
		{`""`, `"" is no IngressClass name`},
	} {
		writeFile(t, dir, cluster, clusterCUE+"defaultIngressClass: "+tc.value+"\n")
		_, _, err := resolveDir(t, dir)
		if err == nil || !strings.Contains(err.Error(), cluster+":4:") || !strings.Contains(err.Error(), "field defaultIngressClass") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("defaultIngressClass: %s: error %v, want %s at its line, naming the field, saying %q", tc.value, err, cluster, tc.want)
		}
	}
	writeFile(t, dir, cluster, clusterCUE+"defaultIngressClass: 3\n")
	if _, _, err := resolveDir(t, dir); err == nil || !strings.Contains(err.Error(), cluster) || !strings.Contains(err.Error(), "defaultIngressClass") {
		t.Errorf("defaultIngressClass: 3: error %v, want one naming %s and the field", err, cluster)
	}
	// The cluster's, not an environment's.
	writeFile(t, dir, cluster, clusterCUE)
	writeFile(t, dir, devEnv, "namespacePrefix: \"dev\"\ndefaultIngressClass: \"nginx\"\n")
	if _, _, err := resolveDir(t, dir); err == nil || !strings.Contains(err.Error(), devEnv) || !strings.Contains(err.Error(), "defaultIngressClass") {
		t.Errorf("defaultIngressClass in environment.cue: error %v, want one naming %s and the field", err, devEnv)
	}
}
