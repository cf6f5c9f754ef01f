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
// when there is nothing to do: both absent, or equal digests and the same
// upgrade request (a newly honoured request that finds no newer driver
// version is an update that changes nothing, so the lock records it).
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
	case prev.Digest == next.Digest && prev.Driver.UpgradeRequest == next.Driver.UpgradeRequest:
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

// Step is one step of a workflow: its name, unique within the workflow
// ("setup/pre/1:runJob"), the hook and mode it belongs to, and the step
// the driver declares.
type Step struct {
	Name string
	// Hook is the driver hook the step comes from; "" for update (the
	// core of the upgrade hook alone) and delete.
	Hook string
	Mode string
	drivers.Step
}

// Steps returns the steps workflow w runs with driver d (the new
// instance's driver), in order. It is the one definition of a workflow's
// steps: the plan shows them (Actions), the agent's task runs them, and
// `styrminctl drivers show` lists them.
//
//   - create: the setup hook, pre → core → post;
//   - upgrade: the upgrade hook, pre → core → post;
//   - update: only the core steps of the upgrade hook (a configuration
//     change needs no migration);
//   - delete: one step that writes the tombstone, after which the
//     StyrminDeployment controller uninstalls the release.
//
// The core mode always writes the instance (upgradeDeploymentVersion).
// d may be nil for delete; for the other workflows it is an error.
func Steps(w Workflow, d *drivers.Driver) ([]Step, error) {
	return StepsFor(w, d, false)
}

// StepsFor is Steps for an instance whose BackupFirst is backupFirst: an
// upgrade then starts with a backup step (the driver's backup hook)
// ahead of the upgrade hook's pre steps, unless the driver's pre mode
// takes one itself. The agent's task runs StepsFor with the instance's
// BackupFirst, so the plan and the task agree.
func StepsFor(w Workflow, d *drivers.Driver, backupFirst bool) ([]Step, error) {
	var hook, prefix string
	var modes drivers.Modes
	switch w {
	case WorkflowCreate:
		hook, prefix = string(drivers.HookSetup), string(drivers.HookSetup)
	case WorkflowUpgrade:
		hook, prefix = string(drivers.HookUpgrade), string(drivers.HookUpgrade)
	case WorkflowUpdate:
		prefix = string(w)
	case WorkflowDelete:
		prefix = string(w)
	case WorkflowBackup:
		hook, prefix = string(drivers.HookBackup), string(drivers.HookBackup)
	case WorkflowRestore:
		hook, prefix = string(drivers.HookRestore), string(drivers.HookRestore)
	case WorkflowDeleteBackup:
		hook, prefix = string(drivers.HookDeleteBackup), string(drivers.HookDeleteBackup)
	default:
		return nil, fmt.Errorf("unknown workflow %q (expected create, update, upgrade, delete, backup or restore)", w)
	}
	if w != WorkflowDelete {
		if d == nil {
			return nil, fmt.Errorf("workflow %s needs the instance's driver", w)
		}
		switch w {
		case WorkflowCreate:
			modes = d.Hooks[drivers.HookSetup]
		case WorkflowUpgrade:
			modes = d.Hooks[drivers.HookUpgrade]
		case WorkflowUpdate:
			modes = drivers.Modes{Core: d.Hooks[drivers.HookUpgrade].Core}
		case WorkflowBackup, WorkflowRestore, WorkflowDeleteBackup:
			var ok bool
			if modes, ok = d.Hooks[drivers.Hook(hook)]; !ok {
				return nil, fmt.Errorf("driver %s@%s declares no %s hook", d.Name, d.Version, hook)
			}
		}
	}
	if w != WorkflowBackup && w != WorkflowRestore && w != WorkflowDeleteBackup {
		// An operation writes no instance.
		modes.Core = withCore(modes.Core)
	}
	if w == WorkflowUpgrade && backupFirst && !slices.ContainsFunc(modes.Pre, func(s drivers.Step) bool { return s.Action == drivers.ActionBackup }) {
		modes.Pre = append([]drivers.Step{{Action: drivers.ActionBackup}}, modes.Pre...)
	}
	var out []Step
	for _, m := range modes.Ordered() {
		for i, s := range m.Steps {
			out = append(out, Step{Name: fmt.Sprintf("%s/%s/%d:%s", prefix, m.Mode, i+1, s.Action), Hook: hook, Mode: m.Mode, Step: s})
		}
	}
	return out, nil
}

// ExpandHooks puts the driver's backup and restore hooks where a change's
// steps ask for them, as the agent's task runs them: an upgrade's backup
// step becomes the steps of the backup hook, a create's restoreBackup
// step those of the restore hook when the deployment restores (restores:
// its environment is a clone from a backup, see Restores); each named
// after the step it replaces ("upgrade/pre/1:backup/backup/pre/1:runJob").
// A restoreBackup step of a deployment that restores nothing stays, and
// the agent skips it. A driver that cannot back up keeps its steps.
//
// The backup an upgrade takes first is of the data the running version
// wrote: its hook is that of backupFrom, the driver the deployment runs
// (BackupHookDriver), as a backup taken then by hand would be.
func ExpandHooks(w Workflow, d, backupFrom *drivers.Driver, restores bool, steps []Step) ([]Step, error) {
	if w != WorkflowCreate && w != WorkflowUpgrade {
		return steps, nil
	}
	var out []Step
	for _, st := range steps {
		hook, hd := Workflow(""), d
		switch {
		case st.Action == drivers.ActionBackup:
			hook, hd = WorkflowBackup, BackupHookDriver(d, backupFrom)
		case st.Action == drivers.ActionRestoreBackup && restores:
			hook = WorkflowRestore
		}
		if hook == "" || hd == nil || !hd.CanBackup() {
			out = append(out, st)
			continue
		}
		hs, err := StepsFor(hook, hd, false)
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			h.Name = st.Name + "/" + h.Name
			out = append(out, h)
		}
	}
	return out, nil
}

// BackupHookDriver is the driver whose backup hook an upgrade to d's
// version runs first: running, the one the deployment runs (its data is
// in that version's format, and its chart's objects are the ones that
// exist); d when none is known, or when the running one has no backup
// hook (the only backup to be had).
func BackupHookDriver(d, running *drivers.Driver) *drivers.Driver {
	if running != nil && running.CanBackup() {
		return running
	}
	return d
}

// Restores reports whether instance in's create restores a backup: its
// environment is a clone from one (context.environment.clonedFrom names
// the backup and its location only for the deployments it restores).
func Restores(in *resolver.Instance) bool {
	if in == nil || in.Context == nil {
		return false
	}
	cf := in.Context.Environment.ClonedFrom
	return cf != nil && cf.Backup != "" && cf.Location != ""
}

// ActionsForInstance is ActionsFor the change to instance next, the
// backup and restore hooks expanded as the agent's task runs them
// (ExpandHooks; running is the driver the deployment runs, nil when none).
func ActionsForInstance(w Workflow, d, running *drivers.Driver, next *resolver.Instance) []Action {
	if d == nil && w != WorkflowDelete {
		d = &drivers.Driver{}
	}
	steps, err := StepsFor(w, d, next != nil && next.BackupFirst)
	if err != nil {
		return nil
	}
	restores := Restores(next)
	if steps, err = ExpandHooks(w, d, running, restores, steps); err != nil {
		return nil
	}
	out := make([]Action, 0, len(steps))
	for _, s := range steps {
		a := describe(s, w)
		if s.Action == drivers.ActionRestoreBackup && !restores {
			a.Description = "restore the backup the environment was cloned from: skipped, the deployment restores none (its environment is no clone from a backup, or it was added after the clone)"
		}
		out = append(out, a)
	}
	return out
}

// Actions returns the steps of Steps as the plan shows them, each with a
// sentence saying what it does; nil for an unknown workflow. Without a
// driver (one that could not be loaded) only the core step is shown.
func Actions(w Workflow, d *drivers.Driver) []Action {
	return ActionsFor(w, d, false)
}

// ActionsFor is Actions for the steps of StepsFor.
func ActionsFor(w Workflow, d *drivers.Driver, backupFirst bool) []Action {
	if d == nil && w != WorkflowDelete {
		d = &drivers.Driver{}
	}
	steps, err := StepsFor(w, d, backupFirst)
	if err != nil {
		return nil
	}
	out := make([]Action, 0, len(steps))
	for _, s := range steps {
		out = append(out, describe(s, w))
	}
	return out
}

// withCore makes sure the core mode writes the instance: drivers loaded by
// the drivers package always have that step; a hand-built driver may not.
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
func describe(step Step, w Workflow) Action {
	s := step.Step
	a := Action{
		Name:       step.Name,
		Hook:       step.Hook,
		Mode:       step.Mode,
		Action:     string(s.Action),
		Components: slices.Clone(s.Components),
		Component:  s.Component,
		Job:        s.Job,
		Command:    slices.Clone(s.Command),
	}
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
	case drivers.ActionBackup:
		a.Description = "take a backup of the deployment (the driver's backup hook)"
	case drivers.ActionRestoreBackup:
		a.Description = "restore the backup the environment was cloned from (the driver's restore hook); skipped unless the environment is a clone from a backup"
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
