package operator

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/testcluster"
)

// Anyone who reaches the web UI can ask for pages as fast as they like,
// and each reads the API server (pods, events, a task): those reads are
// bounded by a token bucket of the UI's own, so a burst of them does not
// make the controllers' requests wait on the bucket the manager's clients
// share. The manager's bucket here allows one request a second.
func TestTheUIsReadsDoNotMakeTheControllersRequestsWait(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	if err := InstallCRDs(context.Background(), c.RESTConfig); err != nil {
		t.Fatal(err)
	}
	mgr, err := NewManager(c.RESTConfig, ManagerOptions{Drivers: &driversource.CatalogSource{Catalog: drivers.NewCatalog()}, QPS: 1, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	live, err := uiLiveReader(mgr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The first request of each reader maps the kind (discovery): not
	// what is measured.
	for _, r := range []client.Reader{live, mgr.GetAPIReader()} {
		if err := r.List(ctx, &corev1.PodList{}, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // the manager's bucket refilled
	// Ten page reads at once, as a script asking for pages makes them.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if err := live.List(ctx, &corev1.EventList{}, client.InNamespace("default")); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := mgr.GetAPIReader().List(ctx, &corev1.PodList{}, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 800*time.Millisecond {
		t.Errorf("a controller's request waited %s behind the UI's reads, want it answered at once", d.Round(time.Millisecond))
	}
	wg.Wait()
}
