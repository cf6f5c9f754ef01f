package blockyaml

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// schemaDoc has a field of every kind a Schema fills, a promoted one, and
// fields it must decline (a type with its own UnmarshalJSON or
// UnmarshalText, a ",string" option) in a separate type.
type schemaDoc struct {
	schemaBase
	Name    string                       `json:"name"`
	Count   int64                        `json:"count,omitempty"`
	Small   int8                         `json:"small"`
	Size    uint16                       `json:"size"`
	Ratio   float32                      `json:"ratio"`
	On      bool                         `json:"on"`
	Ptr     *schemaLeaf                  `json:"ptr,omitempty"`
	Leaves  []schemaLeaf                 `json:"leaves"`
	ByName  map[string]schemaLeaf        `json:"byName"`
	Nested  map[string]map[string]string `json:"nested"`
	Any     any                          `json:"any"`
	Values  map[string]any               `json:"values"`
	Words   []string                     `json:"words"`
	Skipped string                       `json:"-"`
	hidden  string
	NoTag   string
}

type schemaBase struct {
	Kind string `json:"kind"`
}

type schemaLeaf struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

type schemaRefused struct {
	When time.Time `json:"when"`
}

type schemaQuoted struct {
	N int `json:"n,string"`
}

// jsonPath decodes data as the Schema must agree with: Decode, then the
// JSON form decoded by encoding/json with DisallowUnknownFields.
func jsonPath(data []byte, v any) error {
	tree, ok := Decode(data)
	if !ok {
		return errDeclined
	}
	j, err := json.Marshal(tree)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

var errDeclined = &json.UnsupportedValueError{Str: "declined by Decode"}

var schemaSeeds = []string{
	"kind: a\nname: web\ncount: 3\nsmall: -4\nsize: 80\nratio: 2\non: true\n",
	"ptr:\n  host: h\n  port: 80\nleaves:\n- host: a\n  port: 1\n- host: b\n  port: 2\n",
	"byName:\n  x:\n    host: h\n    port: 9\nnested:\n  a:\n    b: c\n",
	"any:\n  list:\n  - 1\n  - x\n  - null\n  - true\nvalues:\n  n: 12345678901234567890\n  m:\n    k: v\n",
	"words:\n- \"1\"\n- \"\"\n- yes-no\nptr: null\nleaves: null\nvalues: null\nany: null\nname: null\n",
	"NoTag: x\n", "noTag: x\n", "Name: x\n", "hidden: x\n", "Skipped: x\n", "unknown: 1\n",
	"small: 300\n", "size: -1\n", "count: 9223372036854775808\n", "on: \"true\"\n", "name: 5\n",
	"leaves:\n  host: a\n", "byName:\n- a\n", "{}\n",
}

// FuzzSchemaFillsAsEncodingJSON pins Schema.Unmarshal to Decode then
// encoding/json: where it fills, the JSON path fills the same value; it
// may only decline.
func FuzzSchemaFillsAsEncodingJSON(f *testing.F) {
	for _, s := range schemaSeeds {
		f.Add([]byte(s))
	}
	s := SchemaOf(&schemaDoc{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow schemaDoc
		if !s.Unmarshal(data, &fast) {
			return
		}
		if err := jsonPath(data, &slow); err != nil {
			t.Fatalf("%q: the schema filled %+v, encoding/json refused: %v", data, fast, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: the schema filled\n%#v\nencoding/json\n%#v", data, fast, slow)
		}
	})
}

// The seeds encoding/json reads are filled, not declined, but for a key
// that is a field's name in another case, which encoding/json matches
// and the schema leaves to it; types with their own decoding, ",string"
// fields and a target of another type are declined.
func TestSchemaFillsWhatEncodingJSONReads(t *testing.T) {
	s := SchemaOf(&schemaDoc{})
	for _, seed := range schemaSeeds {
		var slow schemaDoc
		jerr := jsonPath([]byte(seed), &slow)
		var fast schemaDoc
		filled := s.Unmarshal([]byte(seed), &fast)
		otherCase := seed == "noTag: x\n" || seed == "Name: x\n"
		if filled != (jerr == nil && !otherCase) {
			t.Errorf("%q: filled %v, encoding/json: %v", seed, filled, jerr)
		}
	}
	if SchemaOf(&schemaRefused{}).Unmarshal([]byte("when: \"2024\"\n"), &schemaRefused{}) {
		t.Error("a field of a type with UnmarshalJSON was filled")
	}
	if SchemaOf(&schemaQuoted{}).Unmarshal([]byte("n: \"1\"\n"), &schemaQuoted{}) {
		t.Error("a \",string\" field was filled")
	}
	if s.Unmarshal([]byte("kind: a\n"), &schemaBase{}) || s.Unmarshal([]byte("kind: a\n"), (*schemaDoc)(nil)) {
		t.Error("a target of another type, or nil, was filled")
	}
	if s.Unmarshal([]byte(strings.Repeat("kind: a\n", 1)+"  bad indent: x\n"), &schemaDoc{}) {
		t.Error("a document Decode declines was filled")
	}
}
