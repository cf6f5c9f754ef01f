package jsonform

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// RoundTrip returns v as encoding/json's Marshal then Unmarshal into an
// any would: every number a float64, maps and slices copied. ok is false
// for what it leaves to them: a type other than JSON data's (maps with
// string keys, []any, strings, bools, the integer types, float64), a
// float32, a string that is not valid UTF-8, a number JSON cannot hold.
func RoundTrip(v any) (any, bool) {
	return convert(v, func(f float64) any { return f }, func(i int64) any { return float64(i) }, func(u uint64) any { return float64(u) })
}

// RoundTripNumbers is RoundTrip as a Decoder with UseNumber reads the
// text back: every number the json.Number of the text Marshal writes for
// it (an integer exactly, a float64 as encoding/json formats it).
func RoundTripNumbers(v any) (any, bool) {
	return convert(v,
		func(f float64) any { return json.Number(formatFloat(f)) },
		func(i int64) any { return json.Number(strconv.FormatInt(i, 10)) },
		func(u uint64) any { return json.Number(strconv.FormatUint(u, 10)) })
}

// RoundTripMap is RoundTrip of a map, typed.
func RoundTripMap(m map[string]any) (map[string]any, bool) {
	if m == nil {
		return nil, true
	}
	v, ok := RoundTrip(m)
	if !ok {
		return nil, false
	}
	return v.(map[string]any), true
}

func convert(v any, float func(float64) any, integer func(int64) any, unsigned func(uint64) any) (any, bool) {
	switch t := v.(type) {
	case nil, bool:
		return t, true
	case string:
		return t, utf8.ValidString(t)
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return nil, false
		}
		return float(t), true
	case int:
		return integer(int64(t)), true
	case int64:
		return integer(t), true
	case int32:
		return integer(int64(t)), true
	case uint64:
		return unsigned(t), true
	case map[string]any:
		if t == nil {
			return nil, true
		}
		out := make(map[string]any, len(t))
		for k, e := range t {
			if !utf8.ValidString(k) {
				return nil, false
			}
			ne, ok := convert(e, float, integer, unsigned)
			if !ok {
				return nil, false
			}
			out[k] = ne
		}
		return out, true
	case []any:
		if t == nil {
			return nil, true
		}
		out := make([]any, len(t))
		for i, e := range t {
			ne, ok := convert(e, float, integer, unsigned)
			if !ok {
				return nil, false
			}
			out[i] = ne
		}
		return out, true
	}
	return nil, false
}

// formatFloat writes f as encoding/json's Marshal does: the shortest
// text that reads back as f, with an exponent only for very large or
// small magnitudes, and no leading zero in a negative exponent.
func formatFloat(f float64) string {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b := strconv.AppendFloat(make([]byte, 0, 24), f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return string(b)
}
