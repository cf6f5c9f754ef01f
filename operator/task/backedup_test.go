package task

import (
	"testing"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// TestAnUpgradesBackupRecordsTheInstanceItStartsFromEvenBeforeTheCacheHasItsRecord
// pins what the backup an upgrade takes first records as its data: the
// active instance, read as the workflow is chosen. The task before the
// upgrade records itself active on the StyrminDeployment, then ends; a
// cache that shows its end but not yet its record must not make the
// backup name the instance before it (a restore would run the wrong
// driver's hook).
func TestAnUpgradesBackupRecordsTheInstanceItStartsFromEvenBeforeTheCacheHasItsRecord(t *testing.T) {
	t.Parallel()
	v := func(version string) v1alpha1.DriverRef { return v1alpha1.DriverRef{Name: "graphhub", Version: version} }
	sdActive := func(seq int64, version string) *v1alpha1.StyrminDeployment {
		return &v1alpha1.StyrminDeployment{Spec: v1alpha1.StyrminDeploymentSpec{Sequence: 5},
			Status: v1alpha1.StyrminDeploymentStatus{ActiveSequence: seq, Active: &v1alpha1.ActiveInstance{Sequence: seq, Driver: v(version)}}}
	}
	succeeded := func(seq int64, version string) v1alpha1.StyrminTask {
		return v1alpha1.StyrminTask{
			Spec:   v1alpha1.StyrminTaskSpec{ToSequence: seq, Target: &v1alpha1.TaskTarget{Kind: "Instance", Driver: v(version)}},
			Status: v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded}}
	}
	upgrade := &resolver.Instance{Sequence: 5, Driver: resolver.DriverRef{Name: "graphhub", Version: "2.0.0"}}
	for _, tc := range []struct {
		name   string
		sd     *v1alpha1.StyrminDeployment
		tasks  []v1alpha1.StyrminTask
		driver string
		seq    int64
	}{
		{"the StyrminDeployment records the instance before", sdActive(4, "1.1.0"), []v1alpha1.StyrminTask{succeeded(4, "1.1.0")}, "1.1.0", 4},
		{"the cache has the task's end, not its record yet", sdActive(3, "1.0.0"), []v1alpha1.StyrminTask{succeeded(3, "1.0.0"), succeeded(4, "1.1.0")}, "1.1.0", 4},
		{"the tasks pruned: the StyrminDeployment's record", sdActive(4, "1.1.0"), nil, "1.1.0", 4},
		{"nothing active: the upgrade's own", nil, nil, "2.0.0", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, seq := backedUp(tc.sd, tc.tasks, upgrade)
			if d.Version != tc.driver || seq != tc.seq {
				t.Errorf("backedUp = driver %s at sequence %d, want %s at %d", d.Version, seq, tc.driver, tc.seq)
			}
		})
	}
}
