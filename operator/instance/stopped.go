package instance

import (
	"cmp"
	"slices"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// StoppedBy is what one failed task stopped and no task started since:
// the components an upgrade stopped before its migration failed, or a
// restore before its job failed. Starting them again, by a drift
// correction say, would run the old workers on half-migrated or
// half-restored data.
type StoppedBy struct {
	Task *v1alpha1.StyrminTask
	// Components are sorted.
	Components []string
}

// LeftStopped folds a deployment's tasks, in the order they started,
// into the components failed tasks left stopped, grouped by the last task
// that stopped each, in start order. Only what a step did counts (a task
// that ran no step changes nothing, whatever its times say):
//
//   - a stopComponents step that started, of a task that failed, holds
//     its components unless a later startComponents step of that task
//     succeeded;
//   - a startComponents step that succeeded ends the hold on its
//     components, but a backup's or a backup deletion's only on what
//     another of those left stopped: they leave the data as it is, so
//     they cannot end a hold a change or a restore left on data it
//     changed halfway;
//   - a change that succeeded ends every hold: its release was applied,
//     replicas included.
//
// A deployment's tasks run one at a time, so their start order is the
// order of their effects. The task cache keeps of each finished task
// what this reads (HoldSteps).
func LeftStopped(tasks []v1alpha1.StyrminTask) []StoppedBy {
	started := make([]*v1alpha1.StyrminTask, 0, len(tasks))
	for i := range tasks {
		if tasks[i].Status.StartedAt != nil {
			started = append(started, &tasks[i])
		}
	}
	slices.SortFunc(started, startOrder)
	held := map[string]*v1alpha1.StyrminTask{}
	for _, t := range started {
		if t.Spec.Operation == nil && t.Status.Phase == v1alpha1.TaskSucceeded {
			clear(held)
			continue
		}
		stopped := map[string]bool{}
		for i := range t.Status.Steps {
			st := &t.Status.Steps[i]
			switch {
			case stopsComponents(st):
				for _, c := range st.Components {
					stopped[c] = true
				}
			case startedComponents(st):
				for _, c := range st.Components {
					delete(stopped, c)
					if by := held[c]; by != nil && (!LeavesData(t) || LeavesData(by)) {
						delete(held, c)
					}
				}
			}
		}
		if t.Status.Phase == v1alpha1.TaskFailed {
			for c := range stopped {
				held[c] = t
			}
		}
	}
	var out []StoppedBy
	for _, t := range started {
		var comps []string
		for c, by := range held {
			if by == t {
				comps = append(comps, c)
			}
		}
		if len(comps) > 0 {
			slices.Sort(comps)
			out = append(out, StoppedBy{Task: t, Components: comps})
		}
	}
	return out
}

// HoldSteps is what LeftStopped reads of the steps of a finished task
// the agent's cache keeps without its steps (a change's): nil when it
// reads none (a change that succeeded ends every hold whatever its steps;
// one that started no stopComponents or startComponents step does
// nothing to them), else every step, in place (currentStep still points
// at its step), trimmed to its name, mode, action, components, state and
// start.
func HoldSteps(t *v1alpha1.StyrminTask) []v1alpha1.TaskStep {
	if t.Status.Phase == v1alpha1.TaskSucceeded {
		return nil
	}
	read := false
	for i := range t.Status.Steps {
		st := &t.Status.Steps[i]
		if (st.Action == string(drivers.ActionStopComponents) || st.Action == string(drivers.ActionStartComponents)) && stepStarted(st) {
			read = true
			break
		}
	}
	if !read {
		return nil
	}
	out := make([]v1alpha1.TaskStep, len(t.Status.Steps))
	for i, st := range t.Status.Steps {
		out[i] = v1alpha1.TaskStep{Name: st.Name, Mode: st.Mode, Action: st.Action, Components: st.Components, State: st.State, StartedAt: st.StartedAt}
	}
	return out
}

// stopsComponents reports whether st is a stopComponents step that began:
// its components may be stopped from then on.
func stopsComponents(st *v1alpha1.TaskStep) bool {
	return st.Action == string(drivers.ActionStopComponents) && stepStarted(st)
}

// startedComponents reports whether st is a startComponents step that
// ended well: its components run again.
func startedComponents(st *v1alpha1.TaskStep) bool {
	return st.Action == string(drivers.ActionStartComponents) && st.State == v1alpha1.StepSucceeded
}

// stepStarted reports whether a step started, whatever its end: a task
// that fails its checks while a step runs marks that step skipped, but
// its start time stays.
func stepStarted(st *v1alpha1.TaskStep) bool {
	switch st.State {
	case v1alpha1.StepRunning, v1alpha1.StepSucceeded, v1alpha1.StepFailed:
		return true
	}
	return st.StartedAt != nil
}

// LeavesData reports whether task t runs an operation that leaves the
// deployment's data as it is: a backup, or a backup's deletion.
func LeavesData(t *v1alpha1.StyrminTask) bool {
	op := t.Spec.Operation
	return op != nil && (op.Kind == v1alpha1.OperationBackup || op.Kind == v1alpha1.OperationDeleteBackup)
}

// startOrder orders tasks by when they started. Start times are kept to
// the second; a tie goes to the higher sequence, then the operation
// after the change, then the name.
func startOrder(a, b *v1alpha1.StyrminTask) int {
	switch {
	case a.Status.StartedAt.Before(b.Status.StartedAt):
		return -1
	case b.Status.StartedAt.Before(a.Status.StartedAt):
		return 1
	}
	if c := cmp.Compare(a.Spec.ToSequence, b.Spec.ToSequence); c != 0 {
		return c
	}
	if ao, bo := a.Spec.Operation != nil, b.Spec.Operation != nil; ao != bo {
		if ao {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.Name, b.Name)
}

// StoppedNow are the components task t's own steps stopped and no later
// step of it started again, sorted: while t runs, they are meant to stay
// stopped until its startComponents step, and an apply of the release in
// between (its core step) keeps them at zero replicas.
func StoppedNow(t *v1alpha1.StyrminTask) []string {
	stopped := map[string]bool{}
	for i := range t.Status.Steps {
		st := &t.Status.Steps[i]
		switch {
		case stopsComponents(st):
			for _, c := range st.Components {
				stopped[c] = true
			}
		case startedComponents(st):
			for _, c := range st.Components {
				delete(stopped, c)
			}
		}
	}
	out := make([]string, 0, len(stopped))
	for c := range stopped {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
