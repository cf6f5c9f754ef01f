package drivers

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hookChartSpec is the driver of the hook tests: a helm-create-like chart
// (a Deployment, a Service and its test Pod) with one component.
const hookChartSpec = `name:        "hooked"
version:     "1.2.0"
appVersions: ">=1.0.0 <2.0.0"
parameters: {
	// Pods.
	replicas: *1 | int & >=1 & <=3
}
components: app: workloads: [{kind: "Deployment", name: context.deployment.name}]
services: http: {component: "app", port: 80}
values: replicaCount: context.parameters.replicas
`

// helmCreateChart is the chart `helm create` writes, cut down: its
// templates/tests/test-connection.yaml is the Pod running wget that
// `helm test` runs, annotated helm.sh/hook: test.
var helmCreateChart = map[string]string{
	"chart/Chart.yaml":  "apiVersion: v2\nname: hooked\nversion: 0.1.0\nappVersion: \"1.16.0\"\n",
	"chart/values.yaml": "replicaCount: 1\nservice:\n  port: 80\n",
	"chart/templates/_helpers.tpl": `{{- define "hooked.fullname" -}}{{ .Release.Name }}{{- end }}
{{- define "hooked.labels" -}}app.kubernetes.io/name: hooked
app.kubernetes.io/instance: {{ .Release.Name }}{{- end }}
`,
	"chart/templates/NOTES.txt": "Run helm test {{ .Release.Name }}.\n",
	"chart/templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "hooked.fullname" . }}
  labels:
    {{- include "hooked.labels" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicaCount }}
  selector:
    matchLabels:
      {{- include "hooked.labels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "hooked.labels" . | nindent 8 }}
    spec:
      containers:
        - name: hooked
          image: nginx:1.16.0
          ports:
            - name: http
              containerPort: 80
`,
	"chart/templates/service.yaml": `apiVersion: v1
kind: Service
metadata:
  name: {{ include "hooked.fullname" . }}
  labels:
    {{- include "hooked.labels" . | nindent 4 }}
spec:
  ports:
    - port: {{ .Values.service.port }}
      targetPort: http
      name: http
  selector:
    {{- include "hooked.labels" . | nindent 4 }}
`,
	"chart/templates/tests/test-connection.yaml": `apiVersion: v1
kind: Pod
metadata:
  name: "{{ include "hooked.fullname" . }}-test-connection"
  labels:
    {{- include "hooked.labels" . | nindent 4 }}
  annotations:
    "helm.sh/hook": test
spec:
  containers:
    - name: wget
      image: busybox
      command: ['wget']
      args: ['{{ include "hooked.fullname" . }}:{{ .Values.service.port }}']
  restartPolicy: Never
`,
}

// writeHookDriver writes the driver (spec, helmCreateChart and extra
// files, "" removing one) into a temporary folder and returns it.
func writeHookDriver(t *testing.T, spec string, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"driver.cue": spec}
	for p, s := range helmCreateChart {
		files[p] = s
	}
	for p, s := range extra {
		files[p] = s
	}
	for p, s := range files {
		if s == "" {
			continue
		}
		f := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const hookSource = "drivers/hooked/1.2.0"

// renderHookDriver loads the driver in dir and renders it with params
// through Render, RenderForPolicy and Lint, which must agree; the load's
// error is returned first.
func renderHookDriver(t *testing.T, dir string, params map[string]any) (*Manifests, error) {
	t.Helper()
	d, err := Load(os.DirFS(dir), LoadOptions{Source: hookSource})
	if err != nil {
		return nil, err
	}
	c, err := d.SampleContextWith(params)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.Render(c, vals)
	_, policyErr := d.RenderForPolicy(t.Context(), c, vals)
	_, lintErr := d.Lint(params)
	for what, e := range map[string]error{"RenderForPolicy": policyErr, "Lint": lintErr} {
		if (e == nil) != (err == nil) || (e != nil && e.Error() != err.Error()) {
			t.Errorf("%s: %v; Render: %v", what, e, err)
		}
	}
	return m, err
}

func objectNames(m *Manifests) []string {
	var out []string
	for _, o := range m.Objects {
		out = append(out, o.Kind+"/"+o.Name)
	}
	return out
}

// TestChartTestHookIsLeftOut: the test Pod every `helm create` chart has
// (templates/tests/test-connection.yaml, helm.sh/hook: test) is not
// rendered, as Helm's install leaves it out (only `helm test` runs it);
// the chart's other objects are.
func TestChartTestHookIsLeftOut(t *testing.T) {
	m, err := renderHookDriver(t, writeHookDriver(t, hookChartSpec, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(objectNames(m), " ")
	if want := "Service/hooked Deployment/hooked"; got != want {
		t.Fatalf("rendered %s, want %s (no test Pod)", got, want)
	}
	for _, o := range m.Objects {
		if strings.Contains(string(o.YAML), "helm.sh/hook") {
			t.Errorf("%s/%s rendered with a hook annotation:\n%s", o.Kind, o.Name, o.YAML)
		}
	}
}

// TestHelmHookAnnotations is the table of helm.sh/hook values: objects
// whose hooks are only `helm test`'s (test, and Helm 2's test-success and
// test-failure; spelled as Helm parses them) are left out, and so are
// those naming an event Helm 4 does not know (crd-install, an empty
// value), which Helm's install skips; any other hook (one, several,
// mixed with test) refuses the
// render with an error naming the driver, the template, the object, the
// value and what to do instead, from Load's sample render and from a
// render whose parameters alone turn the hook on; other annotations, a
// hook's weight alone included, leave an object ordinary, and so does a
// driver patch that removes the annotation.
func TestHelmHookAnnotations(t *testing.T) {
	job := func(annotations string) string {
		return "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}-migrate\n" + annotations +
			"spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: migrate\n          image: busybox\n"
	}
	hook := func(v string) string {
		return job("  annotations:\n    helm.sh/hook: " + v + "\n    helm.sh/hook-delete-policy: hook-succeeded\n")
	}
	const removeHook = `
patches: [{
	target: {kind: "Job"}
	jsonPatch: [{op: "remove", path: "/metadata/annotations/helm.sh~1hook"}]
}]
`
	cases := []struct {
		name, template, spec string
		// kept: the Job is rendered; neither kept nor refused: left out.
		kept, refused bool
	}{
		{name: "test", template: hook("test")},
		{name: "legacy test-success", template: hook("test-success")},
		{name: "legacy test-failure", template: hook("test-failure")},
		{name: "test hooks spelled loosely", template: hook(`" Test-Success, test ,"`)},
		{name: "pre-upgrade", template: hook("pre-upgrade"), refused: true},
		{name: "several hooks", template: hook("pre-install,post-install"), refused: true},
		{name: "test with another hook", template: hook("test,post-install"), refused: true},
		{name: "post-delete", template: hook("post-delete"), refused: true},
		// Skipped by Helm's install ("skipping unknown hooks"): left out.
		{name: "Helm 2 crd-install", template: hook("crd-install")},
		{name: "empty", template: hook(`""`)},
		{name: "a known hook and an unknown one", template: hook("pre-upgrade,crd-install")},
		{name: "no hook", template: job(""), kept: true},
		{name: "a hook's weight alone", template: job("  annotations:\n    helm.sh/hook-weight: \"5\"\n"), kept: true},
		{name: "hook removed by a patch", template: hook("pre-upgrade"), spec: removeHook, kept: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const file = "chart/templates/migrate-job.yaml"
			spec := hookChartSpec + tc.spec
			always := writeHookDriver(t, spec, map[string]string{file: tc.template})
			m, loadErr := renderHookDriver(t, always, nil)
			// Rendered only with replicas > 1: Load's sample render passes,
			// a deployment's render refuses. (A patch must match the Job.)
			m2, renderErr := m, loadErr
			if tc.spec == "" {
				sometimes := writeHookDriver(t, spec, map[string]string{file: "{{ if gt (int .Values.replicaCount) 1 }}\n" + tc.template + "{{ end }}\n"})
				if _, err := renderHookDriver(t, sometimes, nil); err != nil {
					t.Fatalf("with the Job off: %v", err)
				}
				m2, renderErr = renderHookDriver(t, sometimes, map[string]any{"replicas": 2})
			}
			if !tc.refused {
				if loadErr != nil || renderErr != nil {
					t.Fatalf("load: %v; render: %v", loadErr, renderErr)
				}
				for _, m := range []*Manifests{m, m2} {
					got := strings.Join(objectNames(m), " ")
					want := "Service/hooked Deployment/hooked"
					if tc.kept {
						want = "Service/hooked Deployment/hooked Job/hooked-migrate"
					}
					if got != want {
						t.Errorf("rendered %s, want %s", got, want)
					}
				}
				return
			}
			value := tc.template[strings.Index(tc.template, "helm.sh/hook: ")+len("helm.sh/hook: "):]
			value = strings.Trim(value[:strings.IndexByte(value, '\n')], `"`)
			for what, err := range map[string]error{"load": loadErr, "render": renderErr} {
				var se *SpecError
				if !errors.As(err, &se) {
					t.Fatalf("%s: %v, want a SpecError", what, err)
				}
				if want := hookSource + "/" + file; se.File != want {
					t.Errorf("%s: error at %q, want %q", what, se.File, want)
				}
				for _, want := range []string{"hooked@1.2.0", "Job hooked-migrate", `helm.sh/hook: "` + value + `"`, HookAdvice} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: %v\ndoes not say %q", what, err, want)
					}
				}
			}
		})
	}
}

// TestEveryRefusedHookIsReported: a chart with two hooks names both
// templates in one error, so its author fixes them at once.
func TestEveryRefusedHookIsReported(t *testing.T) {
	job := func(name, event string) string {
		return "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: " + name + "\n  annotations:\n    helm.sh/hook: " + event +
			"\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: x\n          image: busybox\n"
	}
	dir := writeHookDriver(t, hookChartSpec, map[string]string{
		"chart/templates/pre.yaml":  job("pre", "pre-upgrade"),
		"chart/templates/post.yaml": job("post", "post-install") + "---\n" + job("post-test", "test"),
	})
	_, err := renderHookDriver(t, dir, nil)
	if err == nil {
		t.Fatal("rendered a chart with two hooks")
	}
	for _, want := range []string{"templates/pre.yaml", "Job pre ", "templates/post.yaml", "Job post "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\ndoes not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "post-test") {
		t.Errorf("%v\nnames the test hook, which is left out", err)
	}
}
