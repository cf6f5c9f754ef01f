package task

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/planner"
)

// Step arguments kept in TaskStep.Args besides the driver's own.
const (
	argCommand   = "command"   // exec, runJob: the command as a JSON list
	argComponent = "component" // exec, runJob: whose pod (template) to use
	argJob       = "job"       // runJob: the one-off job's name
	// argRetryAttempts and argRetryBackoff keep the step's retry policy.
	argRetryAttempts = "retryAttempts"
	argRetryBackoff  = "retryBackoff"
)

// Steps returns the steps a workflow runs for driver d, in order, as a
// task's status records them: planner.Steps, the one definition the plan
// shows too. d may be nil for delete. The steps are computed once, when
// the task starts, and kept in its status: a restarted agent runs what
// was planned even if the driver source changed meanwhile.
func Steps(wf v1alpha1.Workflow, d *drivers.Driver) ([]v1alpha1.TaskStep, error) {
	return StepsFor(wf, d, false)
}

// StepsFor is Steps for an instance whose BackupFirst is backupFirst
// (planner.StepsFor: an upgrade then starts with a backup).
func StepsFor(wf v1alpha1.Workflow, d *drivers.Driver, backupFirst bool) ([]v1alpha1.TaskStep, error) {
	planned, err := planner.StepsFor(planner.Workflow(wf), d, backupFirst)
	if err != nil {
		return nil, err
	}
	out := make([]v1alpha1.TaskStep, 0, len(planned))
	for _, p := range planned {
		out = append(out, taskStepOf(p.Name, p.Hook, p.Mode, p.Step))
	}
	return out, nil
}

func taskStepOf(name, hook, mode string, s drivers.Step) v1alpha1.TaskStep {
	ts := v1alpha1.TaskStep{
		Name:       name,
		Hook:       hook,
		Mode:       mode,
		Action:     string(s.Action),
		Components: append([]string(nil), s.Components...),
		State:      v1alpha1.StepPending,
	}
	args := maps.Clone(s.Args)
	// A driver declares only the keys drivers.IsStepArg allows (Load
	// refuses the rest); the others are the agent's own, set below and by
	// expandSteps, and a driver's value for one would be read as the
	// agent's (a backup's credentials and artefact, retries past their
	// bound). A driver loaded before Load checked its arguments keeps
	// none of them.
	maps.DeleteFunc(args, func(k, _ string) bool { return !drivers.IsStepArg(s.Action, k) })
	if len(args) == 0 {
		args = nil
	}
	set := func(k, v string) {
		if v == "" {
			return
		}
		if args == nil {
			args = map[string]string{}
		}
		args[k] = v
	}
	if len(s.Command) > 0 {
		b, _ := json.Marshal(s.Command) // a []string always encodes
		set(argCommand, string(b))
	}
	set(argComponent, s.Component)
	set(argJob, s.Job)
	if s.Retry.Attempts > 1 {
		set(argRetryAttempts, strconv.Itoa(s.Retry.Attempts))
		if s.Retry.Backoff > 0 {
			set(argRetryBackoff, s.Retry.Backoff.String())
		}
	}
	ts.Args = args
	if s.Timeout > 0 {
		ts.Timeout = &metav1.Duration{Duration: s.Timeout}
	}
	return ts
}

// driverStep is the inverse of taskStepOf: the declared step a TaskStep
// runs.
func driverStep(ts *v1alpha1.TaskStep) (drivers.Step, error) {
	s := drivers.Step{
		Action:     drivers.ActionKind(ts.Action),
		Components: ts.Components,
		Component:  ts.Args[argComponent],
		Job:        ts.Args[argJob],
		Args:       ts.Args,
	}
	if c := ts.Args[argCommand]; c != "" {
		if err := json.Unmarshal([]byte(c), &s.Command); err != nil {
			return s, fmt.Errorf("step %s: args.command: expected a JSON list of strings: %w", ts.Name, err)
		}
	}
	if ts.Timeout != nil {
		s.Timeout = ts.Timeout.Duration
	}
	s.Retry = retryPolicy(ts)
	return s, nil
}

// retryPolicy is the retry policy a step records (none when it records
// none, or records it badly: a status is not the place to fail a task).
func retryPolicy(ts *v1alpha1.TaskStep) drivers.RetryPolicy {
	var p drivers.RetryPolicy
	if n, err := strconv.Atoi(ts.Args[argRetryAttempts]); err == nil && n > 1 {
		p.Attempts = n
	}
	if d, err := time.ParseDuration(ts.Args[argRetryBackoff]); err == nil && d > 0 {
		p.Backoff = d
	}
	return p
}

// stepTimeout is the time a step may take before it fails.
func stepTimeout(ts *v1alpha1.TaskStep, def time.Duration) time.Duration {
	if ts.Timeout != nil && ts.Timeout.Duration > 0 {
		return ts.Timeout.Duration
	}
	return def
}
