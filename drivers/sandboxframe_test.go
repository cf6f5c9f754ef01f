package drivers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// frameObjects are a render's objects with every field set, text holding
// newlines and bytes JSON would escape.
func frameObjects() []Object {
	return []Object{{
		APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Namespace: "staging-web", Name: "web", Component: "web",
		YAML:  []byte("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  annotations:\n    x: \"\\\"quoted\\\"\\n\"\n"),
		Hosts: []HostClaim{{Class: "nginx", Host: "web.staging.example.com", Path: "/", TLS: "web-tls"}},
	}, {Kind: "ConfigMap", Name: "empty"}}
}

// An answer's output and objects follow its line as they are, and the
// next answer on the same stream reads whole after them: the framing
// keeps the two processes in step whatever bytes the results hold.
func TestASandboxAnswerCarriesItsOutputAndObjectsAfterItsLine(t *testing.T) {
	answers := []*sandboxResponse{
		{Evaluated: true, Objects: frameObjects()},
		{Evaluated: true, Output: []byte("{\"a\":\"line\\none\"}\n\n{")},
		{Errors: toWire(&LimitError{Driver: "d", Limit: LimitTime, Max: "1s"}), Retire: true},
		{Evaluated: true, Objects: []Object{}}, // a render of no objects
		{NeedFiles: true},
	}
	var stream []byte
	for _, a := range answers {
		c := *a
		stream = append(stream, encodeAnswer(&c)...)
	}
	r := bufio.NewReader(bytes.NewReader(stream))
	for i, want := range answers {
		got, unreadable, err := readAnswer(r, 1<<20)
		if err != nil || unreadable != nil {
			t.Fatalf("answer %d: %v, %v", i, err, unreadable)
		}
		if len(want.Objects) == 0 {
			want.Objects = nil // as JSON's omitempty carried it
		}
		got.OutputLen, got.ObjectsLen, got.kept = 0, 0, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("answer %d read back as\n%+v\nwant\n%+v", i, got, want)
		}
	}
	if _, _, err := readAnswer(r, 1<<20); !errors.Is(err, io.EOF) {
		t.Errorf("after the last answer: %v, want EOF", err)
	}
}

// A render's objects, read from the child, are kept as the child encoded
// them: the result log's record is the answer's bytes, not encoded again.
func TestARenderReadFromTheChildIsKeptAsItsAnswerEncodedIt(t *testing.T) {
	sent := &sandboxResponse{Evaluated: true, Objects: frameObjects()}
	line := encodeAnswer(sent)
	got, unreadable, err := readAnswer(bufio.NewReader(bytes.NewReader(line)), 1<<20)
	if err != nil || unreadable != nil {
		t.Fatal(err, unreadable)
	}
	want := encodeKept(&sandboxResponse{Objects: frameObjects()}, true)
	if kept := encodeKept(got, true); !bytes.Equal(kept, want) || !bytes.HasSuffix(line, kept) {
		t.Errorf("kept %q\nwant %q, the end of the answer", kept, want)
	}
	// The objects are the caller's to change: the kept bytes stay.
	got.Objects[0].YAML[0] = 'X'
	if !bytes.Equal(encodeKept(got, true), want) {
		t.Error("changing a read object's text changed what is kept of it")
	}
}

// An answer cut short is no answer (the child died: its exit is read for
// the cause); one whose lengths reach past the limit is refused before
// anything is allocated for it; one that comes whole but does not decode
// is unreadable.
func TestASandboxAnswerCutShortLongerThanItsLimitOrGarbledIsRefused(t *testing.T) {
	whole := encodeAnswer(&sandboxResponse{Evaluated: true, Output: []byte(`{"replicas":2}`), Objects: frameObjects()})
	line := whole[:bytes.IndexByte(whole, '\n')+1]
	for n := len(line); n < len(whole); n++ {
		_, unreadable, err := readAnswer(bufio.NewReader(bytes.NewReader(whole[:n])), 1<<20)
		if !errors.Is(err, io.ErrUnexpectedEOF) || unreadable != nil {
			t.Fatalf("cut to %d of %d bytes: %v, %v; want no whole answer", n, len(whole), err, unreadable)
		}
	}
	if _, _, err := readAnswer(bufio.NewReader(bytes.NewReader(whole)), int64(len(whole)-1)); !errors.Is(err, errAnswerTooLarge) {
		t.Errorf("an answer one byte over its limit: %v, want %v", err, errAnswerTooLarge)
	}
	for name, bad := range map[string]string{
		"negative length":  `{"outputLen":-1}` + "\n",
		"not JSON":         "{\n",
		"objects garbled":  `{"objectsLen":3}` + "\nOxx",
		"objects as text":  `{"objectsLen":3}` + "\nJ{}",
		"length past it":   `{"objectsLen":1099511627776}` + "\n",
		"output past it":   `{"outputLen":4611686018427387904,"objectsLen":4611686018427387904}` + "\n",
		"lengths overflow": `{"outputLen":9223372036854775807,"objectsLen":9223372036854775807}` + "\n",
	} {
		resp, unreadable, err := readAnswer(bufio.NewReader(strings.NewReader(bad)), 1<<20)
		if resp != nil || unreadable == nil && err == nil {
			t.Errorf("%s: read as %+v", name, resp)
		}
	}
}

// A request's input follows its line as it is, and its numbers decode as
// the parent wrote them (an int past float64's precision stays exact).
func TestASandboxRequestCarriesItsInputAfterItsLine(t *testing.T) {
	input := []byte("{\"parameters\":{\"n\":9007199254740993}}\n\n")
	reqs := []*sandboxRequest{
		{ID: 1, Op: "check", Source: "d", Eval: evalValues, Input: input, Values: map[string]any{"big": json.Number("9007199254740993")}},
		{ID: 2, Op: "load", Source: "d", Files: map[string][]byte{"driver.cue": []byte("x: 1\n")}},
		{ID: 3, Op: "call", Func: "f", Input: []byte{0, '\n', 0xff}},
	}
	var stream []byte
	for _, r := range reqs {
		b, err := encodeRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(stream, b...)
	}
	r := bufio.NewReader(bytes.NewReader(stream))
	for i, want := range reqs {
		got, err := readRequest(r)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got.InputLen != len(want.Input) {
			t.Errorf("request %d: input length %d, want %d", i, got.InputLen, len(want.Input))
		}
		got.InputLen = 0
		if !reflect.DeepEqual(got, want) {
			t.Errorf("request %d read back as\n%+v\nwant\n%+v", i, got, want)
		}
	}
	if _, err := readRequest(r); !errors.Is(err, io.EOF) {
		t.Errorf("after the last request: %v, want EOF", err)
	}
	b, _ := encodeRequest(reqs[0])
	if _, err := readRequest(bufio.NewReader(bytes.NewReader(b[:len(b)-1]))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a request cut short: %v, want %v", err, io.ErrUnexpectedEOF)
	}
}

// FuzzSandboxAnswer: whatever a child writes, reading it never panics,
// never takes more than the limit, and what reads is what its encoding
// reads back as.
func FuzzSandboxAnswer(f *testing.F) {
	f.Add(encodeAnswer(&sandboxResponse{Evaluated: true, Objects: frameObjects()}))
	f.Add(encodeAnswer(&sandboxResponse{Evaluated: true, Output: []byte(`{"a":1}`)}))
	f.Add([]byte(`{"objectsLen":5}` + "\nO\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		const limit = 1 << 16
		resp, unreadable, err := readAnswer(bufio.NewReader(bytes.NewReader(b)), limit)
		if err != nil || unreadable != nil {
			return
		}
		if resp.OutputLen+resp.ObjectsLen > limit {
			t.Fatalf("read an answer of %d bytes past a limit of %d", resp.OutputLen+resp.ObjectsLen, limit)
		}
		again, unreadable, err := readAnswer(bufio.NewReader(bytes.NewReader(encodeAnswer(resp))), 1<<30)
		if err != nil || unreadable != nil {
			t.Fatalf("an answer read does not read again once encoded: %v, %v", err, unreadable)
		}
		if !reflect.DeepEqual(again.Objects, resp.Objects) || !bytes.Equal(again.Output, resp.Output) || again.Evaluated != resp.Evaluated {
			t.Fatalf("read again as %+v, first %+v", again, resp)
		}
	})
}
