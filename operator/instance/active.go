package instance

import (
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
)

// Active returns a deployment's active instance: the last one whose task
// succeeded, post steps included (nil: none). It is the newest of what the
// StyrminDeployment records (status.active, written when a task succeeds,
// or with Ready when its last step is the one that writes the instance)
// and the deployment's succeeded tasks: a task's end reaches the cache of
// tasks before the StyrminDeployment's status may, and a StyrminDeployment
// outlives the tasks pruned from the history. sd may be nil (none yet, or
// uninstalled); tasks are the deployment's, in any order.
func Active(sd *v1alpha1.StyrminDeployment, tasks []v1alpha1.StyrminTask) *v1alpha1.ActiveInstance {
	var active *v1alpha1.ActiveInstance
	legacyFailed := false
	if sd != nil {
		active = sd.Status.Active
		if active == nil && sd.Status.ActiveSequence > 0 && sd.Status.ActiveSequence == sd.Spec.Sequence {
			if legacyActiveHolds(sd.Status.ActiveSequence, tasks) {
				// Written by an agent that recorded no summary: the
				// instance it ran is the spec.
				active = &v1alpha1.ActiveInstance{Sequence: sd.Spec.Sequence, Kind: sd.Spec.Kind, Digest: sd.Spec.Digest,
					Driver: sd.Spec.Driver, AppVersion: sd.Spec.AppVersion}
			} else {
				legacyFailed = true
			}
		}
	}
	for i := range tasks {
		t := &tasks[i]
		if t.Status.Phase != v1alpha1.TaskSucceeded || t.Spec.Operation != nil || (active != nil && t.Spec.ToSequence <= active.Sequence) {
			continue
		}
		if a := TaskTarget(t); a != nil {
			active = a
		}
	}
	if active == nil && legacyFailed {
		// Something runs (an older agent applied it), but which instance
		// is active is not known: not nothing, or a retry would run the
		// create's setup hooks over a deployment that holds data. An
		// instance of no driver makes the next change an upgrade.
		active = &v1alpha1.ActiveInstance{Kind: resolver.KindInstance}
	}
	return active
}

// legacyActiveHolds tells whether an activeSequence written by an agent
// that recorded no summary (status.active nil) names an active instance.
// Those agents wrote it when the release was applied, before the task's
// post steps ran: it is the applied sequence, active only when the task of
// that sequence succeeded, or is no longer kept (pruned from the history,
// so finished long ago). A task of it that failed, was superseded or still
// runs leaves the active instance to the deployment's succeeded tasks.
func legacyActiveHolds(seq int64, tasks []v1alpha1.StyrminTask) bool {
	for i := range tasks {
		t := &tasks[i]
		if t.Spec.Operation == nil && t.Spec.ToSequence == seq {
			return t.Status.Phase == v1alpha1.TaskSucceeded
		}
	}
	return true
}

// TaskTarget summarises the instance a task applies as an active
// instance; nil when the task carries no summary.
func TaskTarget(t *v1alpha1.StyrminTask) *v1alpha1.ActiveInstance {
	a := &v1alpha1.ActiveInstance{Sequence: t.Spec.ToSequence, Task: t.Name}
	switch {
	case t.Spec.Target != nil:
		tg := t.Spec.Target
		a.Kind, a.Digest, a.Driver, a.AppVersion = tg.Kind, tg.Digest, tg.Driver, tg.AppVersion
	case t.Spec.Instance != nil:
		in := t.Spec.Instance
		a.Kind, a.Digest, a.Driver, a.AppVersion = in.Kind, in.Digest, in.Driver, in.AppVersion
	default:
		return nil
	}
	return a
}

// Summary summarises an instance as an active instance.
func Summary(in *resolver.Instance, task string) *v1alpha1.ActiveInstance {
	return &v1alpha1.ActiveInstance{Sequence: in.Sequence, Kind: in.Kind, Digest: in.Digest,
		Driver:     v1alpha1.DriverRef{Name: in.Driver.Name, Version: in.Driver.Version, Digest: in.Driver.Digest},
		AppVersion: in.AppVersion, Task: task}
}

// SelectWorkflow returns the workflow of the task that takes a deployment
// from the active instance (nil: none) to next, by the planner's rule (so
// a plan shows what the agent will run): delete for a tombstone, create
// when nothing is active (or a tombstone is), upgrade when the driver or
// the application version differs from the active one, update otherwise.
// Where the planner sees nothing to do (equal digests under a new
// sequence: a retry of what runs, a tombstone after a tombstone) the task
// still runs, as an update or a delete, so every sequence ends.
func SelectWorkflow(active *v1alpha1.ActiveInstance, next *resolver.Instance) v1alpha1.Workflow {
	var prev *resolver.Instance
	if active != nil {
		prev = &resolver.Instance{Kind: active.Kind, Sequence: active.Sequence, Digest: active.Digest,
			Driver: resolver.DriverRef{Name: active.Driver.Name, Version: active.Driver.Version, Digest: active.Driver.Digest}, AppVersion: active.AppVersion}
		if prev.Kind == "" {
			prev.Kind = resolver.KindInstance
		}
	}
	switch w := planner.SelectWorkflow(prev, next); {
	case w != "":
		return v1alpha1.Workflow(w)
	case next.Tombstone():
		return v1alpha1.WorkflowDelete
	default:
		return v1alpha1.WorkflowUpdate
	}
}
