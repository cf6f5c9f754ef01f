package intern

import (
	"reflect"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// MaxLen is the longest string a Table shares: longer ones (a message
// naming many objects, a raw document) rarely repeat.
const MaxLen = 128

// DefaultSize bounds a Table's strings when New is given no size: room
// for the few strings each deployment's objects hold alone (its name, its
// instance's digest, its lockfile's path) at tens of thousands of
// deployments, in about a megabyte.
const DefaultSize = 1 << 15

// Table is a bounded set of canonical strings. When it is full it starts
// again empty: strings already shared stay shared, later objects share
// new copies, and the table's own memory stays bounded whatever the
// objects hold. Safe for concurrent use.
type Table struct {
	mu   sync.Mutex
	m    map[string]string
	size int
}

// New returns an empty table of at most size strings (DefaultSize when
// size ≤ 0).
func New(size int) *Table {
	if size <= 0 {
		size = DefaultSize
	}
	return &Table{m: make(map[string]string), size: size}
}

// String returns the table's copy of s, keeping s as that copy when it
// has none.
func (t *Table) String(s string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.locked(s)
}

func (t *Table) locked(s string) string {
	if s == "" || len(s) > MaxLen {
		return s
	}
	if c, ok := t.m[s]; ok {
		return c
	}
	if len(t.m) >= t.size {
		clear(t.m)
	}
	t.m[s] = s
	return s
}

// Object points the strings of obj (a pointer to a typed API object) at
// the table's copies, in place: every exported string field, element and
// map key or value, but an object's own name, generated name, namespace,
// UID and resourceVersion (one object's or one deployment's: little to
// share, and they would crowd the table) and byte slices (raw JSON, not
// strings). Maps of strings are rebuilt (keys cannot be replaced in
// place); other maps are left as they are.
func (t *Table) Object(obj any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.walk(reflect.ValueOf(obj))
}

// own tells the fields of ObjectMeta that are unique to an object.
func own(field string) bool {
	switch field {
	case "Name", "GenerateName", "Namespace", "UID", "ResourceVersion":
		return true
	}
	return false
}

func (t *Table) walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() {
			if s := v.String(); s != "" {
				v.SetString(t.locked(s))
			}
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			t.walk(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes: raw JSON, one reflective call a byte for nothing
		}
		for i := range v.Len() {
			t.walk(v.Index(i))
		}
	case reflect.Struct:
		meta := v.Type() == reflect.TypeFor[metav1.ObjectMeta]()
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || (meta && own(f.Name)) {
				continue
			}
			t.walk(v.Field(i))
		}
	case reflect.Map:
		kt, et := v.Type().Key(), v.Type().Elem()
		if v.IsNil() || !v.CanSet() || kt.Kind() != reflect.String || et.Kind() != reflect.String {
			return
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			k := reflect.ValueOf(t.locked(it.Key().String())).Convert(kt)
			e := reflect.ValueOf(t.locked(it.Value().String())).Convert(et)
			out.SetMapIndex(k, e)
		}
		v.Set(out)
	}
}

// Transform returns a cache transform that runs next (when not nil) and
// then shares the strings of what it returns, when that is one of the
// types given (pointers to typed objects); others are left as they are.
func (t *Table) Transform(next cache.TransformFunc, types ...any) cache.TransformFunc {
	want := map[reflect.Type]bool{}
	for _, o := range types {
		want[reflect.TypeOf(o)] = true
	}
	var transform cache.TransformFunc
	transform = func(obj any) (any, error) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			inner, err := transform(d.Obj)
			return cache.DeletedFinalStateUnknown{Key: d.Key, Obj: inner}, err
		}
		if next != nil {
			var err error
			if obj, err = next(obj); err != nil {
				return obj, err
			}
		}
		if want[reflect.TypeOf(obj)] {
			t.Object(obj)
		}
		return obj, nil
	}
	return transform
}
