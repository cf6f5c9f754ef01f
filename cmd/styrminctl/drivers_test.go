package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// examplesRepo is the example desired-state repository, whose drivers/
// folder holds the example drivers.
const examplesRepo = "../../examples"

// runDrivers runs styrminctl in-process and returns stdout and the error.
func runDrivers(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestDriversListText(t *testing.T) {
	t.Parallel()
	out, err := runDrivers(t, "--repo", examplesRepo, "drivers", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"NAME           VERSION  APP VERSIONS",
		"graphhub       1.0.0    >=1.0.0 <1.5.0",
		"graphhub       2.0.0    >=1.5.0 <2.0.0",
		"ingress-nginx  1.0.0    >=1.10.0 <2.0.0",
		"schemademo     1.0.0    >=1.0.0 <2.0.0",
		"webapp         1.0.0    >=1.24.0 <1.28.0",
		"webapp         1.1.0    >=1.24.0 <2.0.0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}
}

func TestDriversListJSONAndYAMLAgree(t *testing.T) {
	t.Parallel()
	js, err := runDrivers(t, "--repo", examplesRepo, "drivers", "list", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON []map[string]any
	if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
		t.Fatal(err)
	}
	ys, err := runDrivers(t, "--repo", examplesRepo, "drivers", "list", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	var fromYAML []map[string]any
	if err := yaml.Unmarshal([]byte(ys), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if len(fromJSON) != 6 || len(fromYAML) != 6 {
		t.Fatalf("%d and %d entries, want 6", len(fromJSON), len(fromYAML))
	}
	for i := range fromJSON {
		for _, k := range []string{"name", "version", "appVersions", "digest", "source"} {
			if fromJSON[i][k] != fromYAML[i][k] || fromJSON[i][k] == "" {
				t.Errorf("entry %d field %s: json %v, yaml %v", i, k, fromJSON[i][k], fromYAML[i][k])
			}
		}
	}
	if fromJSON[0]["source"] != "drivers/graphhub/1.0.0" {
		t.Errorf("source = %v", fromJSON[0]["source"])
	}
}

func TestDriversListOfARepositoryWithoutDriversSaysSo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "styrmin.cue"), []byte("deletionThreshold: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runDrivers(t, "--repo", dir, "drivers", "list")
	if err != nil || !strings.Contains(out, "no drivers in") {
		t.Fatalf("out %q, err %v", out, err)
	}
}

func TestDriversShowText(t *testing.T) {
	t.Parallel()
	out, err := runDrivers(t, "--repo", examplesRepo, "drivers", "show", "graphhub@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"graphhub 1.0.0: Graph data hub",
		"app versions: >=1.0.0 <1.5.0",
		"databasePassword  secret  (required)",
		"workers           int     2           int & >=0 & <=20",
		"server: Deployment",
		"database: StatefulSet {app.kubernetes.io/component=database,app.kubernetes.io/name=graphhub}",
		"api: http port 8000 on server, ingress",
		"pre:   1. stopComponents worker\n           2. runJob job migrate from server `graphhub db migrate` (timeout 15m0s)",
		"core:  1. upgradeDeploymentVersion\n    post:  1. startComponents worker\n           2. waitReady server, worker (timeout 5m0s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
}

func TestDriversShowNewestByDefault(t *testing.T) {
	t.Parallel()
	out, err := runDrivers(t, "--repo", examplesRepo, "drivers", "show", "webapp", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Version    string `json:"version"`
		Parameters []struct {
			Name    string `json:"name"`
			Default any    `json:"default"`
		} `json:"parameters"`
		Actions map[string]map[string][]struct {
			Action string `json:"action"`
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.Version != "1.1.0" {
		t.Errorf("version = %s, want the newest, 1.1.0", d.Version)
	}
	if len(d.Parameters) != 4 || d.Parameters[2].Name != "replicas" || d.Parameters[2].Default != float64(1) {
		t.Errorf("parameters = %+v", d.Parameters)
	}
	if got := d.Actions["upgrade"]["post"]; len(got) != 1 || got[0].Action != "waitReady" {
		t.Errorf("upgrade post = %+v", got)
	}
	if got := d.Actions["setup"]["core"]; len(got) != 1 || got[0].Action != "upgradeDeploymentVersion" {
		t.Errorf("setup core = %+v (the default core step)", got)
	}
}

func TestDriversShowYAML(t *testing.T) {
	t.Parallel()
	out, err := runDrivers(t, "--repo", examplesRepo, "drivers", "show", "graphhub@2.0.0", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "name: graphhub\n") || !strings.Contains(out, "- action: exec\n") {
		t.Fatalf("yaml output:\n%s", out)
	}
}

func TestDriversShowUnknown(t *testing.T) {
	t.Parallel()
	_, err := runDrivers(t, "--repo", examplesRepo, "drivers", "show", "nope")
	if err == nil || !strings.Contains(err.Error(), "driver nope: unknown driver (the repository has: graphhub, ingress-nginx, schemademo, webapp)") {
		t.Fatalf("err = %v", err)
	}
	_, err = runDrivers(t, "--repo", examplesRepo, "drivers", "show", "webapp@9.0.0")
	if err == nil || !strings.Contains(err.Error(), "driver webapp has no version 9.0.0 (loaded: 1.0.0, 1.1.0)") {
		t.Fatalf("err = %v", err)
	}
}

func TestDriversLintExample(t *testing.T) {
	t.Parallel()
	out, err := runDrivers(t, "drivers", "lint", filepath.Join(examplesRepo, "drivers", "graphhub", "2.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"graphhub@2.0.0: ok (9 objects)", "StatefulSet  graphhub-database  database", "ConfigMap    graphhub-config    -", "Ingress      graphhub           -"} {
		if !strings.Contains(out, want) {
			t.Errorf("lint output lacks %q:\n%s", want, out)
		}
	}
}

func TestDriversLintParamsAndManifests(t *testing.T) {
	t.Parallel()
	out, err := runDrivers(t, "drivers", "lint", filepath.Join(examplesRepo, "drivers", "webapp", "1.1.0"),
		"-p", "ingress=true", "-p", "replicas=4", "--manifests", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Objects   []struct{ Kind string } `json:"objects"`
		Manifests string                  `json:"manifests"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Objects) != 4 || rep.Objects[3].Kind != "Ingress" || !strings.Contains(rep.Manifests, "replicas: 4") {
		t.Fatalf("report: %+v", rep)
	}
	_, err = runDrivers(t, "drivers", "lint", filepath.Join(examplesRepo, "drivers", "webapp", "1.1.0"), "-p", "replicas=40")
	if err == nil || !strings.Contains(err.Error(), "parameter replicas: must be at most 10, got 40") {
		t.Fatalf("err = %v", err)
	}
}

func TestDriversLintBrokenFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"driver.cue":               "name: \"broken\"\nversion: \"1.0.0\"\nappVersions: \">=1\"\ncomponents: app: workloads: [{kind: \"Deployment\", name: \"x\"}]\nservices: web: {component: \"frontend\", port: 80}\n",
		"chart/Chart.yaml":         "apiVersion: v2\nname: broken\nversion: 1.0.0\n",
		"chart/templates/dep.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
	}
	for p, c := range files {
		path := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := runDrivers(t, "drivers", "lint", dir)
	if err == nil || !strings.Contains(err.Error(), "driver.cue:5:") || !strings.Contains(err.Error(), `services.web.component: unknown component "frontend"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestDriversRejectsUnknownOutput(t *testing.T) {
	t.Parallel()
	_, err := runDrivers(t, "--repo", examplesRepo, "drivers", "list", "-o", "xml")
	if err == nil || !strings.Contains(err.Error(), `unknown output format "xml"`) {
		t.Fatalf("err = %v", err)
	}
}
