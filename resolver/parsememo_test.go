package resolver

import (
	"reflect"
	"strings"
	"testing"
)

// TestTheSameFileTextIsEvaluatedOnceAndEachFileKeepsItsName: two
// deployment files of the same text are evaluated once, yet each gets a
// value of its own and positions naming it; a file that fails is never
// remembered, and each copy of it fails naming itself.
func TestTheSameFileTextIsEvaluatedOnceAndEachFileKeepsItsName(t *testing.T) {
	l := NewLoader(0)
	data := []byte("driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, ingress: true}\n")
	const a, b = "clusters/c/environments/e/deployments/a.cue", "clusters/c/environments/e/deployments/b.cue"
	var va, vb map[string]any
	posA, err := l.parse(a, data, "#Deployment", &va)
	if err != nil {
		t.Fatal(err)
	}
	posB, err := l.parse(b, data, "#Deployment", &vb)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(l.memo.m); n != 1 {
		t.Fatalf("the loader remembers %d files, want the one text", n)
	}
	if !reflect.DeepEqual(va, vb) {
		t.Fatalf("the same text read as %v and %v", va, vb)
	}
	if posA["parameters.replicas"].Filename != a || posB["parameters.replicas"].Filename != b || posA["parameters.replicas"].Line != posB["parameters.replicas"].Line {
		t.Fatalf("positions %v and %v do not name their own files at the same line", posA["parameters.replicas"], posB["parameters.replicas"])
	}
	va["parameters"].(map[string]any)["replicas"] = 99
	var vc map[string]any
	if _, err := l.parse("clusters/c/environments/e/deployments/c.cue", data, "#Deployment", &vc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(vc, vb) {
		t.Fatalf("a caller's change reached the next file: %v", vc)
	}

	bad := []byte("driver: 5\n")
	for _, f := range []string{"clusters/c/environments/e/deployments/x.cue", "clusters/c/environments/e/deployments/y.cue"} {
		var v map[string]any
		_, err := l.parse(f, bad, "#Deployment", &v)
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Fatalf("%s: error %v does not name the file", f, err)
		}
	}
	if n := len(l.memo.m); n != 1 {
		t.Fatalf("the loader remembers %d files after two failures, want 1", n)
	}
	// Forks (the loaders of the other cores) share what is remembered.
	if f := l.fork(); f.memo != l.memo {
		t.Fatal("a fork remembers on its own")
	}
}
