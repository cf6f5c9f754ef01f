package resolver

import (
	"reflect"
	"strings"
)

// Detached returns a deep copy of in that shares no memory with it.
//
// A decoded lockfile's strings are slices of the document's text (the
// decoder reads without copying), so an instance kept for long would keep
// the whole lockfile alive with it: a part kept of each (the sync keeps
// a few fields of every deployment's last instance through a walk) holds
// all of it. A detached copy holds its own strings alone
// (BenchmarkDetachedInstanceRetains). It is equal to in
// (reflect.DeepEqual) and decodes nothing: numbers keep their types.
func (in *Instance) Detached() *Instance {
	if in == nil {
		return nil
	}
	return detach(reflect.ValueOf(in)).Interface().(*Instance)
}

// detach returns a deep copy of v with every string copied. Unexported
// fields (none in an instance today) are copied as they are.
func detach(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.String:
		return reflect.ValueOf(strings.Clone(v.String())).Convert(v.Type())
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(detach(v.Elem()))
		return p
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		out := reflect.New(v.Type()).Elem()
		out.Set(detach(v.Elem()))
		return out
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(detach(it.Key()), detach(it.Value()))
		}
		return out
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(detach(v.Index(i)))
		}
		return out
	case reflect.Array:
		out := reflect.New(v.Type()).Elem()
		for i := range v.Len() {
			out.Index(i).Set(detach(v.Index(i)))
		}
		return out
	case reflect.Struct:
		out := reflect.New(v.Type()).Elem()
		out.Set(v)
		for i := range v.NumField() {
			if f := out.Field(i); f.CanSet() {
				f.Set(detach(v.Field(i)))
			}
		}
		return out
	default:
		return v
	}
}
