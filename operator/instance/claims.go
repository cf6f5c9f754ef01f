package instance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	claimDoubtful                        // the write failed in a way it may still be made
	claimFailed                          // the task ends Failed
)

type activeClaim struct {
	state claimState
	// settled is closed when a recording ends, written or not.
	settled chan struct{}
	at      time.Time
}

const (
	// claimAge is how long a failed task's claim is kept: long enough
	// for any cache of the controller to have seen the task end, so it
	// never records the instance active from a copy still showing it
	// running.
	claimAge = 30 * time.Minute
	// doubtAge is how long a write that failed without a definite answer
	// (a timeout, a reset connection, a server error) may still be made
	// by the API server: its request timeout (60 s by default) and some.
	doubtAge = 90 * time.Second
	// maxRecordWait bounds a failing task's wait for a record under way;
	// the write's own timeout ends it sooner.
	maxRecordWait = 2 * time.Minute
)

// ErrRecordInDoubt is Fail's answer while the controller's record of the
// task's change may still be made by the API server: the task must not end
// Failed yet, and asks again later.
var ErrRecordInDoubt = errors.New("the StyrminDeployment controller's record of this change as active failed without a definite answer and may still be made; deciding again later")

// NewActiveClaims returns an empty set of claims.
func NewActiveClaims() *ActiveClaims {
	return &ActiveClaims{claims: map[types.UID]*activeClaim{}, now: time.Now}
}

// Record claims the recording of task uid's instance as active, for the
// StyrminDeployment controller's status write. It reports false when the
// task has claimed its failure (the controller then records nothing).
// Otherwise settle must be called once the write is made or failed, with
// its error; until then a task claiming its failure waits. A write the
// API server refused (definitely) leaves the task free to fail; one that
// failed otherwise may still be made, and keeps it from failing for
// doubtAge.
func (c *ActiveClaims) Record(uid types.UID) (settle func(err error), ok bool) {
	if c == nil {
		return func(error) {}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prune()
	prev := c.claims[uid]
	if prev != nil {
		switch prev.state {
		case claimFailed:
			return nil, false
		case claimRecording:
			// Two reconciles of one StyrminDeployment never run at once;
			// a second recording would be a bug, not a race.
			return nil, false
		case claimRecorded:
			// Written already (a cache behind that write asks again): the
			// new write's fate changes nothing.
			return func(error) {}, true
		}
	}
	cl := &activeClaim{state: claimRecording, settled: make(chan struct{}), at: c.now()}
	c.claims[uid] = cl
	var once sync.Once
	return func(err error) {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			switch {
			case err == nil:
				cl.state = claimRecorded
			case refused(err) && prev == nil:
				delete(c.claims, uid)
			case refused(err):
				// An earlier write still in doubt stays so.
				c.claims[uid] = prev
			default:
				cl.state = claimDoubtful
				cl.at = c.now()
			}
			close(cl.settled)
		})
	}, true
}

// refused reports whether the API server answered a write with a
// definite refusal, after which it makes nothing of it.
func refused(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsNotAcceptable(err) || apierrors.IsUnsupportedMediaType(err) ||
		apierrors.IsTooManyRequests(err) || errors.Is(err, ErrNotWritten)
}

// ErrNotWritten settles a record whose status write was never sent.
var ErrNotWritten = errors.New("the status write was not made")

// Fail claims task uid's failure. It reports recorded when the
// controller recorded the instance active first: the task must then not
// fail, its change is the deployment's active one. A recording under way
// is waited for (ctx, and at most maxRecordWait); a record in doubt
// answers ErrRecordInDoubt until doubtAge has passed. After a false
// answer the controller records nothing for the task; the task can still
// succeed by itself (a later look finds its deployment Ready) and record
// it.
func (c *ActiveClaims) Fail(ctx context.Context, uid types.UID) (recorded bool, err error) {
	if c == nil {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, maxRecordWait)
	defer cancel()
	for {
		c.mu.Lock()
		c.prune()
		cl := c.claims[uid]
		switch {
		case cl == nil || (cl.state == claimDoubtful && c.now().Sub(cl.at) >= doubtAge):
			c.claims[uid] = &activeClaim{state: claimFailed, at: c.now()}
			c.mu.Unlock()
			return false, nil
		case cl.state == claimDoubtful:
			c.mu.Unlock()
			return false, ErrRecordInDoubt
		case cl.state == claimRecording:
			c.mu.Unlock()
			select {
			case <-cl.settled:
				continue
			case <-ctx.Done():
				return false, fmt.Errorf("waiting for the StyrminDeployment controller's record of this change: %w", ctx.Err())
			}
		default:
			recorded = cl.state == claimRecorded
			c.mu.Unlock()
			return recorded, nil
		}
	}
}

// Forget drops task uid's claim once the task has ended Succeeded or
// Superseded: nothing is left to decide (a record in doubt included). A failed task's claim is kept
// (until claimAge) for the controller's cache to see the end.
func (c *ActiveClaims) Forget(uid types.UID) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.claims[uid]; cl != nil && (cl.state == claimRecorded || cl.state == claimDoubtful) {
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
