package operator

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// Step arguments kept in TaskStep.Args besides the driver's own.
const (
	argCommand   = "command"   // exec, runJob: the command as a JSON list
	argComponent = "component" // exec, runJob: whose pod (template) to use
	argJob       = "job"       // runJob: the one-off job's name
)

// Modes of a hook, in the order they run.
const (
	modePre  = "pre"
	modeCore = "core"
	modePost = "post"
)

// TaskSteps returns the steps a workflow runs for driver d, in order:
//
//   - create: the setup hook, pre → core → post;
//   - upgrade: the upgrade hook, pre → core → post;
//   - update: only the core steps of the upgrade hook (a configuration
//     change needs no migration);
//   - delete: one step that writes the tombstone, after which the
//     StyrminDeployment controller uninstalls the release.
//
// d may be nil for delete. The steps are computed once, when the task
// starts, and kept in its status: a restarted agent runs what was
// planned even if the driver source changed meanwhile.
func TaskSteps(wf v1alpha1.Workflow, d *drivers.Driver) ([]v1alpha1.TaskStep, error) {
	core := []drivers.Step{{Action: drivers.ActionUpgradeDeploymentVersion}}
	if wf == v1alpha1.WorkflowDelete {
		return taskStepsOf(string(wf), "", drivers.Modes{Core: core}), nil
	}
	if d == nil {
		return nil, fmt.Errorf("workflow %s needs the instance's driver", wf)
	}
	switch wf {
	case v1alpha1.WorkflowCreate:
		return taskStepsOf(string(drivers.HookSetup), string(drivers.HookSetup), withCore(d.Hooks[drivers.HookSetup])), nil
	case v1alpha1.WorkflowUpgrade:
		return taskStepsOf(string(drivers.HookUpgrade), string(drivers.HookUpgrade), withCore(d.Hooks[drivers.HookUpgrade])), nil
	case v1alpha1.WorkflowUpdate:
		m := withCore(d.Hooks[drivers.HookUpgrade])
		return taskStepsOf(string(wf), "", drivers.Modes{Core: m.Core}), nil
	default:
		return nil, fmt.Errorf("unknown workflow %q (expected create, update, upgrade or delete)", wf)
	}
}

// withCore makes sure the core mode writes the instance: drivers loaded by
// the drivers package always have that step; a hand-built driver may not.
func withCore(m drivers.Modes) drivers.Modes {
	for _, s := range m.Core {
		if s.Action == drivers.ActionUpgradeDeploymentVersion {
			return m
		}
	}
	m.Core = append(append([]drivers.Step(nil), m.Core...), drivers.Step{Action: drivers.ActionUpgradeDeploymentVersion})
	return m
}

func taskStepsOf(prefix, hook string, m drivers.Modes) []v1alpha1.TaskStep {
	var out []v1alpha1.TaskStep
	for _, mode := range []struct {
		name  string
		steps []drivers.Step
	}{{modePre, m.Pre}, {modeCore, m.Core}, {modePost, m.Post}} {
		for i, s := range mode.steps {
			out = append(out, taskStepOf(fmt.Sprintf("%s/%s/%d:%s", prefix, mode.name, i+1, s.Action), hook, mode.name, s))
		}
	}
	return out
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
	return s, nil
}

// stepTimeout is the time a step may take before it fails.
func stepTimeout(ts *v1alpha1.TaskStep, def time.Duration) time.Duration {
	if ts.Timeout != nil && ts.Timeout.Duration > 0 {
		return ts.Timeout.Duration
	}
	return def
}
