package resolver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
)

// exampleCluster is the example cluster's cluster.cue.
const exampleCluster = `domain:       "local.styrmin.dev"
ingressClass: "nginx"
storageClasses: default: "standard"
config: logFormat: "json"
parameters: logLevel: "info"
`

// withIngress is the example cluster.cue with extra lines (ingress: …).
func withIngress(extra string) string { return exampleCluster + extra + "\n" }

// badIngressDriver writes driver bad-ingress: ingress-nginx's copy whose
// chart creates a fixed IngressClass instead of the one of its context.
func badIngressDriver(t *testing.T, dir string) {
	t.Helper()
	src := filepath.Join(dir, "drivers/ingress-nginx/1.0.0")
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		text := strings.ReplaceAll(string(b), `name:        "ingress-nginx"`, `name:        "bad-ingress"`)
		if filepath.Base(p) == "ingressclass.yaml" {
			text = strings.Replace(text, "name: {{ .Values.className }}", "name: fixed", 1)
		}
		writeFile(t, dir, filepath.ToSlash(filepath.Join("drivers/bad-ingress/1.0.0", rel)), text)
		return nil
	})
	must(t, err)
}

// lockOf reads the lockfile of id in dir ("" when there is none).
func lockOf(t *testing.T, dir string, id ID) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(id.LockPath())))
	if os.IsNotExist(err) {
		return ""
	}
	must(t, err)
	return string(b)
}

func changeFor(changes []LockChange, id ID) (LockChange, bool) {
	for _, c := range changes {
		if c.ID == id {
			return c, true
		}
	}
	return LockChange{}, false
}

var (
	sharedIngress  = SharedIngressID("local")
	devIngress     = EnvironmentIngressID("local", "dev")
	stagingIngress = EnvironmentIngressID("local", "staging")
	exampleApps    = []ID{{"local", "dev", "hub"}, {"local", "dev", "web"}, {"local", "staging", "hub"}, {"local", "staging", "web"}}
)

// TestIngressAddsTheSharedControllerAndOnePerDedicatedEnvironment pins
// the internal deployments cluster.cue's ingress: adds: the shared
// controller serving the cluster's class, and a controller for each
// environment that opts in (its own dedicatedIngress over the cluster's),
// serving "<env>-<class>", each marked internal in its lock, in a
// namespace of its own, with a policy that allows its IngressClass; the
// applications' context says which class to use.
func TestIngressAddsTheSharedControllerAndOnePerDedicatedEnvironment(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: {driver: "ingress-nginx", parameters: replicas: 2}`))
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\ndedicatedIngress: true\n")
	res, _, err := resolveDir(t, dir)
	if err != nil || res.Err() != nil {
		t.Fatalf("resolve: %v %v", err, res.Err())
	}
	for _, tc := range []struct {
		id             ID
		class, ns, env string
	}{
		{sharedIngress, "nginx", "styrmin-ingress", "styrmin.cluster"},
		{devIngress, "dev-nginx", "dev-styrmin-ingress", "dev"},
	} {
		r, ok := res.Get(tc.id)
		if !ok {
			t.Fatalf("no internal deployment %s", tc.id)
		}
		in := r.Instance
		ctx := in.Context
		if in.Internal != InternalIngress || ctx.Cluster.IngressClass != tc.class || ctx.Deployment.Namespace != tc.ns || ctx.Environment.Name != tc.env {
			t.Errorf("%s: internal %q, class %q, namespace %q, environment %q; want ingress, %s, %s, %s", tc.id, in.Internal, ctx.Cluster.IngressClass, ctx.Deployment.Namespace, ctx.Environment.Name, tc.class, tc.ns, tc.env)
		}
		if in.Driver.Name != "ingress-nginx" || in.AppVersion != "1.11.3" || in.Values["className"] != tc.class || fmt.Sprint(in.Values["replicaCount"]) != "2" {
			t.Errorf("%s: driver %s, app %s, values %v", tc.id, in.Driver, in.AppVersion, in.Values)
		}
		if p := ctx.Environment.Policy; p == nil || !p.AllowsKind("IngressClass") {
			t.Errorf("%s: policy %+v does not allow its IngressClass", tc.id, p)
		}
		if ctx.Cluster.Domain != "" || ctx.Environment.Config != nil || ctx.Parameters["logLevel"] != nil {
			t.Errorf("%s: application settings reached the controller: %+v", tc.id, ctx)
		}
	}
	if _, ok := res.Get(stagingIngress); ok {
		t.Error("staging has a controller without dedicatedIngress")
	}
	for id, want := range map[ID]bool{{"local", "dev", "web"}: true, {"local", "staging", "web"}: false} {
		r, _ := res.Get(id)
		if got := r.Instance.Context.Cluster; got.DedicatedIngress != want || got.IngressClass != "nginx" {
			t.Errorf("%s: dedicatedIngress %t, class %q; want %t, nginx", id, got.DedicatedIngress, got.IngressClass, want)
		}
	}
	changes, err := PlanLocks(res, nil)
	must(t, err)
	c, _ := changeFor(changes, devIngress)
	if !strings.Contains(string(c.Data), "internal: ingress\n") || c.Path() != "locks/local/dev/styrmin.ingress.lock.yaml" {
		t.Errorf("%s: lockfile %s does not say internal: ingress:\n%s", devIngress, c.Path(), c.Data)
	}
	if _, err := DecodeLock(c.Path(), c.Data); err != nil {
		t.Error(err)
	}
	// Staging opts out explicitly with the cluster on.
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`+"\ndedicatedIngress: true"))
	writeFile(t, dir, "clusters/local/environments/staging/environment.yaml", "namespacePrefix: staging\ndedicatedIngress: false\n")
	res, _, err = resolveDir(t, dir)
	must(t, err)
	_, dev := res.Get(devIngress)
	_, staging := res.Get(stagingIngress)
	if !dev || staging {
		t.Errorf("cluster on, staging out: dev's controller %t, staging's %t; want true, false", dev, staging)
	}
}

// TestDedicatedIngressOnThenOffOrdersAroundEachEnvironmentsController
// pins the order of both directions in the lockfiles: on, each
// environment's controller is created and every changed application of
// that environment runs after its new instance (and only its own
// environment's); off, the applications move back first and each
// controller's tombstone, still marked internal, runs after every changed
// application of its environment. The shared controller is untouched by
// both.
func TestDedicatedIngressOnThenOffOrdersAroundEachEnvironmentsController(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`))
	first := lockDirInto(t, dir)
	for _, id := range exampleApps {
		c, _ := changeFor(first, id)
		if !slices.Contains(c.Next.After, AfterRef(sharedIngress, 1)) {
			t.Errorf("new %s runs after %v, want the shared controller %s@1 among them", id, c.Next.After, sharedIngress)
		}
	}
	shared := lockOf(t, dir, sharedIngress)

	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`+"\ndedicatedIngress: true"))
	on := lockDirInto(t, dir)
	for _, ctl := range []ID{devIngress, stagingIngress} {
		c, ok := changeFor(on, ctl)
		if !ok || c.Previous != nil || c.Next.Sequence != 1 || len(c.Next.After) != 0 {
			t.Errorf("on: %s is not created first (change %v, after %v)", ctl, ok, c.Next)
		}
	}
	for _, id := range exampleApps {
		c, ok := changeFor(on, id)
		want := []string{AfterRef(EnvironmentIngressID("local", id.Environment), 1)}
		if !ok || !slices.Equal(c.Next.After, want) {
			t.Errorf("on: %s runs after %v, want %v", id, c.Next.After, want)
		}
	}
	if len(on) != 6 {
		t.Errorf("on locks %d changes, want 2 controllers and 4 applications", len(on))
	}

	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`))
	off := lockDirInto(t, dir)
	if d, err := checkDeletions(RepoSettings{}, off, 0); err != nil || d.Count != 0 {
		t.Errorf("off: the deletion rule counts %d deletions (%v); the environments' controllers go by the setting, after their applications", d.Count, err)
	}
	for _, ctl := range []ID{devIngress, stagingIngress} {
		c, _ := changeFor(off, ctl)
		var want []string
		for _, id := range exampleApps {
			if id.Environment == ctl.Environment {
				app, _ := changeFor(off, id)
				want = append(want, AfterRef(id, app.Next.Sequence))
			}
		}
		if c.Next == nil || !c.Next.Tombstone() || c.Next.Internal != InternalIngress || !slices.Equal(c.Next.After, want) {
			t.Errorf("off: %s: %+v, want a tombstone marked internal after %v", ctl, c.Next, want)
		}
	}
	for _, id := range exampleApps {
		if c, _ := changeFor(off, id); len(c.Next.After) != 0 {
			t.Errorf("off: %s runs after %v, want nothing (the shared controller runs)", id, c.Next.After)
		}
	}
	if got := lockOf(t, dir, sharedIngress); got != shared {
		t.Error("turning dedicated ingress on and off relocked the shared controller")
	}

	// Removing ingress: takes the shared class's controller away: that
	// counts as a deletion.
	writeFile(t, dir, "clusters/local/cluster.cue", exampleCluster)
	res, locks, err := resolveDir(t, dir)
	must(t, err)
	gone, err := PlanLocks(res, locks)
	must(t, err)
	if got := Deleted(gone); !slices.Equal(got, []ID{sharedIngress}) {
		t.Errorf("removing ingress: deletes %v, want the deletion rule to count %s", got, sharedIngress)
	}
}

// TestFanOutsNeverRedeployInternalDeployments pins that cluster and
// environment fan-outs (parameters, config, domain, storage classes,
// backup location) lock new application instances and leave every
// internal lock byte-identical, and that a change of ingress: relocks the
// controllers alone.
func TestFanOutsNeverRedeployInternalDeployments(t *testing.T) {
	dir := exampleCopy(t)
	const ingress = `ingress: driver: "ingress-nginx"` + "\ndedicatedIngress: true"
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(ingress))
	lockDirInto(t, dir)
	internal := []ID{sharedIngress, devIngress, stagingIngress}
	snapshotInternal := func() []string {
		var out []string
		for _, id := range internal {
			l := lockOf(t, dir, id)
			if l == "" {
				t.Fatalf("no lock of %s", id)
			}
			out = append(out, l)
		}
		return out
	}
	before := snapshotInternal()
	for _, tc := range []struct {
		name, file, content string
		apps                int
	}{
		{"cluster", "clusters/local/cluster.cue", `domain:       "other.styrmin.dev"
ingressClass: "nginx"
storageClasses: default: "fast"
config: logFormat: "text"
parameters: {logLevel: "warning", replicas: 3}
` + ingress + "\n", 4},
		{"environment", "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\nbackupLocation: \"s3://elsewhere\"\nconfig: team: \"a\"\nparameters: logLevel: \"warning\"\n", 2},
	} {
		changes := lockDirInto(t, dir)
		if len(changes) != 0 {
			t.Fatalf("%d changes before the %s fan-out", len(changes), tc.name)
		}
		writeFile(t, dir, tc.file, tc.content)
		changes = lockDirInto(t, dir)
		if len(changes) != tc.apps {
			t.Errorf("%s fan-out locked %d instances, want the %d applications it reaches", tc.name, len(changes), tc.apps)
		}
		for _, c := range changes {
			if c.Next.Internal != "" {
				t.Errorf("%s fan-out relocked internal %s", tc.name, c.ID)
			}
		}
		if after := snapshotInternal(); !slices.Equal(after, before) {
			t.Errorf("%s fan-out changed an internal lockfile", tc.name)
		}
	}
	writeFile(t, dir, "clusters/local/cluster.cue", strings.Replace(lockOfFile(t, dir, "clusters/local/cluster.cue"), `ingress: driver: "ingress-nginx"`, `ingress: {driver: "ingress-nginx", parameters: replicas: 2}`, 1))
	changes := lockDirInto(t, dir)
	var ids []ID
	for _, c := range changes {
		ids = append(ids, c.ID)
	}
	if !slices.Equal(ids, []ID{devIngress, stagingIngress, sharedIngress}) {
		t.Errorf("a change of ingress.parameters locked %v, want the three controllers alone", ids)
	}
}

func lockOfFile(t *testing.T, dir, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	must(t, err)
	return string(b)
}

// TestLockfileWithAnUnknownInternalServiceIsRefused: internal names the
// service an internal deployment provides; another value is refused by
// name of the field, even with a matching checksum.
func TestLockfileWithAnUnknownInternalServiceIsRefused(t *testing.T) {
	dir := exampleCopy(t)
	changes := lockDirInto(t, dir)
	bad := *changes[0].Next
	bad.Internal = "dns"
	data, err := EncodeLock(&bad)
	must(t, err)
	if _, err := DecodeLock(bad.ID.LockPath(), data); err == nil || !strings.Contains(err.Error(), `field internal: expected "ingress" or none, got "dns"`) {
		t.Errorf("internal: dns: %v, want an error naming the field", err)
	}
}

// TestEnvironmentControllerStaysWhileAnApplicationStillUsesItsClass: with
// dedicated ingress turned off while an application of dev fails to
// resolve (it keeps its lock, on dev's class), dev's controller is kept
// and staging's goes; the lock after the fix removes dev's, after the
// application moved back.
func TestEnvironmentControllerStaysWhileAnApplicationStillUsesItsClass(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`+"\ndedicatedIngress: true"))
	lockDirInto(t, dir)
	const devWeb = "clusters/local/environments/dev/deployments/web.cue"
	good := lockOfFile(t, dir, devWeb)
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`))
	writeFile(t, dir, devWeb, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 99\n")
	res, locks, err := resolveDir(t, dir)
	if res == nil || len(res.Errors) == 0 {
		t.Fatalf("dev/web resolves: %v", err)
	}
	changes, err := PlanLocks(res, locks)
	must(t, err)
	if _, ok := changeFor(changes, devIngress); ok {
		t.Error("dev's controller is tombstoned while dev/web, which failed to resolve, still uses its class")
	}
	if c, ok := changeFor(changes, stagingIngress); !ok || !c.Next.Tombstone() {
		t.Error("staging's controller is not tombstoned")
	}
	for _, c := range changes {
		writeFile(t, dir, c.Path(), string(c.Data))
	}
	writeFile(t, dir, devWeb, good)
	fixed := lockDirInto(t, dir)
	// dev/hub connects to web, so it failed too: both move back now.
	var want []string
	for _, id := range []ID{{"local", "dev", "hub"}, {"local", "dev", "web"}} {
		c, _ := changeFor(fixed, id)
		want = append(want, AfterRef(id, c.Next.Sequence))
	}
	ctl, ok := changeFor(fixed, devIngress)
	if !ok || !ctl.Next.Tombstone() || !slices.Equal(ctl.Next.After, want) {
		t.Errorf("after the fix, dev's controller: %+v, want a tombstone after %v", ctl.Next, want)
	}
}

// TestAnIngressLockMustBeWhatItsConfigurationResolvesTo pins the agent's
// check of an ingress controller's lockfile (CheckIngressInstance): an
// ingress controller applies as the agent, with every namespaced kind,
// so a lockfile written by hand with other values (an image of its
// choosing), parameters or app version than a lock of the configuration
// at its commit writes is refused, naming what differs; the lock as
// written passes, and so does one a lock of a configuration pinning
// nothing keeps at its recorded version.
func TestAnIngressLockMustBeWhatItsConfigurationResolvesTo(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress("ingress: {driver: \"ingress-nginx\", parameters: replicas: 2}\ndedicatedIngress: true"))
	res, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := drivers.LoadCatalog(os.DirFS(dir), "drivers", drivers.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fsys := os.DirFS(dir)
	n := 0
	for _, r := range res.Resolved {
		in := r.Instance
		if in.Internal != InternalIngress {
			continue
		}
		n++
		drv, ok := cat.Get(in.Driver.Name, in.Driver.Version)
		if !ok {
			t.Fatalf("%s: driver %s@%s not in the catalog", in.ID, in.Driver.Name, in.Driver.Version)
		}
		if err := NewLoader(0).CheckIngressInstance(fsys, deepCopyInstance(t, in), drv); err != nil {
			t.Errorf("%s as locked: %v", in.ID, err)
		}
		for _, tc := range []struct {
			name string
			edit func(in *Instance)
			want string
		}{
			{"an image of its own", func(in *Instance) {
				in.Values["image"] = map[string]any{"repository": "evil.example/controller", "tag": "v1"}
			}, "with its values other than"},
			{"more replicas", func(in *Instance) { in.Context.Parameters["replicas"] = int64(5) }, "with its context"},
			{"another app version", func(in *Instance) { in.AppVersion = "1.99.0"; in.Context.Deployment.AppVersion = "1.99.0" }, `app version "1.99.0"`},
		} {
			t.Run(in.ID.String()+"/"+tc.name, func(t *testing.T) {
				edited := deepCopyInstance(t, in)
				tc.edit(edited)
				err := NewLoader(0).CheckIngressInstance(fsys, edited, drv)
				if _, ok := errors.AsType[*UndeclaredError](err); !ok || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "clusters/local/cluster.cue") {
					t.Errorf("got %v; want an UndeclaredError in cluster.cue containing %q", err, tc.want)
				}
			})
		}
	}
	if n < 2 {
		t.Fatalf("%d ingress controllers resolved, want the cluster's and dev's", n)
	}
}

// deepCopyInstance is in at sequence 1 as the agent reads it from its
// lockfile, sharing nothing with in.
func deepCopyInstance(t *testing.T, in *Instance) *Instance {
	t.Helper()
	numbered := *in
	numbered.Sequence = 1
	b, err := EncodeLock(&numbered)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeLock(in.ID.LockPath(), b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAnIngressDriverVersionRemovedUnderItsControllerIsAnErrorNotAnotherVersion
// pins for ingress controllers what a deployment does when the driver
// version its lock runs is gone: the controller took the newest version
// loaded, and that chart's application, with nobody asking (a driver
// folder cleaned up went back a version, and the lock mode pushed it). It
// now fails naming cluster.cue's ingress and the remedies of an ingress
// block, with or without ingress.appVersion, and keeps its lock; a pinned
// ingress.version moves it.
func TestAnIngressDriverVersionRemovedUnderItsControllerIsAnErrorNotAnotherVersion(t *testing.T) {
	for _, appVersion := range []string{"", "\ningress: appVersion: \"1.11.3\""} {
		t.Run(fmt.Sprintf("appVersion %q", strings.TrimSpace(appVersion)), func(t *testing.T) {
			dir := exampleCopy(t)
			addDriverBuild(t, dir, "ingress-nginx", "1.0.0", "1.1.0")
			writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`+appVersion))
			lockDirInto(t, dir)
			before := lockOf(t, dir, sharedIngress)
			if !strings.Contains(before, "version: 1.1.0") {
				t.Fatalf("the controller's lock:\n%s\nwant driver version 1.1.0", before)
			}
			must(t, os.RemoveAll(filepath.Join(dir, "drivers", "ingress-nginx", "1.1.0")))
			res, locks, err := resolveDir(t, dir)
			if err == nil {
				t.Fatal("resolved with the controller's driver version removed")
			}
			for _, want := range []string{"clusters/local/cluster.cue", "version 1.1.0, which the ingress controller's lock runs, is not loaded (loaded: 1.0.0)", "ingress.version"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "styrminctl upgrade") {
				t.Errorf("error %q names a remedy an ingress block has not", err)
			}
			if changes, _ := PlanLocks(res, locks); slices.ContainsFunc(changes, func(c LockChange) bool { return c.ID == sharedIngress }) {
				t.Fatal("the controller's lock changed")
			}
			writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: {driver: "ingress-nginx", version: "1.0.0"}`+appVersion))
			lockDirInto(t, dir)
			if after := lockOf(t, dir, sharedIngress); !strings.Contains(after, "version: 1.0.0") {
				t.Fatalf("the controller's lock once ingress.version is pinned:\n%s\nwant driver version 1.0.0", after)
			}
		})
	}
}
