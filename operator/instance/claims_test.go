package instance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestActiveClaimsLetTheFirstOfRecordAndFailDecide pins the arbitration
// between the StyrminDeployment controller's record of a change as
// active and its task's failure: whichever claims first decides, and the
// other learns it.
func TestActiveClaimsLetTheFirstOfRecordAndFailDecide(t *testing.T) {
	ctx := context.Background()
	const uid = types.UID("task-1")
	t.Run("a record written first makes the failure a record", func(t *testing.T) {
		c := NewActiveClaims()
		settle, ok := c.Record(uid)
		if !ok {
			t.Fatal("record refused on a fresh task")
		}
		settle(nil)
		if recorded, err := c.Fail(ctx, uid); err != nil || !recorded {
			t.Fatalf("Fail after a written record: %v, %v; want recorded", recorded, err)
		}
	})
	t.Run("a failure claimed first refuses the record", func(t *testing.T) {
		c := NewActiveClaims()
		if recorded, err := c.Fail(ctx, uid); err != nil || recorded {
			t.Fatalf("Fail on a fresh task: %v, %v; want not recorded", recorded, err)
		}
		if _, ok := c.Record(uid); ok {
			t.Fatal("record granted after the task claimed its failure")
		}
		// Asked again (a retried reconcile), the failure stands.
		if recorded, _ := c.Fail(ctx, uid); recorded {
			t.Fatal("a second Fail reported a record")
		}
	})
	for _, written := range []bool{true, false} {
		// Not written: refused by the API server (a conflict).
		var result error = apierrors.NewConflict(schema.GroupResource{Group: "styrmin.io", Resource: "styrmindeployments"}, "dev-web", errors.New("changed"))
		if written {
			result = nil
		}
		t.Run(fmt.Sprintf("a failure waits for a record under way, written %v", written), func(t *testing.T) {
			c := NewActiveClaims()
			settle, ok := c.Record(uid)
			if !ok {
				t.Fatal("record refused on a fresh task")
			}
			got := make(chan bool, 1)
			go func() {
				recorded, _ := c.Fail(ctx, uid)
				got <- recorded
			}()
			select {
			case r := <-got:
				t.Fatalf("Fail returned %v while the record was under way", r)
			case <-time.After(50 * time.Millisecond):
			}
			settle(result)
			settle(ErrNotWritten) // a second call changes nothing
			if r := <-got; r != written {
				t.Fatalf("Fail after a record settled written=%v: recorded %v", written, r)
			}
			if _, ok := c.Record(uid); !written && ok {
				t.Fatal("record granted after the failure claimed behind an unwritten record")
			}
		})
	}
	t.Run("a write without a definite answer keeps the task from failing for a while", func(t *testing.T) {
		now := time.Unix(1_000_000, 0)
		c := NewActiveClaims()
		c.now = func() time.Time { return now }
		settle, _ := c.Record(uid)
		settle(apierrors.NewTimeoutError("the server was slow", 0))
		if _, err := c.Fail(ctx, uid); !errors.Is(err, ErrRecordInDoubt) {
			t.Fatalf("Fail right after a timed-out record: %v; want ErrRecordInDoubt", err)
		}
		now = now.Add(doubtAge)
		if recorded, err := c.Fail(ctx, uid); err != nil || recorded {
			t.Fatalf("Fail once the doubt is over: %v, %v; want not recorded (the task reads the API server next)", recorded, err)
		}
		if _, ok := c.Record(uid); ok {
			t.Fatal("record granted after the failure was claimed")
		}
	})
	t.Run("a refused write leaves the task free to fail", func(t *testing.T) {
		for _, err := range []error{ErrNotWritten, apierrors.NewNotFound(schema.GroupResource{Resource: "styrmindeployments"}, "dev-web"),
			apierrors.NewTooManyRequests("later", 1), apierrors.NewForbidden(schema.GroupResource{Resource: "styrmindeployments"}, "dev-web", errors.New("no"))} {
			c := NewActiveClaims()
			settle, _ := c.Record(uid)
			settle(err)
			if recorded, ferr := c.Fail(ctx, uid); ferr != nil || recorded {
				t.Errorf("Fail after a record refused with %v: %v, %v; want not recorded", err, recorded, ferr)
			}
		}
	})
	t.Run("a record made stays made whatever a later write does", func(t *testing.T) {
		c := NewActiveClaims()
		settle, _ := c.Record(uid)
		settle(nil)
		again, ok := c.Record(uid)
		if !ok {
			t.Fatal("a second record of a recorded task refused")
		}
		again(apierrors.NewConflict(schema.GroupResource{Resource: "styrmindeployments"}, "dev-web", errors.New("changed")))
		if recorded, err := c.Fail(ctx, uid); err != nil || !recorded {
			t.Fatalf("Fail after a record then a refused write: %v, %v; want recorded", recorded, err)
		}
	})
	t.Run("the wait ends with its context", func(t *testing.T) {
		c := NewActiveClaims()
		if _, ok := c.Record(uid); !ok {
			t.Fatal("record refused")
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := c.Fail(cctx, uid); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Fail with a record never settled: %v; want the context's error", err)
		}
	})
	t.Run("forget drops a record, keeps a failure", func(t *testing.T) {
		c := NewActiveClaims()
		settle, _ := c.Record(uid)
		settle(nil)
		c.Forget(uid)
		if recorded, _ := c.Fail(ctx, uid); recorded {
			t.Fatal("a forgotten record still answered Fail")
		}
		c.Forget(uid)
		if _, ok := c.Record(uid); ok {
			t.Fatal("Forget dropped a failed task's claim, which the controller's cache may still need")
		}
	})
	t.Run("old claims go", func(t *testing.T) {
		now := time.Unix(1_000_000, 0)
		c := NewActiveClaims()
		c.now = func() time.Time { return now }
		if recorded, _ := c.Fail(ctx, uid); recorded {
			t.Fatal("recorded on a fresh task")
		}
		now = now.Add(claimAge + 2*time.Minute)
		if _, ok := c.Record(uid); !ok {
			t.Fatal("a failure claimed longer ago than claimAge still refused the record")
		}
		if len(c.claims) != 1 {
			t.Fatalf("%d claims kept; want the new record alone", len(c.claims))
		}
	})
	t.Run("nil claims nothing", func(t *testing.T) {
		var c *ActiveClaims
		settle, ok := c.Record(uid)
		if !ok {
			t.Fatal("nil refused a record")
		}
		settle(nil)
		if recorded, err := c.Fail(ctx, uid); recorded || err != nil {
			t.Fatalf("nil Fail: %v, %v", recorded, err)
		}
		c.Forget(uid)
	})
}

// TestLastStepWritesInstanceNamesTheTaskTheControllerRecords pins which
// task the StyrminDeployment controller records active with Ready (and
// whose failure is claimed): the running task of the sequence, applying
// that digest, at its last step, which writes the instance.
func TestLastStepWritesInstanceNamesTheTaskTheControllerRecords(t *testing.T) {
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "web"}
	core := v1alpha1.TaskStep{Name: "core", Action: string(drivers.ActionUpgradeDeploymentVersion)}
	post := v1alpha1.TaskStep{Name: "verify", Action: string(drivers.ActionWaitReady)}
	task := func(mod func(*v1alpha1.StyrminTask)) *v1alpha1.StyrminTask {
		t := &v1alpha1.StyrminTask{
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, ToSequence: 3, Target: &v1alpha1.TaskTarget{Digest: "sha256:a"}},
			Status: v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning,
				Steps: []v1alpha1.TaskStep{{Name: "pre", Action: string(drivers.ActionRunJob)}, core}, CurrentStep: 1},
		}
		if mod != nil {
			mod(t)
		}
		return t
	}
	cases := []struct {
		name string
		t    *v1alpha1.StyrminTask
		want bool
	}{
		{"at its last step, the core one", task(nil), true},
		{"at an earlier step", task(func(t *v1alpha1.StyrminTask) { t.Status.CurrentStep = 0 }), false},
		{"with a step after the core one", task(func(t *v1alpha1.StyrminTask) {
			t.Status.Steps = append(t.Status.Steps, post)
		}), false},
		{"not running", task(func(t *v1alpha1.StyrminTask) { t.Status.Phase = v1alpha1.TaskFailed }), false},
		{"of another sequence", task(func(t *v1alpha1.StyrminTask) { t.Spec.ToSequence = 2 }), false},
		{"applying another digest", task(func(t *v1alpha1.StyrminTask) { t.Spec.Target.Digest = "sha256:b" }), false},
		{"an operation", task(func(t *v1alpha1.StyrminTask) {
			t.Spec.Operation = &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup}
		}), false},
	}
	for _, c := range cases {
		if got := LastStepWritesInstance(c.t, id, 3, "sha256:a"); got != c.want {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
	}
}
