package drivers

import (
	"bytes"
	"crypto/sha256"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// keptRecords are the records of the one result log in dir that read,
// with the log's path.
func keptRecords(t *testing.T, dir string) (string, map[[sha256.Size]byte][]byte) {
	t.Helper()
	logs := resultLogs(t, dir)
	if len(logs) != 1 {
		t.Fatalf("result logs after one driver's evaluations: %v, want one", logs)
	}
	data, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	out := map[[sha256.Size]byte][]byte{}
	readRecords(data, func(key [sha256.Size]byte, result []byte) { out[key] = result })
	return logs[0], out
}

// writeRecords writes records as a result log at path, in the order of
// their keys.
func writeRecords(t *testing.T, path string, records map[[sha256.Size]byte][]byte) {
	t.Helper()
	var data []byte
	for _, k := range slices.SortedFunc(maps.Keys(records), func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) }) {
		data = append(data, resultRecord(k, records[k])...)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// What a child evaluated is kept with its input's check, and the next
// process reads it back rather than evaluating the input again: a kept
// result changed on disk is what that process gets.
func TestAResultKeptByAnEarlierProcessIsReadBackNotEvaluatedAgain(t *testing.T) {
	dir := t.TempDir()
	sb := checkingSandbox(t, dir)
	d, _ := loadExample(t, sb)
	first, sent := evaluateExample(t, sb, d, "hub")
	if sent == 0 {
		t.Fatal("the first process sent no evaluation to a child")
	}
	path, kept := keptRecords(t, dir)
	if len(kept) != int(sent) {
		t.Fatalf("%d results kept of the %d evaluations the child made", len(kept), sent)
	}
	// The services changed: no other evaluation reads them.
	changed := false
	for k, r := range kept {
		if r[0] == keptOutput && bytes.Contains(r, []byte(`"url"`)) {
			kept[k] = bytes.Replace(r, []byte("hub.staging-hub.svc"), []byte("kept.not.evaluated"), 1)
			changed = true
		}
	}
	if !changed {
		t.Fatalf("no kept result holds the services: %q", slices.Collect(maps.Values(kept)))
	}
	writeRecords(t, path, kept)

	sb = checkingSandbox(t, dir)
	d, _ = loadExample(t, sb)
	again, sent := evaluateExample(t, sb, d, "hub")
	if sent != 0 {
		t.Errorf("the next process sent %d evaluations to a child, want 0", sent)
	}
	if !strings.Contains(again, "kept.not.evaluated") {
		t.Fatalf("the next process evaluated the services again instead of reading the kept result:\n%.600s", again)
	}
	if back := strings.ReplaceAll(again, "kept.not.evaluated", "hub.staging-hub.svc"); back != first {
		t.Errorf("read back:\n%.600s\nevaluated in the child:\n%.600s", back, first)
	}
}

// A kept result that does not read (altered, or cut short by a process
// stopped mid-write) costs only its own input, evaluated again in this
// process and kept again; the other results are read back.
func TestAKeptResultThatDoesNotReadIsEvaluatedAgainAndKeptAgain(t *testing.T) {
	dir := t.TempDir()
	sb := checkingSandbox(t, dir)
	d, _ := loadExample(t, sb)
	first, _ := evaluateExample(t, sb, d, "hub")
	path, kept := keptRecords(t, dir)
	keys := slices.SortedFunc(maps.Keys(kept), func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	if len(keys) < 3 {
		t.Fatalf("%d results kept, want at least 3", len(keys))
	}
	// The first altered under its CRC, the last cut short.
	var data []byte
	for i, k := range keys {
		rec := resultRecord(k, kept[k])
		switch i {
		case 0:
			rec[len(rec)-2] ^= 0x20
		case len(keys) - 1:
			rec = rec[:len(rec)-len(kept[k])/2]
		}
		data = append(data, rec...)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	sb = checkingSandbox(t, dir)
	d, _ = loadExample(t, sb)
	again, sent := evaluateExample(t, sb, d, "hub")
	if sent != 0 {
		t.Errorf("sent %d evaluations to a child, want 0: their inputs are checked", sent)
	}
	if again != first {
		t.Errorf("with two kept results that do not read:\n%.600s\nwant, as the child evaluated:\n%.600s", again, first)
	}
	if _, after := keptRecords(t, dir); !reflect.DeepEqual(after, kept) {
		t.Errorf("after the next process, %d results read, want the %d kept first, each as it was", len(after), len(kept))
	}
}

// A result evaluated in this process (its input checked by an earlier
// process, its result not kept) is kept as the child would have answered
// it, byte for byte.
func TestAResultKeptFromAnInProcessEvaluationIsTheChildsAnswer(t *testing.T) {
	dir := t.TempDir()
	sb := checkingSandbox(t, dir)
	d, _ := loadExample(t, sb)
	evaluateExample(t, sb, d, "hub")
	path, fromChild := keptRecords(t, dir)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	sb = checkingSandbox(t, dir)
	d, _ = loadExample(t, sb)
	if _, sent := evaluateExample(t, sb, d, "hub"); sent != 0 {
		t.Fatalf("sent %d evaluations to a child, want 0", sent)
	}
	_, fromHere := keptRecords(t, dir)
	if !reflect.DeepEqual(fromHere, fromChild) {
		for k, r := range fromChild {
			if !bytes.Equal(fromHere[k], r) {
				t.Errorf("kept from this process:\n%q\nfrom the child:\n%q", fromHere[k], r)
			}
		}
		t.Fatalf("%d results kept from this process, %d from the child, not the same", len(fromHere), len(fromChild))
	}
}

// A kept render keeps every field of its objects: a field added to
// Object or HostClaim must be kept too (encodeKept, decodeKept).
func TestAKeptRenderKeepsEveryFieldOfItsObjects(t *testing.T) {
	if n := reflect.TypeFor[Object]().NumField(); n != 7 {
		t.Fatalf("Object has %d fields, the kept render 7: keep the new field in encodeKept and decodeKept", n)
	}
	if n := reflect.TypeFor[HostClaim]().NumField(); n != 3 {
		t.Fatalf("HostClaim has %d fields, the kept render 3: keep the new field in encodeKept and decodeKept", n)
	}
	objs := []Object{{
		APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Namespace: "staging-web", Name: "web", Component: "web",
		Hosts: []HostClaim{{Class: "nginx", Host: "web.staging.example.com", Path: "/"}, {Class: "", Host: "*.example.com", Path: "=/x"}},
	}, {
		APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: "things.example.com",
		YAML: []byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"),
	}, {}}
	resp, err := decodeKept(encodeKept(&sandboxResponse{Evaluated: true, Objects: objs}))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(resp.Objects, objs) || !resp.Evaluated {
		t.Errorf("read back:\n%+v\nwant:\n%+v", resp.Objects, objs)
	}
	out := []byte(`{"replicaCount":2}`)
	resp, err = decodeKept(encodeKept(&sandboxResponse{Evaluated: true, Output: out}))
	if err != nil || !bytes.Equal(resp.Output, out) || resp.Objects != nil {
		t.Errorf("an output read back as %+v, %v", resp, err)
	}
	// Every prefix of a kept render is refused, not read as less.
	full := encodeKept(&sandboxResponse{Evaluated: true, Objects: objs})
	for i := 1; i < len(full); i++ {
		if _, err := decodeKept(full[:i]); err == nil {
			t.Fatalf("a kept render cut to %d of %d bytes was read", i, len(full))
		}
	}
}

// A result log is bounded: one past its bound is started again by the
// next process that reads it, and a process stops adding at the bound.
func TestAResultLogPastItsBoundIsStartedAgain(t *testing.T) {
	dir := t.TempDir()
	root := checksRoot(t, dir)
	c := &loadChecks{root: root, code: "x", resultMax: 300}
	name := hexKey('a') + resultLogSuffix
	key := func(b byte) (k [sha256.Size]byte) {
		for i := range k {
			k[i] = b
		}
		return k
	}
	result := &sandboxResponse{Evaluated: true, Output: []byte(`{"message":"` + strings.Repeat("x", 150) + `"}`)}
	r := &inputResults{c: c, name: name}
	r.put(key(1), result)
	r.put(key(2), result) // over the bound: not kept
	if _, ok := r.get(key(1)); !ok {
		t.Fatal("the first result was not kept")
	}
	if _, ok := (&inputResults{c: c, name: name}).get(key(2)); ok {
		t.Error("a result was added past the log's bound")
	}
	r = &inputResults{c: c, name: name}
	r.put(key(2), result)
	r = &inputResults{c: c, name: name}
	if _, ok := r.get(key(1)); ok {
		t.Error("a log past its bound was read")
	}
	if _, ok := r.get(key(2)); !ok {
		t.Error("the log started again does not hold the result kept since")
	}
}

// A result log is trimmed as a check is: removed once unused for
// checksKeep.
func TestAResultLogUnusedForAMonthIsRemoved(t *testing.T) {
	dir := t.TempDir()
	root := checksRoot(t, dir)
	c := &loadChecks{root: root, code: "x"}
	now := time.Now()
	old, used := hexKey('a')+resultLogSuffix, hexKey('b')+resultLogSuffix
	for _, name := range []string{old, used} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-checksKeep - time.Hour)
		if name == used {
			at = now
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	c.trim(now, true)
	if _, err := os.Stat(filepath.Join(dir, old)); !os.IsNotExist(err) {
		t.Errorf("a result log unused for a month: %v, want it removed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, used)); err != nil {
		t.Errorf("a result log used today: %v, want it kept", err)
	}
}

// FuzzResultLog reads any bytes as a result log: nothing panics, a record
// is read only when its CRC matches, and a kept result decodes or is
// refused.
func FuzzResultLog(f *testing.F) {
	var k [sha256.Size]byte
	render := encodeKept(&sandboxResponse{Evaluated: true, Objects: []Object{{Kind: "Ingress", Name: "web", YAML: []byte("a: b\n"), Hosts: []HostClaim{{Host: "x"}}}}})
	f.Add(resultRecord(k, render))
	f.Add(append(resultRecord(k, []byte(`J{"a":1}`)), resultRecord(k, render)[:40]...))
	f.Add([]byte(strings.Repeat("0", 64) + " 00000000 3\nJ{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		readRecords(data, func(_ [sha256.Size]byte, result []byte) {
			if len(result) > maxKeptResult {
				t.Fatalf("a record of %d bytes was read", len(result))
			}
			if !bytes.Contains(data, result) {
				t.Fatal("a record read is not in the log")
			}
			_ = crc32.ChecksumIEEE(result)
			_, _ = decodeKept(result)
		})
		_, _ = decodeKept(data)
	})
}
