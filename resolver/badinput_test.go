package resolver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadInputGivesAClearErrorAndWritesNothing pins, for every kind of bad
// input, that resolution fails with an error naming the file and the field
// (or what was expected) and that no lockfile is written.
func TestBadInputGivesAClearErrorAndWritesNothing(t *testing.T) {
	const (
		devDir     = "clusters/local/environments/dev"
		webCUE     = devDir + "/deployments/web.cue"
		clusterCUE = "clusters/local/cluster.cue"
	)
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string // substrings of the error
	}{
		{"cue syntax error", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/cluster.cue", "domain: \"x\"\nconfig: {\n")
		}, []string{"clusters/local/cluster.cue:", "expected"}},
		{"yaml syntax error", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/environments/staging/deployments/web.yaml", "driver: webapp\nappVersion: [1.25.0\n")
		}, []string{"clusters/local/environments/staging/deployments/web.yaml"}},
		{"unknown field", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nreplicas: 3\n")
		}, []string{webCUE + ":3:1", "field replicas", "unknown field"}},
		{"wrong type of a setting", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "namespacePrefix: \"dev\"\ndedicatedIngress: \"yes\"\n")
		}, []string{devDir + "/environment.cue:2", "field dedicatedIngress", "bool"}},
		{"wrong type of a parameter", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: \"two\"\n")
		}, []string{webCUE, "replicas"}},
		{"unknown parameter", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: colour: \"red\"\n")
		}, []string{webCUE, "parameters.colour", "has no parameter"}},
		{"a deployment file in JSON", func(t *testing.T, dir string) {
			must(t, os.Rename(filepath.Join(dir, webCUE), filepath.Join(dir, devDir, "deployments/web.json")))
		}, []string{devDir + "/deployments/web.json", `extension ".json" is not read`, "rename it NAME.yaml"}},
		{"a deployment file's extension in capitals", func(t *testing.T, dir string) {
			must(t, os.Rename(filepath.Join(dir, webCUE), filepath.Join(dir, devDir, "deployments/web.CUE")))
		}, []string{devDir + "/deployments/web.CUE", `extension ".CUE" is not read`, "in lowercase"}},
		{"a deployment in a folder inside deployments", func(t *testing.T, dir string) {
			must(t, os.MkdirAll(filepath.Join(dir, devDir, "deployments/team-a"), 0o755))
			must(t, os.Rename(filepath.Join(dir, webCUE), filepath.Join(dir, devDir, "deployments/team-a/web.cue")))
		}, []string{devDir + "/deployments/team-a", "a folder inside deployments/ is not read"}},
		{"unknown driver", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"nosuchdriver\"\nappVersion: \"1.25.0\"\n")
		}, []string{webCUE, "field driver", "nosuchdriver"}},
		{"no matching driver version", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"99.0.0\"\n")
		}, []string{webCUE, "field driver", "99.0.0"}},
		{"pinned driver version missing", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: {name: \"webapp\", version: \"9.9.9\"}\nappVersion: \"1.25.0\"\n")
		}, []string{webCUE, "field driver", "9.9.9"}},
		{"bad application version", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"latest\"\n")
		}, []string{webCUE + ":2", "field appVersion"}},
		{"missing environment file", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, devDir, "environment.cue")))
		}, []string{devDir + "/environment.cue", "missing"}},
		{"missing cluster file", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, "clusters/local/cluster.cue")))
		}, []string{"clusters/local/cluster.cue", "missing"}},
		{"reference to a missing deployment", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/deployments/hub.cue", hubWith(`connects: ["db"]`))
		}, []string{devDir + "/deployments/hub.cue", "connects[0]", `no deployment "db"`}},
		{"reference to a missing service", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/deployments/hub.cue", hubWith(`connects: ["web.grpc"]`))
		}, []string{devDir + "/deployments/hub.cue", "connects[0]", `no service "grpc"`}},
		{"two environments with one namespace prefix", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/environments/other/environment.cue", "namespacePrefix: \"dev\"\n")
			writeFile(t, dir, "clusters/local/environments/other/deployments/web.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\n")
		}, []string{webCUE, `namespace "dev-web" is also the namespace of local/other/web (clusters/local/environments/other/deployments/web.cue)`, "never share a namespace"}},
		{"prefix and name that add up to another deployment's namespace", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/deployments/web-x.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\n")
			writeFile(t, dir, "clusters/local/environments/a/environment.cue", "namespacePrefix: \"dev-web\"\n")
			writeFile(t, dir, "clusters/local/environments/a/deployments/x.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\n")
		}, []string{devDir + "/deployments/web-x.cue", `namespace "dev-web-x" is also the namespace of local/a/x`}},
		{"a reserved namespace", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/environments/kube/environment.cue", "namespacePrefix: \"kube\"\n")
			writeFile(t, dir, "clusters/local/environments/kube/deployments/system.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\n")
		}, []string{"clusters/local/environments/kube/deployments/system.cue", `namespace "kube-system"`, "reserved"}},
		{"duplicate deployment names in YAML and CUE", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/deployments/web.yaml", "driver: webapp\nappVersion: 1.25.0\n")
		}, []string{devDir + "/deployments/web", "already defined"}},
		{"duplicate environment files", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.yaml", "namespacePrefix: dev\n")
		}, []string{devDir + "/environment.yaml", "duplicate"}},
		{"path escape through a symlink", func(t *testing.T, dir string) {
			outside := filepath.Join(t.TempDir(), "evil.cue")
			must(t, os.WriteFile(outside, []byte("driver: \"webapp\"\nappVersion: \"1.25.0\"\n"), 0o644))
			must(t, os.Symlink(outside, filepath.Join(dir, devDir, "deployments", "evil.cue")))
		}, []string{devDir + "/deployments/evil.cue", "symbolic link"}},
		{"oversized file", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\n// "+strings.Repeat("x", DefaultMaxFileSize)+"\n")
		}, []string{webCUE, "more than the"}},
		{"folder name that is not a DNS label", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/environments/Prod_1/environment.cue", "")
		}, []string{"clusters/local/environments/Prod_1", "DNS label"}},
		{"list at the top level", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/environments/staging/deployments/web.yaml", "- driver: webapp\n")
		}, []string{"clusters/local/environments/staging/deployments/web.yaml", "expected a struct"}},
		{"ingress driver that does not declare an IngressClass", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, withIngress(`ingress: driver: "webapp"`))
		}, []string{clusterCUE + ":", "field ingress.driver", "does not declare an IngressClass", `provides: ["ingressClass"]`}},
		{"ingress driver whose chart creates no IngressClass of its class", func(t *testing.T, dir string) {
			badIngressDriver(t, dir)
			writeFile(t, dir, clusterCUE, withIngress(`ingress: driver: "bad-ingress"`))
		}, []string{clusterCUE, "ingress.driver", `creates no IngressClass "nginx"`, "it creates: fixed"}},
		{"unknown ingress driver", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, withIngress(`ingress: driver: "nosuchdriver"`))
		}, []string{clusterCUE + ":", "field ingress.driver", "nosuchdriver", "unknown driver"}},
		{"unknown ingress parameter", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, withIngress(`ingress: {driver: "ingress-nginx", parameters: colour: "red"}`))
		}, []string{clusterCUE + ":", "field ingress.parameters.colour", "has no parameter"}},
		{"ingress parameter out of range", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, withIngress(`ingress: {driver: "ingress-nginx", parameters: replicas: 9}`))
		}, []string{clusterCUE + ":6", "field ingress.parameters.replicas", "at most 5"}},
		{"ingress driver version that is not loaded", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, withIngress(`ingress: {driver: "ingress-nginx", version: "9.9.9"}`))
		}, []string{clusterCUE + ":6", "field ingress.version", "9.9.9 is not loaded"}},
		{"ingress without an ingress class", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, "domain: \"local.styrmin.dev\"\ningress: driver: \"ingress-nginx\"\n")
		}, []string{clusterCUE, "field ingressClass", "missing"}},
		{"two environments' ingress controllers serving one class", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, withIngress(`ingress: driver: "ingress-nginx"`+"\ndedicatedIngress: true"))
			writeFile(t, dir, "clusters/local/environments/a/environment.cue", "ingressClass: \"b-nginx\"\n")
			writeFile(t, dir, "clusters/local/environments/a-b/environment.cue", "")
		}, []string{"clusters/local/environments/a/environment.cue:1:1", "field ingressClass", `local/a/styrmin.ingress would serve class "a-b-nginx", which local/a-b/styrmin.ingress serves too`}},
		{"ingress class that is no IngressClass name", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, strings.Replace(withIngress(`ingress: driver: "ingress-nginx"`), `"nginx"`, `"Nginx_1"`, 1))
		}, []string{clusterCUE + ":2", "field ingressClass", `"Nginx_1", which is no IngressClass name`}},
		{"deployment setting dedicatedIngress", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\ndedicatedIngress: true\n")
		}, []string{webCUE + ":3:1", "field dedicatedIngress", "is a cluster setting"}},
		{"deployment in the namespace of its environment's ingress controller", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, withIngress(`ingress: driver: "ingress-nginx"`+"\ndedicatedIngress: true"))
			writeFile(t, dir, devDir+"/deployments/styrmin-ingress.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\n")
		}, []string{devDir + "/deployments/styrmin-ingress.cue", `namespace "dev-styrmin-ingress" is also the namespace of the ingress controller local/dev/styrmin.ingress (clusters/local/cluster.cue)`}},
		{"deployment setting backupLocation", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nbackupLocation: \"s3://backups/web\"\n")
		}, []string{webCUE + ":3:1", "field backupLocation", "backupLocation is an environment setting"}},
		{"deployment setting backups", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nbackups: keep: 3\n")
		}, []string{webCUE + ":3:", "field backups", "backups is an environment setting"}},
		{"backup location of an unknown scheme", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "namespacePrefix: \"dev\"\nbackupLocation: \"gs://backups/dev\"\n")
		}, []string{devDir + "/environment.cue:2", "field backupLocation", "s3://BUCKET[/PREFIX] or pvc://CLAIM[/PATH]"}},
		{"backup location with a bad bucket", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, "domain: \"local.styrmin.dev\"\nbackupLocation: \"s3://Backups_1/local\"\n")
		}, []string{clusterCUE + ":2", "field backupLocation", `bucket "Backups_1"`, "s3://BUCKET[/PREFIX]"}},
		{"backup location with a bad claim", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "backupLocation: \"pvc://My.Claim/dev\"\n")
		}, []string{devDir + "/environment.cue:1", "field backupLocation", `claim "My.Claim"`}},
		{"backup location with an escaping path", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "backupLocation: \"pvc://backups/../prod\"\n")
		}, []string{devDir + "/environment.cue:1", "field backupLocation", `no "." or ".."`}},
		{"backup schedule that is no cron expression", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "backupLocation: \"s3://backups/dev\"\nbackups: schedule: \"every night\"\n")
		}, []string{devDir + "/environment.cue:2", "field backups.schedule", "no cron expression", "0 3 * * *"}},
		{"backup schedule with six fields", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "backupLocation: \"s3://backups/dev\"\nbackups: schedule: \"0 0 3 * * *\"\n")
		}, []string{devDir + "/environment.cue:2", "field backups.schedule", "five fields"}},
		{"backups keeping none", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "backupLocation: \"s3://backups/dev\"\nbackups: keep: 0\n")
		}, []string{devDir + "/environment.cue:2", "field backups.keep", "at least 1"}},
		{"domain with an empty label", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, "domain: \"local..styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\n")
		}, []string{clusterCUE + ":1", "field domain", "DNS-1123 subdomain"}},
		{"domain ending in a dot", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, "domain: \"styrmin.dev.\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\n")
		}, []string{clusterCUE + ":1", "field domain", "DNS-1123 subdomain"}},
		{"domain whose label starts with a hyphen", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, "domain: \"-x.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\n")
		}, []string{clusterCUE + ":1", "field domain", "DNS-1123 subdomain"}},
		{"backups secret that is no Secret name", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, "domain: \"local.styrmin.dev\"\nbackups: secret: \"Backup_Creds\"\n")
		}, []string{clusterCUE + ":2", "field backups.secret", "DNS-1123 subdomain"}},
		{"unknown key in backups", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "backupLocation: \"s3://backups/dev\"\nbackups: retain: 3\n")
		}, []string{devDir + "/environment.cue:2", "retain", "unknown field"}},
		{"backup schedule without a location", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "namespacePrefix: \"dev\"\nbackups: schedule: \"0 3 * * *\"\n")
		}, []string{devDir + "/environment.cue:2", "field backups.schedule", "environment local/dev has no backupLocation"}},
		{"backup retention from the cluster without a location", func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCUE, "domain: \"local.styrmin.dev\"\nbackups: keep: 3\n")
			writeFile(t, dir, devDir+"/environment.cue", "namespacePrefix: \"dev\"\n")
		}, []string{clusterCUE + ":2", "field backups.keep", "environment local/dev has no backupLocation"}},
		{"clone source with a bad backup ID", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "backupLocation: \"s3://backups/dev\"\nclonedFrom: {cluster: \"local\", environment: \"staging\", commit: \"abcdef1\", backup: \"Nightly_1\", location: \"s3://backups/staging\"}\n")
		}, []string{devDir + "/environment.cue:2", "field clonedFrom.backup", "no backup ID"}},
		{"clone source listing a deployment by no name", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "backupLocation: \"s3://backups/dev\"\nclonedFrom: {cluster: \"local\", environment: \"staging\", commit: \"abcdef1\", backup: \"n1\", location: \"s3://backups/staging\", deployments: [\"Web_1\"]}\n")
		}, []string{devDir + "/environment.cue:2", "clonedFrom.deployments"}},
		{"clone source with a bad commit", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "clonedFrom: {cluster: \"local\", environment: \"staging\", commit: \"HEAD\"}\n")
		}, []string{devDir + "/environment.cue:1", "clonedFrom.commit"}},
		{"backup before upgrade of a driver that cannot be backed up", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nbackupBeforeUpgrade: true\n")
		}, []string{webCUE + ":3:", "field backupBeforeUpgrade", "driver webapp@", "declares no backup and restore hooks"}},
		{"backup before upgrade set by the environment for a driver that cannot be backed up", func(t *testing.T, dir string) {
			writeFile(t, dir, devDir+"/environment.cue", "namespacePrefix: \"dev\"\nbackupBeforeUpgrade: true\n")
		}, []string{devDir + "/environment.cue:2:", "field backupBeforeUpgrade", "local/dev/web", "driver webapp@"}},
		{"backup before upgrade that is no boolean", func(t *testing.T, dir string) {
			writeFile(t, dir, webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nbackupBeforeUpgrade: \"yes\"\n")
		}, []string{webCUE + ":3", "field backupBeforeUpgrade", "bool"}},
		{"lockfile edited by hand", func(t *testing.T, dir string) {
			lockDirInto(t, dir)
			p := filepath.Join(dir, "locks/local/dev/web.lock.yaml")
			data, err := os.ReadFile(p)
			must(t, err)
			must(t, os.WriteFile(p, []byte(strings.Replace(string(data), "replicas", "replicaz", 1)), 0o644))
		}, []string{"locks/local/dev/web.lock.yaml", "edited by hand"}},
		{"stray file under locks", func(t *testing.T, dir string) {
			writeFile(t, dir, "locks/local/dev/notes.txt", "hello")
		}, []string{"locks/local/dev/notes.txt", "unexpected file"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			tc.setup(t, dir)
			before := snapshot(t, dir)
			res, locks, err := resolveDir(t, dir)
			if err == nil {
				_, err = planLocksStrict(res, locks)
			}
			if err == nil {
				t.Fatalf("no error, want one mentioning %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if after := snapshot(t, dir); after != before {
				t.Error("bad input changed the repository")
			}
		})
	}
}

// planLocksStrict is PlanLocks that refuses to lock anything while any
// deployment fails, as `styrminctl lock` does by default.
func planLocksStrict(res *Result, locks map[ID]*Instance) ([]LockChange, error) {
	if err := res.Err(); err != nil {
		return nil, err
	}
	return PlanLocks(res, locks)
}

func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.Mode().String() + " " + fi.ModTime().String() + "\n")
		return nil
	})
	must(t, err)
	return b.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hubWith is dev/hub's configuration with an extra line.
func hubWith(extra string) string {
	return "driver: \"graphhub\"\nappVersion: \"1.4.0\"\nparameters: databasePassword: {name: \"hub-db\", key: \"password\"}\n" + extra + "\n"
}
