package drivers

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/internal/blockyaml"
)

// toYAMLSeeds are values a chart's toYaml meets (labels, resources,
// environment lists, numbers of every kind) and the corners of YAML's
// writer: words read as booleans, digits, long text folded at 80
// columns, non-ASCII, control characters, empty collections.
var toYAMLSeeds = []string{
	`{"app.kubernetes.io/name":"web","app.kubernetes.io/instance":"prod-web","helm.sh/chart":"webapp-1.1.0"}`,
	`{"requests":{"cpu":"50m","memory":"64Mi"},"limits":{"memory":"64Mi"}}`,
	`{"env":[{"name":"LOG","value":"info"},{"name":"PORT","value":"8080"}],"replicas":3,"ratio":0.5,"big":18446744073709551615}`,
	`{"yes":"yes","no":"on","n":"1","x":"0x1F","e":"","z":null,"t":true,"f":false,"o":"0644","d":"2001-12-14"}`,
	`{"text":"` + strings.Repeat("word ", 30) + `","u":"\u00e9","c":"a\u007fb","nel":"a\u0085b","tab":"a\tb"}`,
	`{"empty":{},"list":[],"nested":{"a":[{"b":[1,"2",null,true]}]},"seq":[[1],[2]]}`,
	`{"B":1,"a":2,"a1":3,"a10":4,"a2":5,"_":6,"-":10,"":11}`,
	`[1,"a",{"k":"v"}]`, `"scalar"`, `42`, `null`,
}

// FuzzToYAMLIsSigsYAML pins toYaml's writer to sigs.k8s.io/yaml's
// Marshal, which Helm's toYaml calls, byte for byte, on the value a
// template holds (JSON data as Go values).
func FuzzToYAMLIsSigsYAML(f *testing.F) {
	for _, s := range toYAMLSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil || !blockyaml.KeysInOneOrder(v) {
			return
		}
		got, gerr := marshalYAML(v)
		want, werr := yaml.Marshal(v)
		if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Errorf("%s: toYaml wrote\n%s(%v)\nsigs.k8s.io/yaml\n%s(%v)", data, got, gerr, want, werr)
		}
	})
}
