package drivers

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

func TestLintRendersWithASampleContext(t *testing.T) {
	m := minimalFS()
	// Fails only for some values: Load's own sample render (the
	// defaults) passes, a lint with other values does not.
	m["chart/templates/check.yaml"] = &fstest.MapFile{Data: []byte(`{{ if gt (int .Values.replicas) 2 }}{{ fail "at most 2 replicas on this chart" }}{{ end }}`)}
	d, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}

	rep, err := d.Lint(nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Driver != d || fmt.Sprint(rep.Context.Parameters["replicas"]) != "1" || rep.Context.Deployment.Namespace == "" {
		t.Errorf("report driver %p (want %p), context %+v", rep.Driver, d, rep.Context)
	}
	if len(rep.Manifests.Objects) != 1 {
		t.Fatalf("objects = %+v", rep.Manifests.Objects)
	}
	o := rep.Manifests.Objects[0]
	if o.Kind != "Deployment" || o.Component != "app" || !strings.Contains(string(rep.Manifests.YAML()), "replicas: 1") {
		t.Errorf("object %s %s (component %q):\n%s", o.Kind, o.Name, o.Component, rep.Manifests.YAML())
	}

	rep, err = d.Lint(map[string]any{"replicas": 2})
	if err != nil || !strings.Contains(string(rep.Manifests.YAML()), "replicas: 2") {
		t.Fatalf("replicas=2: %v", err)
	}

	tests := []struct {
		name       string
		params     map[string]any
		wantParams bool // a *SampleParamsError
		want       string
	}{
		{name: "value outside the constraint", params: map[string]any{"replicas": 7}, wantParams: true,
			want: "drivers/mini/1.0.0: driver mini@1.0.0: parameter replicas: must be at most 3, got 7"},
		{name: "unknown parameter", params: map[string]any{"colour": "red"}, wantParams: true, want: "drivers/mini/1.0.0: "},
		{name: "template failing for the values", params: map[string]any{"replicas": 3},
			want: "drivers/mini/1.0.0/chart/templates/check.yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Lint(tc.params)
			if err == nil {
				t.Fatal("no error")
			}
			var pe *SampleParamsError
			if errors.As(err, &pe) != tc.wantParams {
				t.Errorf("error %T %v: SampleParamsError %v, want %v", err, err, !tc.wantParams, tc.wantParams)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestLintNeedsTheParametersWithoutADefault(t *testing.T) {
	m := minimalFS()
	replaceSpec(`replicas: *1 | int & >=1 & <=3`, "replicas: *1 | int & >=1 & <=3\n\tregion: string")(m)
	d, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Lint(nil)
	var pe *SampleParamsError
	if !errors.As(err, &pe) || pe.Source != "drivers/mini/1.0.0" || !strings.Contains(err.Error(), "parameters without a default must be set: region") {
		t.Fatalf("err = %v, want a SampleParamsError naming region", err)
	}
	if _, err := d.Lint(map[string]any{"region": "eu"}); err != nil {
		t.Fatalf("with region set: %v", err)
	}
}

// TestLintRefusesAChartsCRDsFolderNamingTheFile pins what lint says of a
// chart that ships CustomResourceDefinitions in crds/ (its own or a
// subchart's): a render holds the templates only, so Styrmin never
// installed them, nor upgraded them when a new chart version changed
// them, and lint said "ok". Lint now fails naming the file and what to do;
// Load still loads it (an agent runs driver versions already locked).
func TestLintRefusesAChartsCRDsFolderNamingTheFile(t *testing.T) {
	crd := []byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\n")
	for name, file := range map[string]string{
		"the chart's":  "chart/crds/widgets.yaml",
		"a subchart's": "chart/charts/sub/crds/widgets.yaml",
	} {
		t.Run(name, func(t *testing.T) {
			m := minimalFS()
			m[file] = &fstest.MapFile{Data: crd}
			if name == "a subchart's" {
				m["chart/charts/sub/Chart.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: v2\nname: sub\nversion: 0.1.0\n")}
			}
			d, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
			if err != nil {
				t.Fatalf("load: %v; want a driver whose chart has crds/ loaded", err)
			}
			_, err = d.Lint(nil)
			var se *SpecError
			if !errors.As(err, &se) || se.File != "drivers/mini/1.0.0/"+file || !strings.Contains(se.Msg, "crds/") || !strings.Contains(se.Msg, "templates/") {
				t.Fatalf("lint: %v; want an error naming drivers/mini/1.0.0/%s, crds/ and what to do", err, file)
			}
		})
	}
}
