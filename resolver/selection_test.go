package resolver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSelectionKeepsTheLockedDriverUnlessPinnedAppChangedOrANewRequest
// pins what the resolver asks the driver selection rule: the locked
// version is kept unless the upgrade request is new (an app version change
// and a pin are the catalog's part of the rule), and the request the new
// instance records.
func TestSelectionKeepsTheLockedDriverUnlessPinnedAppChangedOrANewRequest(t *testing.T) {
	lock := func(driver, version, request string) *Instance {
		return &Instance{Kind: KindInstance, AppVersion: "1.25.0", Driver: DriverRef{Name: driver, Version: version, UpgradeRequest: request}}
	}
	tomb := &Instance{Kind: KindTombstone, Driver: DriverRef{UpgradeRequest: "r1"}}
	cases := []struct {
		name        string
		file        string // the deployment's driver.upgrade
		pinned      string
		locked      *Instance
		wantLocked  string
		wantUpgrade bool
		wantRequest string
	}{
		{name: "new deployment", wantRequest: ""},
		{name: "new deployment with a request records it", file: "r1", wantRequest: "r1"},
		{name: "a fan-out keeps the locked version", locked: lock("webapp", "1.0.0", ""), wantLocked: "1.0.0"},
		{name: "a request the lock honoured is no request", file: "r1", locked: lock("webapp", "1.0.0", "r1"), wantLocked: "1.0.0", wantRequest: "r1"},
		{name: "a new request re-selects", file: "r2", locked: lock("webapp", "1.0.0", "r1"), wantLocked: "1.0.0", wantUpgrade: true, wantRequest: "r2"},
		{name: "a first request re-selects", file: "r1", locked: lock("webapp", "1.0.0", ""), wantLocked: "1.0.0", wantUpgrade: true, wantRequest: "r1"},
		{name: "a removed token keeps the spent one", locked: lock("webapp", "1.0.0", "r1"), wantLocked: "1.0.0", wantRequest: "r1"},
		{name: "a pin is passed on with the lock", pinned: "1.1.0", locked: lock("webapp", "1.0.0", ""), wantLocked: "1.0.0"},
		{name: "another driver has no locked version", file: "r1", locked: lock("other", "1.0.0", "r1"), wantRequest: "r1"},
		{name: "a tombstone has no locked version", file: "r1", locked: tomb, wantRequest: "r1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := &Deployment{Driver: "webapp", DriverVersion: c.pinned, AppVersion: "1.25.0", UpgradeRequest: c.file}
			sel, request := selection(d, c.locked)
			if sel.Locked != c.wantLocked || sel.Upgrade != c.wantUpgrade || request != c.wantRequest || sel.Pinned != c.pinned || sel.AppVersion != "1.25.0" {
				t.Errorf("selection = %+v, request %q; want locked %q, upgrade %v, request %q", sel, request, c.wantLocked, c.wantUpgrade, c.wantRequest)
			}
			if c.wantLocked != "" && sel.LockedAppVersion != "1.25.0" {
				t.Errorf("LockedAppVersion = %q, want the lock's", sel.LockedAppVersion)
			}
		})
	}
}

// addDriverBuild loads a newer build of a driver: a copy of the folder of
// version from, as version to.
func addDriverBuild(t testing.TB, dir, driver, from, to string) {
	t.Helper()
	src := filepath.Join(dir, "drivers", driver, from)
	dst := filepath.Join(dir, "drivers", driver, to)
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dst, "driver.cue")
	b, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	old := `version:     "` + from + `"`
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s has no line %s", spec, old)
	}
	if err := os.WriteFile(spec, []byte(strings.Replace(string(b), old, `version:     "`+to+`"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// webWith is dev/web's file with a driver field.
func webWith(driver string) string {
	return "driver:     " + driver + "\nappVersion: \"1.25.0\"\nparameters: replicas: 2\n"
}

const devWeb = "clusters/local/environments/dev/deployments/web.cue"

func TestFanOutKeepsTheDriverVersionAndANewUpgradeRequestMovesItOnce(t *testing.T) {
	dir := exampleCopy(t)
	web := ID{"local", "dev", "web"}
	// An upgrade request honoured by an earlier lock.
	writeFile(t, dir, devWeb, webWith(`{name: "webapp", upgrade: "r1"}`))
	lockDirInto(t, dir)
	at := func(want, request string) *Instance {
		t.Helper()
		in, err := ReadLock(os.DirFS(dir), web.LockPath())
		if err != nil {
			t.Fatal(err)
		}
		if in.Driver.Version != want || in.Driver.UpgradeRequest != request {
			t.Fatalf("dev/web is at webapp %s (request %q), want %s (request %q)", in.Driver.Version, in.Driver.UpgradeRequest, want, request)
		}
		return in
	}
	at("1.1.0", "r1")

	// A newer build is loaded, then a cluster fan-out re-resolves every
	// deployment: the driver version stays.
	addDriverBuild(t, dir, "webapp", "1.1.0", "1.2.0")
	writeFile(t, dir, "clusters/local/cluster.cue", `
domain:       "local.styrmin.dev"
ingressClass: "nginx"
storageClasses: default: "standard"
config: logFormat: "text"
parameters: logLevel: "info"
`)
	if changes := lockDirInto(t, dir); len(changes) != 4 {
		t.Fatalf("the fan-out locked %v, want every deployment", describe(changes))
	}
	before := at("1.1.0", "r1")

	// A new request: the next lock takes the newest build, once.
	writeFile(t, dir, devWeb, webWith(`{name: "webapp", upgrade: "r2"}`))
	changes := lockDirInto(t, dir)
	if len(changes) != 1 || changes[0].ID != web || changes[0].Next.Sequence != before.Sequence+1 {
		t.Fatalf("the upgrade locked %v, want local/dev/web=%d only", describe(changes), before.Sequence+1)
	}
	upgraded := at("1.2.0", "r2")
	if changes := lockDirInto(t, dir); len(changes) != 0 {
		t.Fatalf("the request was honoured twice: %v", describe(changes))
	}

	// A new request with no newer build still spends it: a new sequence
	// with the same digest.
	writeFile(t, dir, devWeb, webWith(`{name: "webapp", upgrade: "r3"}`))
	changes = lockDirInto(t, dir)
	if len(changes) != 1 || changes[0].Next.Digest != upgraded.Digest {
		t.Fatalf("a request with no newer build locked %v, want dev/web with digest %s", describe(changes), upgraded.Digest)
	}
	at("1.2.0", "r3")

	// Removing the spent token is no change.
	writeFile(t, dir, devWeb, webWith(`"webapp"`))
	if changes := lockDirInto(t, dir); len(changes) != 0 {
		t.Fatalf("removing a spent token locked %v", describe(changes))
	}
}

func TestStandingUpgradeFlagIsRefusedWithWhatToWriteInstead(t *testing.T) {
	for _, v := range []string{"true", "false"} {
		dir := exampleCopy(t)
		writeFile(t, dir, devWeb, webWith(`{name: "webapp", upgrade: `+v+`}`))
		_, err := NewLoader(0).Load(os.DirFS(dir))
		if err == nil {
			t.Fatalf("upgrade: %s was accepted", v)
		}
		for _, want := range []string{devWeb, "field driver.upgrade", "styrminctl upgrade local/dev/web", "token"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("upgrade: %s: error %q lacks %q", v, err, want)
			}
		}
	}
}

func TestUpgradeRequestMustBeAToken(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, devWeb, webWith(`{name: "webapp", upgrade: "two words"}`))
	if _, err := NewLoader(0).Load(os.DirFS(dir)); err == nil || !strings.Contains(err.Error(), devWeb) || !strings.Contains(err.Error(), "driver.upgrade") {
		t.Fatalf("error %v; want one naming the file and driver.upgrade", err)
	}
}

// TestADriverVersionRemovedUnderItsDeploymentsIsAnErrorNotAnotherVersion
// pins what a lock does when the driver version deployments run is no
// longer loaded (its folder removed as unused, its tag gone from a
// driver source): it took the newest version that supports the
// application, so a clean-up of driver folders was a fan-out that changed
// driver versions and ran their upgrade steps, downwards when the newest
// was removed, with no upgrade asked for. Each such deployment now fails
// to resolve naming its file, the driver field and the remedies, and keeps
// its lock; an upgrade request moves it.
func TestADriverVersionRemovedUnderItsDeploymentsIsAnErrorNotAnotherVersion(t *testing.T) {
	dir := exampleCopy(t)
	web := ID{"local", "dev", "web"}
	writeFile(t, dir, devWeb, webWith(`"webapp"`))
	lockDirInto(t, dir)
	locked, err := ReadLock(os.DirFS(dir), web.LockPath())
	if err != nil {
		t.Fatal(err)
	}
	if locked.Driver.Version != "1.1.0" {
		t.Fatalf("dev/web locked at webapp %s, want 1.1.0", locked.Driver.Version)
	}
	if err := os.RemoveAll(filepath.Join(dir, "drivers", "webapp", "1.1.0")); err != nil {
		t.Fatal(err)
	}
	res, locks, err := resolveDir(t, dir)
	if err == nil {
		t.Fatal("resolved with the locked driver version removed")
	}
	for _, want := range []string{devWeb, "field driver", "version 1.1.0, which the deployment's lock runs, is not loaded (loaded: 1.0.0)", "styrminctl upgrade"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	changes, _ := PlanLocks(res, locks)
	for _, c := range changes {
		if c.ID == web {
			t.Fatalf("dev/web's lock changed: %s", c.Data)
		}
	}

	// An upgrade request leaves the version gone: the newest that
	// supports the application.
	writeFile(t, dir, devWeb, webWith(`{name: "webapp", upgrade: "r1"}`))
	res, _, _ = resolveDir(t, dir)
	for _, e := range res.Errors {
		if e.ID == web {
			t.Fatalf("an upgrade request of the deployment: %v", e)
		}
	}
	upgraded := false
	for _, r := range res.Resolved {
		upgraded = upgraded || r.Deployment.ID == web
		if r.Deployment.ID == web && r.Instance.Driver.Version != "1.0.0" {
			t.Fatalf("the upgrade request took webapp %s, want 1.0.0 (the one loaded)", r.Instance.Driver.Version)
		}
	}
	if !upgraded {
		t.Fatal("dev/web did not resolve with an upgrade request")
	}
}
