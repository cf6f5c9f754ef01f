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
