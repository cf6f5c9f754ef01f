package resolver

import (
	"os"
	"testing"
)

// TestALockWhoseValuesWereMadeByHandIsStale: a lockfile whose values
// were written by hand, its digest and checksum recomputed so it decodes
// cleanly, is not what the configuration gives: the lock (and so `lock
// --check` in a pull request) evaluates the driver again and replaces it,
// rather than trusting the values because the driver and the context
// are unchanged. Values decide what runs (images, commands).
func TestALockWhoseValuesWereMadeByHandIsStale(t *testing.T) {
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	id := ID{Cluster: "local", Environment: "dev", Name: "web"}
	ws, err := LoadWorkspace(os.DirFS(dir), WorkspaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := *ws.Locks[id]
	forged.Values = deepCopy(forged.Values).(map[string]any)
	forged.Values["image"] = map[string]any{"repository": "registry.example/forged", "tag": "latest"}
	if forged.Digest, err = forged.ComputeDigest(); err != nil {
		t.Fatal(err)
	}
	data, err := EncodeLock(&forged)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, id.LockPath(), string(data))

	ws, err = LoadWorkspace(os.DirFS(dir), WorkspaceOptions{})
	if err != nil {
		t.Fatalf("the forged lockfile does not even decode: %v", err)
	}
	changes, _, err := ws.Lock(LockAllOrNothing)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		if c.ID != id {
			continue
		}
		img, _ := c.Next.Values["image"].(map[string]any)
		if img["repository"] == "registry.example/forged" {
			t.Fatalf("the new lock kept the hand-made values: %v", img)
		}
		return
	}
	t.Fatalf("the lock found nothing to change in %s, whose values were made by hand (changes: %d)", id, len(changes))
}
