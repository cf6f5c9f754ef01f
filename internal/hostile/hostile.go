// Package hostile builds driver folders that try to exhaust whoever
// loads them: templates that loop for minutes, CUE that allocates
// gigabytes, small folders that render or unpack to gigabytes. The tests
// of the drivers package, the CLI and the agent load them under
// test-sized limits and expect each to fail within its limit (tests
// only).
package hostile

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"time"
)

// Case is one hostile driver.
type Case struct {
	// Name names the case in test output.
	Name string
	// Limits are the limits it may hit ("time", "memory", "rendered
	// bytes", "unpacked chart bytes"); empty: it fails some other way
	// (a template error), quickly.
	Limits []string
	// templates are the chart's templates; files other files of the
	// folder (the CUE cases are written in Files).
	templates map[string]string
	files     func() map[string][]byte
}

// TestLimits are the limits the cases are meant for: small enough that
// each fails in a few seconds, far above what the example drivers need.
type TestLimits struct {
	Timeout                           time.Duration
	Memory, RenderedBytes, ChartBytes int64
}

// Test are the test-sized limits.
func Test() TestLimits {
	return TestLimits{Timeout: 4 * time.Second, Memory: 256 << 20, RenderedBytes: 16 << 20, ChartBytes: 32 << 20}
}

// CUE is the limits block for styrmin.cue that sets Test().
func (l TestLimits) CUE() string {
	return fmt.Sprintf("limits: {\n\ttimeout: %q\n\tmemory: %d\n\trenderedBytes: %d\n\tchartBytes: %d\n}\n",
		l.Timeout.String(), l.Memory, l.RenderedBytes, l.ChartBytes)
}

// Cases returns every hostile case.
func Cases() []Case {
	return []Case{
		{Name: "nested-until-template", Limits: []string{"time"},
			templates: map[string]string{"loop.yaml": `{{- range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}`}},
		{Name: "cue-list-range-oom", Limits: []string{"memory", "time"}},
		{Name: "huge-render-small-folder", Limits: []string{"memory", "rendered bytes", "time"},
			templates: map[string]string{"big.yaml": `{{- $s := repeat 1048576 "x" }}{{ range until 4000 }}{{ $s }}{{ end }}`}},
		{Name: "render-over-the-byte-limit", Limits: []string{"rendered bytes"},
			templates: map[string]string{"big.yaml": `{{- $s := repeat 1048576 "x" }}# {{ range until 24 }}{{ $s }}{{ end }}`}},
		{Name: "subchart-archive-bomb", Limits: []string{"unpacked chart bytes"},
			files: archiveBomb},
		{Name: "deep-template-recursion", Limits: nil,
			templates: map[string]string{"_r.tpl": `{{- define "r" }}{{ include "r" . }}{{ end }}`, "r.yaml": `{{ include "r" . }}`}},
		{Name: "deeply-nested-values", Limits: []string{"memory", "time", ""},
			files: nestedValues},
		{Name: "huge-cue-string", Limits: []string{"memory", "time"}},
		{Name: "many-objects", Limits: []string{"memory", "time", "rendered bytes"},
			templates: map[string]string{"many.yaml": "{{- range until 300000 }}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{{ . }}\ndata: {k: v}\n{{- end }}\n"}},
	}
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  selector:
    matchLabels: {app: x}
  template:
    metadata:
      labels: {app: x}
    spec:
      containers:
        - name: app
          image: nginx
`

// Files returns the case's driver folder for name@version (application
// versions >=1.0.0 <2.0.0, every parameter defaulted), paths relative to
// the folder.
func (c Case) Files(name, version string) map[string][]byte {
	values := "values: {}\n"
	imports := ""
	switch c.Name {
	case "cue-list-range-oom":
		imports = "import \"list\"\n\n"
		values = "values: big: list.Range(0, 2e8, 1)\n"
	case "huge-cue-string":
		// CUE's strings.Repeat refuses large results itself; doubling
		// a KiB 21 times asks for 2 GiB.
		values = fmt.Sprintf("_s0: %q\n", strings.Repeat("x", 1024))
		for i := 1; i <= 21; i++ {
			values += fmt.Sprintf("_s%d: _s%d + _s%d\n", i, i-1, i-1)
		}
		values += "values: big: _s21\n"
	}
	spec := imports + fmt.Sprintf(`name:        %q
version:     %q
appVersions: ">=1.0.0 <2.0.0"
components: app: workloads: [{kind: "Deployment", name: context.deployment.name}]
`, name, version) + values
	out := map[string][]byte{
		"driver.cue":                      []byte(spec),
		"chart/Chart.yaml":                []byte(fmt.Sprintf("apiVersion: v2\nname: %s\nversion: %s\n", name, version)),
		"chart/templates/deployment.yaml": []byte(deployment),
	}
	for n, t := range c.templates {
		out["chart/templates/"+n] = []byte(t)
	}
	if c.files != nil {
		for n, b := range c.files() {
			out[n] = b
		}
	}
	return out
}

// archiveBomb is four subchart archives of 48 MiB of zeros each, about
// 50 KiB each on disk.
func archiveBomb() map[string][]byte {
	out := map[string][]byte{}
	for i := range 4 {
		name := fmt.Sprintf("bomb%d", i)
		var buf bytes.Buffer
		gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		tw := tar.NewWriter(gz)
		add := func(p string, data []byte) {
			_ = tw.WriteHeader(&tar.Header{Name: name + "/" + p, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
			_, _ = tw.Write(data)
		}
		add("Chart.yaml", []byte("apiVersion: v2\nname: "+name+"\nversion: 1.0.0\n"))
		add("files/zero", make([]byte, 48<<20))
		_ = tw.Close()
		_ = gz.Close()
		out["chart/charts/"+name+".tgz"] = buf.Bytes()
	}
	return out
}

// nestedValues is a values.yaml nested 150000 levels deep in flow style.
func nestedValues() map[string][]byte {
	const depth = 150000
	return map[string][]byte{"chart/values.yaml": []byte("a: " + strings.Repeat("{a: ", depth) + "1" + strings.Repeat("}", depth) + "\n")}
}

// OverAgentMemory is a driver that loads within the default limits (it
// renders a few bytes, in about a second and some 160 MB) but not under
// an agent limit of 96 MiB: locked by a CI whose limits it meets, it
// fails in the agent alone.
func OverAgentMemory() Case {
	return Case{Name: "over-agent-memory", Limits: []string{"memory"},
		templates: map[string]string{"big.yaml": "{{- $l := until 20000000 }}# {{ len $l }}\n"}}
}
