package resolver

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/styrmin/styrmin/internal/secrettest"
)

// quotedValue is the value TestConfigErrorsQuoteNoParameterValue writes
// where a driver parameter's value goes: no error may show it.
const quotedValue = "hunter2XYZ"

// TestConfigErrorsQuoteNoParameterValue writes a parameter's value in
// each form CUE quotes in its messages (a type, alternatives, an
// operator, a constraint, a name, a parser's literal, a YAML tag, the
// parameters or the whole file against another value): the error names
// the file, position, field and what is wrong, never the value.
// Which parameters are sensitive only the driver tells, after the file
// loaded, so no parameter's value is quoted.
func TestConfigErrorsQuoteNoParameterValue(t *testing.T) {
	const (
		webCUE  = "clusters/local/environments/dev/deployments/web.cue"
		webYAML = "clusters/local/environments/staging/deployments/web.yaml"
		hubCUE  = "clusters/local/environments/dev/deployments/hub.cue"
	)
	head := "driver:     \"webapp\"\nappVersion: \"1.25.0\"\n"
	param := func(expr string) string { return head + "parameters: message: " + expr + "\n" }
	v := `"` + quotedValue + `"`
	cases := []struct {
		name, file, content, want string
	}{
		{"a value and a type", webCUE, param(v + " & int"),
			webCUE + `:3:22: field parameters.message: cannot be both a string and an integer (not shown: a parameter may be sensitive)`},
		{"alternatives", webCUE, param(v + ` | "other"`),
			webCUE + `:3:22: field parameters.message: must be a concrete value, got several alternatives (not shown: a parameter may be sensitive): keep one, or mark the default with *`},
		{"an operator", webCUE, param(v + " + 3"),
			webCUE + `:3:22: field parameters.message: cannot apply + to a string and an integer (not shown: a parameter may be sensitive)`},
		{"a constraint", webCUE, param(v + ` & =~"^x"`),
			webCUE + `:3:22: field parameters.message: fails a constraint written with it (not shown: a parameter may be sensitive)`},
		{"a constraint that names the value", webCUE, param(`string & ` + v + ` & !=` + v),
			webCUE + `:3:22: field parameters.message: fails a constraint written with it (not shown: a parameter may be sensitive)`},
		{"a value and a bound", webCUE, param(v + " & <3"),
			webCUE + `:3:22: field parameters.message: cannot be both a string and a number (not shown: a parameter may be sensitive)`},
		{"a value used as a struct", webCUE, param(v + ".field"),
			webCUE + `:3:22: field parameters.message: uses a string as a list or struct (not shown: a parameter may be sensitive)`},
		{"a value without quotes", webCUE, param(quotedValue),
			webCUE + `:3:22: field parameters.message: refers to a name that is not defined (not shown: a parameter may be sensitive): a string needs quotes`},
		{"a struct and a string", webCUE, param(`{a: 1, ` + v + `}`),
			webCUE + `:3:22: field parameters.message: cannot be both a struct and a string (not shown: a parameter may be sensitive)`},
		{"a secret reference and a string", hubCUE, "driver: \"graphhub\"\nappVersion: \"1.4.0\"\nparameters: databasePassword: {name: " + v + ", key: \"password\"} & \"x\"\n",
			hubCUE + `:3:31: field parameters.databasePassword: set to two different values (not shown: a parameter may be sensitive): keep one`},
		{"the parameters and another value", webCUE, head + "parameters: {message: " + v + "} & 3\n",
			webCUE + `:3:13: field parameters: set to two different values (not shown: a parameter may be sensitive): keep one`},
		{"the parameters set to a value", webCUE, head + "parameters: " + v + "\n",
			webCUE + `:3:13: field parameters: must be a struct (not shown: a parameter may be sensitive)`},
		{"the whole file and another value", webCUE, "{\n" + head + "parameters: message: " + v + "\n} & [1]\n",
			webCUE + `:1:1: the file's top level cannot be both a struct and a list`},
		{"a literal the parser did not expect", webCUE, head + "parameters: {message " + v + "}\n",
			webCUE + `:3:22: expected label or ':', found a string`},
		{"a YAML tag", webYAML, "driver: webapp\nappVersion: 1.25.0\nparameters:\n  message: !!int " + quotedValue + "\n",
			webYAML + `:4:3: invalid YAML: cannot decode the value as !!int (not shown: it may be a sensitive parameter)`},
		{"a YAML float tag", webYAML, "driver: webapp\nappVersion: 1.25.0\nparameters:\n  message: !!float " + v + "\n",
			webYAML + `:4:3: invalid YAML: cannot decode the value as !!float (not shown: it may be a sensitive parameter)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			writeFile(t, dir, tc.file, tc.content)
			_, _, err := resolveDir(t, dir)
			if err == nil {
				t.Fatal("no error")
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n%s\nwant:\n%s", err, tc.want)
			}
			if found := secrettest.Find([]byte(err.Error()), quotedValue); len(found) > 0 {
				t.Errorf("error %q holds %s", err, strings.Join(found, ", "))
			}
			for _, n := range cueNoise {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error %q shows CUE's %q", err, n)
				}
			}
		})
	}
}

// parameterForms are ways a parameter's value is written that fail to
// load whatever the value, %s standing for it as a CUE string (YAML for
// .yaml).
var parameterForms = []struct{ ext, doc string }{
	{".cue", "parameters: p: %s & int\n"},
	{".cue", "parameters: p: %s | \"other\"\n"},
	{".cue", "parameters: p: %s + 3\n"},
	{".cue", "parameters: p: %s & =~\"^x\"\n"},
	{".cue", "parameters: p: string & %s & !=%s\n"},
	{".cue", "parameters: p: %s & <3\n"},
	{".cue", "parameters: p: %s.field\n"},
	{".cue", "parameters: p: {name: %s, key: \"k\"} & \"x\"\n"},
	{".cue", "parameters: {p: %s} & 3\n"},
	{".cue", "parameters: %s\n"},
	{".cue", "{parameters: p: %s} & [1]\n"},
	{".cue", "parameters: {p %s}\n"},
	{".yaml", "parameters:\n  p: !!int %s\n"},
	{".yaml", "parameters:\n  p: !!float %s\n"},
}

// FuzzConfigErrorsQuoteNoParameterValue loads a deployment file holding
// a value in one of parameterForms: the error is the one any other value
// gives, so nothing of the value reaches it. The value is framed by
// letters, so that every form fails (no number, no match of ^x).
func FuzzConfigErrorsQuoteNoParameterValue(f *testing.F) {
	for i := range parameterForms {
		for _, v := range []string{quotedValue, "", `a"b\c`, "line\nbreak", "\\(x)", "ünï©ødé", "12", "' x", "' 3", "\" as !!float: "} {
			f.Add(v, uint8(i))
		}
	}
	l := NewLoader(0)
	load := func(value string, form uint8) error {
		fm := parameterForms[int(form)%len(parameterForms)]
		v := "Zq" + value + "qZ"
		q, _ := json.Marshal(v) // a CUE string
		if fm.ext == ".yaml" {
			// A YAML double-quoted scalar: no control character as is.
			q = []byte(strconv.QuoteToASCII(v))
		}
		doc := strings.ReplaceAll(fm.doc, "%s", string(q))
		var out map[string]any
		_, err := l.parse("clusters/c/environments/e/deployments/d"+fm.ext, []byte(doc), "#Deployment", &out)
		return err
	}
	f.Fuzz(func(t *testing.T, value string, form uint8) {
		if !utf8.ValidString(value) {
			return // json.Marshal writes another value
		}
		got, want := load(value, form), load("", form)
		if got == nil || want == nil || got.Error() != want.Error() {
			t.Fatalf("form %q with %q:\n%v\nwith another value:\n%v", parameterForms[int(form)%len(parameterForms)].doc, value, got, want)
		}
	})
}
