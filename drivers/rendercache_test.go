package drivers

import (
	"bytes"
	"os"
	"testing"
)

// TestRenderCacheRendersEachInputOnce pins the cache: the same driver,
// context and values render once (the second call returns the same
// manifests); other values or another context render again; values
// that differ only in their Go types (int and float64 of one number)
// are one input, rendered from their JSON form as the agent renders a
// lockfile's; the output is the uncached render's.
func TestRenderCacheRendersEachInputOnce(t *testing.T) {
	rc := NewRenderCache()
	cat, err := LoadCatalog(os.DirFS(examples), ".", LoadOptions{Source: "examples/drivers", RenderCache: rc})
	if err != nil {
		t.Fatal(err)
	}
	plain := loadExamples(t)
	d, _ := cat.Get("webapp", "1.1.0")
	pd, _ := plain.Get("webapp", "1.1.0")
	c := exampleContext(d)
	vals, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	first, err := d.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	again, err := d.RenderInProcess(t.Context(), c, vals)
	if err != nil || again != first || rc.Len() != 1 {
		t.Fatalf("the same input rendered again (%d cached, same manifests: %v, %v)", rc.Len(), again == first, err)
	}
	want, err := pd.Render(c, vals)
	if err != nil || !bytes.Equal(want.YAML(), first.YAML()) {
		t.Fatalf("the cached render differs from the uncached one (%v)", err)
	}

	asFloat := map[string]any{}
	for k, v := range vals {
		asFloat[k] = v
	}
	asFloat["replicaCount"] = float64(toInt(t, vals["replicaCount"]))
	if m, err := d.Render(c, asFloat); err != nil || m != first || rc.Len() != 1 {
		t.Fatalf("the same number as a float64 is another input (%d cached, %v)", rc.Len(), err)
	}

	asFloat["replicaCount"] = float64(toInt(t, vals["replicaCount"]) + 1)
	other, err := d.Render(c, asFloat)
	if err != nil || other == first || rc.Len() != 2 || bytes.Equal(other.YAML(), first.YAML()) {
		t.Fatalf("other values: %d cached, %v", rc.Len(), err)
	}
	c.Deployment.Name = "other"
	if _, err := d.Render(c, vals); err != nil || rc.Len() != 3 {
		t.Fatalf("another context: %d cached, %v", rc.Len(), err)
	}
}

func toInt(t *testing.T, v any) int {
	t.Helper()
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	}
	t.Fatalf("%T is no number", v)
	return 0
}
