package resolver

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/internal/blockyaml"
)

// canonicalSeeds are JSON documents that reach go-yaml's corners: every
// number form (int, beyond int64, beyond uint64, floats in both notations,
// beyond a float's range), strings YAML 1.1 would read as other types,
// escapes, empty and nested collections.
var canonicalSeeds = []string{
	`{"a":1,"b":-1,"c":0,"d":9223372036854775807,"e":-9223372036854775808,"f":18446744073709551615,"g":18446744073709551616}`,
	`{"f":1.5,"g":-0.0,"h":1e21,"i":1E-7,"j":1e400,"k":-1e400,"l":123456789012345678901234567890}`,
	`{"yes":"yes","no":"no","on":"on","null":"null","~":"~","t":"true","n":"1","x":"0x1F","o":"0644","dt":"2001-12-14","e":""}`,
	`{"s":"line\nbreak\ttab \u2028 \u003chtml\u003e \"q\" \\ 'single' : colon # hash - dash","u":"\u00e9\ud83d\ude00","c":"\u0001\u007f"}`,
	`{"empty":{},"list":[],"nested":{"a":[{"b":[1,"2",null,true,false]}]},"z":null}`,
	`{"B":1,"a":2,"a1":3,"a10":4,"a2":5,"_":6,"1":7,"10":8,"2":9,"-":10,"":11}`,
	`[1,"a",{"k":"v"},[],null]`,
	`{"nel":"a\u0085b","end":"a\u0085"}`,
	`{"` + strings.Repeat("k", 1100) + `":1}`,
	`"scalar"`, `42`, `null`, `true`,
}

func TestJSONToYAMLIsSigsYAML(t *testing.T) {
	docs := append([]string(nil), canonicalSeeds...)
	// Every golden lockfile's instance, as canonical encodes it.
	for _, j := range goldenInstancesJSON(t) {
		docs = append(docs, string(j))
	}
	for _, d := range docs {
		if !sameAsSigsYAML(t, []byte(d)) {
			t.Errorf("not valid JSON: %s", d)
		}
	}
}

// sameAsSigsYAML fails t unless jsonToYAML and sigs.k8s.io/yaml's
// JSONToYAML agree on data as encoding/json writes it (data is decoded,
// numbers kept as written, and encoded again: canonical only sees
// json.Marshal's output). It reports false when data is no JSON.
func sameAsSigsYAML(t *testing.T, data []byte) bool {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return false
	}
	j, err := json.Marshal(v)
	if err != nil {
		return false
	}
	want, werr := yaml.JSONToYAML(j)
	got, gerr := jsonToYAML(j)
	if gerr != nil {
		t.Errorf("%.300s: %v", j, gerr)
		return true
	}
	if again, _ := jsonToYAML(j); !bytes.Equal(again, got) {
		t.Errorf("%.300s: two encodings differ:\n%q\n%q", j, got, again)
	}
	// JSONToYAML's reader took U+0085 (NEL) for a line break and wrote a
	// space: there it is no reference.
	if werr == nil && blockyaml.KeysInOneOrder(v) && !bytes.Contains(j, []byte("\u0085")) && !bytes.Contains(j, []byte("\xc2\x85")) {
		if !bytes.Equal(got, want) {
			t.Errorf("%.300s:\n got %q\nwant %q", j, got, want)
		}
		return true
	}
	// JSONToYAML refused a raw character its YAML reader does not allow
	// (DEL, C1 controls) or a key over 1,024 characters, read NEL as a
	// line break, or its key order was not total (then it wrote one of
	// several files): the YAML written reads back as the JSON.
	back, err := yaml.YAMLToJSON(got)
	if err != nil {
		t.Errorf("%.300s: JSONToYAML: %v; jsonToYAML's %q does not read back: %v", j, werr, got, err)
		return true
	}
	var a, b any
	if json.Unmarshal(j, &a) != nil || json.Unmarshal(back, &b) != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("%.300s: JSONToYAML: %v; jsonToYAML's %q reads back as %s", j, werr, got, back)
	}
	return true
}

// FuzzJSONToYAML checks jsonToYAML against sigs.k8s.io/yaml's JSONToYAML
// on what canonical gives it: JSON as encoding/json writes it (so the
// fuzzer's bytes are decoded, numbers kept as written, and encoded again).
func FuzzJSONToYAML(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameAsSigsYAML(t, data)
	})
}

// Keys go-yaml cannot put in one order (its order goes round in a circle
// on them) get the same lockfile every time.
func TestEncodeLockIsTheSameForKeysGoYAMLCannotOrder(t *testing.T) {
	in := &Instance{APIVersion: APIVersion, Kind: "Instance", ID: ID{"c", "e", "n"}, Sequence: 1,
		Values: map[string]any{"env": map[string]any{"0A": "a", "1": "b", "010": "c", "2": "d", "7": "e"}}}
	first, err := EncodeLock(in)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		again, err := EncodeLock(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, first) {
			t.Fatalf("two encodings differ:\n%s\n%s", first, again)
		}
	}
	if _, err := DecodeLock("locks/c/e/n.lock.yaml", first); err != nil {
		t.Fatalf("the lockfile does not decode: %v\n%s", err, first)
	}
}

// goldenInstances is every golden lockfile decoded, by path.
func goldenInstances(t *testing.T) map[string]*Instance {
	t.Helper()
	paths, err := filepath.Glob("testdata/golden/locks/*/*/*.lock.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("golden lockfiles: %v, %v", paths, err)
	}
	out := map[string]*Instance{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if out[p], err = DecodeLock(p, data); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// goldenInstancesJSON is every golden lockfile's instance in JSON, by
// path.
func goldenInstancesJSON(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for p, in := range goldenInstances(t) {
		var err error
		if out[p], err = json.Marshal(in); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
