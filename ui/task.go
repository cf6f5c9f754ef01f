package ui

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

type taskData struct {
	Cluster string
	ID      resolver.ID
	Task    taskRow
	Lock    v1alpha1.LockRef
	Steps   []stepView
	// Explain says in words how the task ended, when it is not plain.
	Explain []string
	Events  []eventView
	Error   string
	// ChartWidth is the bar chart's width in pixels.
	ChartWidth int
	Total      string
}

type stepView struct {
	Index                            int
	Name, Mode, Action, State, Class string
	Attempts                         int32
	Started, Duration                string
	Output, Message                  string
	// Bar places the step in the chart: its start and length in
	// pixels, and the row's y.
	BarX, BarW, BarY int
	Kept             bool
}

// chartWidth is the duration chart's drawing width.
const chartWidth = 600

func (h *Handler) task(w http.ResponseWriter, r *http.Request) {
	c, err := h.cluster(r.PathValue("cluster"))
	if err != nil {
		h.fail(w, http.StatusNotFound, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	d, code, err := h.taskData(ctx, c, r.PathValue("namespace"), r.PathValue("task"))
	if err != nil {
		h.fail(w, code, err)
		return
	}
	h.render(w, "task", page{
		Title: "Task " + d.Task.Name, Live: !v1alpha1.TaskPhase(d.Task.Phase).Terminal(), Data: d,
		Nav: []link{{"Overview", "/"}, {d.ID.String(), deploymentHref(c.Name, d.ID)}},
	})
}

func (h *Handler) taskData(ctx context.Context, c *Cluster, namespace, name string) (taskData, int, error) {
	var t v1alpha1.StyrminTask
	if err := c.Live.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &t); err != nil {
		if apierrors.IsNotFound(err) {
			return taskData{}, http.StatusNotFound, fmt.Errorf("task %s/%s in cluster %s: %s", namespace, name, c.Name, mask(err.Error()))
		}
		// Not "not found": the task may well be there.
		return taskData{}, http.StatusBadGateway, fmt.Errorf("reading task %s/%s from cluster %s: %s", namespace, name, c.Name, mask(err.Error()))
	}
	d := taskData{Cluster: c.Name, ID: instance.ResolverID(t.Spec.Deployment), Task: taskRowOf(&t), Lock: t.Spec.Lock, ChartWidth: chartWidth}
	now := h.o.Now()
	var first, last time.Time
	for _, s := range t.Status.Steps {
		if s.StartedAt != nil && (first.IsZero() || s.StartedAt.Time.Before(first)) {
			first = s.StartedAt.Time
		}
		end := now
		if s.FinishedAt != nil {
			end = s.FinishedAt.Time
		}
		if s.StartedAt != nil && end.After(last) {
			last = end
		}
	}
	span := last.Sub(first)
	if span > 0 {
		d.Total = span.Round(time.Millisecond).String()
	}
	for i, s := range t.Status.Steps {
		v := stepView{
			Index: i + 1, Name: s.Name, Mode: s.Mode, Action: s.Action, State: string(s.State), Attempts: s.Attempts,
			Output: mask(s.Output), Message: mask(s.Message), BarY: i * 22, Class: stateClass(string(s.State)),
		}
		if v.State == "" {
			v.State = string(v1alpha1.StepPending)
		}
		if s.StartedAt != nil {
			v.Started = s.StartedAt.UTC().Format("15:04:05")
			end := now
			if s.FinishedAt != nil {
				end = s.FinishedAt.Time
			}
			dur := end.Sub(s.StartedAt.Time)
			v.Duration = dur.Round(time.Millisecond).String()
			if span > 0 {
				v.BarX = int(float64(s.StartedAt.Time.Sub(first)) / float64(span) * chartWidth)
				v.BarW = max(2, int(float64(dur)/float64(span)*chartWidth))
			}
		}
		// The core step's output when the guard kept a newer instance
		// (task.writeInstance); the event says it too.
		v.Kept = strings.Contains(s.Output, "newer than this task's") && strings.Contains(s.Output, "left unchanged")
		d.Steps = append(d.Steps, v)
	}
	d.Explain = explainTask(&t, d.Steps)
	if words := withdrawnWay(ctx, c.Live, &t); words != "" {
		// Not the words of a newer instance that superseded it.
		d.Explain = []string{words}
	}
	_, d.Events, d.Error = h.podsAndEvents(ctx, c, namespace, map[string]bool{t.Name: true})
	return d, http.StatusOK, nil
}

// withdrawnWay says where the change of t stands when t was superseded
// before it ran by a change withdrawn since (instance.Carrier): not
// applied while no change was locked after the withdrawn one, else
// where that one is ("": no withdrawn change on the way, or the tasks
// cannot be read: the page then says what it says of a superseded one).
func withdrawnWay(ctx context.Context, r client.Reader, t *v1alpha1.StyrminTask) string {
	if t.Status.Phase != v1alpha1.TaskSuperseded || t.Withdrawn() {
		return ""
	}
	var tasks v1alpha1.StyrminTaskList
	if err := r.List(ctx, &tasks, client.InNamespace(t.Namespace), client.MatchingLabels(t.Spec.Deployment.Labels())); err != nil {
		return ""
	}
	carrier, by := instance.Carrier(tasks.Items, t)
	if by == nil {
		return ""
	}
	head := fmt.Sprintf("Superseded by sequence %d before it ran, and sequence %d was then withdrawn: "+
		"the branch no longer held its lock commit when its turn came (a force push or a rewind took it away). ",
		t.Status.SupersededBy, by.Spec.ToSequence)
	if carrier.Withdrawn() {
		return head + fmt.Sprintf("Neither was applied; the cluster runs the instance before them until a lock numbered past %d applies what the branch holds.",
			by.Spec.ToSequence)
	}
	head += fmt.Sprintf("Sequence %d, locked since on the branch that holds this change, carries it on unless a later commit undid it: ", carrier.Spec.ToSequence)
	switch carrier.Status.Phase {
	case v1alpha1.TaskSucceeded:
		return head + "it was applied."
	case v1alpha1.TaskSuperseded:
		return head + "it was superseded in turn by a newer instance the cluster ran."
	case v1alpha1.TaskFailed:
		return head + "it failed, so this change is not applied (see its task)."
	case "":
		return head + "not applied yet (its task is not planned yet)."
	default:
		return head + fmt.Sprintf("not applied yet (its task is %s).", carrier.Status.Phase)
	}
}

// explainTask says in words how a task ended when a phase alone does
// not say it: superseded, a newer instance kept, failed, waiting.
func explainTask(t *v1alpha1.StyrminTask, steps []stepView) []string {
	var out []string
	kept := false
	for _, s := range steps {
		if s.Kept {
			kept = true
		}
	}
	switch t.Status.Phase {
	case v1alpha1.TaskSuperseded:
		if t.Withdrawn() {
			// No newer instance took it on: saying one did reads as applied.
			out = append(out, fmt.Sprintf("Withdrawn: when this task's turn came, the branch no longer held the lock commit of sequence %d "+
				"(a force push or a rewind took it away), so nothing of it was applied and no newer instance carries it. "+
				"A change superseded by this one before it ran was not applied either, until a change locked after this one carries it on.", t.Spec.ToSequence))
			break
		}
		by := "a newer instance"
		if t.Status.SupersededBy > 0 {
			by = fmt.Sprintf("sequence %d", t.Status.SupersededBy)
		}
		out = append(out, supersededWords(t, steps, by, kept))
		if kept {
			out = append(out, "NewerInstanceKept: the step that writes the StyrminDeployment found the newer instance and left it; "+
				"this change's remaining steps (its post steps) still ran, as its pre steps did, so its hooks are not skipped.")
		}
	case v1alpha1.TaskFailed:
		for _, s := range steps {
			if s.State == string(v1alpha1.StepFailed) {
				out = append(out, fmt.Sprintf("Failed at step %d (%s): %s", s.Index, s.Name, firstLine(s.Message)))
				break
			}
		}
		out = append(out, "The instance before stays active: the next change's workflow is chosen against it, so nothing this task should have run is skipped. "+
			"Fix the configuration, or retry with styrminctl lock --retry-failed.")
	case v1alpha1.TaskSucceeded:
		if kept {
			out = append(out, "NewerInstanceKept: a newer instance was already in the cluster; this task ran its hooks and left the newer instance in place.")
		}
	default:
		if c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Reason == v1alpha1.ReasonWaitingForOrder {
			out = append(out, "Waiting for its turn: "+mask(c.Message))
		}
	}
	return out
}

// supersededWords says how a task not withdrawn was superseded, by (a
// sequence): at its write step, by the instance the guard kept (kept);
// before it ran any step, by a newer change locked after it (which may
// delete the deployment: nothing then carries this change); else by a
// newer instance, without saying when. Said of a task superseded before
// it ran, "the cluster already held" named an instance the cluster may
// not have held yet (the newer task had not run).
func supersededWords(t *v1alpha1.StyrminTask, steps []stepView, by string, kept bool) string {
	const carried = "which was resolved from a later commit of the same branch and so includes this change unless a later commit undid it."
	switch {
	case kept:
		return fmt.Sprintf("Superseded: when this task came to write sequence %d, the cluster already held %s of this deployment. "+
			"The guard never lets an older change overwrite a newer one, so the cluster runs the newer instance, "+carried, t.Spec.ToSequence, by)
	case supersededByDeletion(t):
		return fmt.Sprintf("Superseded before it ran: %s, locked after it, deletes this deployment, so this task ran none of its steps "+
			"and nothing of it was applied: an earlier change does not install the deployment again.", by)
	case ranNoStep(steps):
		return fmt.Sprintf("Superseded before it ran: %s of this deployment was locked after it, and its task writes the whole configuration, "+
			"so this task ran none of its steps and wrote nothing: its change is carried by the newer instance (its task says whether it was applied), "+carried, by)
	default:
		return fmt.Sprintf("Superseded by %s of this deployment: the guard never lets an older change overwrite a newer one, "+
			"so the cluster runs the newer instance, "+carried, by)
	}
}

// supersededByDeletion reports whether a change locked after t deletes
// the deployment (its Ready condition's reason, set by either path of
// the agent that ends a task so, whatever their words). A task an older
// agent ended has reason Superseded and one of its two wordings.
func supersededByDeletion(t *v1alpha1.StyrminTask) bool {
	c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady)
	switch {
	case c == nil:
		return false
	case c.Reason == v1alpha1.ReasonSupersededByDeletion:
		return true
	}
	return c.Reason == v1alpha1.ReasonTaskSuperseded &&
		(strings.Contains(c.Message, "which deleted the deployment") || strings.Contains(c.Message, "that change deletes the deployment"))
}

// ranNoStep reports whether none of a task's steps ran (each skipped or
// pending).
func ranNoStep(steps []stepView) bool {
	for _, s := range steps {
		if s.State != string(v1alpha1.StepSkipped) && s.State != string(v1alpha1.StepPending) {
			return false
		}
	}
	return true
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}

// stateClass is the style class of a step or task state.
func stateClass(s string) string {
	switch s {
	case "Succeeded", "True", "ready":
		return "ok"
	case "Failed", "failed", "stalled":
		return "bad"
	case "Running", "behind", "not applied":
		return "run"
	case "Superseded", "Skipped", "held":
		return "muted"
	}
	return "wait"
}

func deploymentHref(cluster string, id resolver.ID) string {
	return "/d/" + cluster + "/" + id.Environment + "/" + id.Name
}
