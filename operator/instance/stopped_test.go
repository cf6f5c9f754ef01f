package instance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// stoppedTask is a task for LeftStopped's tests: its name says what it
// is ("web-2", "web-backup-nightly"), it starts at minute (nil start when
// negative), and its steps are "action state [components]" ("stop
// Succeeded web", "start Failed web", "runJob Failed").
func stoppedTask(name string, op v1alpha1.OperationKind, seq int64, minute int, phase v1alpha1.TaskPhase, steps ...string) v1alpha1.StyrminTask {
	t := v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.StyrminTaskSpec{ToSequence: seq},
		Status:     v1alpha1.StyrminTaskStatus{Phase: phase},
	}
	if op != "" {
		t.Spec.Operation = &v1alpha1.TaskOperation{Kind: op, Name: "op"}
	}
	if minute >= 0 {
		at := metav1.NewTime(time.Date(2026, 12, 6, 12, minute, 0, 0, time.UTC))
		t.Status.StartedAt = &at
	}
	for i, s := range steps {
		f := strings.Fields(s)
		action := map[string]string{"stop": "stopComponents", "start": "startComponents"}[f[0]]
		if action == "" {
			action = f[0]
		}
		t.Status.Steps = append(t.Status.Steps, v1alpha1.TaskStep{Name: fmt.Sprintf("x/pre/%d:%s", i, action), Mode: "pre",
			Action: action, State: v1alpha1.StepState(f[1]), Components: f[2:]})
	}
	return t
}

// TestLeftStoppedHoldsWhatAFailedTaskStoppedUntilAStartOrASucceededChange
// pins which tasks end the hold on components a failed task stopped. It
// ended at the next task to have a start time: a backup, a backup's
// deletion, a retry that failed before its own stop, a fix that failed
// its checks before any step; the drift check then started the old
// workers on half-migrated data.
func TestLeftStoppedHoldsWhatAFailedTaskStoppedUntilAStartOrASucceededChange(t *testing.T) {
	const (
		backup  = v1alpha1.OperationBackup
		restore = v1alpha1.OperationRestore
		del     = v1alpha1.OperationDeleteBackup
		ok      = v1alpha1.TaskSucceeded
		failed  = v1alpha1.TaskFailed
	)
	upgrade := stoppedTask("web-2", "", 2, 10, failed, "exec Succeeded", "stop Succeeded web worker", "runJob Failed", "start Skipped web worker")
	for _, tc := range []struct {
		name  string
		tasks []v1alpha1.StyrminTask
		want  string // "task: components; …"
	}{
		{"an upgrade that failed after its stop", []v1alpha1.StyrminTask{upgrade}, "web-2: web worker"},
		{"one whose stop was running when it failed", []v1alpha1.StyrminTask{
			stoppedTask("web-2", "", 2, 10, failed, "stop Running web", "runJob Skipped")}, "web-2: web"},
		{"one whose checks failed while its stop ran (skipped, started)", []v1alpha1.StyrminTask{func() v1alpha1.StyrminTask {
			t := stoppedTask("web-2", "", 2, 10, failed, "stop Skipped web", "runJob Skipped")
			t.Status.Steps[0].StartedAt = t.Status.StartedAt
			return t
		}()}, "web-2: web"},
		{"one that started what it stopped before it failed", []v1alpha1.StyrminTask{
			stoppedTask("web-2", "", 2, 10, failed, "stop Succeeded web worker", "start Succeeded worker", "verify Failed")}, "web-2: web"},
		{"one that failed before its stop", []v1alpha1.StyrminTask{
			stoppedTask("web-2", "", 2, 10, failed, "exec Failed", "stop Skipped web")}, ""},
		{"one that succeeded after a stop without a start", []v1alpha1.StyrminTask{
			stoppedTask("web-2", "", 2, 10, ok, "stop Succeeded web")}, ""},
		{"a backup that succeeded after it", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-backup", backup, 2, 20, ok, "runJob Succeeded")}, "web-2: web worker"},
		{"a backup that stopped and started them after it", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-backup", backup, 2, 20, ok, "stop Succeeded worker", "runJob Succeeded", "start Succeeded worker")}, "web-2: web worker"},
		{"a backup's deletion after it", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-deletebackup", del, 2, 20, ok, "runJob Succeeded", "start Succeeded web")}, "web-2: web worker"},
		{"a retry that failed before its stop", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-3", "", 3, 20, failed, "exec Failed", "stop Skipped web worker", "runJob Skipped", "start Skipped web worker")}, "web-2: web worker"},
		{"a fix that failed its checks, with the start time agents gave it", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-3", "", 3, 20, failed, "exec Skipped", "stop Skipped web worker", "runJob Skipped", "start Skipped web worker")}, "web-2: web worker"},
		{"a fix that failed its checks, with no start time", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-3", "", 3, -1, failed, "exec Skipped", "stop Skipped web worker")}, "web-2: web worker"},
		{"a retry that failed after its own stop", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-3", "", 3, 20, failed, "exec Succeeded", "stop Succeeded web worker", "runJob Failed", "start Skipped web worker")}, "web-3: web worker"},
		{"a retry that started one and failed", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-3", "", 3, 20, failed, "start Succeeded web", "verify Failed")}, "web-2: worker"},
		{"a retry that succeeded", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-3", "", 3, 20, ok)}, ""},
		{"a superseded change that started them", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-3", "", 3, 20, v1alpha1.TaskSuperseded, "stop Succeeded web worker", "start Succeeded web worker")}, ""},
		{"a succeeded change before it", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-1", "", 1, 5, ok)}, "web-2: web worker"},
		{"a restore that started one", []v1alpha1.StyrminTask{upgrade,
			stoppedTask("web-restore", restore, 2, 20, ok, "stop Succeeded web", "runJob Succeeded", "start Succeeded web")}, "web-2: worker"},
		{"a restore that failed halfway, then a backup", []v1alpha1.StyrminTask{
			stoppedTask("web-restore", restore, 2, 10, failed, "stop Succeeded web", "runJob Failed", "start Skipped web"),
			stoppedTask("web-backup", backup, 2, 20, ok, "stop Succeeded web", "start Succeeded web")}, "web-restore: web"},
		{"a backup that failed halfway, then one that succeeded", []v1alpha1.StyrminTask{
			stoppedTask("web-backup-1", backup, 2, 10, failed, "stop Succeeded web", "runJob Failed", "start Skipped web"),
			stoppedTask("web-backup-2", backup, 2, 20, ok, "stop Succeeded web", "runJob Succeeded", "start Succeeded web")}, ""},
		{"two failed tasks, each holding its own", []v1alpha1.StyrminTask{
			stoppedTask("web-backup", backup, 1, 5, failed, "stop Succeeded db", "runJob Failed"), upgrade}, "web-backup: db; web-2: web worker"},
		{"listed in any order, in start order", []v1alpha1.StyrminTask{
			stoppedTask("web-3", "", 3, 20, ok), upgrade}, ""},
		{"a tie of start times goes to the higher sequence", []v1alpha1.StyrminTask{
			stoppedTask("web-3", "", 3, 10, ok), upgrade}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range LeftStopped(tc.tasks) {
				got = append(got, s.Task.Name+": "+strings.Join(s.Components, " "))
			}
			if g := strings.Join(got, "; "); g != tc.want {
				t.Errorf("left stopped %q, want %q", g, tc.want)
			}
		})
	}
}
