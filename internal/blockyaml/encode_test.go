package blockyaml

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	yamlv2 "go.yaml.in/yaml/v2"
)

// encodes checks that Encode writes doc as go-yaml v2 does, or declines;
// it reports whether Encode accepted.
func encodes(t *testing.T, doc yamlv2.MapSlice) bool {
	t.Helper()
	want, err := yamlv2.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := Encode(doc)
	if ok && !bytes.Equal(got, want) {
		t.Fatalf("Encode wrote\n%s\ngo-yaml v2 writes\n%s", got, want)
	}
	return ok
}

func TestEncodeWritesWhatGoYAMLWritesOrDeclines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		doc    yamlv2.MapSlice
		accept bool
	}{
		{"empty document", yamlv2.MapSlice{}, true},
		{"scalars", yamlv2.MapSlice{{Key: "a", Value: "web"}, {Key: "count", Value: 3}, {Key: "b", Value: true}, {Key: "z", Value: nil}, {Key: "u", Value: uint64(1 << 63)}}, true},
		{"a key read as a boolean", yamlv2.MapSlice{{Key: "n", Value: 3}}, false},
		{"quoted digits and empty", yamlv2.MapSlice{{Key: "port", Value: "5432"}, {Key: "mode", Value: "0755"}, {Key: "", Value: ""}, {Key: "8080", Value: "x"}}, true},
		{"version, quantity, digest, url", yamlv2.MapSlice{{Key: "v", Value: "1.25.0"}, {Key: "m", Value: "128Mi"}, {Key: "d", Value: "sha256:0f3a"}, {Key: "u", Value: "redis://a-b.c.svc:6379"}}, true},
		{"nested", yamlv2.MapSlice{{Key: "a", Value: yamlv2.MapSlice{{Key: "b", Value: yamlv2.MapSlice{{Key: "c", Value: 1}}}, {Key: "e", Value: yamlv2.MapSlice{}}}}}, true},
		{"sequences", yamlv2.MapSlice{{Key: "s", Value: []any{"x", 1, yamlv2.MapSlice{{Key: "k", Value: "v"}, {Key: "l", Value: []any{"why"}}}, yamlv2.MapSlice{}, []any{}}}, {Key: "e", Value: []any{}}}, true},
		{"a message that fits", yamlv2.MapSlice{{Key: "message", Value: "Hello from Styrmin"}}, true},
		{"a float", yamlv2.MapSlice{{Key: "f", Value: 1.5}}, false},
		{"a line break", yamlv2.MapSlice{{Key: "s", Value: "a\nb"}}, false},
		{"a word read as a boolean", yamlv2.MapSlice{{Key: "s", Value: "yes"}}, false},
		{"a number in a string", yamlv2.MapSlice{{Key: "s", Value: "1.5"}}, false},
		{"a colon and a space", yamlv2.MapSlice{{Key: "s", Value: "a: b"}}, false},
		{"a long sentence", yamlv2.MapSlice{{Key: "s", Value: strings.Repeat("word ", 20) + "end"}}, false},
		{"a long word", yamlv2.MapSlice{{Key: "s", Value: strings.Repeat("w", 200)}}, true},
		{"a sequence in a sequence", yamlv2.MapSlice{{Key: "s", Value: []any{[]any{"a"}}}}, false},
		{"a non-ASCII letter", yamlv2.MapSlice{{Key: "s", Value: "é"}}, false},
		{"a long key", yamlv2.MapSlice{{Key: strings.Repeat("k", 120), Value: 1}}, false},
		{"a key that is no string", yamlv2.MapSlice{{Key: 1, Value: 1}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := encodes(t, tc.doc); got != tc.accept {
				t.Errorf("accepted = %t, want %t", got, tc.accept)
			}
		})
	}
}

// TestEncodeWritesRandomDocumentsAsGoYAML writes random documents of the
// words Decode's tests use (the odd ones included) both ways.
func TestEncodeWritesRandomDocumentsAsGoYAML(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	accepted := 0
	const docs = 3000
	for range docs {
		if encodes(t, randomSlice(rng, 0, "")) {
			accepted++
		}
	}
	// Most documents hold an odd word somewhere; what is accepted must
	// be right.
	if accepted < docs/20 {
		t.Fatalf("accepted %d of %d documents", accepted, docs)
	}
}

// randomSlice is a random document whose keys and strings are words, or
// extra.
func randomSlice(rng *rand.Rand, depth int, extra string) yamlv2.MapSlice {
	m := yamlv2.MapSlice{}
	for range 1 + rng.IntN(4) {
		k := words[rng.IntN(len(words))]
		if extra != "" && rng.IntN(3) == 0 {
			k = extra
		}
		m = append(m, yamlv2.MapItem{Key: k, Value: randomSliceValue(rng, depth+1, extra)})
	}
	return m
}

func randomSliceValue(rng *rand.Rand, depth int, extra string) any {
	k := rng.IntN(10)
	if depth > 3 {
		k = rng.IntN(6)
	}
	switch k {
	case 0:
		if extra != "" {
			return extra
		}
		return words[rng.IntN(len(words))]
	case 1:
		return rng.Int64N(1<<40) - 1<<39
	case 2:
		return rng.IntN(2) == 0
	case 3:
		return nil
	case 4, 5:
		return words[rng.IntN(len(words))]
	case 6, 7:
		if rng.IntN(5) == 0 {
			return yamlv2.MapSlice{}
		}
		return randomSlice(rng, depth, extra)
	default:
		s := make([]any, rng.IntN(3))
		for i := range s {
			s[i] = randomSliceValue(rng, depth+1, extra)
		}
		return s
	}
}

// FuzzEncode: whatever Encode accepts, it writes as go-yaml v2 does; the
// fuzzed string stands as keys and values at random depths and columns.
func FuzzEncode(f *testing.F) {
	for _, s := range words {
		f.Add(uint64(1), s)
	}
	f.Add(uint64(7), strings.Repeat("ab ", 30))
	f.Fuzz(func(t *testing.T, seed uint64, s string) {
		rng := rand.New(rand.NewPCG(seed, 5))
		for range 4 {
			encodes(t, randomSlice(rng, 0, s))
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	var docs []yamlv2.MapSlice
	for len(docs) < 100 {
		d := randomSlice(rng, 0, "")
		if _, ok := Encode(d); ok {
			docs = append(docs, d)
		}
	}
	b.Run("blockyaml", func(b *testing.B) {
		for b.Loop() {
			for _, d := range docs {
				Encode(d)
			}
		}
	})
	b.Run("go-yaml-v2", func(b *testing.B) {
		for b.Loop() {
			for _, d := range docs {
				if _, err := yamlv2.Marshal(d); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// TestEncodeBreaksNoLineGoYAMLWouldNot sweeps sentences across the 80th
// column, at several depths, after keys of several lengths, in mappings
// and in sequences: accepted, they are written as go-yaml writes them.
func TestEncodeBreaksNoLineGoYAMLWouldNot(t *testing.T) {
	accepted := 0
	for n := 40; n <= 100; n++ {
		sentence := strings.Repeat("ab ", n/3+1)[:n]
		sentence = strings.TrimRight(sentence, " ") + "z"
		for _, key := range []string{"k", "message", strings.Repeat("key", 10)} {
			var v any = sentence
			for range 4 {
				for _, doc := range []yamlv2.MapSlice{{{Key: key, Value: v}}, {{Key: key, Value: []any{v}}}} {
					if encodes(t, doc) {
						accepted++
					}
				}
				v = yamlv2.MapSlice{{Key: key, Value: v}}
			}
		}
	}
	if accepted == 0 {
		t.Fatal("no sentence accepted")
	}
}
