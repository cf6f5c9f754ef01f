package drivers

import (
	"context"
	"os"
	"sync"
	"testing"
	"testing/fstest"
)

// Two catalogs loaded through one share (a plan's base and head) evaluate
// a version they hold alike once, in the sandbox and in-process, and
// share its Driver; a version whose files differ, or loaded under other
// limits, loads on its own. Loads of one folder at once wait for the
// first.
func TestALoadShareLoadsEachFolderOnce(t *testing.T) {
	sb := newSandbox(t, 2)
	share := NewLoadShare()
	opts := LoadOptions{Sandbox: sb, Limits: testLimits(), Shared: share}
	base, err := LoadCatalog(os.DirFS(examples), ".", opts)
	if err != nil {
		t.Fatal(err)
	}
	loads := sb.Requests()
	if loads == 0 {
		t.Fatal("the base's drivers loaded without the sandbox")
	}
	head, err := LoadCatalog(os.DirFS(examples), ".", opts)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Requests() != loads {
		t.Errorf("the head's drivers, alike, sent %d more loads to the sandbox", sb.Requests()-loads)
	}
	for _, name := range base.Names() {
		for _, d := range base.Versions(name) {
			h, ok := head.Get(name, d.Version)
			if !ok || h != d {
				t.Errorf("%s@%s: the head's is not the base's Driver", name, d.Version)
			}
		}
	}

	changed := minimalFS()
	mini, err := Load(minimalFS(), LoadOptions{Source: "drivers/mini/1.0.0", Shared: share})
	if err != nil {
		t.Fatal(err)
	}
	changed["chart/values.yaml"] = &fstest.MapFile{Data: []byte("replicas: 2\n")}
	other, err := Load(changed, LoadOptions{Source: "drivers/mini/1.0.0", Shared: share})
	if err != nil {
		t.Fatal(err)
	}
	limited, err := Load(minimalFS(), LoadOptions{Source: "drivers/mini/1.0.0", Shared: share, Limits: Limits{RenderedBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	cachedRenders, err := Load(minimalFS(), LoadOptions{Source: "drivers/mini/1.0.0", Shared: share, RenderCache: NewRenderCache()})
	if err != nil {
		t.Fatal(err)
	}
	if other == mini || other.Digest == mini.Digest || limited == mini || cachedRenders == mini {
		t.Error("a folder of other files, or under other limits or another render cache, was given the first load's Driver")
	}

	// A failed load is not kept: the next load of the folder loads.
	retried := NewLoadShare()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Load(minimalFS(), LoadOptions{Source: "drivers/mini/1.0.0", Shared: retried, Context: cancelled}); err == nil {
		t.Fatal("a load with its context cancelled succeeded")
	}
	if d, err := Load(minimalFS(), LoadOptions{Source: "drivers/mini/1.0.0", Shared: retried}); err != nil || d == nil {
		t.Errorf("after a failed load, the next gave %v, %v; want the driver", d, err)
	}

	at := NewLoadShare()
	got := make([]*Driver, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			got[i], _ = Load(minimalFS(), LoadOptions{Source: "drivers/mini/1.0.0", Shared: at})
		})
	}
	wg.Wait()
	for _, d := range got {
		if d == nil || d != got[0] {
			t.Fatalf("loads at once gave %v", got)
		}
	}
}
