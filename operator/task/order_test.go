package task

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

func TestReadySinceCountsAPeerReadyFromItsActiveTasksEnd(t *testing.T) {
	readyLong := time.Date(2026, 12, 3, 11, 40, 0, 0, time.UTC)
	ended := readyLong.Add(5 * time.Minute)
	now := ended.Add(time.Second)
	finished := func(at *time.Time) *v1alpha1.StyrminTask {
		task := &v1alpha1.StyrminTask{}
		if at != nil {
			mt := metav1.NewTime(*at)
			task.Status.FinishedAt = &mt
		}
		return task
	}
	early := readyLong.Add(-time.Minute)
	for _, tc := range []struct {
		name   string
		active *v1alpha1.StyrminTask
		want   time.Time
	}{
		{"the task that made the instance active ended after the condition turned true", finished(&ended), ended},
		{"the condition turned true after the task ended", finished(&early), readyLong},
		// The task records its instance active before it writes its end:
		// Ready since an older instance is not Ready since this one.
		{"the task has recorded its instance active but not its end yet", finished(nil), now},
		{"the task was pruned from the history", nil, readyLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := readySince(readyLong, tc.active, now); !got.Equal(tc.want) {
				t.Errorf("readySince = %v, want %v", got, tc.want)
			}
		})
	}
}
