package planner

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/resolver"
)

// checkSameSide fails when the two ways of reading in as its lockfile
// differ.
func checkSameSide(t *testing.T, what string, in *resolver.Instance) {
	t.Helper()
	fast, ok := sideOfData(in)
	if !ok {
		return
	}
	want, err := sideByText(in)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !reflect.DeepEqual(fast.ctx, want.ctx) {
		t.Errorf("%s: context\n%#v\nthrough the text\n%#v", what, fast.ctx, want.ctx)
	}
	if !reflect.DeepEqual(fast.values, want.values) {
		t.Errorf("%s: values\n%#v\nthrough the text\n%#v", what, fast.values, want.values)
	}
	if !reflect.DeepEqual(fast.tree, want.tree) {
		t.Errorf("%s: tree\n%#v\nthrough the text\n%#v", what, fast.tree, want.tree)
	}
}

// A side is the instance as the agent reads it from its lockfile, with
// its values taken through JSON's types without the text: the same for
// every example deployment as resolved (CUE's integers) and as read back
// from its lockfile (float64), with and without a backup first.
func TestASideIsTheInstanceAsItsLockfileGivesIt(t *testing.T) {
	dir := lockedExample(t)
	w := loadWorkspace(t, dir)
	res := resolver.Resolve(w.repo, resolver.Options{Catalog: w.catalog, Locks: w.locks, SourceCommit: strings.Repeat("0", 40)})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for id, in := range w.locks {
		checkSameSide(t, "locked "+id.String(), in)
		cp := *in
		cp.BackupFirst = !cp.BackupFirst
		checkSameSide(t, "locked, backup first flipped "+id.String(), &cp)
		n++
	}
	for _, r := range res.Resolved {
		in := r.Instance
		if _, ok := sideOfData(in); !ok {
			t.Errorf("%s: a resolved instance's values were left to encoding/json", in.ID)
		}
		checkSameSide(t, "resolved "+in.ID.String(), in)
		n++
	}
	if n == 0 {
		t.Fatal("no instances")
	}
	checkSameSide(t, "no context nor values", &resolver.Instance{})
	checkSameSide(t, "empty values", &resolver.Instance{Values: map[string]any{}})
}

// FuzzASideIsTheInstanceAsItsLockfileGivesIt: values of any JSON shape,
// integers as int64 as CUE gives them.
func FuzzASideIsTheInstanceAsItsLockfileGivesIt(f *testing.F) {
	for _, s := range []string{
		`{"replicaCount":3,"image":{"tag":"1.27"},"ratio":0.5,"big":9007199254740993}`,
		`{"a":null,"b":[],"c":{},"d":-0,"e":1e21,"f":1e-7,"g":"<&>"}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var values map[string]any
		if dec.Decode(&values) != nil {
			return
		}
		in := &resolver.Instance{Values: intsOf(values).(map[string]any)}
		checkSameSide(t, string(data), in)
	})
}

func intsOf(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = intsOf(e)
		}
	case []any:
		for i, e := range t {
			t[i] = intsOf(e)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	}
	return v
}
