package resolver

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"sort"
	"testing"
	"unsafe"
)

// stringData maps each non-empty string of v, by its path, to the address
// of its bytes.
func stringData(v reflect.Value, path string, out map[string]uintptr) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); s != "" {
			out[path] = uintptr(unsafe.Pointer(unsafe.StringData(s)))
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			stringData(v.Elem(), path, out)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			k := fmt.Sprint(it.Key().Interface())
			stringData(it.Key(), path+"{key "+k+"}", out)
			stringData(it.Value(), path+"{"+k+"}", out)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			stringData(v.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			stringData(v.Field(i), path+"."+v.Type().Field(i).Name, out)
		}
	}
}

func TestADetachedInstanceIsEqualAndSharesNoStringWithItsLockfile(t *testing.T) {
	for p, in := range goldenInstances(t) {
		t.Run(p, func(t *testing.T) {
			out := in.Detached()
			if !reflect.DeepEqual(in, out) {
				t.Fatalf("detached copy differs:\n%+v\n%+v", in, out)
			}
			before, after := map[string]uintptr{}, map[string]uintptr{}
			stringData(reflect.ValueOf(in), "", before)
			stringData(reflect.ValueOf(out), "", after)
			if len(before) < 20 || len(after) != len(before) {
				t.Fatalf("strings: %d decoded, %d detached; want the same, at least 20", len(before), len(after))
			}
			var shared []string
			for path, addr := range after {
				if before[path] == addr {
					shared = append(shared, path)
				}
			}
			sort.Strings(shared)
			if len(shared) > 0 {
				t.Fatalf("the detached copy shares the bytes of %d strings with the decoded instance: %v", len(shared), shared)
			}
		})
	}
	if (*Instance)(nil).Detached() != nil {
		t.Fatal("a nil instance detached is not nil")
	}
}

// BenchmarkDetachedInstanceRetains measures the heap a kept instance holds:
// decoded from its lockfile (its strings keep the document's text alive),
// detached, and kept as its lockfile (what the agent's task controller
// keeps for a task that waits). Reported in bytes per instance.
//
//	go test ./resolver -run '^$' -bench DetachedInstanceRetains
func BenchmarkDetachedInstanceRetains(b *testing.B) {
	data, err := os.ReadFile("testdata/golden/locks/local/dev/web.lock.yaml")
	if err != nil {
		b.Fatal(err)
	}
	const n = 2000
	const (
		decoded = iota
		detached
		encoded
	)
	retained := func(form int) float64 {
		keep := make([]any, n)
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		for i := range keep {
			if form == encoded {
				keep[i] = bytes.Clone(data) // as read from git
				continue
			}
			in, err := DecodeLock("locks/local/dev/web.lock.yaml", data)
			if err != nil {
				b.Fatal(err)
			}
			if form == detached {
				in = in.Detached()
			}
			keep[i] = in
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		runtime.KeepAlive(keep)
		return float64(ms.HeapAlloc-before) / n
	}
	var sum [3]float64
	for range b.N {
		for form := range sum {
			sum[form] += retained(form)
		}
	}
	for form, unit := range []string{"decoded-B/instance", "detached-B/instance", "lockfile-B/instance"} {
		b.ReportMetric(sum[form]/float64(b.N), unit)
	}
}
