package afterwrite

import (
	"context"

	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Read reads obj from the cache, and again from the API server when the
// cache has not seen the caller's last write of it yet (wrote, the
// resourceVersion that write was answered with; "" for none). It reports
// whether it read the API server.
//
// A status patch computed against a copy older than the caller's own last
// write can make a needed write look like no change (a Ready that went
// False and back stays False on the server until the next event) or keep
// an older transition time; a condition the last write set can be dropped.
// The read costs a request only when the cache is behind. Resource versions that
// cannot be compared are read from the API server too: the answer must be
// right, and an etcd-backed API server always gives comparable ones.
func Read(ctx context.Context, cache, api client.Reader, key client.ObjectKey, obj client.Object, wrote string) (bool, error) {
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
