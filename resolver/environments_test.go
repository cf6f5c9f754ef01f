package resolver

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const cloneCommit = "0123456789abcdef0123456789abcdef01234567"

func cloneWorkspace(t *testing.T, dir string) *Workspace {
	t.Helper()
	ws, err := LoadWorkspace(os.DirFS(dir), WorkspaceOptions{SourceCommit: cloneCommit})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func writePlanFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for p, data := range files {
		if data == nil {
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
				t.Fatal(err)
			}
			continue
		}
		writeFile(t, dir, p, string(data))
	}
}

// TestCloneCopiesTheEnvironmentAndConnectsInsideIt: the clone's
// deployment files are byte-for-byte copies, its environment file is
// rewritten (prefix, location, no schedule, clonedFrom), and after the
// clone every cloned instance reaches only deployments of the clone.
func TestCloneCopiesTheEnvironmentAndConnectsInsideIt(t *testing.T) {
	dir := exampleCopy(t)
	const devEnv = "clusters/local/environments/dev/environment.cue"
	writeFile(t, dir, devEnv, "// dev: the team's environment\nnamespacePrefix: \"dev\"\nbackupLocation:  \"s3://backups/local/dev\"\nbackups: {secret: \"backup-credentials\", schedule: \"0 3 * * *\", keep: 7}\nparameters: logLevel: \"debug\"\n")
	plan, err := cloneWorkspace(t, dir).PlanClone(CloneRequest{Cluster: "local", Source: "dev", Target: "preview", FromBackup: "nightly-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.DroppedSchedule || plan.BackupLocation != "s3://backups/local/preview" || len(plan.Deployments) != 2 {
		t.Errorf("plan %+v", plan)
	}
	for _, rel := range []string{"deployments/hub.cue", "deployments/web.cue"} {
		want, err := os.ReadFile(filepath.Join(dir, "clusters/local/environments/dev", rel))
		if err != nil {
			t.Fatal(err)
		}
		if got := plan.Files()["clusters/local/environments/preview/"+rel]; string(got) != string(want) {
			t.Errorf("%s: copy differs:\n%s\nwant\n%s", rel, got, want)
		}
	}
	env := string(plan.Files()["clusters/local/environments/preview/environment.cue"])
	for _, want := range []string{"// dev: the team's environment", `namespacePrefix: "preview"`, `backupLocation:  "s3://backups/local/preview"`, `secret: "backup-credentials"`,
		`parameters: logLevel: "debug"`, `cluster:     "local"`, `environment: "dev"`, `commit:      "` + cloneCommit + `"`, `backup:      "nightly-1"`, `location:    "s3://backups/local/dev"`, `deployments: ["hub", "web"]`} {
		if !strings.Contains(env, want) {
			t.Errorf("environment file lacks %q:\n%s", want, env)
		}
	}
	if strings.Contains(env, "schedule") || strings.Contains(env, "keep") {
		t.Errorf("environment file keeps the schedule:\n%s", env)
	}
	if !strings.Contains(plan.Subject(), "local/dev → local/preview from backup nightly-1") || plan.Trailers()[0].Value != "local/preview" {
		t.Errorf("subject %q, trailers %v", plan.Subject(), plan.Trailers())
	}

	writePlanFiles(t, dir, plan.Files())
	res, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range res.Resolved {
		if r.Instance.ID.Environment != "preview" {
			continue
		}
		n++
		ctx := r.Instance.Context
		if !strings.HasPrefix(ctx.Deployment.Namespace, "preview-") {
			t.Errorf("%s: namespace %s", r.Instance.ID, ctx.Deployment.Namespace)
		}
		if cf := ctx.Environment.ClonedFrom; cf == nil || cf.Backup != "nightly-1" || cf.Environment != "dev" {
			t.Errorf("%s: clonedFrom %+v", r.Instance.ID, cf)
		}
		for dep, svcs := range ctx.Services {
			for name, ep := range svcs {
				if !strings.Contains(ep.Host, ".preview-"+dep+".") || !strings.Contains(ep.URL, ".preview-"+dep+".") {
					t.Errorf("%s: service %s.%s at %s (%s), outside the clone", r.Instance.ID, dep, name, ep.Host, ep.URL)
				}
			}
		}
		if r.Instance.ID.Name == "hub" && len(ctx.Services["web"]) == 0 {
			t.Errorf("preview/hub does not reach preview/web: %+v", ctx.Services)
		}
	}
	if n != 2 {
		t.Fatalf("%d preview deployments resolved, want 2", n)
	}

	// A deployment added to the clone later is not in the backup: it
	// starts empty (no clone source, so its restoreBackup step skips).
	writeFile(t, dir, "clusters/local/environments/preview/deployments/extra.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\n")
	res, _, err = resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	extra, ok := res.Get(ID{Cluster: "local", Environment: "preview", Name: "extra"})
	if !ok {
		t.Fatalf("preview/extra did not resolve: %v", res.Err())
	}
	if cf := extra.Instance.Context.Environment.ClonedFrom; cf != nil {
		t.Errorf("preview/extra, added after the clone, restores %+v", cf)
	}
	if web, _ := res.Get(ID{Cluster: "local", Environment: "preview", Name: "web"}); web == nil || web.Instance.Context.Environment.ClonedFrom == nil {
		t.Errorf("preview/web no longer restores the backup")
	}
}

// TestCloneOfAYAMLEnvironmentToAnotherPrefix: YAML stays YAML; the
// location's last element is the source's name, so it is replaced.
func TestCloneOfAYAMLEnvironmentToAnotherPrefix(t *testing.T) {
	dir := exampleCopy(t)
	plan, err := cloneWorkspace(t, dir).PlanClone(CloneRequest{Cluster: "local", Source: "staging", Target: "qa", NamespacePrefix: "qa-1"})
	if err != nil {
		t.Fatal(err)
	}
	env := string(plan.Files()["clusters/local/environments/qa/environment.yaml"])
	for _, want := range []string{"# YAML is accepted", "namespacePrefix: qa-1", "backupLocation: s3://backups/local/qa", "clonedFrom:\n  cluster: \"local\"\n  environment: \"staging\"\n  commit: \"" + cloneCommit + "\"\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("environment file lacks %q:\n%s", want, env)
		}
	}
	if plan.DroppedSchedule || strings.Contains(env, "backup:") || strings.Contains(env, "deployments:") {
		t.Errorf("plan %+v:\n%s", plan, env)
	}

	// From a backup: the deployments it holds are listed, and read back.
	plan, err = cloneWorkspace(t, dir).PlanClone(CloneRequest{Cluster: "local", Source: "staging", Target: "qa", NamespacePrefix: "qa-1", FromBackup: "nightly-2"})
	if err != nil {
		t.Fatal(err)
	}
	env = string(plan.Files()["clusters/local/environments/qa/environment.yaml"])
	if !strings.Contains(env, "  backup: \"nightly-2\"\n") || !strings.Contains(env, "  deployments: [hub, web]\n") {
		t.Errorf("environment file lacks the backup and its deployments:\n%s", env)
	}
	writePlanFiles(t, dir, plan.Files())
	settings, err := BackupSettings(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range settings {
		if e.Environment == "qa" && (e.ClonedFrom == nil || !slices.Equal(e.ClonedFrom.Deployments, []string{"hub", "web"})) {
			t.Errorf("qa's clone source read back: %+v", e.ClonedFrom)
		}
	}
}

// TestCloneLocations: the clone's name replaces the source's as the last
// path element, or is appended; into another cluster, the cluster's
// name replaces the source cluster's before it; the second choice ends
// in <cluster>-<name>.
func TestCloneLocations(t *testing.T) {
	for _, tc := range []struct{ in, dstCluster, dst, want string }{
		{"s3://backups/local/dev", "local", "preview", "s3://backups/local/preview s3://backups/local/local-preview"},
		{"s3://backups/local", "local", "preview", "s3://backups/local/preview s3://backups/local/local-preview"},
		{"s3://backups", "local", "preview", "s3://backups/preview s3://backups/local-preview"},
		{"pvc://claim/dev", "local", "preview", "pvc://claim/preview pvc://claim/local-preview"},
		{"s3://backups/local/dev", "other", "dev", "s3://backups/other/dev s3://backups/other/other-dev"},
		{"s3://backups/dev", "other", "dev", "s3://backups/dev s3://backups/other-dev"},
		{"s3://backups/team/dev", "other", "dev", "s3://backups/team/dev s3://backups/team/other-dev"},
	} {
		l, err := ParseBackupLocation(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range cloneLocations(l, "local", "dev", tc.dstCluster, tc.dst) {
			got = append(got, c.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s → %s/%s: %v, want %s", tc.in, tc.dstCluster, tc.dst, got, tc.want)
		}
	}
}

// TestACloneNeverTakesABackupLocationAnEnvironmentUses: a clone into
// another cluster under the source's name (or the name of another
// environment of the source's cluster) kept a location in use, and the
// two clusters' schedules, each naming its backups dev-YYYYMMDD-HHMM,
// wrote the same artefacts, which either cluster's retention deleted.
func TestACloneNeverTakesABackupLocationAnEnvironmentUses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dev      string // dev's backupLocation
		req      CloneRequest
		want     string
		refusals []string
	}{
		{"into another cluster under the same name", "s3://backups/local/dev",
			CloneRequest{Cluster: "local", Source: "dev", Target: "dev", TargetCluster: "other", NamespacePrefix: "dev2"}, "s3://backups/other/dev", nil},
		{"into another cluster under the name of an environment of the source's", "s3://backups/local/dev",
			CloneRequest{Cluster: "local", Source: "dev", Target: "staging", TargetCluster: "other"}, "s3://backups/other/staging", nil},
		{"a location without the cluster's name, under the same name", "s3://backups/dev",
			CloneRequest{Cluster: "local", Source: "dev", Target: "dev", TargetCluster: "other", NamespacePrefix: "dev2"}, "s3://backups/other-dev", nil},
		{"both choices in use", "s3://backups/dev",
			CloneRequest{Cluster: "local", Source: "dev", Target: "dev", TargetCluster: "other", NamespacePrefix: "dev2"}, "",
			[]string{"clusters/other/environments/dev/environment.cue", "field backupLocation", "s3://backups/dev is the backupLocation of local/dev (clusters/local/environments/dev/environment.cue)",
				"s3://backups/other-dev is the backupLocation of local/staging (clusters/local/environments/staging/environment.yaml)", "choose another name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			writeFile(t, dir, "clusters/other/cluster.cue", "domain: \"other.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\n")
			writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\nbackupLocation: \""+tc.dev+"\"\n")
			if tc.refusals != nil {
				writeFile(t, dir, "clusters/local/environments/staging/environment.yaml", "namespacePrefix: staging\nbackupLocation: s3://backups/other-dev\n")
			}
			ws := cloneWorkspace(t, dir)
			before := snapshot(t, dir)
			plan, err := ws.PlanClone(tc.req)
			if tc.refusals != nil {
				if err == nil {
					t.Fatalf("accepted, with the location %s", plan.BackupLocation)
				}
				for _, w := range tc.refusals {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				if snapshot(t, dir) != before {
					t.Error("a refused clone changed the repository")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.BackupLocation == tc.dev || plan.BackupLocation != tc.want {
				t.Errorf("the clone backs up to %s, want %s (the source's is %s)", plan.BackupLocation, tc.want, tc.dev)
			}
			env := string(plan.Files()[plan.EnvironmentFile])
			if !strings.Contains(env, `"`+tc.want+`"`) {
				t.Errorf("the clone's environment file lacks %s:\n%s", tc.want, env)
			}
		})
	}
}

// TestACloneTakesNoLocationAnEnvironmentOfItsNameInAnotherClusterUses:
// local's dev has no backupLocation, so its clone into other takes
// other's, s3://backups/shared, which eu's dev uses too: the two agents
// would write and delete the same dev-YYYYMMDD-HHMM artefacts. Load no
// longer refuses that (the agent reads the repository through it), so
// the clone does, naming the file and the field; under another name it
// may share the location.
func TestACloneTakesNoLocationAnEnvironmentOfItsNameInAnotherClusterUses(t *testing.T) {
	dir := exampleCopy(t)
	const cluster = "domain: \"%s.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nbackupLocation: \"s3://backups/shared\"\n"
	writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\n")
	writeFile(t, dir, "clusters/other/cluster.cue", fmt.Sprintf(cluster, "other"))
	writeFile(t, dir, "clusters/eu/cluster.cue", fmt.Sprintf(cluster, "eu"))
	writeFile(t, dir, "clusters/eu/environments/dev/environment.cue", "")
	ws := cloneWorkspace(t, dir)
	before := snapshot(t, dir)
	plan, err := ws.PlanClone(CloneRequest{Cluster: "local", Source: "dev", Target: "dev", TargetCluster: "other"})
	if err == nil {
		t.Fatalf("other/dev sharing eu/dev's location accepted: %+v", plan)
	}
	for _, w := range []string{"env clone refused, nothing written", "clusters/other/cluster.cue:4:", "field backupLocation", "other/dev", "eu/dev (set in clusters/eu/cluster.cue:4)"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if snapshot(t, dir) != before {
		t.Error("a refused clone changed the repository")
	}
	if _, err := ws.PlanClone(CloneRequest{Cluster: "local", Source: "dev", Target: "qa", TargetCluster: "other"}); err != nil {
		t.Errorf("other/qa sharing the location with eu/dev: %v", err)
	}
}

// TestACloneFromABackupRestoresOnlyThePartsItsRecordHoldsSucceeded: told
// what the backup holds, the clone lists only the deployments whose part
// succeeded (one it holds nothing of starts empty, and the plan says
// which), and refuses one whose part failed or a backup holding none.
func TestACloneFromABackupRestoresOnlyThePartsItsRecordHoldsSucceeded(t *testing.T) {
	dir := exampleCopy(t)
	ws := cloneWorkspace(t, dir)
	req := CloneRequest{Cluster: "local", Source: "dev", Target: "preview", FromBackup: "monday", BackupHolds: map[string]bool{"hub": true}}
	plan, err := ws.PlanClone(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.ClonedFrom.Deployments, []string{"hub"}) || !slices.Equal(plan.NotInBackup, []string{"web"}) {
		t.Errorf("clonedFrom.deployments %v, not in the backup %v; want [hub], [web]", plan.ClonedFrom.Deployments, plan.NotInBackup)
	}
	if env := string(plan.Files()[plan.EnvironmentFile]); !strings.Contains(env, `deployments: ["hub"]`) {
		t.Errorf("environment file:\n%s", env)
	}
	for _, tc := range []struct {
		name  string
		holds map[string]bool
		want  string
	}{
		{"a part that failed", map[string]bool{"hub": false, "web": true}, "backup monday's part of hub did not succeed"},
		{"no part at all", map[string]bool{}, "backup monday holds none of the deployments of local/dev (hub, web)"},
	} {
		req.BackupHolds = tc.holds
		if _, err := ws.PlanClone(req); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "clusters/local/environments/preview/environment.cue") {
			t.Errorf("%s: %v, want a refusal saying %q", tc.name, err, tc.want)
		}
	}
}

// TestACloneFromABackupIsRefusedWhenADriverWouldNotRestoreIt: a clone
// from a backup listed hub to restore it although graphhub's setup hook
// (here without its restoreBackup step) never runs the restore, so the
// clone came up empty and Ready. The clone is refused naming the driver
// and the deployment, nothing written; without --from-backup it clones,
// and web, whose driver cannot back up, is never in the way.
func TestACloneFromABackupIsRefusedWhenADriverWouldNotRestoreIt(t *testing.T) {
	dir := exampleCopy(t)
	const drv = "drivers/graphhub/1.0.0/driver.cue"
	data, err := os.ReadFile(filepath.Join(dir, drv))
	if err != nil {
		t.Fatal(err)
	}
	without := strings.Replace(string(data), `{action: "restoreBackup"},`, "", 1)
	if without == string(data) {
		t.Fatalf("%s has no restoreBackup step to take out", drv)
	}
	writeFile(t, dir, drv, without)
	ws := cloneWorkspace(t, dir)
	_, err = ws.PlanClone(CloneRequest{Cluster: "local", Source: "dev", Target: "preview", FromBackup: "monday"})
	for _, want := range []string{"clusters/local/environments/preview/environment.cue", "nothing written", "driver graphhub@1.0.0 of hub has no restoreBackup step in its setup hook", "clonedFrom.deployments lists them to restore backup monday"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("clone from a backup: %v, want a refusal saying %q", err, want)
		}
	}
	if _, err := ws.PlanClone(CloneRequest{Cluster: "local", Source: "dev", Target: "preview"}); err != nil {
		t.Errorf("clone without a backup: %v", err)
	}
	if _, err := ws.PlanClone(CloneRequest{Cluster: "local", Source: "dev", Target: "preview", FromBackup: "monday", BackupHolds: map[string]bool{"web": true}}); err != nil {
		t.Errorf("clone restoring web only: %v", err)
	}
}

// TestCloneRefusesBadInput: every refusal names the environment and what
// was expected, and no file is written (PlanClone writes nothing; the
// tree is compared all the same).
func TestCloneRefusesBadInput(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		req   CloneRequest
		opts  *WorkspaceOptions
		want  []string
	}{
		{"target exists", nil, CloneRequest{Cluster: "local", Source: "dev", Target: "staging"},
			nil, []string{"clusters/local/environments/staging/environment.cue", "environment local/staging exists already"}},
		{"source missing", nil, CloneRequest{Cluster: "local", Source: "prod", Target: "preview"},
			nil, []string{"clusters/local/environments/prod/environment.cue", `no environment "prod"`, "dev, staging"}},
		{"target cluster missing", nil, CloneRequest{Cluster: "local", Source: "dev", Target: "preview", TargetCluster: "remote"},
			nil, []string{"clusters/remote/cluster.cue", `no cluster "remote"`}},
		{"bad target name", nil, CloneRequest{Cluster: "local", Source: "dev", Target: "Preview_1"},
			nil, []string{"clusters/local/environments/Preview_1/environment.cue", `name "Preview_1" must be a lowercase DNS label`}},
		{"colliding namespace prefix", nil, CloneRequest{Cluster: "local", Source: "dev", Target: "preview", NamespacePrefix: "staging"},
			nil, []string{"clusters/local/environments/preview/environment.cue", `namespace prefix "staging" gives deployment hub the namespace "staging-hub" of local/staging/hub (clusters/local/environments/staging/deployments/hub.cue)`, "--namespace-prefix"}},
		{"reserved namespace prefix", nil, CloneRequest{Cluster: "local", Source: "dev", Target: "kube"},
			nil, []string{"reserved namespace \"kube-hub\""}},
		{"backup ID that is no label", nil, CloneRequest{Cluster: "local", Source: "dev", Target: "preview", FromBackup: "Nightly_1"},
			nil, []string{"clusters/local/environments/preview/environment.cue", `backup "Nightly_1": expected a backup ID`}},
		{"latest not resolved", nil, CloneRequest{Cluster: "local", Source: "dev", Target: "preview", FromBackup: LatestBackup},
			nil, []string{"--from-backup latest must be resolved"}},
		{"from a backup without a location", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\n")
		}, CloneRequest{Cluster: "local", Source: "dev", Target: "preview", FromBackup: "nightly-1"},
			nil, []string{"local/dev has no backupLocation", "no backups to clone from"}},
		{"from a backup on a claim", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\nbackupLocation: \"pvc://backups/dev\"\n")
		}, CloneRequest{Cluster: "local", Source: "dev", Target: "preview", FromBackup: "nightly-1"},
			nil, []string{"local/dev backs up to pvc://backups/dev", "use an s3:// backupLocation"}},
		{"uncommitted configuration", nil, CloneRequest{Cluster: "local", Source: "dev", Target: "preview"},
			&WorkspaceOptions{}, []string{"records the commit of local/dev", "commit it first"}},
		{"environment file defining a field twice", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\nnamespacePrefix: string\n")
		}, CloneRequest{Cluster: "local", Source: "dev", Target: "preview"},
			nil, []string{"clusters/local/environments/dev/environment.cue", "field namespacePrefix", "defines namespacePrefix 2 times"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			opts := WorkspaceOptions{SourceCommit: cloneCommit}
			if tc.opts != nil {
				opts = *tc.opts
			}
			ws, err := LoadWorkspace(os.DirFS(dir), opts)
			if err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, dir)
			plan, err := ws.PlanClone(tc.req)
			if err == nil {
				t.Fatalf("accepted: %+v", plan)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if snapshot(t, dir) != before {
				t.Error("a refused clone changed the repository")
			}
		})
	}
}

// TestEnvironmentDelete: the folder goes; the next lock tombstones its
// deployments and, two being more than the default threshold, needs
// --allow-deletions 2.
func TestEnvironmentDelete(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	ws := cloneWorkspace(t, dir)
	if _, err := ws.PlanEnvironmentDelete(EnvironmentDeleteRequest{Cluster: "local", Environment: "prod"}); err == nil || !strings.Contains(err.Error(), `no environment "prod"`) {
		t.Errorf("deleting a missing environment: %v", err)
	}
	plan, err := ws.PlanEnvironmentDelete(EnvironmentDeleteRequest{Cluster: "local", Environment: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Deployments) != 2 || plan.Deployments[0] != (ID{"local", "dev", "hub"}) || !plan.Deletions.Refused || plan.Deletions.Count != 2 {
		t.Errorf("plan %+v", plan)
	}
	for p, data := range plan.Files() {
		if data != nil || !strings.HasPrefix(p, "clusters/local/environments/dev/") {
			t.Errorf("file %s: %q", p, data)
		}
	}
	writePlanFiles(t, dir, plan.Files())
	// git keeps no empty folders; a working tree is cleaned the same way.
	if err := os.RemoveAll(filepath.Join(dir, filepath.FromSlash(plan.Dir))); err != nil {
		t.Fatal(err)
	}
	res, locks, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	changes, err := PlanLocks(res, locks)
	if err != nil {
		t.Fatal(err)
	}
	if got := Deleted(changes); len(got) != 2 {
		t.Errorf("deleted %v, want dev's two deployments", got)
	}
	_, err = checkDeletions(RepoSettings{}, changes, 0)
	var refused *DeletionsRefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "--allow-deletions 2") {
		t.Errorf("lock without an allowance: %v", err)
	}
	if _, err := checkDeletions(RepoSettings{}, changes, 2); err != nil {
		t.Errorf("lock --allow-deletions 2: %v", err)
	}
}

// TestACloneDoesNotCopyASensitiveValueSetInClear: env clone copied the
// deployment files byte for byte and the environment file's parameters,
// so a sensitive value set in clear in dev's files was written into the
// clone's too (and committed with --commit), where no author wrote it.
// The clone is refused, naming the file and the parameter, never the
// value; a value set in cluster.cue, which the clone reads without a
// copy, clones. Into another cluster, the refusal names that cluster's
// file, not the source's, which the clone does not read.
func TestACloneDoesNotCopyASensitiveValueSetInClear(t *testing.T) {
	const secret = "cl0ne-s3cret"
	markSensitive := func(t *testing.T, dir string) {
		spec := "drivers/webapp/1.1.0/driver.cue"
		src, err := os.ReadFile(filepath.Join(dir, spec))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, spec, strings.Replace(string(src), `message: *"Hello from Styrmin" | string & !=""`, `message: *"Hello from Styrmin" | string & !="" @styrmin(sensitive)`, 1))
		writeFile(t, dir, "clusters/local/environments/dev/deployments/web.cue", "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 2\n")
	}
	req := CloneRequest{Cluster: "local", Source: "dev", Target: "preview"}
	other := req
	other.TargetCluster = "other"
	for _, tc := range []struct {
		name, file, content string
		req                 CloneRequest
	}{
		{"in a deployment file", "clusters/local/environments/dev/deployments/web.cue", "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \"" + secret + "\"}\n", req},
		{"in the environment file", "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\nbackupLocation:  \"s3://backups/local/dev\"\nparameters: message: \"" + secret + "\"\n", req},
		{"in a deployment file, into another cluster", "clusters/local/environments/dev/deployments/web.cue", "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \"" + secret + "\"}\n", other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			markSensitive(t, dir)
			writeFile(t, dir, "clusters/other/cluster.cue", "domain: \"other.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\n")
			writeFile(t, dir, tc.file, tc.content)
			before := snapshot(t, dir)
			plan, err := cloneWorkspace(t, dir).PlanClone(tc.req)
			if err == nil {
				t.Fatalf("a clone copying a sensitive value was planned (%d files)", len(plan.Files()))
			}
			target := cmp.Or(tc.req.TargetCluster, tc.req.Cluster)
			to := strings.Replace(tc.file, "local/environments/dev/", target+"/environments/preview/", 1)
			clusterFile := "clusters/" + target + "/cluster.cue"
			for _, want := range []string{tc.file, "field parameters.message", "sensitive parameter message", to, "#SecretRef", "or set it in " + clusterFile} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the refusal shows the value: %v", err)
			}
			if snapshot(t, dir) != before {
				t.Error("a refused clone changed the repository")
			}
		})
	}

	// Set in cluster.cue, the value stays where its author wrote it.
	dir := exampleCopy(t)
	markSensitive(t, dir)
	writeFile(t, dir, "clusters/local/cluster.cue", "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nparameters: message: \""+secret+"\"\n")
	plan, err := cloneWorkspace(t, dir).PlanClone(req)
	if err != nil {
		t.Fatal(err)
	}
	for p, data := range plan.Files() {
		if strings.Contains(string(data), secret) {
			t.Errorf("%s holds the sensitive value", p)
		}
	}
}

// TestACloneOfADeploymentWhoseDriverIsNotLoadedIsRefusedNotCopiedUnchecked:
// the check for a sensitive value set in clear skipped a deployment
// whose driver the catalog lacked, silently, and copied its files
// unchecked. It is refused, naming the deployment and its driver, as the
// clone's resolution refuses a driver not loaded.
func TestACloneOfADeploymentWhoseDriverIsNotLoadedIsRefusedNotCopiedUnchecked(t *testing.T) {
	ws := cloneWorkspace(t, exampleCopy(t))
	var dev *Environment
	for _, e := range ws.cluster("local").Environments {
		if e.Name == "dev" {
			dev = e
		}
	}
	if dev == nil || len(dev.Deployments) == 0 {
		t.Fatal("the example has no local/dev with deployments")
	}
	res := &Result{}
	for _, d := range dev.Deployments {
		in := &Instance{ID: ID{Cluster: "local", Environment: "preview", Name: d.ID.Name}, Driver: DriverRef{Name: d.Driver, Version: "0.0.0-not-loaded"}}
		res.Resolved = append(res.Resolved, &Resolved{Instance: in, Deployment: d})
	}
	err := ws.sensitiveCopies(res, "clusters/local/cluster.cue", dev, "clusters/local/environments/preview")
	d := dev.Deployments[0]
	for _, want := range []string{d.File, "field driver", "driver " + d.Driver + "@0.0.0-not-loaded", "deployment " + d.ID.String(), "is not loaded", "env clone refused, nothing written"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// TestACloneNamesEverySensitiveValueSetInClearAtOnce: the clone's refusal
// of a sensitive value set in clear named the first one only, so a user
// fixed it, ran the clone again and met the next. Every one is named in
// one error (file and parameter, never the value), sorted by file and
// line, the same on every run.
func TestACloneNamesEverySensitiveValueSetInClearAtOnce(t *testing.T) {
	const secret = "all-at-0nce"
	dir := exampleCopy(t)
	spec := "drivers/webapp/1.1.0/driver.cue"
	src, err := os.ReadFile(filepath.Join(dir, spec))
	must(t, err)
	text := strings.NewReplacer(
		`message: *"Hello from Styrmin" | string & !=""`, `message: *"Hello from Styrmin" | string & !="" @styrmin(sensitive)`,
		`	ingress: *false | bool`, "\tingress: *false | bool\n\ttoken: *\"none\" | string @styrmin(sensitive)",
	).Replace(string(src))
	writeFile(t, dir, spec, text)
	const (
		env  = "clusters/local/environments/dev/environment.cue"
		web  = "clusters/local/environments/dev/deployments/web.cue"
		web2 = "clusters/local/environments/dev/deployments/web2.cue"
	)
	writeFile(t, dir, web, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {\n\ttoken: \""+secret+"-t\"\n\tmessage: \""+secret+"\"\n}\n")
	writeFile(t, dir, web2, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: message: \""+secret+"-2\"\n")
	writeFile(t, dir, env, "namespacePrefix: \"dev\"\nbackupLocation:  \"s3://backups/local/dev\"\nparameters: message: \""+secret+"-env\"\n")
	req := CloneRequest{Cluster: "local", Source: "dev", Target: "preview"}
	_, err = cloneWorkspace(t, dir).PlanClone(req)
	if err == nil {
		t.Fatal("a clone copying four sensitive values was planned")
	}
	msg := err.Error()
	if strings.Contains(msg, secret) {
		t.Errorf("the refusal shows a value: %v", msg)
	}
	// In order: web.cue's token (line 4) then message (line 5), web2.cue,
	// then the environment file.
	last := -1
	for _, want := range []string{web + ":4:", "field parameters.token", web + ":5:", "field parameters.message", web2 + ":3:", "field parameters.message", env + ":3:", "field parameters.message"} {
		i := strings.Index(msg[last+1:], want)
		if i < 0 {
			t.Fatalf("the refusal lacks %q after position %d:\n%s", want, last, msg)
		}
		last += 1 + i
	}
	if n := strings.Count(msg, "env clone refused"); n != 4 {
		t.Errorf("%d refusals, want 4 (one per value):\n%s", n, msg)
	}
	_, again := cloneWorkspace(t, dir).PlanClone(req)
	if again == nil || again.Error() != msg {
		t.Errorf("a second run says another thing:\n%v\nthen:\n%v", msg, again)
	}
}

// TestACloneCopiesNoFileStyrminDoesNotRead: the clone copied every file
// of the source's folder, so an editor's backup of a deployment file
// (web.cue.bak, unread by the loader) holding a sensitive value in clear
// was copied into the clone, and committed with --commit, unchecked:
// the check reads only the files Styrmin reads. The clone now copies the
// environment and deployment files only and names the others.
func TestACloneCopiesNoFileStyrminDoesNotRead(t *testing.T) {
	const secret = "b4ckup-s3cret"
	dir := exampleCopy(t)
	dev := "clusters/local/environments/dev/"
	writeFile(t, dir, dev+"deployments/web.cue.bak", "driver: \"webapp\"\nparameters: password: \""+secret+"\"\n")
	writeFile(t, dir, dev+"deployments/_old/web.cue", "parameters: password: \""+secret+"\"\n")
	writeFile(t, dir, dev+"README.md", "dev\n")
	plan, err := cloneWorkspace(t, dir).PlanClone(CloneRequest{Cluster: "local", Source: "dev", Target: "preview"})
	must(t, err)
	for p, data := range plan.Files() {
		if strings.Contains(string(data), secret) {
			t.Errorf("the clone copies %s, holding the value", p)
		}
	}
	want := []string{"README.md", "deployments/_old/web.cue", "deployments/web.cue.bak"}
	if !slices.Equal(plan.NotCopied, want) {
		t.Errorf("NotCopied %q, want %q", plan.NotCopied, want)
	}
	pre := "clusters/local/environments/preview/"
	for _, f := range []string{pre + "environment.cue", pre + "deployments/web.cue", pre + "deployments/hub.cue"} {
		if _, ok := plan.Files()[f]; !ok {
			t.Errorf("the clone lacks %s (it writes %v)", f, slices.Sorted(maps.Keys(plan.Files())))
		}
	}
}
