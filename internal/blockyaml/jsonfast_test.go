package blockyaml

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// jsonSeeds are JSON texts as encoding/json writes lockfiles and a
// chart's values (escapes of HTML and control characters, numbers of
// every kind, empty and nested collections) and the corners the one-pass
// reader leaves to encoding/json.
var jsonSeeds = []string{
	`{"apiVersion":"styrmin.io/v1alpha1","context":{"cluster":{"domain":"a.example.com","config":{}},"parameters":{"replicas":3,"ratio":0.5}},"values":{"list":[1,"a",null,true,false,[]]}}`,
	`{"html":"\u003ca href=\"x\"\u003e\u0026\u003c/a\u003e","ctl":"a\u0000b\u001fc","nl":"line\nline\ttab\r","sl":"a\/b","u":"é\u00e9\u2028"}`,
	`{"big":18446744073709551615,"neg":-9223372036854775808,"f":1e21,"g":-0,"h":1.5e-7,"i":0,"j":123456789012345678901234567890}`,
	`{"B":1,"a":2,"a1":3,"a10":4,"a2":5,"_":6,"-":10,"":11,"0A":1,"1":2,"010":3}`,
	`{"dup":1,"dup":2}`, `{"s":"\ud83d\ude00"}`, `{"s":"\udc00"}`, "{\"s\":\"\xff\"}",
	`[1,2,3]`, `"x"`, `42`, `null`, ` {} `, `[]`, `{"a":1}{}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1,}`,
	strings.Repeat("[", 1500) + strings.Repeat("]", 1500),
}

// FuzzFromJSONReadsAsEncodingJSON pins the one-pass reader to FromJSON's
// reading through encoding/json: where it reads a text it gives the same
// value, and never one encoding/json refuses.
func FuzzFromJSONReadsAsEncodingJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := fromJSONText(data)
		want, err := fromJSONDecoder(data)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("%q: read as %#v where encoding/json refuses it: %v", data, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: read as\n%#v\nencoding/json\n%#v", data, got, want)
		}
	})
}

// What encoding/json writes is read in one pass: a lockfile's instance,
// every seed that is a single valid value without a duplicate key, a
// surrogate escape, invalid UTF-8 or nesting deeper than the reader's.
func TestFromJSONReadsWhatEncodingJSONWritesInOnePass(t *testing.T) {
	for _, s := range jsonSeeds {
		var v any
		err := json.Unmarshal([]byte(s), &v)
		declined := strings.Contains(s, `"dup"`) || strings.Contains(s, `\ud`) || strings.Contains(s, "\xff") || strings.HasPrefix(s, "[[[")
		if _, ok := fromJSONText([]byte(s)); ok != (err == nil && !declined) {
			t.Errorf("%.60q: read in one pass: %v; valid JSON: %v", s, ok, err == nil)
		}
		if err != nil {
			continue
		}
		out, _ := json.Marshal(v)
		if _, ok := fromJSONText(out); !ok && !declined {
			t.Errorf("%.60q: encoding/json's own text %.60q was left to it", s, out)
		}
	}
}

// BenchmarkFromJSON reads a golden lockfile's JSON form in one pass and
// through encoding/json, the reference, in the same run (go test
// ./internal/blockyaml -run '^$' -bench FromJSON -benchmem).
func BenchmarkFromJSON(b *testing.B) {
	y, err := os.ReadFile("../../resolver/testdata/golden/locks/local/dev/hub.lock.yaml")
	if err != nil {
		b.Fatal(err)
	}
	j, err := sigsyaml.YAMLToJSON(y)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		read func([]byte) (any, error)
	}{{"one-pass", FromJSON}, {"encoding-json", fromJSONDecoder}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(j)))
			for b.Loop() {
				if _, err := tc.read(j); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
