package jsonform

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

// seeds are values a driver's values and a deployment's context hold, and
// the corners of JSON's numbers and text.
var seeds = []string{
	`{"replicaCount":3,"image":{"repository":"nginx","tag":"1.27"},"resources":{"requests":{"cpu":"50m"}}}`,
	`{"env":[{"name":"LOG","value":"info"}],"ratio":0.5,"big":18446744073709551615,"neg":-9223372036854775808}`,
	`{"a":null,"b":{"c":null},"d":[],"e":{},"f":-0,"g":9007199254740993,"h":1e300,"i":1e21,"j":1e-7,"k":0.000001,"l":123456789e-20}`,
	`{"html":"<a href=\"x\">&</a>","u":"\u00e9\u2028","c":"a\u007fb"}`,
	`[1,"a",{"k":"v"},[[]]]`, `"scalar"`, `42`, `null`, `true`,
}

// roundTrip is what the package stands in for.
func roundTrip(t *testing.T, v any, numbers bool) any {
	t.Helper()
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%#v: Marshal refused what the conversion took: %v", v, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	if numbers {
		dec.UseNumber()
	}
	var out any
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzRoundTripIsEncodingJSONs pins both conversions to encoding/json's
// round trip on JSON read three ways: with float64 numbers (as a lockfile
// gives them), with int64 where a number is one (as CUE gives them), and
// with uint64 where it fits only that.
func FuzzRoundTripIsEncodingJSONs(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var asFloats any
		if json.Unmarshal(data, &asFloats) != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var asNumbers any
		if dec.Decode(&asNumbers) != nil {
			return
		}
		for _, v := range []any{asFloats, withInts(asNumbers)} {
			if got, ok := RoundTrip(v); ok {
				if want := roundTrip(t, v, false); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: RoundTrip gave\n%#v\nencoding/json\n%#v", data, got, want)
				}
			}
			if got, ok := RoundTripNumbers(v); ok {
				if want := roundTrip(t, v, true); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: RoundTripNumbers gave\n%#v\nencoding/json\n%#v", data, got, want)
				}
			}
		}
	})
}

// withInts replaces each json.Number by an int64 when it is one, a
// uint64 when only that holds it, else a float64.
func withInts(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = withInts(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = withInts(e)
		}
		return out
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		var u uint64
		if err := json.Unmarshal([]byte(t), &u); err == nil {
			return u
		}
		f, _ := t.Float64()
		return f
	}
	return v
}

// What encoding/json would change or refuse is left to it, and the
// conversions copy: changing the result leaves the input as it was.
func TestRoundTripLeavesToEncodingJSONWhatItWouldChange(t *testing.T) {
	for name, v := range map[string]any{
		"invalid UTF-8 text": map[string]any{"a": "\xff"},
		"invalid UTF-8 key":  map[string]any{"\xff": 1},
		"NaN":                []any{math.NaN()},
		"infinity":           map[string]any{"a": math.Inf(-1)},
		"a float32":          map[string]any{"a": float32(0.1)},
		"a struct":           map[string]any{"a": struct{ B int }{1}},
		"a typed map":        map[string]any{"a": map[string]string{"b": "c"}},
		"a json.Number":      []any{json.Number("1")},
	} {
		if _, ok := RoundTrip(v); ok {
			t.Errorf("%s: RoundTrip took it", name)
		}
		if _, ok := RoundTripNumbers(v); ok {
			t.Errorf("%s: RoundTripNumbers took it", name)
		}
	}
	in := map[string]any{"list": []any{1, "x"}, "map": map[string]any{"n": int64(2)}}
	out, ok := RoundTripMap(in)
	if !ok {
		t.Fatal("RoundTripMap refused JSON data")
	}
	out["list"].([]any)[0] = "changed"
	out["map"].(map[string]any)["n"] = "changed"
	if in["list"].([]any)[0] != 1 || in["map"].(map[string]any)["n"] != int64(2) {
		t.Errorf("changing the result changed the input: %v", in)
	}
	if m, ok := RoundTripMap(nil); !ok || m != nil {
		t.Errorf("RoundTripMap(nil) = %v, %v; want nil, true", m, ok)
	}
}

// Floats are written as encoding/json writes them, across the magnitudes
// where it switches to an exponent.
func TestNumbersAreTheTextMarshalWrites(t *testing.T) {
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1.5, 1e20, 1e21, 123456789e13, 1e-6, 1e-7, 5e-324, math.MaxFloat64, 0.1, 1.0 / 3} {
		j, _ := json.Marshal(f)
		got, _ := RoundTripNumbers(f)
		if got != json.Number(j) {
			t.Errorf("%v: %v, Marshal wrote %s", f, got, j)
		}
	}
	if got, _ := RoundTripNumbers(int64(math.MaxInt64)); got != json.Number(strings.TrimSpace("9223372036854775807")) {
		t.Errorf("MaxInt64: %v", got)
	}
}
