package operator_test

import (
	"strings"
	"testing"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

func TestSelectWorkflow(t *testing.T) {
	inst := func(kind, driver, version, app string) *resolver.Instance {
		return &resolver.Instance{Kind: kind, Driver: resolver.DriverRef{Name: driver, Version: version}, AppVersion: app}
	}
	v1 := inst(resolver.KindInstance, "graphhub", "1.0.0", "1.4.0")
	for _, tc := range []struct {
		name       string
		prev, next *resolver.Instance
		want       v1alpha1.Workflow
	}{
		{"no instance before: create", nil, v1, v1alpha1.WorkflowCreate},
		{"a tombstone before: create again", inst(resolver.KindTombstone, "", "", ""), v1, v1alpha1.WorkflowCreate},
		{"same driver and app version: update", v1, inst(resolver.KindInstance, "graphhub", "1.0.0", "1.4.0"), v1alpha1.WorkflowUpdate},
		{"app version changed: upgrade", v1, inst(resolver.KindInstance, "graphhub", "1.0.0", "1.4.1"), v1alpha1.WorkflowUpgrade},
		{"driver version changed: upgrade", v1, inst(resolver.KindInstance, "graphhub", "2.0.0", "1.4.0"), v1alpha1.WorkflowUpgrade},
		{"driver changed: upgrade", v1, inst(resolver.KindInstance, "webapp", "1.0.0", "1.4.0"), v1alpha1.WorkflowUpgrade},
		{"tombstone: delete", v1, inst(resolver.KindTombstone, "", "", ""), v1alpha1.WorkflowDelete},
		{"tombstone without instance: delete", nil, inst(resolver.KindTombstone, "", "", ""), v1alpha1.WorkflowDelete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := operator.SelectWorkflow(tc.prev, tc.next); got != tc.want {
				t.Errorf("SelectWorkflow = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestTaskAndJobNamesAreDeterministic(t *testing.T) {
	if got := operator.TaskName("hub", 12); got != "hub-12" {
		t.Errorf("TaskName = %q", got)
	}
	if got := operator.JobName("hub", "migrate", 3); got != "hub-migrate-3" {
		t.Errorf("JobName = %q", got)
	}
	long := operator.JobName(strings.Repeat("d", 63), strings.Repeat("j", 40), 123456)
	if len(long) > 63 || long != operator.JobName(strings.Repeat("d", 63), strings.Repeat("j", 40), 123456) {
		t.Errorf("long JobName = %q (%d chars)", long, len(long))
	}
	if long == operator.JobName(strings.Repeat("d", 63), strings.Repeat("j", 40), 123457) {
		t.Error("two sequences share a job name")
	}
}
