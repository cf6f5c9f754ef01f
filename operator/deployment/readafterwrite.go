package deployment

import (
	"context"

	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// readAfterWrite reads obj from the cache, and again from the API server
// when the cache has not seen this controller's last write of it yet
// (wrote, the resourceVersion that write was answered with; "" for none).
// It reports whether it read the API server.
//
// The status patch is computed against what was read: from a copy older
// than the controller's own last write, a needed write can look like no
// change (a Ready that went False and back stays False on the server until
// the next event) and a condition keeps an older transition time. The read
// costs a request only when the cache is behind. Resource versions that
// cannot be compared are read from the API server too: the answer must be
// right, and an etcd-backed API server always gives comparable ones.
func readAfterWrite(ctx context.Context, cache, api client.Reader, key client.ObjectKey, obj client.Object, wrote string) (bool, error) {
	if err := cache.Get(ctx, key, obj); err != nil {
		return false, err
	}
	if wrote == "" {
		return false, nil
	}
	if c, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), wrote); err == nil && c >= 0 {
		return false, nil
	}
	return true, api.Get(ctx, key, obj)
}
