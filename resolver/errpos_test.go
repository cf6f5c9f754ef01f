package resolver

import (
	"strings"
	"testing"
)

// cueNoise is CUE's own phrasing, which speaks of its evaluator and our
// schema rather than of what the user wrote: none of it may reach users.
var cueNoise = []string{
	"empty disjunction", "more errors", "conflicting values", "mismatched types",
	"#Deployment", "#Environment", "#Cluster", "#Settings", "#Name", "styrmin-schema.cue",
	"incomplete value", "field not allowed", "'EOF'", "does not satisfy",
}

// TestConfigErrorsNamePositionFieldAndWhatToDo pins, for each kind of
// error in a desired-state file, the whole message: file:line:column of
// what the user wrote, the field, and what it must be, one line per
// problem in position order.
func TestConfigErrorsNamePositionFieldAndWhatToDo(t *testing.T) {
	const (
		devDir  = "clusters/local/environments/dev"
		webCUE  = devDir + "/deployments/web.cue"
		hubCUE  = devDir + "/deployments/hub.cue"
		webYAML = "clusters/local/environments/staging/deployments/web.yaml"
	)
	web := func(params string) string {
		return "// Web front end of dev.\ndriver:     \"webapp\"\nappVersion: \"1.25.0\"\n\n// Scaled up for the load test.\nparameters: {\n" + params + "}\n"
	}
	cases := []struct {
		name, file, content string
		want                []string // the error's lines, in order
	}{
		{"yaml syntax error", webYAML, "driver: webapp\nappVersion: [1.25.0\n",
			[]string{webYAML + `:2:13: invalid YAML: did not find expected ',' or ']'`}},
		{"yaml indentation error", webYAML, "driver: webapp\n  appVersion: 1.25.0\n",
			[]string{webYAML + `:2:3: invalid YAML: mapping values are not allowed in this context`}},
		{"cue syntax error", webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 2 3\n",
			[]string{webCUE + `:3:25: missing ',' in struct literal`}},
		{"cue syntax error at the end of the file", webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {\n",
			[]string{webCUE + `:3:15: expected '}', found the end of the file`}},
		{"type mismatch of a parameter", webCUE, web("\treplicas: \"two\"\n"),
			[]string{"local/dev/web: " + webCUE + `:7:12: field parameters.replicas: must be an integer, got "two"`}},
		{"type mismatch of a parameter in YAML", webYAML, "driver: webapp\nappVersion: 1.25.0\nparameters:\n  replicas: many\n",
			[]string{"local/staging/web: " + webYAML + `:4:13: field parameters.replicas: must be an integer, got "many"`}},
		{"type mismatch of a setting", devDir + "/environment.cue", "namespacePrefix: \"dev\"\ndedicatedIngress: \"yes\"\n",
			[]string{devDir + `/environment.cue:2:19: field dedicatedIngress: must be a bool (true or false), got "yes"`}},
		{"type mismatch of the driver", webCUE, "driver: 3\nappVersion: \"1.25.0\"\n",
			[]string{webCUE + `:1:9: field driver: must be a string or a struct {name, version, upgrade}, got 3`}},
		{"out-of-range constraint", webCUE, web("\treplicas: 50\n"),
			[]string{"local/dev/web: " + webCUE + `:7:12: field parameters.replicas: must be at most 10, got 50`}},
		{"pattern of a setting", webCUE, "driver: \"webapp\"\nappVersion: \"latest\"\n",
			[]string{webCUE + `:2:13: field appVersion: must match the regular expression ^v?[0-9]+\.[0-9]+\.[0-9]+([-+].*)?$, got "latest"`}},
		{"pattern inside one alternative", webCUE, "driver: {name: \"Web_App\"}\nappVersion: \"1.25.0\"\n",
			[]string{webCUE + `:1:16: field driver.name: must match the regular expression ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$, got "Web_App"`}},
		{"enum mismatch", webCUE, web("\tsize: \"huge\"\n"),
			[]string{"local/dev/web: " + webCUE + `:7:8: field parameters.size: must be one of "small", "medium", "large", got "huge"`}},
		{"enum mismatch set by the environment", devDir + "/environment.cue", "namespacePrefix: \"dev\"\nparameters: logLevel: \"verbose\"\n",
			[]string{"local/dev/hub: " + devDir + `/environment.cue:2:23: field parameters.logLevel: must be one of "info", "debug", "warning", "error", got "verbose"`}},
		{"unknown field", webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nreplicas: 3\n",
			[]string{webCUE + `:3:1: field replicas: unknown field (allowed here: appVersion, backupBeforeUpgrade, backupLocation, backups, config, connects, dedicatedIngress, domain, driver, hold, ingressClass, parameters, storageClasses)`}},
		{"unknown field of the driver", webCUE, "driver: {name: \"webapp\", versoin: \"1.1.0\"}\nappVersion: \"1.25.0\"\n",
			[]string{webCUE + `:1:26: field driver.versoin: unknown field`}},
		{"unknown parameter", webCUE, web("\tcolour: \"red\"\n"),
			[]string{"local/dev/web: " + webCUE + `:7:10: field parameters.colour: driver webapp@1.1.0 has no parameter "colour" (it has: ingress, message, replicas, size)`}},
		{"missing required parameter", hubCUE, "driver:     \"graphhub\"\nappVersion: \"1.4.0\"\nparameters: {\n\tworkers: 2\n}\n",
			[]string{"local/dev/hub: " + hubCUE + `:3:13: field parameters.databasePassword: required, not set (expected a secret reference {name, key})`}},
		{"missing required field", webCUE, "driver: \"webapp\"\n",
			[]string{webCUE + `:1:1: field appVersion: required, not set`}},
		{"one field set twice", webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 2\nparameters: replicas: 3\n",
			// A parameter may be sensitive, which only its driver tells:
			// its two values are not quoted.
			[]string{webCUE + `:4:23: field parameters.replicas: set to two different values (not shown: a parameter may be sensitive): keep one`}},
		{"another field set twice", webCUE, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nappVersion: \"1.26.0\"\n",
			[]string{webCUE + `:3:13: field appVersion: set to both "1.26.0" and "1.25.0": keep one`}},
		{"several errors, in position order", webCUE, web("\tsize:     \"huge\"\n\treplicas: 50\n\tingress:  \"yes\"\n"),
			[]string{
				"local/dev/web: " + webCUE + `:7:12: field parameters.size: must be one of "small", "medium", "large", got "huge"`,
				webCUE + `:8:12: field parameters.replicas: must be at most 10, got 50`,
				webCUE + `:9:12: field parameters.ingress: must be a bool (true or false), got "yes"`,
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			writeFile(t, dir, tc.file, tc.content)
			res, _, err := resolveDir(t, dir)
			if err == nil {
				t.Fatal("no error")
			}
			if res != nil {
				// Only the deployment at fault: the others that connect to
				// it fail too, and are pinned elsewhere.
				err = nil
				for _, de := range res.Errors {
					if strings.HasPrefix(tc.want[0], de.ID.String()+": ") {
						err = de
					}
				}
				if err == nil {
					t.Fatalf("no error for the deployment of %q in %v", tc.want[0], res.Err())
				}
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("error:\n%s\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
			for _, n := range cueNoise {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error %q shows CUE's %q", err, n)
				}
			}
		})
	}
}
