package instance

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// ActiveClaims decides, within one agent, between the two writers of a
// change's end when its task's last step is the core one (it writes the
// instance and waits for Ready): the StyrminDeployment controller,
// which records the instance active in the status write that makes the
// deployment Ready, and the task, which fails that step (its deadline
// passed, a workload failed) or the whole task. Their caches do not see
// each other's writes at once, so each claims the task here first, and
// the second learns what the first did: a task whose instance was
// recorded active does not end Failed, and a task that ends Failed does
// not have its instance recorded active by the controller. So a failed
// task always leaves the previous instance active.
//
// Both controllers run in the elected agent only, so one process holds
// every claim. A restart loses them: the task then resumes its step,
// whose deadline starts again, and the controller reads a Failed task
// as written before the restart.
//
// The zero value is not usable; a nil *ActiveClaims claims nothing (each
// side then decides alone, as when a controller runs by itself).
type ActiveClaims struct {
	mu     sync.Mutex
	claims map[types.UID]*activeClaim
	pruned time.Time
	// now is time.Now but in tests.
	now func() time.Time
}

type claimState uint8

const (
	claimRecording claimState = iota + 1 // the controller's write is under way
	claimRecorded                        // the controller wrote it
	claimFailed                          // the task ends Failed
)

type activeClaim struct {
	state claimState
	// settled is closed when a recording ends, written or not.
	settled chan struct{}
	at      time.Time
}

// claimAge is how long a failed task's claim is kept: long enough for any
// cache of the controller to have seen the task end, so it never records
// the instance active from a copy still showing it running.
const claimAge = 30 * time.Minute

// NewActiveClaims returns an empty set of claims.
func NewActiveClaims() *ActiveClaims {
	return &ActiveClaims{claims: map[types.UID]*activeClaim{}, now: time.Now}
}

// Record claims the recording of task uid's instance as active, for the
// StyrminDeployment controller's status write. It reports false when the
// task has claimed its failure (the controller then records nothing).
// Otherwise settle must be called once the write is done or failed,
// written reporting whether the API server took it; until then a task
// claiming its failure waits.
func (c *ActiveClaims) Record(uid types.UID) (settle func(written bool), ok bool) {
	if c == nil {
		return func(bool) {}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prune()
	if cl := c.claims[uid]; cl != nil {
		switch cl.state {
		case claimFailed:
			return nil, false
		case claimRecording:
			// Two reconciles of one StyrminDeployment never run at once;
			// a second recording would be a bug, not a race.
			return nil, false
		}
	}
	cl := &activeClaim{state: claimRecording, settled: make(chan struct{}), at: c.now()}
	c.claims[uid] = cl
	var once sync.Once
	return func(written bool) {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if written {
				cl.state = claimRecorded
			} else if c.claims[uid] == cl {
				delete(c.claims, uid)
			}
			close(cl.settled)
		})
	}, true
}

// Fail claims task uid's failure. It reports recorded when the
// controller recorded the instance active first: the task must then not
// fail, its change is the deployment's active one. A recording under way
// is waited for (ctx bounds the wait). After a false answer the
// controller records nothing for the task; the task can still succeed by
// itself (a later look finds its deployment Ready) and record it.
func (c *ActiveClaims) Fail(ctx context.Context, uid types.UID) (recorded bool, err error) {
	if c == nil {
		return false, nil
	}
	for {
		c.mu.Lock()
		c.prune()
		cl := c.claims[uid]
		switch {
		case cl == nil:
			c.claims[uid] = &activeClaim{state: claimFailed, at: c.now()}
			c.mu.Unlock()
			return false, nil
		case cl.state == claimRecording:
			c.mu.Unlock()
			select {
			case <-cl.settled:
				continue
			case <-ctx.Done():
				return false, ctx.Err()
			}
		default:
			recorded = cl.state == claimRecorded
			c.mu.Unlock()
			return recorded, nil
		}
	}
}

// Forget drops task uid's claim once the task has ended Succeeded or
// Superseded: nothing is left to decide. A failed task's claim is kept
// (until claimAge) for the controller's cache to see the end.
func (c *ActiveClaims) Forget(uid types.UID) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.claims[uid]; cl != nil && cl.state != claimFailed && cl.state != claimRecording {
		delete(c.claims, uid)
	}
}

// prune drops settled claims older than claimAge (c.mu held): a task
// that ended in another agent, or was deleted, never says Forget.
func (c *ActiveClaims) prune() {
	now := c.now()
	if now.Sub(c.pruned) < time.Minute {
		return
	}
	c.pruned = now
	cut := now.Add(-claimAge)
	for uid, cl := range c.claims {
		if cl.state != claimRecording && cl.at.Before(cut) {
			delete(c.claims, uid)
		}
	}
}

// LastStepWritesInstance reports whether t is the running task of the
// deployment's sequence seq, applying the instance of digest, whose
// current step is its last and writes the instance: the task whose
// change the StyrminDeployment controller records active with Ready.
func LastStepWritesInstance(t *v1alpha1.StyrminTask, id v1alpha1.DeploymentID, seq int64, digest string) bool {
	if t.Spec.Operation != nil || t.Spec.ToSequence != seq || t.Spec.Deployment != id || t.Status.Phase != v1alpha1.TaskRunning {
		return false
	}
	if target := TaskTarget(t); target == nil || target.Digest != digest {
		return false
	}
	steps := t.Status.Steps
	return len(steps) > 0 && int(t.Status.CurrentStep) == len(steps)-1 &&
		steps[len(steps)-1].Action == string(drivers.ActionUpgradeDeploymentVersion)
}
