package afterwrite

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/cachetest"
	"github.com/styrmin/styrmin/testcluster"
)

// TestACachedCopyOlderThanTheControllersLastWriteIsReadFromTheAPIServer
// pins the read a StyrminDeployment's reconcile and a sync start with:
// their status writes are computed against it, so a copy from before the
// controller's own last write would lose a write (Ready False, then True
// again from a copy that still says True: nothing to write) or keep an
// older transition time. The object here is a ConfigMap: the read is the
// same for any kind.
func TestACachedCopyOlderThanTheControllersLastWriteIsReadFromTheAPIServer(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	api, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sd"}, Data: map[string]string{"ready": "True"}}
	if err := api.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	before := cm.DeepCopy()
	// The controller's write: Ready went False.
	cm.Data["ready"] = "False"
	if err := api.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	wrote := cm.ResourceVersion
	key := client.ObjectKeyFromObject(cm)

	for _, tc := range []struct {
		name    string
		cached  *corev1.ConfigMap
		wrote   string
		want    string
		fromAPI bool
	}{
		{"no write of this controller known: the cache's copy", before, "", "True", false},
		{"the cache has seen the write: its copy", cm, wrote, "False", false},
		{"the cache is behind the write: the API server's copy", before, wrote, "False", true},
		{"a resource version that cannot be compared: the API server's copy", before, "not-a-number", "False", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gets := 0
			var got corev1.ConfigMap
			fromAPI, err := Read(ctx, cachetest.Stale{Client: api, Copy: tc.cached}, cachetest.Counting{Reader: api, Gets: &gets}, key, &got, tc.wrote)
			if err != nil {
				t.Fatal(err)
			}
			if got.Data["ready"] != tc.want {
				t.Errorf("read ready=%s, want %s", got.Data["ready"], tc.want)
			}
			if fromAPI != tc.fromAPI || gets != map[bool]int{false: 0, true: 1}[tc.fromAPI] {
				t.Errorf("read the API server: reported %v, %d reads; want %v", fromAPI, gets, tc.fromAPI)
			}
		})
	}
}
