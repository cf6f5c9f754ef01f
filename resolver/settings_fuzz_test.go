package resolver

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

// settingsFiles are the files FuzzSettingsFiles writes the fuzzed text
// to: the repository's, a cluster's and an environment's settings.
var settingsFiles = []string{
	"styrmin.cue", "styrmin.yaml",
	"clusters/c/cluster.cue", "clusters/c/cluster.yaml",
	"clusters/c/environments/e/environment.cue", "clusters/c/environments/e/environment.yaml",
}

// FuzzSettingsFiles feeds arbitrary text as styrmin.cue, cluster.cue or
// environment.cue (CUE or YAML) of an otherwise valid repository: Load
// reads it or refuses it with ConfigErrors, each naming the file and
// saying what was expected, never panics. The checks after the schema
// (rollout, ingress, policy, backups, clonedFrom) are reached this way.
func FuzzSettingsFiles(f *testing.F) {
	for _, s := range []string{
		"deletionThreshold: 1\n",
		"rollout: {waves: 4, gate: \"ready\", pause: \"2s\", order: [\"e\"]}\n",
		"rollout: waves: \"10%\"\n",
		"rollout: waves: 1e300\n",
		"rollout: {order: [\"e\", \"e\"]}\n",
		"limits: {timeout: \"30s\", memory: 536870912}\n",
		"drivers: [{name: \"x\", version: \"1.0.0\", url: \"https://example.com/d.git\", ref: \"main\"}]\n",
		"domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\ningress: {driver: \"ingress-nginx\", appVersion: \"1.2.3\"}\ndedicatedIngress: true\n",
		"policy: {namespaces: [\"shared\"], kinds: [\"Deployment\", \"*\"], serviceAccountName: \"ns/deployer\"}\n",
		"backupLocation: \"s3://backups/c/e\"\nbackups: {secret: \"creds\", schedule: \"0 3 * * *\", keep: 7}\n",
		"backupLocation: \"pvc://claim/path\"\n",
		"clonedFrom: {cluster: \"c\", environment: \"f\", commit: \"0123456789abcdef\", backup: \"b\", deployments: [\"d\"]}\n",
		"namespacePrefix: \"dev\"\nparameters: logLevel: \"debug\"\n",
		"rollout:\n  waves: 2\n  pause: 1m\n",
		"backups:\n  keep: -1\n",
		"deletionThreshold: 100000000000000000000000000000\n",
		"limits: memory: 100000000000000000000000000000\n",
		"backupLocation: \"s3://bucket/p\"\nbackups: keep: 100000000000000000000000000000\n",
		"ingressClass: \"nginx\"\ningress: {driver: \"ingress-nginx\", parameters: {x: 1e400, y: [1.5, -1e-400], z: 100000000000000000000000000000}}\n",
		"ingress:\n  driver: ingress-nginx\n  parameters:\n    x: 1e-400\n    y: [.inf]\n",
		"",
	} {
		for i := range settingsFiles {
			f.Add(s, uint8(i))
		}
	}
	const deployment = "clusters/c/environments/e/deployments/d.cue"
	l := NewLoader(0)
	f.Fuzz(func(t *testing.T, text string, which uint8) {
		file := settingsFiles[int(which)%len(settingsFiles)]
		fsys := fstest.MapFS{
			"clusters/c/cluster.cue":                    {Data: []byte("domain: \"c.example\"\n")},
			"clusters/c/environments/e/environment.cue": {Data: []byte("\n")},
			deployment: {Data: []byte("driver: \"webapp\"\nappVersion: \"1.0.0\"\n")},
		}
		// The fuzzed file replaces the one of its folder.
		for _, other := range settingsFiles {
			if strings.TrimSuffix(other, ".cue") == strings.TrimSuffix(strings.TrimSuffix(file, ".yaml"), ".cue") {
				delete(fsys, other)
			}
		}
		fsys[file] = &fstest.MapFile{Data: []byte(text)}
		_, err := l.Load(fsys)
		if err == nil {
			return
		}
		for _, e := range leafErrors(err) {
			var ce *ConfigError
			if !errors.As(e, &ce) || ce.File != file {
				t.Fatalf("%s = %q: error %v is not a ConfigError naming %s", file, text, e, file)
			}
			if ce.Msg == "" || strings.HasPrefix(ce.Msg, "json: ") {
				t.Fatalf("%s = %q: error %q says not what was expected", file, text, e)
			}
		}
	})
}

// leafErrors are the errors errors.Join put together in err, itself when
// it joins none.
func leafErrors(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leafErrors(e)...)
	}
	return out
}
