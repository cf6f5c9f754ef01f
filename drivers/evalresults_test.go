package drivers

import (
	"bytes"
	"crypto/sha256"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// keptRecords are the records of the one result log in dir that read,
// with the log's path.
func keptRecords(t *testing.T, dir string) (string, map[[sha256.Size]byte][]byte) {
	t.Helper()
	log, data := onlyLog(t, resultLogs(t, dir))
	out := map[[sha256.Size]byte][]byte{}
	readRecords(data, func(key [sha256.Size]byte, result []byte) { out[key] = result })
	return log, out
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
	first, sent := nextProcess(t, dir, "hub")
	if sent == 0 {
		t.Fatal("the first process sent no evaluation to a child")
	}
	path, kept := keptRecords(t, dir)
	if len(kept) != int(sent)-1 {
		t.Fatalf("%d results kept of the %d evaluations the child made, want all but the parameters'", len(kept), sent)
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

	again, sent := nextProcess(t, dir, "hub")
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
// stopped mid-write) ends what is read of its log: the results before it
// are read back, it and those after it are evaluated again in this
// process, and the log is started again and holds them all once more.
func TestAKeptResultThatDoesNotReadIsEvaluatedAgainAndKeptAgain(t *testing.T) {
	dir := t.TempDir()
	first, _ := nextProcess(t, dir, "hub")
	path, kept := keptRecords(t, dir)
	keys := slices.SortedFunc(maps.Keys(kept), func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	if len(keys) < 3 {
		t.Fatalf("%d results kept, want at least 3", len(keys))
	}
	// The second altered under its CRC, the last cut short.
	var data []byte
	for i, k := range keys {
		rec := resultRecord(k, kept[k])
		switch i {
		case 1:
			rec[len(rec)-2] ^= 0x20
		case len(keys) - 1:
			rec = rec[:len(rec)-len(kept[k])/2]
		}
		data = append(data, rec...)
	}
	read := 0
	if readRecords(data, func([sha256.Size]byte, []byte) { read++ }) == len(data) || read != 1 {
		t.Fatalf("%d records read before the altered one, want 1, and the log not read whole", read)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	again, sent := nextProcess(t, dir, "hub")
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
	nextProcess(t, dir, "hub")
	path, fromChild := keptRecords(t, dir)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, sent := nextProcess(t, dir, "hub"); sent != 0 {
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
	if n := reflect.TypeFor[HostClaim]().NumField(); n != 4 {
		t.Fatalf("HostClaim has %d fields, the kept render 4: keep the new field in encodeKept and decodeKept", n)
	}
	objs := []Object{{
		APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Namespace: "staging-web", Name: "web", Component: "web",
		Hosts: []HostClaim{{Class: "nginx", Host: "web.staging.example.com", Path: "/", TLS: "web-tls"}, {Class: "", Host: "*.example.com", Path: "=/x", TLS: DefaultCertificate}},
	}, {
		APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: "things.example.com",
		YAML: []byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"),
	}, {}}
	resp, err := decodeKept(encodeKept(&sandboxResponse{Evaluated: true, Objects: objs}, true), true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(resp.Objects, objs) || !resp.Evaluated {
		t.Errorf("read back:\n%+v\nwant:\n%+v", resp.Objects, objs)
	}
	if resp, err := decodeKept(encodeKept(&sandboxResponse{Evaluated: true}, true), true); err != nil || resp.Objects != nil {
		t.Errorf("a render of no objects read back as %+v, %v; want none, as the child's answer", resp, err)
	}
	out := []byte(`{"replicaCount":2}`)
	resp, err = decodeKept(encodeKept(&sandboxResponse{Evaluated: true, Output: out}, false), false)
	if err != nil || !bytes.Equal(resp.Output, out) || resp.Objects != nil {
		t.Errorf("an output read back as %+v, %v", resp, err)
	}
	// A record of the other form is refused: a render's key never reads
	// an output as no objects.
	if _, err := decodeKept(encodeKept(&sandboxResponse{Evaluated: true, Output: out}, false), true); err == nil {
		t.Error("an output was read as a render")
	}
	if _, err := decodeKept(encodeKept(&sandboxResponse{Evaluated: true, Objects: objs}, true), false); err == nil {
		t.Error("a render was read as an output")
	}
	// Every prefix of a kept render is refused, not read as less.
	full := encodeKept(&sandboxResponse{Evaluated: true, Objects: objs}, true)
	for i := 1; i < len(full); i++ {
		if _, err := decodeKept(full[:i], true); err == nil {
			t.Fatalf("a kept render cut to %d of %d bytes was read", i, len(full))
		}
	}
}

// A result log is bounded: a record that would take it past its bound is
// not written, and one past its bound (a bound lowered since) is started
// again by the next process that reads it.
func TestAResultLogPastItsBoundIsStartedAgain(t *testing.T) {
	dir := t.TempDir()
	c := &loadChecks{root: checksRoot(t, dir), code: "x", resultMax: 300}
	name := hexKey('a') + resultLogSuffix
	key := func(b byte) (k [sha256.Size]byte) {
		for i := range k {
			k[i] = b
		}
		return k
	}
	result := &sandboxResponse{Evaluated: true, Output: []byte(`{"message":"` + strings.Repeat("x", 150) + `"}`)}
	r := &inputResults{c: c, name: name}
	r.put(key(1), evalValues, result)
	r.put(key(2), evalValues, result) // past the bound: not written
	r = &inputResults{c: c, name: name}
	if _, ok := r.get(key(1), evalValues); !ok {
		t.Fatal("the result written within the bound was not read back")
	}
	if _, ok := r.get(key(2), evalValues); ok {
		t.Fatal("a result that took the log past its bound was written")
	}
	c.resultMax = 100
	r = &inputResults{c: c, name: name}
	if _, ok := r.get(key(1), evalValues); ok {
		t.Error("a log past its bound was read")
	}
	if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
		t.Errorf("a log past its bound: %v, want it removed", err)
	}
}

// A result log another user could have written (writable by its group)
// is neither read nor written to: a kept result decides what a lock
// writes.
func TestAResultLogOthersMayWriteIsNeitherReadNorWritten(t *testing.T) {
	dir := t.TempDir()
	first, _ := nextProcess(t, dir, "hub")
	path, kept := keptRecords(t, dir)
	for k, r := range kept {
		kept[k] = bytes.Replace(r, []byte("hub.staging-hub.svc"), []byte("planted.by.another"), 1)
	}
	writeRecords(t, path, kept)
	if err := os.Chmod(path, 0o664); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := nextProcess(t, dir, "hub")
	if again != first {
		t.Errorf("with a result log its group may write:\n%.600s\nwant, as evaluated:\n%.600s", again, first)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, before) {
		t.Error("a result log its group may write was written to")
	}
}

// The applied parameters are never kept: they hold a sensitive value in
// clear (the resolver puts its placeholder in after them), which must not
// reach the checks folder, kept in CI caches.
func TestASensitiveParameterValueIsNotKeptInTheChecksFolder(t *testing.T) {
	const secret = "s3cr3t-kept-n0where"
	dir := t.TempDir()
	sb := checkingSandbox(t, dir)
	fsys := folderFS(t)
	spec := string(fsys["driver.cue"].Data)
	marked := strings.Replace(spec, `message: *"Hello from Styrmin" | string & !=""`, `message: *"Hello from Styrmin" | string & !="" @styrmin(sensitive)`, 1)
	if marked == spec {
		t.Fatal("the example's message parameter was not found to mark sensitive")
	}
	fsys["driver.cue"] = &fstest.MapFile{Data: []byte(marked)}
	d, err := Load(fsys, LoadOptions{Source: checkedSource, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // in the child, then in this process
		if _, err := d.ApplyParameters(map[string]any{"message": secret}); err != nil {
			t.Fatal(err)
		}
	}
	c := exampleContext(d)
	c.Parameters["message"] = "placeholder"
	if _, err := d.Values(c); err != nil {
		t.Fatal(err)
	}
	if len(resultLogs(t, dir)) == 0 {
		t.Fatal("nothing kept: the test would prove nothing")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("%s holds the sensitive value in clear", e.Name())
		}
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
	render := encodeKept(&sandboxResponse{Evaluated: true, Objects: []Object{{Kind: "Ingress", Name: "web", YAML: []byte("a: b\n"), Hosts: []HostClaim{{Host: "x"}}}}}, true)
	f.Add(resultRecord(k, render))
	f.Add(append(resultRecord(k, []byte(`J{"a":1}`)), resultRecord(k, render)[:40]...))
	f.Add([]byte(strings.Repeat("0", 64) + " 00000000 3\nJ{}\n"))
	// A record planted in a render's text, after a record cut short.
	planted := resultRecord([sha256.Size]byte{1}, []byte(`J{"planted":true}`))
	inText := encodeKept(&sandboxResponse{Evaluated: true, Objects: []Object{{Kind: "ConfigMap", YAML: append([]byte("data: |\n"), planted...)}}}, true)
	f.Add(append(resultRecord(k, inText)[:50], resultRecord(k, inText)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var read []byte
		readRecords(data, func(key [sha256.Size]byte, result []byte) {
			if len(result) > maxKeptResult {
				t.Fatalf("a record of %d bytes was read", len(result))
			}
			read = append(read, resultRecord(key, result)...)
			_, _ = decodeKept(result, true)
			_, _ = decodeKept(result, false)
		})
		// The records read are the log's first, whole, each under the CRC
		// and length its header gives: never one inside another's bytes.
		if !bytes.HasPrefix(data, read) {
			t.Fatalf("the records read are not the log's first:\n%q\nof\n%q", read, data)
		}
		_, _ = decodeKept(data, true)
		_, _ = decodeKept(data, false)
	})
}

// The result logs of a checks folder are bounded together: a trim removes
// the least recently used beyond the folder's bound, and no check.
func TestResultLogsBeyondTheFoldersBoundAreRemovedLeastRecentlyUsedFirst(t *testing.T) {
	dir := t.TempDir()
	c := &loadChecks{root: checksRoot(t, dir), code: "x", resultFolderMax: 250}
	now := time.Now()
	logs := []string{hexKey('a') + resultLogSuffix, hexKey('b') + resultLogSuffix, hexKey('c') + resultLogSuffix}
	for i, name := range append([]string{hexKey('d')}, logs...) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.Repeat([]byte{'x'}, 100), 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-time.Duration(10-i) * time.Hour) // the check the oldest, then a, b, c
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	c.trim(now, true)
	for name, want := range map[string]bool{hexKey('d'): true, logs[0]: false, logs[1]: true, logs[2]: true} {
		_, err := os.Stat(filepath.Join(dir, name))
		if got := err == nil; got != want {
			t.Errorf("%s kept: %v, want %v", name, got, want)
		}
	}
}
