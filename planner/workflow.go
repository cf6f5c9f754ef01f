package planner

import (
	"fmt"
	"slices"
	"strings"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

// SelectWorkflow returns the workflow that takes a deployment from prev
// (nil or a tombstone: none) to next (a tombstone: deleted). It returns ""
// when there is nothing to do: both absent, or equal digests.
func SelectWorkflow(prev, next *resolver.Instance) Workflow {
	prevLive := prev != nil && !prev.Tombstone()
	nextLive := next != nil && !next.Tombstone()
	switch {
	case !prevLive && !nextLive:
		return ""
	case !prevLive:
		return WorkflowCreate
	case !nextLive:
		return WorkflowDelete
	case prev.Digest == next.Digest:
		return ""
	case prev.Driver != next.Driver || !sameAppVersion(prev.AppVersion, next.AppVersion):
		return WorkflowUpgrade
	default:
		return WorkflowUpdate
	}
}

func sameAppVersion(a, b string) bool {
	return strings.TrimPrefix(a, "v") == strings.TrimPrefix(b, "v")
}

// coreStep is the step every workflow runs: write the StyrminDeployment
// (for a delete, the tombstone that uninstalls the release).
var coreStep = drivers.Step{Action: drivers.ActionUpgradeDeploymentVersion}

// Actions returns the steps a workflow runs with driver d (the new
// instance's driver; the old one's for a delete), in order: create runs
// the setup hook and upgrade the upgrade hook, each pre → core → post;
// update and delete run only the core step.
func Actions(w Workflow, d *drivers.Driver) []Action {
	var hook drivers.Hook
	switch w {
	case WorkflowCreate:
		hook = drivers.HookSetup
	case WorkflowUpgrade:
		hook = drivers.HookUpgrade
	case WorkflowUpdate, WorkflowDelete:
		return []Action{describe("", "core", 1, coreStep, w)}
	default:
		return nil
	}
	var modes drivers.Modes
	if d != nil {
		modes = d.Hooks[hook]
	}
	core := modes.Core
	if len(core) == 0 {
		core = []drivers.Step{coreStep}
	}
	var out []Action
	for _, m := range []struct {
		name  string
		steps []drivers.Step
	}{{"pre", modes.Pre}, {"core", core}, {"post", modes.Post}} {
		for i, s := range m.steps {
			out = append(out, describe(string(hook), m.name, i+1, s, w))
		}
	}
	return out
}

// describe turns a declared step into an Action with a sentence saying
// what it does.
func describe(hook, mode string, n int, s drivers.Step, w Workflow) Action {
	a := Action{
		Hook:       hook,
		Mode:       mode,
		Action:     string(s.Action),
		Components: slices.Clone(s.Components),
		Component:  s.Component,
		Job:        s.Job,
		Command:    slices.Clone(s.Command),
	}
	prefix := hook
	if prefix == "" {
		prefix = string(w)
	}
	a.Name = fmt.Sprintf("%s/%s/%d:%s", prefix, mode, n, s.Action)
	if s.Timeout > 0 {
		a.Timeout = s.Timeout.String()
	}
	if len(s.Args) > 0 {
		a.Args = make(map[string]string, len(s.Args))
		for k, v := range s.Args {
			a.Args[k] = v
		}
	}
	comps := strings.Join(s.Components, ", ")
	switch s.Action {
	case drivers.ActionStopComponents:
		a.Description = "stop " + comps + " (scale to zero, remembering the replicas)"
	case drivers.ActionStartComponents:
		a.Description = "start " + comps + " (restore the replicas)"
	case drivers.ActionWaitReady:
		a.Description = "wait until " + comps + " are ready"
	case drivers.ActionRunJob:
		a.Description = fmt.Sprintf("run job %s from the %s pod template: %s", s.Job, s.Component, strings.Join(s.Command, " "))
	case drivers.ActionExec:
		a.Description = fmt.Sprintf("exec in a %s pod: %s", s.Component, strings.Join(s.Command, " "))
	case drivers.ActionUpgradeDeploymentVersion:
		switch w {
		case WorkflowDelete:
			a.Description = "write the tombstone: uninstall the release and remove the StyrminDeployment"
		case WorkflowCreate:
			a.Description = "write the StyrminDeployment: install the release"
		default:
			a.Description = "write the StyrminDeployment: upgrade the release to the new instance"
		}
	default:
		a.Description = string(s.Action)
	}
	if a.Timeout != "" {
		a.Description += " (timeout " + a.Timeout + ")"
	}
	return a
}
