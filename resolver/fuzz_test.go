package resolver

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadFile feeds arbitrary bytes to the config loader as CUE and as
// YAML: it must return a value or a ConfigError naming the file, never
// panic.
func FuzzLoadFile(f *testing.F) {
	seeds := []string{
		"driver: \"webapp\"\nappVersion: \"1.0.0\"\n",
		"driver: {name: \"webapp\", version: \"1.0.0\"}\nappVersion: \"1.0.0\"\nparameters: replicas: 2\n",
		"driver: webapp\nappVersion: 1.0.0\nconnects: [db]\n",
		"config: {a: b: c: 1}\n",
		"domain: \"x\"\nconfig: {\n",
		"- a\n- b\n",
		"x: *1 | int\n",
		"import \"strings\"\nx: strings.Repeat(\"a\", 3)\n",
		"&: {\n",
		"",
	}
	for _, s := range seeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	l := NewLoader(0)
	f.Fuzz(func(t *testing.T, data []byte, yaml bool) {
		file := "clusters/c/environments/e/deployments/d.cue"
		if yaml {
			file = "clusters/c/environments/e/deployments/d.yaml"
		}
		var out map[string]any
		_, err := l.parse(file, data, "#Deployment", &out)
		if err == nil {
			if _, ok := out["driver"]; !ok {
				t.Fatalf("accepted a deployment without a driver: %q", data)
			}
			return
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.File != file {
			t.Fatalf("error %v is not a ConfigError naming %s", err, file)
		}
	})
}

// FuzzDecodeLock feeds arbitrary bytes to the lockfile decoder.
func FuzzDecodeLock(f *testing.F) {
	in := &Instance{APIVersion: APIVersion, Kind: KindTombstone, ID: ID{"c", "e", "n"}, Sequence: 3}
	data, err := EncodeLock(in)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("apiVersion: styrmin.io/v1alpha1\nkind: Instance\n"))
	f.Add([]byte("{"))
	golden, _ := filepath.Glob("testdata/golden/locks/*/*/*.lock.yaml")
	for _, p := range golden {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameOnBothDecodingPaths(t, data)
		got, err := DecodeLock("locks/c/e/n.lock.yaml", data)
		if err != nil {
			return
		}
		again, err := EncodeLock(got)
		if err != nil {
			t.Fatalf("decoded lock does not encode: %v", err)
		}
		if _, err := DecodeLock("locks/c/e/n.lock.yaml", again); err != nil {
			t.Fatalf("re-encoded lock does not decode: %v", err)
		}
	})
}
