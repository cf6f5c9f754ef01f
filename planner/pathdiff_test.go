package planner

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/blockyaml"
)

func mustNormalize(t *testing.T, v any) any {
	t.Helper()
	n, err := normalize(v)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTreeDiffListsEveryChangedLeafWithItsPath(t *testing.T) {
	cases := []struct {
		name     string
		old, new any
		want     []string // "op path old new"
	}{
		{
			name: "scalar changed, added, removed",
			old:  map[string]any{"a": 1, "b": "x"},
			new:  map[string]any{"a": 2, "c": true},
			want: []string{"changed a 1 2", "removed b \"x\" ", "added c  true"},
		},
		{
			name: "keys that are not identifiers are quoted",
			old:  map[string]any{"annotations": map[string]any{"nginx.ingress.kubernetes.io/rewrite": "/"}},
			new:  map[string]any{"annotations": map[string]any{"nginx.ingress.kubernetes.io/rewrite": "/x"}},
			want: []string{`changed annotations["nginx.ingress.kubernetes.io/rewrite"] "/" "/x"`},
		},
		{
			name: "lists compare index by index",
			old:  map[string]any{"args": []any{"a", "b"}},
			new:  map[string]any{"args": []any{"a", "c", "d"}},
			want: []string{`changed args[1] "b" "c"`, `added args[2]  "d"`},
		},
		{
			name: "a new subtree is expanded into its leaves",
			old:  map[string]any{},
			new:  map[string]any{"resources": map[string]any{"limits": map[string]any{"cpu": "1", "memory": "1Gi"}}},
			want: []string{`added resources.limits.cpu  "1"`, `added resources.limits.memory  "1Gi"`},
		},
		{
			name: "a map replacing a scalar is one change",
			old:  map[string]any{"x": "flat"},
			new:  map[string]any{"x": map[string]any{"y": 1}},
			want: []string{`changed x "flat" {"y":1}`},
		},
		{
			name: "null counts as absent",
			old:  map[string]any{"services": nil},
			new:  map[string]any{},
			want: nil,
		},
		{
			name: "numbers compare by value",
			old:  map[string]any{"n": 2.0},
			new:  map[string]any{"n": int64(2)},
			want: nil,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := &treeDiff{}
			d.diff(nil, mustNormalize(t, c.old), mustNormalize(t, c.new), true, true)
			var got []string
			for _, ch := range d.out {
				o, n := "", ""
				if ch.Old != nil {
					o = changeValue(ch, ch.Old)
				}
				if ch.New != nil {
					n = changeValue(ch, ch.New)
				}
				got = append(got, strings.Join([]string{string(ch.Op), ch.Path, o, n}, " "))
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

func TestMaskerHidesSensitiveValuesInsideStringsAndBase64(t *testing.T) {
	m := newMaskers(map[string]bool{"token": true, "pin": true},
		map[string]any{"token": "s3cr3t-old", "pin": "42"},
		map[string]any{"token": "s3cr3t-new", "pin": "42"})
	got, masked := m.new.maskValue(mustNormalize(t, map[string]any{
		"url":    "https://x/?t=s3cr3t-new",
		"b64":    "czNjcjN0LW5ldw==", // base64 of s3cr3t-new
		"old":    "s3cr3t-old",
		"answer": "42", // shorter than minMaskLen: left alone outside its parameter
	}))
	if !masked {
		t.Fatal("nothing masked")
	}
	g := got.(map[string]any)
	want := map[string]any{
		"url":    "https://x/?t=" + MaskedChanged,
		"b64":    MaskedChanged,
		"old":    Masked,
		"answer": "42",
	}
	for k, v := range want {
		if g[k] != v {
			t.Errorf("%s: %v, want %v", k, g[k], v)
		}
	}
}

func TestSecretObjectDataIsRedactedInManifestDiffs(t *testing.T) {
	obj := func(pw string) *drivers.Manifests {
		return &drivers.Manifests{Objects: []drivers.Object{{
			APIVersion: "v1", Kind: "Secret", Namespace: "ns", Name: "db",
			YAML: []byte("apiVersion: v1\ndata:\n  password: " + pw + "\n  user: YWRtaW4=\nkind: Secret\nmetadata:\n  name: db\n  namespace: ns\n"),
		}}}
	}
	md, err := diffManifests(obj("b2xkLXB3"), obj("bmV3LXB3"), sideMaskers{})
	if err != nil {
		t.Fatal(err)
	}
	if md.Changed != 1 || md.Objects[0].Fields != 1 {
		t.Fatalf("got %+v, want one changed object with one field", md)
	}
	diff := md.Objects[0].Diff
	for _, leak := range []string{"b2xkLXB3", "bmV3LXB3", "YWRtaW4="} {
		if strings.Contains(diff, leak) {
			t.Errorf("diff shows Secret data %q:\n%s", leak, diff)
		}
	}
	if !strings.Contains(diff, "-  password: "+Redacted) || !strings.Contains(diff, "+  password: "+RedactedChanged) {
		t.Errorf("diff does not show that the password changed:\n%s", diff)
	}

	added, err := diffManifests(nil, obj("bmV3LXB3"), sideMaskers{})
	if err != nil {
		t.Fatal(err)
	}
	if d := added.Objects[0].Diff; strings.Contains(d, "bmV3LXB3") || strings.Contains(d, "YWRtaW4=") {
		t.Errorf("added Secret shows its data:\n%s", d)
	}
}

func TestManifestDiffMatchesObjectsByGroupKindNamespaceName(t *testing.T) {
	o := func(apiVersion, kind, name, body string) drivers.Object {
		return drivers.Object{APIVersion: apiVersion, Kind: kind, Namespace: "ns", Name: name,
			YAML: []byte("apiVersion: " + apiVersion + "\nkind: " + kind + "\nmetadata:\n  name: " + name + "\n  namespace: ns\n" + body)}
	}
	old := &drivers.Manifests{Objects: []drivers.Object{
		o("autoscaling/v1", "HorizontalPodAutoscaler", "web", "spec:\n  maxReplicas: 3\n"),
		o("v1", "ConfigMap", "gone", "data:\n  a: b\n"),
	}}
	nw := &drivers.Manifests{Objects: []drivers.Object{
		o("autoscaling/v2", "HorizontalPodAutoscaler", "web", "spec:\n  maxReplicas: 3\n"),
		o("v1", "ConfigMap", "new", "data:\n  a: b\n"),
	}}
	md, err := diffManifests(old, nw, sideMaskers{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, od := range md.Objects {
		got = append(got, od.Summary())
	}
	want := []string{
		"ConfigMap/ns/gone removed: 5 fields",
		"ConfigMap/ns/new added: 5 fields",
		"HorizontalPodAutoscaler/ns/web changed: 1 field",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMaskedObjectsKeepTheRenderedLayout(t *testing.T) {
	// An object the drivers package rendered, re-encoded after masking,
	// must differ from the original only where something was masked.
	y := "apiVersion: v1\ndata:\n  a: \"5432\"\n  f: 1.5\n  list:\n    - x\n    - \"y\"\n  \"n\": 3\nkind: ConfigMap\nmetadata:\n  name: c\n"
	tree, err := parseObject(drivers.Object{Kind: "ConfigMap", Name: "c", YAML: []byte(y)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := marshalYAML(tree)
	if err != nil {
		t.Fatal(err)
	}
	if got != y {
		t.Errorf("re-encoded:\n%s\nwant:\n%s", got, y)
	}
}

// TestParseObjectReadsTheCanonicalFormAsYAMLDoes: rendered objects are
// read by the fast block reader where they can be, and to what go-yaml
// v3 and normalize make of them; an object outside its subset (a float)
// is read by go-yaml.
func TestParseObjectReadsTheCanonicalFormAsYAMLDoes(t *testing.T) {
	golden, err := filepath.Glob("../drivers/testdata/golden/*.yaml")
	if err != nil || len(golden) == 0 {
		t.Fatalf("no rendered goldens: %v", err)
	}
	var objects []drivers.Object
	for _, p := range golden {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// The goldens are a summary, then the objects, in canonical form.
		docs := strings.Split(string(data), "\n---\n")
		for _, doc := range docs[1:] {
			objects = append(objects, drivers.Object{Kind: "X", Name: p, YAML: []byte(strings.TrimSuffix(doc, "\n") + "\n")})
		}
	}
	objects = append(objects, drivers.Object{Kind: "Float", Name: "f", YAML: []byte("spec:\n  cpu: 0.5\n  ratio: 1.0\n")})
	var fast int
	for _, o := range objects {
		got, err := parseObject(o)
		if err != nil {
			t.Fatalf("%s: %v", o.Name, err)
		}
		var v any
		if err := yamlv3.Unmarshal(o.YAML, &v); err != nil {
			t.Fatal(err)
		}
		if want := mustNormalize(t, v); !reflect.DeepEqual(any(got), want) {
			t.Fatalf("%s read as\n%#v\nwant\n%#v", o.Name, got, want)
		}
		if _, ok := blockyaml.Decode(o.YAML); ok {
			fast++
		}
	}
	if fast != len(objects)-1 {
		t.Fatalf("%d of %d objects took the fast path, want all but the one with floats", fast, len(objects))
	}
}
