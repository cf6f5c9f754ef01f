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
	case prev.Driver.Name != next.Driver.Name || prev.Driver.Version != next.Driver.Version || prev.AppVersion != next.AppVersion:
		// The agent's rule: a driver whose content changed under the same
		// version is a configuration change.
		return WorkflowUpgrade
	default:
		return WorkflowUpdate
	}
}

// coreStep is the step every workflow runs: write the StyrminDeployment
// (for a delete, the tombstone that uninstalls the release).
var coreStep = drivers.Step{Action: drivers.ActionUpgradeDeploymentVersion}

// Actions returns the steps a workflow runs with driver d (the new
// instance's driver), in the order and with the names the agent's task
// gives them: create runs the setup hook and upgrade the upgrade hook,
// each pre → core → post; update runs only the core steps of the upgrade
// hook; delete runs one step that writes the tombstone. The core mode
// always writes the instance (upgradeDeploymentVersion).
func Actions(w Workflow, d *drivers.Driver) []Action {
	var hook, prefix string
	var modes drivers.Modes
	if d != nil {
		switch w {
		case WorkflowCreate:
			modes = d.Hooks[drivers.HookSetup]
		case WorkflowUpgrade, WorkflowUpdate:
			modes = d.Hooks[drivers.HookUpgrade]
		}
	}
	switch w {
	case WorkflowCreate:
		hook, prefix = string(drivers.HookSetup), string(drivers.HookSetup)
	case WorkflowUpgrade:
		hook, prefix = string(drivers.HookUpgrade), string(drivers.HookUpgrade)
	case WorkflowUpdate:
		modes = drivers.Modes{Core: modes.Core}
		prefix = string(w)
	case WorkflowDelete:
		modes = drivers.Modes{}
		prefix = string(w)
	default:
		return nil
	}
	modes.Core = withCore(modes.Core)
	var out []Action
	for _, m := range []struct {
		name  string
		steps []drivers.Step
	}{{"pre", modes.Pre}, {"core", modes.Core}, {"post", modes.Post}} {
		for i, s := range m.steps {
			out = append(out, describe(hook, prefix, m.name, i+1, s, w))
		}
	}
	return out
}

// withCore makes sure the core mode writes the instance.
func withCore(core []drivers.Step) []drivers.Step {
	for _, s := range core {
		if s.Action == drivers.ActionUpgradeDeploymentVersion {
			return core
		}
	}
	return append(slices.Clone(core), coreStep)
}

// describe turns a declared step into an Action with a sentence saying
// what it does.
func describe(hook, prefix, mode string, n int, s drivers.Step, w Workflow) Action {
	a := Action{
		Hook:       hook,
		Mode:       mode,
		Action:     string(s.Action),
		Components: slices.Clone(s.Components),
		Component:  s.Component,
		Job:        s.Job,
		Command:    slices.Clone(s.Command),
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
