package blockyaml

import (
	"encoding"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// A Schema fills values of one Go type from documents Decode reads, as
// encoding/json fills them from the documents' JSON form with
// DisallowUnknownFields (what sigs.k8s.io/yaml's UnmarshalStrict does
// after converting YAML to JSON), without writing and scanning that JSON:
// three quarters of reading a lockfile went there. It declines what it does
// not map exactly as encoding/json would: a key that is no field's JSON
// name as written (encoding/json also matches other cases), a number a
// field's type cannot hold, a type
// with its own UnmarshalJSON or UnmarshalText, a field tagged ",string".
// A Schema is built once per type (SchemaOf) and is safe for concurrent
// use.
type Schema struct {
	typ  reflect.Type
	root *typeInfo
}

// typeInfo is how one Go type is filled; nil fields of a struct are
// filled by their typeInfo in fields.
type typeInfo struct {
	kind   reflect.Kind
	elem   *typeInfo            // pointer, slice and map elements
	fields map[string]fieldInfo // struct fields by JSON name
	bad    bool                 // a type Unmarshal declines
}

// fieldInfo is a struct field, by its index path (promoted fields of an
// embedded struct have two or more).
type fieldInfo struct {
	index []int
	info  *typeInfo
}

// SchemaOf returns the Schema of the type of v's target (v is a
// pointer, as for Unmarshal).
func SchemaOf(v any) *Schema {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return &Schema{root: &typeInfo{bad: true}}
	}
	return &Schema{typ: t, root: infoOf(t.Elem(), map[reflect.Type]*typeInfo{})}
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func infoOf(t reflect.Type, seen map[reflect.Type]*typeInfo) *typeInfo {
	if ti, ok := seen[t]; ok {
		return ti
	}
	ti := &typeInfo{kind: t.Kind()}
	seen[t] = ti
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		ti.bad = true
		return ti
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		ti.elem = infoOf(t.Elem(), seen)
	case reflect.Map:
		if t.Key() != reflect.TypeFor[string]() {
			ti.bad = true
			break
		}
		ti.elem = infoOf(t.Elem(), seen)
	case reflect.Struct:
		ti.fields = map[string]fieldInfo{}
		if !addFields(ti, t, nil, seen) {
			ti.bad = true
		}
	case reflect.String, reflect.Bool, reflect.Interface,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if t.Kind() == reflect.Interface && t.NumMethod() != 0 {
			ti.bad = true
		}
	default:
		ti.bad = true
	}
	return ti
}

// addFields adds t's fields to ti.fields, those of embedded structs
// without a JSON name promoted; false for what encoding/json would
// resolve by its rules of depth and tags (two fields of one name).
func addFields(ti *typeInfo, t reflect.Type, index []int, seen map[reflect.Type]*typeInfo) bool {
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",string,") {
			return false
		}
		at := append(append([]int(nil), index...), i)
		if sf.Anonymous && name == "" {
			// encoding/json promotes the fields of an embedded struct,
			// exported or not; an embedded pointer is not worth its rules.
			if sf.Type.Kind() != reflect.Struct {
				return false
			}
			if !addFields(ti, sf.Type, at, seen) {
				return false
			}
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if _, dup := ti.fields[name]; dup {
			return false
		}
		ti.fields[name] = fieldInfo{index: at, info: infoOf(sf.Type, seen)}
	}
	return true
}

// Unmarshal decodes data into v, which must be a pointer of the Schema's
// type, as Decode then encoding/json (DisallowUnknownFields) would. ok is
// false when data is outside Decode's subset or anything in it is outside
// what the Schema maps; v may then be partly filled, and the caller
// decodes afresh by the general path.
func (s *Schema) Unmarshal(data []byte, v any) bool {
	rv := reflect.ValueOf(v)
	if s.root.bad || rv.Type() != s.typ || rv.IsNil() {
		return false
	}
	tree, ok := Decode(data)
	if !ok {
		return false
	}
	return fill(rv.Elem(), s.root, tree)
}

// fill sets v from the JSON data x as encoding/json would, or reports
// false.
func fill(v reflect.Value, ti *typeInfo, x any) bool {
	if ti.bad {
		return false
	}
	if x == nil {
		// As encoding/json: null sets an interface, pointer, map or slice
		// to nil and leaves anything else as it is.
		switch ti.kind {
		case reflect.Interface, reflect.Pointer, reflect.Map, reflect.Slice:
			v.SetZero()
		}
		return true
	}
	switch ti.kind {
	case reflect.Interface:
		jx, ok := jsonAny(x)
		if !ok {
			return false
		}
		v.Set(reflect.ValueOf(&jx).Elem())
		return true
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return fill(v.Elem(), ti.elem, x)
	case reflect.Struct:
		m, ok := x.(map[string]any)
		if !ok {
			return false
		}
		for k, e := range m {
			f, ok := ti.fields[k]
			if !ok {
				return false
			}
			fv := v
			for _, i := range f.index {
				fv = fv.Field(i)
			}
			if !fill(fv, f.info, e) {
				return false
			}
		}
		return true
	case reflect.Map:
		m, ok := x.(map[string]any)
		if !ok {
			return false
		}
		if v.IsNil() {
			v.Set(reflect.MakeMapWithSize(v.Type(), len(m)))
		}
		et := v.Type().Elem()
		for k, e := range m {
			ev := reflect.New(et).Elem()
			if !fill(ev, ti.elem, e) {
				return false
			}
			v.SetMapIndex(reflect.ValueOf(k), ev)
		}
		return true
	case reflect.Slice:
		s, ok := x.([]any)
		if !ok {
			return false
		}
		out := reflect.MakeSlice(v.Type(), len(s), len(s))
		for i, e := range s {
			if !fill(out.Index(i), ti.elem, e) {
				return false
			}
		}
		v.Set(out)
		return true
	case reflect.String:
		s, ok := x.(string)
		if !ok {
			return false
		}
		v.SetString(s)
		return true
	case reflect.Bool:
		b, ok := x.(bool)
		if !ok {
			return false
		}
		v.SetBool(b)
		return true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := x.(json.Number)
		if !ok {
			return false
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || v.OverflowInt(i) {
			return false
		}
		v.SetInt(i)
		return true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := x.(json.Number)
		if !ok {
			return false
		}
		u, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil || v.OverflowUint(u) {
			return false
		}
		v.SetUint(u)
		return true
	case reflect.Float32, reflect.Float64:
		n, ok := x.(json.Number)
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(string(n), v.Type().Bits())
		if err != nil || v.OverflowFloat(f) {
			return false
		}
		v.SetFloat(f)
		return true
	}
	return false
}

// jsonAny is x as encoding/json decodes it into an `any`: numbers as
// float64. Maps and slices are Decode's own, changed in place.
func jsonAny(x any) (any, bool) {
	switch t := x.(type) {
	case map[string]any:
		for k, e := range t {
			je, ok := jsonAny(e)
			if !ok {
				return nil, false
			}
			t[k] = je
		}
		return t, true
	case []any:
		for i, e := range t {
			je, ok := jsonAny(e)
			if !ok {
				return nil, false
			}
			t[i] = je
		}
		return t, true
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, false
		}
		return f, true
	case string, bool, nil:
		return t, true
	}
	return nil, false
}
