package resolver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
)

func TestParseBackupLocation(t *testing.T) {
	good := []struct {
		in   string
		want BackupLocation
	}{
		{"s3://backups", BackupLocation{"s3", "backups", ""}},
		{"s3://backups/local/dev", BackupLocation{"s3", "backups", "local/dev"}},
		{"s3://my.bucket-1/a_b/c.d", BackupLocation{"s3", "my.bucket-1", "a_b/c.d"}},
		{"pvc://backup-claim", BackupLocation{"pvc", "backup-claim", ""}},
		{"pvc://backup-claim/dev", BackupLocation{"pvc", "backup-claim", "dev"}},
	}
	for _, tc := range good {
		got, err := ParseBackupLocation(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseBackupLocation(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("%q: String() = %q", tc.in, got.String())
		}
	}
	bad := []string{"", "backups", "s3:/backups", "gs://backups", "S3://backups", "s3://", "s3://ab",
		"s3://" + strings.Repeat("a", 64), "s3://-backups", "s3://back..ups", "s3://Backups", "s3://back_ups",
		"s3://backups/", "s3://backups//dev", "s3://backups/../x", "s3://backups/./x", "s3://backups/a b",
		"pvc://Claim", "pvc://claim.with.dots", "pvc://" + strings.Repeat("a", 64), "pvc://claim/", "pvc://claim/..",
		"s3://backups?x=1", "pvc://claim/a\\b"}
	for _, in := range bad {
		if got, err := ParseBackupLocation(in); err == nil {
			t.Errorf("ParseBackupLocation(%q) = %+v, want an error", in, got)
		} else if !strings.Contains(err.Error(), "s3://BUCKET[/PREFIX] or pvc://CLAIM[/PATH]") {
			t.Errorf("ParseBackupLocation(%q): error %q does not say the forms expected", in, err)
		}
	}
}

func TestArtifactURL(t *testing.T) {
	for _, tc := range []struct{ loc, want string }{
		{"s3://backups/local/dev", "s3://backups/local/dev/nightly-1/hub"},
		{"s3://backups/local/dev/", "s3://backups/local/dev/nightly-1/hub"},
		{"pvc://claim", "pvc://claim/nightly-1/hub"},
	} {
		if got := ArtifactURL(tc.loc, "nightly-1", "hub"); got != tc.want {
			t.Errorf("ArtifactURL(%q) = %q, want %q", tc.loc, got, tc.want)
		}
	}
}

// FuzzParseBackupLocation: whatever the input, the parser does not panic,
// and what it accepts prints back to itself and parses to the same parts.
func FuzzParseBackupLocation(f *testing.F) {
	for _, s := range []string{"s3://backups/local/dev", "pvc://claim/x", "s3://a..b", "pvc://", "://", "s3://b/../c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseBackupLocation(s)
		if err != nil {
			return
		}
		if l.String() != s {
			t.Fatalf("%q parsed to %+v, which prints as %q", s, l, l.String())
		}
		if l.Scheme != SchemeS3 && l.Scheme != SchemePVC {
			t.Fatalf("%q: scheme %q", s, l.Scheme)
		}
		for _, seg := range strings.Split(l.Path, "/") {
			if l.Path != "" && (seg == "" || seg == "." || seg == "..") {
				t.Fatalf("%q: path %q has an empty or relative element", s, l.Path)
			}
		}
		again, err := ParseBackupLocation(l.String())
		if err != nil || again != l {
			t.Fatalf("%q: reparsed to %+v, %v", s, again, err)
		}
	})
}

// TestBackupSettings pins the agent's view: every environment, sorted,
// the cluster's defaults filled in field by field, the location
// inherited, and the clone source.
func TestBackupSettings(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nbackupLocation: \"s3://backups/local\"\nbackups: {secret: \"backup-credentials\", keep: 3}\n")
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\nbackupLocation: \"s3://backups/local/dev\"\nbackups: {schedule: \"0 3 * * *\", keep: 7}\n")
	writeFile(t, dir, "clusters/local/environments/preview/environment.cue", "backupLocation: \"s3://backups/local/preview\"\nclonedFrom: {cluster: \"local\", environment: \"dev\", commit: \"0123456789abcdef0123456789abcdef01234567\", backup: \"nightly-1\", location: \"s3://backups/local/dev\"}\n")
	writeFile(t, dir, "clusters/other/cluster.cue", "domain: \"other.dev\"\n")
	writeFile(t, dir, "clusters/other/environments/a/environment.cue", "")
	// A broken deployment is not read: backups depend on no deployment.
	writeFile(t, dir, "clusters/local/environments/dev/deployments/web.cue", "driver: \n")
	got, err := BackupSettings(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	want := []EnvironmentBackups{
		{Cluster: "local", Environment: "dev", Location: "s3://backups/local/dev", Secret: "backup-credentials", Schedule: "0 3 * * *", Keep: 7},
		{Cluster: "local", Environment: "preview", Location: "s3://backups/local/preview", Secret: "backup-credentials", Keep: 3,
			ClonedFrom: &CloneSource{Cluster: "local", Environment: "dev", Commit: "0123456789abcdef0123456789abcdef01234567", Backup: "nightly-1", Location: "s3://backups/local/dev"}},
		{Cluster: "local", Environment: "staging", Location: "s3://backups/local/staging", Secret: "backup-credentials", Keep: 3},
		{Cluster: "other", Environment: "a"},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("BackupSettings:\n%s\nwant:\n%s", g, w)
	}

	writeFile(t, dir, "clusters/other/environments/a/environment.cue", "backups: schedule: \"@nightly\"\n")
	if _, err := BackupSettings(os.DirFS(dir)); err == nil || !strings.Contains(err.Error(), "clusters/other/environments/a/environment.cue:1") || !strings.Contains(err.Error(), "backups.schedule") {
		t.Errorf("bad environment file: %v", err)
	}
}

// TestABrokenFileHidesOnlyTheBackupSettingsOfTheEnvironmentsItLayers
// pins what one invalid cluster or environment file hides: the
// environments it layers, each listed with an error naming the file and
// the field. The whole read failed on it, and the agent then made,
// deleted and started no backup or restore in any environment of any
// cluster.
func TestABrokenFileHidesOnlyTheBackupSettingsOfTheEnvironmentsItLayers(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nbackupLocation: \"s3://backups/local\"\n")
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\nbackups: {schedule: \"0 3 * * *\", keep: 7}\n")
	writeFile(t, dir, "clusters/local/environments/qa/environment.cue", "backups: schedule: \"every night\"\n")
	writeFile(t, dir, "clusters/other/cluster.cue", "domain: \"other.dev\"\nbackupLocation: \"s3://backups/other\"\nbackups: keep: 0\n")
	writeFile(t, dir, "clusters/other/environments/a/environment.cue", "")
	writeFile(t, dir, "clusters/other/environments/b/environment.cue", "")

	got, err := BackupSettings(os.DirFS(dir))
	if err == nil || !strings.Contains(err.Error(), "clusters/local/environments/qa/environment.cue") || !strings.Contains(err.Error(), "clusters/other/cluster.cue") {
		t.Errorf("the error of the read: %v, want it to name both broken files", err)
	}
	byName := map[string]EnvironmentBackups{}
	for _, e := range got {
		byName[e.Cluster+"/"+e.Environment] = e
	}
	if e := byName["local/dev"]; e.Err != nil || e.Schedule != "0 3 * * *" || e.Keep != 7 || e.Location != "s3://backups/local" {
		t.Errorf("local/dev beside broken files: %+v, want its schedule, keep and the cluster's location", e)
	}
	if e := byName["local/staging"]; e.Err != nil || e.Location != "s3://backups/local/staging" {
		t.Errorf("local/staging beside broken files: %+v, want its location", e)
	}
	for env, want := range map[string][]string{
		"local/qa": {"clusters/local/environments/qa/environment.cue:1", "backups.schedule"},
		"other/a":  {"clusters/other/cluster.cue:3", "backups.keep"},
		"other/b":  {"clusters/other/cluster.cue:3", "backups.keep"},
	} {
		e, ok := byName[env]
		if !ok || e.Err == nil {
			t.Errorf("%s: %+v (listed %v), want it listed with its error", env, e, ok)
			continue
		}
		var ce *ConfigError
		if !errors.As(e.Err, &ce) {
			t.Errorf("%s: %v is no *ConfigError", env, e.Err)
		}
		for _, w := range want {
			if !strings.Contains(e.Err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", env, e.Err, w)
			}
		}
		if e.Location != "" || e.Schedule != "" || e.Keep != 0 {
			t.Errorf("%s, unreadable, has settings %+v", env, e)
		}
	}
	if len(got) != 5 {
		t.Errorf("%d environments listed, want 5: %+v", len(got), got)
	}
}

// TestCloneSourceReachesTheContext: clonedFrom lands in the context of
// every instance the backup holds (all of them in a clone written before
// the list of deployments), without that list; a deployment added to the
// clone later has none (it starts empty); environment-only settings stay
// out of the settings the drivers see.
func TestCloneSourceReachesTheContext(t *testing.T) {
	const from = `clonedFrom: {cluster: "local", environment: "staging", commit: "abcdef1", backup: "b1", location: "s3://backups/local/staging"%s}` + "\n"
	for _, tc := range []struct {
		name, list string
		restores   map[string]bool
	}{
		{"a clone written before the list", "", map[string]bool{"web": true, "hub": true}},
		{"hub added after the clone", `, deployments: ["web"]`, map[string]bool{"web": true}},
		// Every name taken out of the list (each to be created empty):
		// none restores, not all of them as without a list.
		{"an empty list", `, deployments: []`, map[string]bool{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\nbackupLocation: \"s3://backups/local/dev\"\nbackups: {secret: \"backup-credentials\", schedule: \"0 3 * * *\", keep: 7}\n"+fmt.Sprintf(from, tc.list))
			res, _, err := resolveDir(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := res.Err(); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range res.Resolved {
				cf := r.Instance.Context.Environment.ClonedFrom
				if r.Instance.ID.Environment != "dev" || !tc.restores[r.Instance.ID.Name] {
					if cf != nil {
						t.Errorf("%s: clonedFrom %+v, want none", r.Instance.ID, cf)
					}
					continue
				}
				n++
				if cf == nil || !reflect.DeepEqual(*cf, CloneSource{Cluster: "local", Environment: "staging", Commit: "abcdef1", Backup: "b1", Location: "s3://backups/local/staging"}) {
					t.Errorf("%s: clonedFrom %+v", r.Instance.ID, cf)
				}
				if _, ok := r.Settings["backups"]; ok {
					t.Errorf("%s: backups reached the merged settings", r.Instance.ID)
				}
				data, err := json.Marshal(r.Instance.Context.Environment)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(data), `"clonedFrom":{"cluster":"local","environment":"staging","commit":"abcdef1","backup":"b1","location":"s3://backups/local/staging"}`) {
					t.Errorf("%s: context.environment %s", r.Instance.ID, data)
				}
			}
			if n != len(tc.restores) {
				t.Fatalf("%d dev deployments restore the backup, want %d", n, len(tc.restores))
			}
		})
	}
}

// TestBackupFirstIsRecordedAndLocked: backupBeforeUpgrade reaches the
// instance of a driver that can be backed up, the digest covers it, and
// the lockfile keeps it; unset, nothing changes.
func TestBackupFirstIsRecordedAndLocked(t *testing.T) {
	hubOf := func(res *Result) *Instance {
		t.Helper()
		for _, r := range res.Resolved {
			if r.Instance.ID == (ID{"local", "dev", "hub"}) {
				return r.Instance
			}
		}
		t.Fatal("no local/dev/hub")
		return nil
	}
	dir := exampleCopy(t)
	res, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	plain := hubOf(res)
	if plain.BackupFirst {
		t.Fatal("backupFirst without the setting")
	}
	const hub = "clusters/local/environments/dev/deployments/hub.cue"
	data, err := os.ReadFile(dir + "/" + hub)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, hub, string(data)+"backupBeforeUpgrade: true\n")
	res, _, err = resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	in := hubOf(res)
	if !in.BackupFirst {
		t.Fatal("backupBeforeUpgrade: true did not set backupFirst")
	}
	d1, _ := plain.ComputeDigest()
	d2, _ := in.ComputeDigest()
	if d1 == d2 {
		t.Error("the digest does not cover backupFirst")
	}
	in.Sequence = 1
	in.Digest = d2
	lock, err := EncodeLock(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lock), "\nbackupFirst: true\n") {
		t.Errorf("lockfile:\n%s", lock)
	}
	back, err := DecodeLock("locks/local/dev/hub.lock.yaml", lock)
	if err != nil {
		t.Fatal(err)
	}
	if !back.BackupFirst {
		t.Error("decoded lock lost backupFirst")
	}
	plain.Sequence, plain.Digest = 1, d1
	lock, err = EncodeLock(plain)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(lock), "backupFirst") {
		t.Errorf("lockfile without the setting mentions backupFirst:\n%s", lock)
	}
}

// TestEnvironmentsOfTwoClustersCannotShareABackupLocation: clusters/local
// copied to clusters/eu keeping its s3:// backupLocation gives both
// clusters' dev one location, where both agents would write their
// scheduled dev-YYYYMMDD-HHMM and delete each other's by retention. The
// lock, under either policy, is refused naming both files, the field and
// the two dev, not eu's qa beside them (no environment of local takes its
// backup IDs). The agent's settings of those two environments are read,
// with the error as their LocationErr (their new backups and restores are
// refused), not as Err, which made their schedules, retention and every
// deletion of a backup of the cluster wait; a location of eu's own is
// accepted.
func TestEnvironmentsOfTwoClustersCannotShareABackupLocation(t *testing.T) {
	dir := exampleCopy(t)
	const cluster = "domain: \"%s.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nbackupLocation: \"%s\"\nbackups: secret: \"backup-credentials\"\n"
	const dev = "namespacePrefix: \"dev\"\nbackups: {schedule: \"0 3 * * *\", keep: 7}\n"
	writeFile(t, dir, "clusters/local/cluster.cue", fmt.Sprintf(cluster, "local", "s3://backups/local"))
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", dev)
	writeFile(t, dir, "clusters/eu/cluster.cue", fmt.Sprintf(cluster, "eu", "s3://backups/local"))
	writeFile(t, dir, "clusters/eu/environments/dev/environment.cue", dev)
	writeFile(t, dir, "clusters/eu/environments/qa/environment.cue", "")

	ws, err := LoadWorkspace(os.DirFS(dir), WorkspaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if changes, _, err := ws.Lock(LockKeepGoing); err == nil || len(changes) > 0 {
		t.Errorf("lock, keeping going: %d changes, %v; want none and the refusal", len(changes), err)
	}
	changes, _, err := ws.Lock(LockAllOrNothing)
	if err == nil || len(changes) > 0 {
		t.Fatalf("two clusters' dev sharing s3://backups/local locked: %d changes, %v", len(changes), err)
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "backupLocation" {
		t.Errorf("%v: want a *ConfigError of field backupLocation", err)
	}
	for _, w := range []string{"clusters/local/cluster.cue:4:", "clusters/eu/cluster.cue:4:", "field backupLocation", `"s3://backups/local"`, "local/dev", "eu/dev", "environments of the same name in two clusters cannot share a backup location", "expected a location of each cluster's own"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("lock: %v\nwant it to say %q", err, w)
		}
	}
	for _, other := range []string{"local/staging", "eu/qa"} {
		if strings.Contains(err.Error(), other) {
			t.Errorf("lock: %v names %s, which shares its location with no environment of its name in another cluster", err, other)
		}
	}

	got, err := BackupSettings(os.DirFS(dir))
	if err != nil {
		t.Errorf("BackupSettings: %v, want the shared location only on its environments", err)
	}
	byName := map[string]EnvironmentBackups{}
	for _, e := range got {
		byName[e.Cluster+"/"+e.Environment] = e
	}
	for env, want := range map[string][]string{
		"local/dev": {"clusters/local/cluster.cue:4:", "field backupLocation", "eu/dev (set in clusters/eu/cluster.cue:4)"},
		"eu/dev":    {"clusters/eu/cluster.cue:4:", "field backupLocation", "local/dev (set in clusters/local/cluster.cue:4)"},
	} {
		e := byName[env]
		if e.Err != nil || e.LocationErr == nil || e.Location != "s3://backups/local" || e.Schedule != "0 3 * * *" || e.Keep != 7 {
			t.Errorf("%s: %+v, want its settings and the shared location's error", env, e)
			continue
		}
		for _, w := range want {
			if !strings.HasPrefix(e.LocationErr.Error(), want[0]) || !strings.Contains(e.LocationErr.Error(), w) {
				t.Errorf("%s: %v, want it to start with %q and say %q", env, e.LocationErr, want[0], w)
			}
		}
	}
	if e := byName["local/staging"]; e.Err != nil || e.LocationErr != nil || e.Location != "s3://backups/local/staging" {
		t.Errorf("local/staging beside the shared location: %+v, want its own", e)
	}
	if e := byName["eu/qa"]; e.Err != nil || e.LocationErr != nil || e.Location != "s3://backups/local" {
		t.Errorf("eu/qa, sharing the location with no environment of its name: %+v, want its settings", e)
	}

	writeFile(t, dir, "clusters/eu/cluster.cue", fmt.Sprintf(cluster, "eu", "s3://backups/eu"))
	if err := lockErr(t, dir); err != nil {
		t.Errorf("eu with a location of its own: %v", err)
	}
	if _, err := BackupSettings(os.DirFS(dir)); err != nil {
		t.Errorf("BackupSettings, eu with a location of its own: %v", err)
	}
}

// TestEnvironmentsOfOneClusterShareALocationAndEachClusterHasItsOwnClaim:
// the environments of one cluster may back up to one location (their
// backup IDs are the names of StyrminBackups in the one namespace of its
// agent), and two clusters' staging may name one pvc:// claim (each is a
// claim of its own Kubernetes cluster).
func TestEnvironmentsOfOneClusterShareALocationAndEachClusterHasItsOwnClaim(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nbackupLocation: \"s3://backups/local\"\n")
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\n")
	writeFile(t, dir, "clusters/local/environments/staging/environment.yaml", "namespacePrefix: staging\nbackupLocation: pvc://backups\n")
	writeFile(t, dir, "clusters/local/environments/qa/environment.cue", "backupLocation: \"s3://backups/local\"\n")
	writeFile(t, dir, "clusters/eu/cluster.cue", "domain: \"eu.styrmin.dev\"\nbackupLocation: \"pvc://backups\"\n")
	writeFile(t, dir, "clusters/eu/environments/staging/environment.cue", "")
	if err := lockErr(t, dir); err != nil {
		t.Fatal(err)
	}
	got, err := BackupSettings(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range got {
		if e.Location == "" {
			t.Errorf("%s/%s has no location: %+v", e.Cluster, e.Environment, e)
		}
	}
}

// TestBackupFirstWithoutABackupLocationIsRefusedNamingTheFile: an upgrade
// asked to back up first in an environment with no backupLocation would
// fail at its first step in the agent, and every later upgrade with it:
// the resolve refuses it in the file that set the field, saying what is
// expected, and so does upgrade --backup-first, changing no file.
func TestBackupFirstWithoutABackupLocationIsRefusedNamingTheFile(t *testing.T) {
	const (
		env = "clusters/local/environments/dev/environment.cue"
		hub = "clusters/local/environments/dev/deployments/hub.cue"
	)
	hubID := ID{"local", "dev", "hub"}
	for _, tc := range []struct {
		name, file, content string
		line                int
	}{
		{"set by the deployment", hub, "driver: \"graphhub\"\nappVersion: \"1.4.0\"\nbackupBeforeUpgrade: true\nparameters: databasePassword: {name: \"hub-db\", key: \"password\"}\n", 3},
		{"set by the environment", env, "namespacePrefix: \"dev\"\nbackupBeforeUpgrade: true\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			writeFile(t, dir, env, "namespacePrefix: \"dev\"\n")
			writeFile(t, dir, tc.file, tc.content)
			res, _, err := resolveDir(t, dir)
			if res == nil {
				t.Fatal(err)
			}
			if r, ok := res.Get(hubID); ok {
				t.Fatalf("local/dev/hub resolved (backupFirst %v) in an environment with no backupLocation", r.Instance.BackupFirst)
			}
			for _, w := range []string{fmt.Sprintf("%s:%d:", tc.file, tc.line), "field backupBeforeUpgrade", "deployment local/dev/hub: environment local/dev has no backupLocation", "set backupLocation (s3://BUCKET[/PREFIX] or pvc://CLAIM[/PATH]) in " + env + " or clusters/local/cluster.cue"} {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("resolve: %v\nwant it to say %q", err, w)
				}
			}
		})
	}

	t.Run("upgrade --backup-first", func(t *testing.T) {
		dir := exampleCopy(t)
		writeFile(t, dir, env, "namespacePrefix: \"dev\"\n")
		lockDirInto(t, dir)
		before, err := os.ReadFile(dir + "/" + hub)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := upgradeWorkspace(t, dir).PlanUpgrade(UpgradeRequest{Target: UpgradeTarget{"local", "dev", "hub"}, AppVersion: "1.4.1", BackupFirst: true, Now: upgradeDay})
		if err == nil {
			t.Fatalf("accepted, editing %s", plan.Files())
		}
		for _, w := range []string{hub, "field backupBeforeUpgrade", "environment local/dev has no backupLocation", "no file changed"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("upgrade: %v\nwant it to say %q", err, w)
			}
		}
		if after, _ := os.ReadFile(dir + "/" + hub); string(after) != string(before) {
			t.Errorf("%s changed:\n%s", hub, after)
		}
	})
}

// TestClustersWhoseEnvironmentsHaveOtherNamesMayShareABackupLocation: the
// backup IDs an agent gives begin with the environment's name, so
// local's dev and eu's qa and prod never take each other's in the one
// bucket prefix they share: neither the lock nor the agent's settings
// refuse it.
func TestClustersWhoseEnvironmentsHaveOtherNamesMayShareABackupLocation(t *testing.T) {
	dir := exampleCopy(t)
	const cluster = "domain: \"%s.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nbackupLocation: \"s3://backups/shared\"\nbackups: secret: \"backup-credentials\"\n"
	writeFile(t, dir, "clusters/local/cluster.cue", fmt.Sprintf(cluster, "local"))
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\nbackups: {schedule: \"0 3 * * *\", keep: 7}\n")
	writeFile(t, dir, "clusters/eu/cluster.cue", fmt.Sprintf(cluster, "eu"))
	writeFile(t, dir, "clusters/eu/environments/qa/environment.cue", "backups: {schedule: \"0 3 * * *\", keep: 7}\n")
	writeFile(t, dir, "clusters/eu/environments/prod/environment.cue", "backupLocation: \"s3://backups/shared\"\n")
	if err := lockErr(t, dir); err != nil {
		t.Fatalf("local/dev, eu/qa and eu/prod sharing s3://backups/shared: %v", err)
	}
	got, err := BackupSettings(os.DirFS(dir))
	if err != nil {
		t.Fatalf("BackupSettings: %v", err)
	}
	shared := 0
	for _, e := range got {
		if e.Err != nil || e.Location == "" {
			t.Errorf("%s/%s: %+v, want its location", e.Cluster, e.Environment, e)
		}
		if e.Location == "s3://backups/shared" {
			shared++
		}
	}
	if shared != 3 {
		t.Errorf("%d environments back up to s3://backups/shared, want local/dev, eu/qa and eu/prod: %+v", shared, got)
	}
}

// lockErr is the error of a lock of dir, all or nothing, as styrminctl
// lock loads it.
func lockErr(t *testing.T, dir string) error {
	t.Helper()
	ws, err := LoadWorkspace(os.DirFS(dir), WorkspaceOptions{})
	if err != nil {
		return err
	}
	_, _, err = ws.Lock(LockAllOrNothing)
	return err
}

// TestTheAgentReadsARepositoryWhoseClustersShareABackupLocation: a
// repository locked before the check of shared backup locations, whose
// clusters' dev share one, was refused by Load, which the agent's reveal
// of sensitive values reads: after the agent's upgrade every deployment
// with a sensitive parameter, in every cluster, stalled. The load and the
// reveal read it; the lock alone refuses it.
func TestTheAgentReadsARepositoryWhoseClustersShareABackupLocation(t *testing.T) {
	const secret = "shared-s3cret"
	dir := exampleCopy(t)
	spec := "drivers/webapp/1.1.0/driver.cue"
	src, err := os.ReadFile(filepath.Join(dir, spec))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, spec, strings.Replace(string(src), `message: *"Hello from Styrmin" | string & !=""`, `message: *"Hello from Styrmin" | string & !="" @styrmin(sensitive)`, 1))
	writeFile(t, dir, "clusters/local/environments/dev/deployments/web.cue", "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \""+secret+"\"}\n")
	res, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := res.Get(ID{Cluster: "local", Environment: "dev", Name: "web"})
	if !ok {
		t.Fatal("local/dev/web did not resolve")
	}
	// eu, a copy of local, keeps dev's s3://backups/local/dev.
	if err := os.CopyFS(filepath.Join(dir, "clusters/eu"), os.DirFS(filepath.Join(dir, "clusters/local"))); err != nil {
		t.Fatal(err)
	}
	if _, err := NewLoader(0).Load(os.DirFS(dir)); err != nil {
		t.Fatalf("Load of a repository whose clusters' dev share a backup location: %v", err)
	}
	cat, err := drivers.LoadCatalog(os.DirFS(dir), "drivers", drivers.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	drv, ok := cat.Get("webapp", r.Instance.Driver.Version)
	if !ok {
		t.Fatal("webapp is not in the catalog")
	}
	got, err := RevealSensitiveFS(os.DirFS(dir), drv, r.Instance)
	if err != nil || len(got) != 1 {
		t.Fatalf("RevealSensitiveFS = %d values, %v; want the one value", len(got), err)
	}
	if err := lockErr(t, dir); err == nil || !strings.Contains(err.Error(), "field backupLocation") {
		t.Errorf("lock: %v, want the shared backupLocation refused", err)
	}
}
