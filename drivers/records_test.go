package drivers

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

// TestChartRenderingAReleaseRecordIsRefused: a chart whose Secret has the
// shape of a Helm release record (its type, or the owner=helm label Helm
// lists records by) is refused by Lint (`styrminctl drivers lint`) and by
// Render (what the task and the StyrminDeployment controller call), with
// an error naming the template; an ordinary Secret renders. The Secret is
// rendered only with replicas > 1, so Load's own sample render (replicas
// at its default) passes and Lint and Render are what refuse it; a chart
// rendering it unconditionally is refused by Load already.
func TestChartRenderingAReleaseRecordIsRefused(t *testing.T) {
	cases := []struct {
		name, secret, want string
	}{
		{"record type", "type: helm.sh/release.v1\n", "of type helm.sh/release.v1"},
		{"record labels", "metadata:\n  name: planted\n  labels: {owner: helm, name: app, status: deployed, version: \"9\"}\n", "labelled owner=helm"},
		{"owner label alone", "metadata:\n  name: planted\n  labels: {owner: helm}\n", "labelled owner=helm"},
		{"an ordinary Secret", "metadata:\n  name: planted\n  labels: {owner: team-a, name: app}\ntype: Opaque\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := minimalFS()
			secret := "apiVersion: v1\nkind: Secret\n" + tc.secret
			if !strings.Contains(tc.secret, "metadata:") {
				secret += "metadata:\n  name: sh.helm.release.v1.app.v9\n"
			}
			m["chart/templates/secret.yaml"] = &fstest.MapFile{Data: []byte(secret)}
			_, loadErr := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
			if (loadErr != nil) != (tc.want != "") || (loadErr != nil && !strings.Contains(loadErr.Error(), tc.want)) {
				t.Errorf("load of a chart rendering it always: %v, want an error saying %q", loadErr, tc.want)
			}
			m["chart/templates/secret.yaml"] = &fstest.MapFile{Data: []byte("{{ if gt (int .Values.replicas) 1 }}\n" + secret + "{{ end }}\n")}
			d, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
			if err != nil {
				t.Fatal(err)
			}
			two := map[string]any{"replicas": 2}
			_, lintErr := d.Lint(two)
			c, err := d.SampleContextWith(two)
			if err != nil {
				t.Fatal(err)
			}
			vals, err := d.Values(c)
			if err != nil {
				t.Fatal(err)
			}
			_, renderErr := d.Render(c, vals)
			for what, err := range map[string]error{"lint": lintErr, "render": renderErr} {
				if tc.want == "" {
					if err != nil {
						t.Errorf("%s: %v", what, err)
					}
					continue
				}
				var se *SpecError
				if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(se.File, "templates/secret.yaml") {
					t.Errorf("%s: %v, want a SpecError in templates/secret.yaml saying %q", what, err, tc.want)
				}
			}
		})
	}
}

// TestAReleaseOfMoreObjectsThanTheStatusListsIsRefused: a chart whose
// render holds more objects than a StyrminDeployment's status can list
// is refused by Render, naming the chart and the bound, rather than
// applied with a status the API server refuses for ever; one at the bound
// renders.
func TestAReleaseOfMoreObjectsThanTheStatusListsIsRefused(t *testing.T) {
	m := minimalFS()
	// The default replicas render none; replicas: N renders N-1 more
	// objects, the Deployment making N.
	m["chart/templates/many.yaml"] = &fstest.MapFile{Data: []byte(`{{- range $i := until (int (sub (int .Values.replicas) 1)) }}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: "c{{ $i }}"}
{{- end }}
`)}
	m["driver.cue"] = &fstest.MapFile{Data: []byte(strings.Replace(minimalSpec, "<=3", fmt.Sprintf("<=%d", MaxReleaseObjects+1), 1))}
	d, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	render := func(n int) error {
		t.Helper()
		c, err := d.SampleContextWith(map[string]any{"replicas": n})
		if err != nil {
			t.Fatal(err)
		}
		vals, err := d.Values(c)
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Render(c, vals)
		return err
	}
	if err := render(MaxReleaseObjects); err != nil {
		t.Fatalf("a release of %d objects: %v", MaxReleaseObjects, err)
	}
	err = render(MaxReleaseObjects + 1)
	var se *SpecError
	want := fmt.Sprintf("renders %d objects: expected at most %d", MaxReleaseObjects+1, MaxReleaseObjects)
	if !errors.As(err, &se) || !strings.HasSuffix(se.File, "drivers/mini/1.0.0/chart") || !strings.Contains(se.Msg, want) {
		t.Fatalf("a release of %d objects: %v; want a SpecError naming the chart and saying %q", MaxReleaseObjects+1, err, want)
	}
}
