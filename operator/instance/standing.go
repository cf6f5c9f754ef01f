package instance

import (
	"fmt"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// Standing is where a deployment stands against git: its newest task, its
// active instance, and whether it is behind (its newest sequence is not
// active because that task failed, waits or still runs) and why.
type Standing struct {
	ID resolver.ID
	// Namespace is the deployment's namespace.
	Namespace string
	// Newest is the deployment's task of the highest sequence.
	Newest *v1alpha1.StyrminTask
	// Change is its task of the highest sequence not withdrawn (its lock
	// commit gone from the branch before it ran): the one Behind, Failed
	// and Reason speak of (nil: none).
	Change *v1alpha1.StyrminTask
	// Active is the active instance's sequence (0: none).
	Active int64
	// Behind is true when Newest is not the active instance.
	Behind bool
	// Failed is true when Newest failed: retry it, or change the
	// configuration.
	Failed bool
	// Reason names the task and its step, and what it waits for or why it
	// failed.
	Reason string
	// Operation is the deployment's backup or restore that runs or waits,
	// or its restore that failed and holds it ("" when none).
	Operation string
}

// Standings tells, for every deployment that has tasks, where it stands:
// sds are StyrminDeployments and tasks StyrminTasks of any deployments.
// Sorted by deployment.
func Standings(sds []v1alpha1.StyrminDeployment, tasks []v1alpha1.StyrminTask) []Standing {
	byID := map[v1alpha1.DeploymentID][]v1alpha1.StyrminTask{}
	ops := map[v1alpha1.DeploymentID][]v1alpha1.StyrminTask{}
	for _, t := range tasks {
		if t.Spec.Operation != nil {
			ops[t.Spec.Deployment] = append(ops[t.Spec.Deployment], t)
			continue
		}
		byID[t.Spec.Deployment] = append(byID[t.Spec.Deployment], t)
	}
	sdOf := map[v1alpha1.DeploymentID]*v1alpha1.StyrminDeployment{}
	for i := range sds {
		sdOf[sds[i].Spec.Deployment] = &sds[i]
	}
	out := make([]Standing, 0, len(byID))
	for id, ts := range byID {
		s := standing(id, sdOf[id], ts)
		s.Operation = operationStanding(ops[id])
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Standing) int { return strings.Compare(a.ID.String(), b.ID.String()) })
	return out
}

func standing(id v1alpha1.DeploymentID, sd *v1alpha1.StyrminDeployment, tasks []v1alpha1.StyrminTask) Standing {
	s := Standing{ID: ResolverID(id)}
	for i := range tasks {
		if s.Newest == nil || tasks[i].Spec.ToSequence > s.Newest.Spec.ToSequence {
			s.Newest = &tasks[i]
		}
	}
	s.Namespace = s.Newest.Namespace
	if a := Active(sd, tasks); a != nil {
		s.Active = a.Sequence
	}
	// A change withdrawn before it ran (its lock commit left the branch)
	// says nothing of where the deployment stands: the newest one that
	// was not does.
	t := newestKept(tasks)
	s.Change = t
	if t == nil || t.Spec.ToSequence <= s.Active {
		return s
	}
	name := t.Namespace + "/" + t.Name
	if t.Status.Phase == v1alpha1.TaskSuperseded {
		// Superseded before it ran by a change withdrawn since: neither
		// was applied, and no newer instance carries this one.
		// (The newest change not withdrawn, t has no change locked after
		// the withdrawn one to carry it on.)
		if by, _ := Carrier(tasks, t); by != nil && by.Withdrawn() {
			s.Behind = true
			s.Reason = fmt.Sprintf("task %s (sequence %d) was superseded by sequence %d, which was withdrawn from the branch before it ran: "+
				"neither was applied (see the StyrminSource's HistoryRewritten condition)", name, t.Spec.ToSequence, by.Spec.ToSequence)
		}
		return s
	}
	s.Behind = true
	step := ""
	if i := int(t.Status.CurrentStep); i >= 0 && i < len(t.Status.Steps) {
		step = t.Status.Steps[i].Name
	}
	switch t.Status.Phase {
	case v1alpha1.TaskFailed:
		s.Failed = true
		s.Reason = fmt.Sprintf("task %s failed: %s", name, t.Status.Message)
	case v1alpha1.TaskRunning:
		s.Reason = fmt.Sprintf("task %s runs step %s", name, step)
		if i := int(t.Status.CurrentStep); i < len(t.Status.Steps) && t.Status.Steps[i].Message != "" {
			s.Reason += ": " + t.Status.Steps[i].Message
		}
	case v1alpha1.TaskSucceeded:
		// Succeeded, its active record not seen yet.
		s.Behind = false
	default:
		s.Reason = fmt.Sprintf("task %s waits to run (%s)", name, orPending(t.Status.Phase))
		// What it waits for (an earlier task of the deployment, and what
		// holds that one), as the task says it.
		if c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Message != "" {
			s.Reason += ": " + c.Message
		}
	}
	return s
}

// newestKept is the task of the highest sequence not withdrawn (nil:
// none).
func newestKept(tasks []v1alpha1.StyrminTask) *v1alpha1.StyrminTask {
	var out *v1alpha1.StyrminTask
	for i := range tasks {
		if !tasks[i].Withdrawn() && (out == nil || tasks[i].Spec.ToSequence > out.Spec.ToSequence) {
			out = &tasks[i]
		}
	}
	return out
}

// Carrier is the change task that took a superseded task's change on,
// among tasks (any; those of t's deployment count): the task at the
// sequence that superseded t, followed while that one was superseded
// too. Where the way reaches a change withdrawn before it ran (its lock
// commit left the branch), it goes on at the deployment's lowest change
// above it not withdrawn: locked since, on the branch that holds t's
// change, it holds its content. carrier is nil when t names none or the
// cluster no longer has it (pruned); it is withdrawn only when no change
// was locked after the withdrawn one yet. withdrawn is the last
// withdrawn change the way went through (nil: none).
func Carrier(tasks []v1alpha1.StyrminTask, t *v1alpha1.StyrminTask) (carrier, withdrawn *v1alpha1.StyrminTask) {
	// Sequences only grow along the way: no loop, whatever the records.
	for cur := t; ; {
		var next *v1alpha1.StyrminTask
		switch {
		case cur != t && cur.Withdrawn():
			withdrawn = cur
			next = lowestKeptAbove(tasks, t.Spec.Deployment, cur.Spec.ToSequence)
		case cur.Status.Phase == v1alpha1.TaskSuperseded && cur.Status.SupersededBy > cur.Spec.ToSequence:
			next = changeAt(tasks, t.Spec.Deployment, cur.Status.SupersededBy)
		}
		if next == nil {
			return carrier, withdrawn
		}
		carrier, cur = next, next
	}
}

// changeAt is the deployment's change task of sequence seq (nil: none).
func changeAt(tasks []v1alpha1.StyrminTask, id v1alpha1.DeploymentID, seq int64) *v1alpha1.StyrminTask {
	for i := range tasks {
		if t := &tasks[i]; t.Spec.Operation == nil && t.Spec.Deployment == id && t.Spec.ToSequence == seq {
			return t
		}
	}
	return nil
}

// lowestKeptAbove is the deployment's change task of the lowest sequence
// above seq not withdrawn (nil: none).
func lowestKeptAbove(tasks []v1alpha1.StyrminTask, id v1alpha1.DeploymentID, seq int64) *v1alpha1.StyrminTask {
	var out *v1alpha1.StyrminTask
	for i := range tasks {
		t := &tasks[i]
		if t.Spec.Operation == nil && t.Spec.Deployment == id && t.Spec.ToSequence > seq && !t.Withdrawn() &&
			(out == nil || t.Spec.ToSequence < out.Spec.ToSequence) {
			out = t
		}
	}
	return out
}

// operationStanding says which of a deployment's operation tasks runs or
// waits, or which restore failed in its newest attempt (it holds the
// deployment's changes).
func operationStanding(ops []v1alpha1.StyrminTask) string {
	newest := map[string]*v1alpha1.StyrminTask{}
	for i := range ops {
		t := &ops[i]
		if n := newest[t.Spec.Operation.Name]; n == nil || n.Spec.Operation.Attempt < t.Spec.Operation.Attempt {
			newest[t.Spec.Operation.Name] = t
		}
	}
	var out []string
	for _, t := range newest {
		op := t.Spec.Operation
		kind := strings.ToLower(string(op.Kind))
		switch {
		case !t.Status.Phase.Terminal():
			out = append(out, fmt.Sprintf("%s %s %s (task %s/%s)", kind, op.Name, strings.ToLower(orPending(t.Status.Phase)), t.Namespace, t.Name))
		case op.Kind == v1alpha1.OperationRestore && t.Status.Phase == v1alpha1.TaskFailed:
			out = append(out, fmt.Sprintf("restore %s failed (task %s/%s): the deployment's changes wait until it is retried or deleted", op.Name, t.Namespace, t.Name))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

func orPending(p v1alpha1.TaskPhase) string {
	if p == "" {
		return "not planned yet"
	}
	return string(p)
}
