package blockyaml

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	yamlv2 "go.yaml.in/yaml/v2"
	yamlv3 "go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// readV3 is how the planner reads a rendered object: go-yaml v3, then
// JSON data with numbers kept as text.
func readV3(data []byte) (any, error) {
	var v any
	if err := yamlv3.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return viaJSON(json.Marshal(v))
}

// readV2 is how sigs.k8s.io/yaml (go-yaml v2, YAML 1.1) reads a
// lockfile, as JSON data with numbers kept as text.
func readV2(data []byte) (any, error) {
	return viaJSON(sigsyaml.YAMLToJSON(data))
}

func viaJSON(j []byte, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// agrees fails t when Decode accepts data and either reader reads it
// differently (or refuses it), and returns whether Decode accepted it.
func agrees(t *testing.T, data []byte) bool {
	t.Helper()
	got, ok := Decode(data)
	if !ok {
		return false
	}
	for name, read := range map[string]func([]byte) (any, error){"go-yaml v3": readV3, "go-yaml v2 (sigs.k8s.io/yaml)": readV2} {
		want, err := read(data)
		if err != nil {
			t.Fatalf("Decode accepted what %s refuses (%v):\n%q", name, err, data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode and %s read differently:\n%q\nDecode: %#v\n%s: %#v", name, data, got, name, want)
		}
	}
	return true
}

func TestDecodeReadsWhatBothYAMLReadersReadOrDeclines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		doc    string
		accept bool
	}{
		{"mapping of scalars", "a: b\nc: 1\nd: -12\ne: true\nf: false\ng: null\nh: \"5432\"\ni: '1.0'\n", true},
		{"nested mappings", "a:\n  b:\n    c: d\n  e: f\ng: h\n", true},
		{"sequence indented", "a:\n  - x\n  - w\nb: z\n", true},
		{"sequence at the key's column", "a:\n- x\n- w\nb: z\n", true},
		{"sequence of mappings", "a:\n- name: x\n  value: \"1\"\n- name: w\n  value: z\n", true},
		{"sequence of sequences", "a:\n- - x\n  - w\n- - z\n", true},
		{"empty collections", "a: {}\nb: []\n", true},
		{"empty document mapping", "{}\n", true},
		{"key alone is null", "a:\nb: c\n", true},
		{"header comment", "# Written by styrmin lock.\napiVersion: v1\n", true},
		{"literal block", "a: |\n  line one\n  line two\nb: c\n", true},
		{"literal block stripped", "a: |-\n  x\n\n  w\n\nb: c\n", true},
		{"literal block kept", "a: |+\n  x\n\n\nb: c\n", true},
		{"literal block with deeper lines", "a: |\n  x\n    w\n  z\n", true},
		{"literal block in a sequence", "a:\n- |\n  x\n  w\n- z\n", true},
		{"double-quoted escapes", "a: \"tab\\tquote\\\" nl\\n \\u00e9 \\x41 \\U0001F600\"\n", true},
		{"single-quoted", "a: 'it''s'\n", true},
		{"quoted keys", "\"a: b\": c\n'd': e\n", true},
		{"keys with dots and slashes", "app.kubernetes.io/name: web\n", true},
		{"versions", "a: 1.25.0\nb: 10.4.0-rc.1+build.5\n", true},
		{"quantities", "a: 128Mi\nb: 500m\nc: 1Gi\n", true},
		{"digests", "a: 656a193f7057342d5a3b48cf8de291d3f4d16579bd22e4b38f7a9d08e14137de\n", true},
		{"flags", "a:\n- --port\n- -U\n- --ingress-class=nginx\n", true},
		{"negative float", "a: -1.5\n", false},
		{"dash alone", "a: -\n", false},
		{"exponent", "a: 1e3\n", false},
		{"hexadecimal", "a: 0x1f\n", false},
		{"two dots after digits only", "a: 1..2\n", false},
		{"urls and colons", "a: http://x.y:80/z\nb: a:b\n", true},
		{"unicode", "a: grüße ✓\n", true},
		{"largest int64", "a: 9223372036854775807\nb: -9223372036854775808\n", true},

		{"yes is a boolean in YAML 1.1", "a: yes\n", false},
		{"so is y", "a: y\n", false},
		{"on as a key", "on: a\n", false},
		{"float", "a: 1.5\n", false},
		{"octal-looking", "a: 0755\n", false},
		{"minus zero", "a: -0\n", false},
		{"beyond int64", "a: 9223372036854775808\n", false},
		{"date", "a: 2001-12-14\n", false},
		{"comment after a value", "a: b # c\n", false},
		{"multi-line plain scalar", "a: b\n  c\n", false},
		{"anchor and alias", "a: &x b\nc: *x\n", false},
		{"tag", "a: !!str 5\n", false},
		{"flow sequence of scalars", "a: [\"graphhub\", 'server', --port, 8000, b c]\nb: [ x ]\nc: [ ]\n", true},
		{"flow sequence nested", "a: [[b], c]\n", false},
		{"flow mapping", "a: {b: c}\n", false},
		{"flow sequence with a trailing comma", "a: [b, c,]\n", false},
		{"flow sequence with a colon", "a: [b: c]\n", false},
		{"flow sequence over lines", "a: [b,\n  c]\n", false},
		{"folded block", "a: >\n  x\n", false},
		{"tab", "a:\tb\n", false},
		{"carriage return", "a: b\r\n", false},
		{"document marker", "---\na: b\n", false},
		{"duplicate key", "a: b\na: c\n", false},
		{"top-level sequence", "- a\n", false},
		{"top-level scalar", "a\n", false},
		{"explicit key", "? a\n: b\n", false},
		{"line separator", "a: b\u2028c\n", false},
		{"next line", "a: b\u0085c\n", false},
		{"bad indentation", "a:\n  b: c\n d: e\n", false},
		{"multi-line quoted", "a: \"b\n  c\"\n", false},
		{"unknown escape", "a: \"\\q\"\n", false},
		{"surrogate escape", "a: \"\\ud800\"\n", false},
		{"merge key", "<<: a\n", false},
		{"no line break at the end", "a: |\n  b", false},
		{"nested deeper than the limit", "a:\n" + strings.Repeat("- ", maxDepth) + "x\n", false},
		{"nested to the limit", "a:\n" + strings.Repeat("- ", maxDepth-2) + "x\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agrees(t, []byte(tc.doc)); got != tc.accept {
				t.Fatalf("Decode accepted %q: %v, want %v", tc.doc, got, tc.accept)
			}
		})
	}
}

// The documents the fast path exists for must be inside the subset, or it
// saves nothing: the repository's golden lockfiles and rendered drivers.
func TestDecodeAcceptsTheRepositorysLockfilesAndRenders(t *testing.T) {
	var n int
	for _, dir := range []string{"../../resolver/testdata/golden", "../../drivers/testdata/golden"} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			// The drivers' golden files are a stream of documents.
			for i, doc := range documents(data) {
				n++
				if !agrees(t, doc) {
					t.Errorf("%s: document %d declined", p, i+1)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 10 {
		t.Fatalf("read %d golden files, expected the lockfiles and renders", n)
	}
}

// documents splits a stream of documents at its "---" lines.
func documents(data []byte) [][]byte {
	var out [][]byte
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		if !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		out = append(out, []byte(doc))
	}
	return out
}

// Trees written by the two YAML writers the documents come from (go-yaml
// v2, which writes lockfiles, and the block style of go-yaml v3 at two
// spaces, the drivers' canonical form) are read back as written, or
// declined, never read otherwise.
func TestDecodeReadsBackWhatTheWritersWrote(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var accepted int
	const trees = 3000
	for range trees {
		tree := randomTree(rng, 0)
		v2, err := yamlv2.Marshal(tree)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		enc := yamlv3.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(tree); err != nil {
			t.Fatal(err)
		}
		for _, doc := range [][]byte{v2, b.Bytes()} {
			if agrees(t, doc) {
				accepted++
			}
		}
	}
	// Most generated trees hold only scalars inside the subset.
	if accepted < trees/2 {
		t.Fatalf("accepted %d of %d written documents", accepted, 2*trees)
	}
}

var words = []string{"a", "web", "app.kubernetes.io/name", "http://x:80", "yes", "on", "1.5", "0755", "5432", "-3",
	"", " lead", "trail ", "a: b", "a #b", "multi\nline\n", "multi\nline", "x\n\n", "tab\there", "é", "null", "~",
	"[x]", "{y}", "- z", "'q'", "\"dq\"", "#c", "@at", "2001-12-14", "1.25.0", "1.2.3e5", "1.2.3:4", "1.2.", "1.4.0-rc.1", "128Mi", "5E", "1Ei", "0b1", "1e5", "6E", "-U", "--port", "-1", "-.5", "---", "-x-", "0o17", "7f3a", "long " + strings.Repeat("word ", 30)}

// randomTree is randomSlice as the map a decoder gives.
func randomTree(rng *rand.Rand, depth int) map[string]any {
	return plainTree(randomSlice(rng, depth, "")).(map[string]any)
}

// plainTree turns MapSlices into maps (a later duplicate key wins).
func plainTree(v any) any {
	switch t := v.(type) {
	case yamlv2.MapSlice:
		m := make(map[string]any, len(t))
		for _, it := range t {
			m[it.Key.(string)] = plainTree(it.Value)
		}
		return m
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = plainTree(e)
		}
		return out
	}
	return v
}

// FuzzDecode: whatever Decode accepts, both YAML readers read the same.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("a:\n" + strings.Repeat("- ", 1<<16) + "x\n"))
	for _, dir := range []string{"../../resolver/testdata/golden/locks", "../../drivers/testdata/golden"} {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if data, err := os.ReadFile(p); err == nil {
					for _, doc := range documents(data) {
						f.Add(doc)
					}
				}
			}
			return nil
		})
	}
	f.Add([]byte("a:\n- name: x\n  v: |\n    y\n- - z\nb: 'c'\n"))
	f.Add([]byte("command: [\"graphhub\", 'server', --port, 8000]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		agrees(t, data)
	})
}
