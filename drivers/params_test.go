package drivers

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

func graphhub(t testing.TB) *Driver {
	t.Helper()
	d, ok := loadExamples(t).Get("graphhub", "2.0.0")
	if !ok {
		t.Fatal("graphhub@2.0.0 not loaded")
	}
	return d
}

func TestApplyParametersFillsDefaults(t *testing.T) {
	d := graphhub(t)
	got, err := d.ApplyParameters(map[string]any{"workers": 4, "databasePassword": SecretRef{Name: "db", Key: "pw"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"workers": int64(4), "serverReplicas": int64(1), "databaseSize": "1Gi", "storageRole": "default",
		"logLevel": "info", "ingress": true, "cacheMemory": "128Mi",
		"databasePassword": map[string]any{"name": "db", "key": "pw"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %#v\nwant %#v", got, want)
	}
}

func TestApplyParametersErrorsNameParameterAndExpectation(t *testing.T) {
	d := graphhub(t)
	secret := map[string]any{"name": "db", "key": "pw"}
	tests := []struct {
		name   string
		params map[string]any
		want   []string
	}{
		{"unknown parameter", map[string]any{"databasePassword": secret, "replicas": 3},
			[]string{"driver graphhub@2.0.0: parameter replicas: unknown parameter", "declares: cacheMemory, databasePassword"}},
		{"out of bounds", map[string]any{"databasePassword": secret, "workers": 50},
			[]string{"parameter workers: must be at most 20, got 50"}},
		{"wrong type", map[string]any{"databasePassword": secret, "workers": "many"},
			[]string{`parameter workers: must be an integer, got "many"`}},
		{"not in the enumeration", map[string]any{"databasePassword": secret, "logLevel": "trace"},
			[]string{`parameter logLevel: must be one of "info", "debug", "warning", "error", got "trace"`}},
		{"pattern", map[string]any{"databasePassword": secret, "databaseSize": "lots"},
			[]string{`parameter databaseSize: must match the regular expression ^[1-9][0-9]*(Mi|Gi|Ti)$, got "lots"`}},
		{"required secret missing", map[string]any{},
			[]string{"parameter databasePassword: required, not set (expected a secret reference {name, key})"}},
		{"secret given as a value", map[string]any{"databasePassword": "hunter2"},
			[]string{"parameter databasePassword: must be a secret reference {name, key} (value hidden)"}},
		{"secret reference with an extra field", map[string]any{"databasePassword": map[string]any{"name": "db", "key": "pw", "value": "hunter2"}},
			[]string{"parameter databasePassword: must be a secret reference {name, key} (value hidden)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.ApplyParameters(tc.params)
			if err == nil {
				t.Fatal("no error")
			}
			var pe *ParameterError
			if !errors.As(err, &pe) {
				t.Errorf("error is %T, want *ParameterError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error reveals a secret value: %q", err)
			}
		})
	}
}

func TestParametersDescribeTheSchema(t *testing.T) {
	d := graphhub(t)
	byName := map[string]Parameter{}
	for _, p := range d.Parameters {
		byName[p.Name] = p
	}
	w := byName["workers"]
	if w.Type != "int" || w.Default != int64(2) || !w.HasDefault || w.Constraint != "int & >=0 & <=20" || !strings.HasPrefix(w.Doc, "Number of background worker pods") {
		t.Errorf("workers = %+v", w)
	}
	s := byName["databasePassword"]
	if !s.Secret || s.Type != "secret" || s.HasDefault || s.Optional {
		t.Errorf("databasePassword = %+v", s)
	}
}

func TestSecretParameterRendersAsReferenceOnly(t *testing.T) {
	d := graphhub(t)
	out := valuesAndRender(t, d, exampleContext(d)).YAML()
	if n := bytes.Count(out, []byte("secretKeyRef:")); n != 3 {
		t.Errorf("%d secretKeyRef entries, want 3 (server, worker, database)", n)
	}
	if bytes.Contains(out, []byte("kind: Secret\n")) {
		t.Error("the driver renders a Secret; secret parameters must stay references")
	}
}

func TestSensitiveAndOptionalParameters(t *testing.T) {
	m := minimalFS()
	replaceSpec(`replicas: *1`, `// API token.
	token?: string @styrmin(sensitive)
	// Extra secret.
	extra?: #SecretRef
	// Optional with a default.
	zone?: *"a" | "b"
	replicas: *1`)(m)
	d, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	tok := d.Parameters[2]
	if tok.Name != "token" || !tok.Sensitive || !tok.Optional || tok.HasDefault {
		t.Fatalf("token = %+v", tok)
	}
	if ex := d.Parameters[0]; ex.Name != "extra" || !ex.Secret || !ex.Optional {
		t.Fatalf("extra = %+v", ex)
	}
	got, err := d.ApplyParameters(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["token"]; ok {
		t.Errorf("optional parameter without a value appears: %v", got)
	}
	if got["zone"] != "a" {
		t.Errorf("optional parameter with a default: zone = %v, want a", got["zone"])
	}
	_, err = d.ApplyParameters(map[string]any{"token": 42})
	if err == nil || err.Error() != "driver mini@1.0.0: parameter token: must be a string (value hidden)" {
		t.Errorf("sensitive value shown, or a parameter with a default reported, in %v", err)
	}
}

// TestRenderIsDeterministic renders every example twice, and again from a
// second, independent Load, and compares the bytes.
func TestRenderIsDeterministic(t *testing.T) {
	a, b := loadExamples(t), loadExamples(t)
	for _, gc := range goldenCases(a) {
		first := renderCase(t, a, gc)
		if again := renderCase(t, a, gc); !bytes.Equal(first, again) {
			t.Errorf("%s: second render differs:\n%s", gc.name, lineDiff(string(first), string(again)))
		}
		if fresh := renderCase(t, b, gc); !bytes.Equal(first, fresh) {
			t.Errorf("%s: render after a fresh Load differs:\n%s", gc.name, lineDiff(string(first), string(fresh)))
		}
	}
}

func TestDigestIsContentOnly(t *testing.T) {
	a, err := Load(os.DirFS(examples+"/webapp/1.0.0"), LoadOptions{Source: "one/place"})
	if err != nil {
		t.Fatal(err)
	}
	m := fstest.MapFS{}
	if err := copyFS(os.DirFS(examples+"/webapp/1.0.0"), m); err != nil {
		t.Fatal(err)
	}
	b, err := Load(m, LoadOptions{Source: "another/place"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest || !strings.HasPrefix(a.Digest, "sha256:") || len(a.Digest) != 71 {
		t.Fatalf("digests %s and %s", a.Digest, b.Digest)
	}
	m["chart/values.yaml"].Data = append(m["chart/values.yaml"].Data, '\n')
	c, err := Load(m, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest == a.Digest {
		t.Fatal("digest did not change with the content")
	}
}

func TestConcurrentRenders(t *testing.T) {
	d := graphhub(t)
	c := exampleContext(d)
	vals, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	want, err := d.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			v, err := d.Values(c)
			if err == nil {
				var m *Manifests
				if m, err = d.Render(c, v); err == nil && !bytes.Equal(m.YAML(), want.YAML()) {
					err = errors.New("concurrent render differs")
				}
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestYAMLSpecLoads(t *testing.T) {
	m := minimalFS()
	delete(m, "driver.cue")
	m["driver.yaml"] = &fstest.MapFile{Data: []byte(`name: mini
version: 1.0.0
appVersions: ">=1.0.0"
parameters:
  replicas: 2
components:
  app:
    workloads: [{kind: Deployment, name: mini}]
values:
  replicas: 2
`)}
	d, err := Load(m, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := d.SampleContext()
	c.Deployment.Name = "mini"
	vals, _ := d.Values(c)
	out, err := d.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Objects) != 1 || out.Objects[0].Component != "app" || !bytes.Contains(out.Objects[0].YAML, []byte("replicas: 2")) {
		t.Fatalf("%s", out.YAML())
	}
}

func TestApplyParametersAcceptsIntegralFloatsForInts(t *testing.T) {
	d := graphhub(t)
	secret := map[string]any{"name": "db", "key": "pw"}
	got, err := d.ApplyParameters(map[string]any{"workers": float64(4), "databasePassword": secret})
	if err != nil {
		t.Fatal(err)
	}
	if got["workers"] != int64(4) {
		t.Fatalf("workers = %#v", got["workers"])
	}
	if _, err := d.ApplyParameters(map[string]any{"workers": 4.5, "databasePassword": secret}); err == nil {
		t.Fatal("4.5 workers accepted")
	}
}

// TestApplyParametersRemembersASetAndGivesEachCallItsOwnCopy: a parameter
// set applied before is not evaluated again, yet every caller gets a
// result of its own to change; sets that differ only in a number's type
// are different sets, and an invalid set is never remembered.
func TestApplyParametersRemembersASetAndGivesEachCallItsOwnCopy(t *testing.T) {
	d := graphhub(t)
	params := func() map[string]any {
		return map[string]any{"workers": int64(7), "databaseSize": "2Gi", "databasePassword": map[string]any{"name": "db", "key": "pw"}}
	}
	first, err := d.ApplyParameters(params())
	if err != nil {
		t.Fatal(err)
	}
	key, ok := paramsKey(params())
	if !ok {
		t.Fatal("no key for plain parameters")
	}
	if _, remembered := d.compiled.appliedParams.Load(key); !remembered {
		t.Fatal("the applied set was not remembered")
	}
	want := deepCopyJSON(first)
	first["workers"] = int64(99)
	first["databasePassword"].(map[string]any)["key"] = "changed"
	second, err := d.ApplyParameters(params())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(any(second), want) {
		t.Fatalf("the second call got %#v, want %#v (a caller's change leaked)", second, want)
	}
	if a, _ := paramsKey(map[string]any{"x": int64(3)}); a == func() string { k, _ := paramsKey(map[string]any{"x": float64(3)}); return k }() {
		t.Fatal("an int and a float of the same value share a key")
	}
	bad := params()
	bad["workers"] = int64(50)
	for range 2 {
		if _, err := d.ApplyParameters(bad); err == nil || !strings.Contains(err.Error(), "must be at most 20") {
			t.Fatalf("an invalid set gave %v", err)
		}
	}
}
