package task

import "testing"

// TestStartComponentsWaitsOutACachedCopyFromBeforeItsScale pins what a
// startComponents step does with one workload. The step reads the cache;
// right after its scale the cache may still hold the copy from before it,
// at zero replicas and fully rolled out, which a waitReady after the step
// would take as ready (0/0). The step waits until the cache shows the
// generation its scale was answered with.
func TestStartComponentsWaitsOutACachedCopyFromBeforeItsScale(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		cached    int64
		scaledGen int64
		scaled    bool
		spec      int32
		want      int32
		move      startMove
	}{
		{"stopped, not scaled yet: scale it", 4, 0, false, 0, 2, startScale},
		{"scaled, the cache still shows the copy from before: wait", 4, 5, true, 0, 2, startWait},
		{"scaled, the cache shows the scale: started", 5, 5, true, 2, 2, startDone},
		{"scaled, then an autoscaler changed the replicas: started, not fought", 6, 5, true, 3, 2, startDone},
		{"already at its replicas (a step run again after a restart): started", 7, 0, false, 2, 2, startDone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := startNext(tc.cached, tc.scaledGen, tc.scaled, tc.spec, tc.want); got != tc.move {
				t.Errorf("startNext(cached gen %d, scaled at %d %v, spec %d, want %d) = %d, want %d",
					tc.cached, tc.scaledGen, tc.scaled, tc.spec, tc.want, got, tc.move)
			}
		})
	}
}
