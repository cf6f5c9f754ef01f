package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/deployment"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/source"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/operator/webhook"
	"github.com/styrmin/styrmin/resolver"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The defaults of the agent's parts, for the agent's flags: cmd/ imports
// only this facade and the API.
const (
	// DefaultPollInterval is how often the repository is fetched.
	DefaultPollInterval = source.DefaultPollInterval
	// DefaultStepTimeout bounds a task step whose driver declares none.
	DefaultStepTimeout = task.DefaultStepTimeout
	// DefaultKeepTasks is how many finished tasks a deployment keeps.
	DefaultKeepTasks = task.DefaultKeepTasks
	// DefaultTaskConcurrency is how many tasks run at once.
	DefaultTaskConcurrency = task.DefaultTaskConcurrency
	// DefaultDeploymentConcurrency is how many StyrminDeployments
	// reconcile at once.
	DefaultDeploymentConcurrency = deployment.DefaultConcurrency
	// DefaultDriftInterval is how often each deployment is checked for
	// drift.
	DefaultDriftInterval = deployment.DefaultDriftInterval
	// DefaultPodStatusAfter is how long a deployment stays not ready
	// before its pods are read into its status.
	DefaultPodStatusAfter = deployment.DefaultPodStatusAfter
	// DefaultStuckAfter is how long one reconcile may run before the
	// agent's /healthz fails: past the longest a step may take, since a
	// step may wait inside its reconcile.
	DefaultStuckAfter = DefaultStepTimeout + 5*time.Minute
	// DefaultWebhookSecretKey is the key of the webhook Secret holding the
	// shared secret.
	DefaultWebhookSecretKey = webhook.DefaultSecretKey
)

// TaskOptions tune the task controller (see task.Options).
type TaskOptions = task.Options

// DriverOptions bound the agent's driver loads and renders: limits (a
// repository's styrmin.cue may lower them) and the sandbox.
type DriverOptions = driversource.LoadOptions

// LockModeOptions configure the agent's lock mode (see
// source.LockModeOptions).
type LockModeOptions = source.LockModeOptions

// DeploymentID is the API's form of a deployment's identity (see
// instance.DeploymentID): the one conversion, for the CLI too.
func DeploymentID(id resolver.ID) v1alpha1.DeploymentID { return instance.DeploymentID(id) }

// Standing is where a deployment stands against git (see
// instance.Standing).
type Standing = instance.Standing

// Standings reads where every deployment of the cluster c reads stands
// against git: its newest task, its active instance, whether it is behind
// and why.
func Standings(ctx context.Context, c client.Reader) ([]Standing, error) {
	var sds v1alpha1.StyrminDeploymentList
	if err := c.List(ctx, &sds); err != nil {
		return nil, fmt.Errorf("listing StyrminDeployments: %w", err)
	}
	var tasks v1alpha1.StyrminTaskList
	if err := c.List(ctx, &tasks); err != nil {
		return nil, fmt.Errorf("listing StyrminTasks: %w", err)
	}
	return instance.Standings(sds.Items, tasks.Items), nil
}

// StandingsOf tells where the deployments of sds and tasks stand (see
// instance.Standings).
func StandingsOf(sds []v1alpha1.StyrminDeployment, tasks []v1alpha1.StyrminTask) []Standing {
	return instance.Standings(sds, tasks)
}

// FailedDeployments reads, from the cluster c reads, the deployments whose
// newest task failed, each with that task's sequence: what `lock
// --retry-failed` locks again, if its lock is still at that sequence.
func FailedDeployments(ctx context.Context, c client.Reader) (map[resolver.ID]int64, error) {
	standings, err := Standings(ctx, c)
	if err != nil {
		return nil, err
	}
	out := map[resolver.ID]int64{}
	for _, s := range standings {
		if s.Failed {
			out[s.ID] = s.Change.Spec.ToSequence
		}
	}
	return out, nil
}

// RanDigests returns, per deployment, the digest of the instance its
// newest task (the one UsedSequences numbers after) targets: the lock
// mode tells by it a lockfile at that number locking other content (see
// LockModeOptions.RanDigests).
func RanDigests(ctx context.Context, c client.Reader) (map[resolver.ID]string, error) {
	standings, err := Standings(ctx, c)
	if err != nil {
		return nil, err
	}
	out := map[resolver.ID]string{}
	for _, s := range standings {
		if s.Newest != nil && s.Newest.Spec.Target != nil {
			out[s.ID] = s.Newest.Spec.Target.Digest
		}
	}
	return out, nil
}

// UsedSequences returns, per deployment, the highest sequence the cluster
// has a task for: what the lock mode numbers after (see
// LockModeOptions.Used).
func UsedSequences(ctx context.Context, c client.Reader) (resolver.UsedSequences, error) {
	standings, err := Standings(ctx, c)
	if err != nil {
		return nil, err
	}
	out := resolver.UsedSequences{}
	for _, s := range standings {
		if s.Newest != nil {
			out[s.ID] = s.Newest.Spec.ToSequence
		}
	}
	return out, nil
}
