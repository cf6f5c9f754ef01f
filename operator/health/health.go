package health

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/eventnote"
)

// OthersComponent holds the judged objects and workloads of a release
// that belong to no component (a chart's own Job or claim, a subchart's
// Deployment).
const OthersComponent = "chart"

// ComponentStatuses reads the inventory's workloads (from c, the
// manager's cache, which watches them), its judged objects, Jobs and
// claims, and its custom resources (from live, the API server: see
// CustomResource), and sums them up per component. A component with none
// of them (only a Service, say) is ready. A workload the cache shows at a
// generation older than written tells (the agent's last apply or
// correction of it), or failed, is read from live, as is one at 0
// replicas (zeroed: who set them), once per resourceVersion of its
// cached copy when zeroes remembers the verdicts (nil: every check).
//
// previous are the components as the last check saw them at the same
// release revision (nil right after an apply): a Job gone since (deleted
// after its ttlSecondsAfterFinished, or cleaned up by hand; the drift
// check does not make it again) keeps the verdict that check gave it,
// finished or failed, or takes the one the Job controller recorded in its
// events at or after endsSince (when the apply that made it began).
//
// A message another program wrote (a custom resource's condition, a Job
// controller's event) is masked with sensitive, called only when one is
// shown (see statusMessage, EventMessage).
func ComponentStatuses(ctx context.Context, c, live client.Reader, inventory []v1alpha1.ObjectRef, appliedAt time.Time, written Written, previous []v1alpha1.ComponentStatus, endsSince time.Time, zeroes *Zeroes, sensitive SensitiveValues) ([]v1alpha1.ComponentStatus, error) {
	byName := map[string]*v1alpha1.ComponentStatus{}
	zeroSeen := map[types.UID]zeroVerdict{}
	for _, r := range inventory {
		judged := drivers.IsJudged(r.APIVersion, r.Kind)
		// Namespaced, as the inventory sees it: it takes every kind it
		// does not know for a namespaced one, so a cluster-scoped custom
		// resource (a ClusterIssuer) is judged too, read through its
		// kind's mapping, which drops the namespace.
		custom := !judged && r.Namespace != "" && IsCustomResource(r.APIVersion)
		if r.Component == "" && (judged || custom || drivers.IsWorkloadKind(r.APIVersion, r.Kind)) {
			// A workload no component selects (a subchart's) is the
			// release's as well: a stuck one keeps it from Ready.
			r.Component = OthersComponent
		}
		if r.Component == "" {
			continue
		}
		cs, ok := byName[r.Component]
		if !ok {
			cs = &v1alpha1.ComponentStatus{Name: r.Component, Ready: true}
			byName[r.Component] = cs
		}
		var ws v1alpha1.WorkloadStatus
		var err error
		switch {
		case judged:
			ws, err = Judged(ctx, live, r, sensitive)
			if err == nil && ws.Message == notFound && r.Kind == "Job" && live != nil {
				ws, err = goneJob(ctx, live, previous, r, ws, endsSince, sensitive)
			}
		case custom:
			ws, err = CustomResource(ctx, live, r, sensitive)
		case drivers.IsWorkloadKind(r.APIVersion, r.Kind):
			var cached metav1.Object
			ws, cached, err = workload(ctx, c, r, appliedAt)
			// Not found in the cache is not ready anyway: no read.
			behind := written != nil && cached != nil && cached.GetGeneration() > 0 && cached.GetGeneration() < written(r)
			if err == nil && (ws.Failed || behind) && live != nil {
				// The cache may not have seen the apply that just changed
				// the workload: its old generation, fully observed,
				// reads as ready (and the deployment would be Ready at
				// the new sequence before its rollout started), or, past
				// its deadline, as failed (which stops a task at once).
				// Read the API then: one read per workload written and
				// not seen yet, or failed.
				ws, err = Workload(ctx, live, r, appliedAt)
			}
			if err == nil && ws.Ready && ws.DesiredReplicas == 0 && live != nil {
				// 0 of 0 reads ready: whether 0 is what the chart asks
				// is in who set it (see zeroed). One read per workload
				// at 0 and resourceVersion (see Zeroes).
				ws, err = zeroes.judge(ctx, live, r, ws, cached, zeroSeen)
			}
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		cs.Workloads = append(cs.Workloads, ws)
		cs.DesiredReplicas += ws.DesiredReplicas
		cs.ReadyReplicas += ws.ReadyReplicas
		cs.Ready = cs.Ready && ws.Ready
	}
	zeroes.keep(zeroSeen)
	out := make([]v1alpha1.ComponentStatus, 0, len(byName))
	for _, cs := range byName {
		slices.SortFunc(cs.Workloads, func(a, b v1alpha1.WorkloadStatus) int {
			return strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name)
		})
		out = append(out, *cs)
	}
	slices.SortFunc(out, func(a, b v1alpha1.ComponentStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Workload reads one workload (from the manager's cache, which watches
// them) and tells whether it is ready, and if not why. A workload that
// does not exist is not ready ("not found").
func Workload(ctx context.Context, c client.Reader, r v1alpha1.ObjectRef, appliedAt time.Time) (v1alpha1.WorkloadStatus, error) {
	ws, _, err := workload(ctx, c, r, appliedAt)
	return ws, err
}

// Written tells the generation the agent's last write of a workload was
// answered with, 0 when none is known (release.Generations.Of).
type Written func(v1alpha1.ObjectRef) int64

// workload is Workload that also returns the object read (nil when there
// is none).
func workload(ctx context.Context, c client.Reader, r v1alpha1.ObjectRef, appliedAt time.Time) (v1alpha1.WorkloadStatus, metav1.Object, error) {
	ws := v1alpha1.WorkloadStatus{Kind: r.Kind, Name: r.Name}
	key := client.ObjectKey{Namespace: r.Namespace, Name: r.Name}
	var obj client.Object
	var err error
	switch r.Kind {
	case "Deployment":
		var d appsv1.Deployment
		if err = c.Get(ctx, key, &d); err == nil {
			deploymentReady(&d, &ws)
			obj = &d
		}
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err = c.Get(ctx, key, &s); err == nil {
			statefulSetReady(&s, &ws)
			obj = &s
		}
	case "DaemonSet":
		var d appsv1.DaemonSet
		if err = c.Get(ctx, key, &d); err == nil {
			daemonSetReady(&d, &ws)
			obj = &d
		}
	}
	if apierrors.IsNotFound(err) {
		ws.Message = "not found"
		return ws, nil, nil
	}
	if err != nil {
		return ws, nil, fmt.Errorf("read %s: %w", r, err)
	}
	if obj == nil {
		return ws, nil, nil
	}
	if !ws.Ready && !timedOutBefore(obj, appliedAt) {
		failed(obj, r, &ws)
	}
	return ws, obj, nil
}

// Judged reads an object of a judged kind (a Job, a claim) or a custom
// resource and tells, by kstatus, whether it is ready (Current), failed
// or neither. A message its controller wrote is masked with sensitive
// (see statusMessage).
func Judged(ctx context.Context, c client.Reader, r v1alpha1.ObjectRef, sensitive SensitiveValues) (v1alpha1.WorkloadStatus, error) {
	ws := v1alpha1.WorkloadStatus{Kind: r.Kind, Name: r.Name, DesiredReplicas: 1}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(r.APIVersion)
	u.SetKind(r.Kind)
	err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, u)
	if apierrors.IsNotFound(err) {
		ws.Message = notFound
		return ws, nil
	}
	if err != nil {
		return ws, fmt.Errorf("read %s: %w", r, err)
	}
	res, err := kstatus.Compute(u)
	if err != nil {
		return ws, fmt.Errorf("status of %s: %w", r, err)
	}
	// Only a message shown is masked: a ready object's costs no read of
	// the sensitive values.
	shown := func() string { return statusMessage(u, res.Message, sensitive) }
	switch {
	case res.Status == kstatus.CurrentStatus && r.Kind == "Job" && drivers.IsJudged(r.APIVersion, r.Kind) && !jobComplete(u):
		// kstatus counts a running Job as current; a release holding a
		// Job is ready when the Job has done its work. (A custom kind
		// named Job is not batch's.)
		ws.Message = shown()
	case res.Status == kstatus.CurrentStatus:
		ws.Ready, ws.ReadyReplicas = true, 1
	case res.Status == kstatus.FailedStatus:
		ws.Failed = true
		ws.Message = "failed: " + shown()
	default:
		ws.Message = shown()
	}
	return ws, nil
}

// notFound is the message of a judged object that does not exist.
const notFound = "not found"

// Gone reports whether a judged object's status says it does not exist
// (and was not seen finished before: see ComponentStatuses).
func Gone(w v1alpha1.WorkloadStatus) bool { return strings.HasPrefix(w.Message, notFound) }

// finishedGone is the message of a Job that finished and is gone.
const finishedGone = "finished; deleted since"

// FinishedGone reports whether a Job's status says it finished and is
// gone: a revision that leaves it as it was does not make it again.
func FinishedGone(w v1alpha1.WorkloadStatus) bool {
	return w.Ready && strings.HasPrefix(w.Message, finishedGone)
}

// goneJob is the status of a Job that is gone: the verdict of the check
// before (previous, at the same revision) when it had seen the Job finish
// or fail, else the verdict the Job controller recorded in its events
// since the apply that made it began (a Job whose ttlSecondsAfterFinished
// deleted it before a check saw it end), else ws: not found, not ready.
func goneJob(ctx context.Context, live client.Reader, previous []v1alpha1.ComponentStatus, r v1alpha1.ObjectRef, ws v1alpha1.WorkloadStatus, since time.Time, sensitive SensitiveValues) (v1alpha1.WorkloadStatus, error) {
	for _, cs := range previous {
		for _, w := range cs.Workloads {
			if w.Kind != r.Kind || w.Name != r.Name {
				continue
			}
			switch {
			case w.Failed:
				return w, nil
			case w.Ready:
				w.Message = finishedGone
				return w, nil
			}
		}
	}
	var events corev1.EventList
	if err := live.List(ctx, &events, client.InNamespace(r.Namespace),
		client.MatchingFields{"involvedObject.kind": "Job", "involvedObject.name": r.Name}); err != nil {
		return ws, fmt.Errorf("events of %s: %w", r, err)
	}
	var last *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		at := eventTime(e)
		if at.Before(since.Truncate(time.Second)) || !jobEndReasons[e.Reason] && e.Reason != "Completed" {
			continue
		}
		if last == nil || at.After(eventTime(last)) {
			last = e
		}
	}
	switch {
	case last == nil:
		ws.Message = notFound + " (a Job is not made again by the drift check: a retry runs it again)"
	case last.Reason == "Completed":
		ws.Ready, ws.ReadyReplicas, ws.Message = true, 1, finishedGone+" (its end read from its events)"
	default:
		ws.Failed, ws.Message = true, "failed: "+last.Reason+": "+eventnote.Cut(EventMessage(last, sensitive), maxPodMessage)+" (read from its events; deleted since)"
	}
	return ws, nil
}

// JobEnded reports whether a Job has completed or failed (its Complete or
// Failed condition is True): the task controller's runJob, which starts a
// step's Job only once the deployment's others ended, and the drift
// check's hold while one runs, ask alike.
func JobEnded(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if endsJob(c) {
			return true
		}
	}
	return false
}

// endsJob reports whether c is a Job's Complete or Failed condition, True.
func endsJob(c batchv1.JobCondition) bool {
	return c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed)
}

// JobEndConditions are a Job's conditions that end it (JobEnded), without
// their times and messages: what a cache of Jobs keeps of their status.
func JobEndConditions(j *batchv1.Job) []batchv1.JobCondition {
	var out []batchv1.JobCondition
	for _, c := range j.Status.Conditions {
		if endsJob(c) {
			out = append(out, batchv1.JobCondition{Type: c.Type, Status: c.Status})
		}
	}
	return out
}

// JobFailedReason reports whether reason is one of an event the Job
// controller records when a Job fails.
func JobFailedReason(reason string) bool { return jobEndReasons[reason] }

// jobEndReasons are the reasons of the events the Job controller records
// when a Job fails.
var jobEndReasons = map[string]bool{
	"BackoffLimitExceeded": true, "DeadlineExceeded": true, "PodFailurePolicy": true,
	"MaxFailedIndexesExceeded": true, "FailedIndexes": true,
}

// eventTime is when an event last happened.
func eventTime(e *corev1.Event) time.Time {
	t := e.LastTimestamp.Time
	if e.EventTime.After(t) {
		t = e.EventTime.Time
	}
	if e.FirstTimestamp.After(t) {
		t = e.FirstTimestamp.Time
	}
	return t
}

// jobComplete reports whether a Job has the condition Complete.
func jobComplete(u *unstructured.Unstructured) bool { return JobCondition(u, "Complete") }

// JobCondition reports whether a Job (as unstructured) has the condition
// typ ("Complete", "Failed") True.
func JobCondition(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// timedOutBefore reports whether a Deployment's progress deadline was
// exceeded before appliedAt (the zero time: never). The deployment
// controller keeps that verdict until the next rollout makes progress,
// so right after a fix (a template rolled back to an available
// ReplicaSet, say) the new generation, observed, still reads as timed
// out: a verdict on the change before, not on this one. Times are kept
// to the second; a timeout in the second of the apply counts.
func timedOutBefore(obj client.Object, appliedAt time.Time) bool {
	d, ok := obj.(*appsv1.Deployment)
	if !ok || appliedAt.IsZero() {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return c.LastUpdateTime.Time.Before(appliedAt.Truncate(time.Second))
		}
	}
	return false
}

// failed marks a workload that kstatus computes as Failed (a Deployment
// past its progress deadline, say): it cannot become ready without a
// change, so whoever waits for it stops at once, with the reason.
func failed(obj client.Object, r v1alpha1.ObjectRef, ws *v1alpha1.WorkloadStatus) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(r.APIVersion)
	u.SetKind(r.Kind)
	res, err := kstatus.Compute(u)
	if err != nil || res.Status != kstatus.FailedStatus {
		return
	}
	ws.Failed = true
	ws.Message = "failed: " + res.Message
	for _, c := range res.Conditions {
		if c.Message != "" {
			ws.Message += " (" + c.Reason + ": " + c.Message + ")"
			break
		}
	}
}

// ReplicasOf is a workload's spec.replicas, 1 when unset (the API
// server's default).
func ReplicasOf(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// deploymentReady follows `kubectl rollout status`: the controller saw the
// current generation, every replica runs the current template, no old one
// is left, and all are available.
func deploymentReady(d *appsv1.Deployment, ws *v1alpha1.WorkloadStatus) {
	want := ReplicasOf(d.Spec.Replicas)
	ws.DesiredReplicas = want
	ws.ReadyReplicas = d.Status.ReadyReplicas
	ws.UpdatedReplicas = d.Status.UpdatedReplicas
	switch {
	case d.Status.ObservedGeneration < d.Generation:
		ws.Message = "waiting for the deployment controller to observe the change"
	case d.Status.UpdatedReplicas < want:
		ws.Message = fmt.Sprintf("%d of %d replicas updated", d.Status.UpdatedReplicas, want)
	case d.Status.Replicas > d.Status.UpdatedReplicas:
		ws.Message = fmt.Sprintf("%d old replicas pending termination", d.Status.Replicas-d.Status.UpdatedReplicas)
	case d.Status.AvailableReplicas < want || d.Status.ReadyReplicas < want:
		ws.Message = fmt.Sprintf("%d of %d replicas ready", d.Status.ReadyReplicas, want)
	default:
		ws.Ready = true
	}
}

// onDeleteHint says why a workload of updateStrategy OnDelete is not
// updated, and what updates it.
const onDeleteHint = "updateStrategy OnDelete: a pod takes the change only once it is deleted; " +
	"delete the others, or stop and start the component in the driver's hook"

// statefulSetReady follows `kubectl rollout status`, and for updateStrategy
// OnDelete (which it does not follow) counts the pods at the update
// revision: ready once every one runs the current template.
func statefulSetReady(s *appsv1.StatefulSet, ws *v1alpha1.WorkloadStatus) {
	want := ReplicasOf(s.Spec.Replicas)
	ws.DesiredReplicas = want
	ws.ReadyReplicas = s.Status.ReadyReplicas
	ws.UpdatedReplicas = s.Status.UpdatedReplicas
	rolling := s.Spec.UpdateStrategy.Type == "" || s.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType
	// A partitioned rollout updates only the pods at or above the
	// partition: done once those are, as `kubectl rollout status` says
	// (the current revision never reaches the update revision then).
	var partition int32
	if ru := s.Spec.UpdateStrategy.RollingUpdate; rolling && ru != nil && ru.Partition != nil {
		partition = min(max(*ru.Partition, 0), want)
	}
	switch {
	case s.Status.ObservedGeneration < s.Generation:
		ws.Message = "waiting for the statefulset controller to observe the change"
	case s.Status.ReadyReplicas < want:
		ws.Message = fmt.Sprintf("%d of %d replicas ready", s.Status.ReadyReplicas, want)
	case s.Status.Replicas > want:
		// A scale-down in progress: the controller counts the pods it
		// deleted until they are gone (a terminating pod may count as
		// ready), and removes the next ordinal only then, so the
		// workload still runs more than the chart asks (kstatus: pending
		// termination).
		ws.Message = fmt.Sprintf("scaling down to %d replicas: %d pending termination", want, s.Status.Replicas-want)
	case rolling && s.Status.UpdateRevision != "" && s.Status.CurrentRevision != s.Status.UpdateRevision && s.Status.UpdatedReplicas < want-partition:
		ws.Message = fmt.Sprintf("%d of %d replicas updated", s.Status.UpdatedReplicas, want-partition)
		if partition > 0 {
			ws.Message += fmt.Sprintf(" (the %d below partition %d stay at the current revision)", partition, partition)
		}
	case s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType && s.Status.UpdateRevision != "" && s.Status.UpdatedReplicas < want:
		// Its pods take a change only once deleted: until then they run
		// the template before it, and Ready would say the sequence runs
		// while none of it does (as a DaemonSet OnDelete is judged; its
		// current revision never follows, the updated count does).
		ws.Message = fmt.Sprintf("%d of %d replicas updated (%s)", s.Status.UpdatedReplicas, want, onDeleteHint)
	default:
		ws.Ready = true
	}
}

func daemonSetReady(d *appsv1.DaemonSet, ws *v1alpha1.WorkloadStatus) {
	want := d.Status.DesiredNumberScheduled
	ws.DesiredReplicas = want
	ws.ReadyReplicas = d.Status.NumberReady
	ws.UpdatedReplicas = d.Status.UpdatedNumberScheduled
	switch {
	case d.Status.ObservedGeneration < d.Generation:
		ws.Message = "waiting for the daemonset controller to observe the change"
	case d.Status.UpdatedNumberScheduled < want:
		ws.Message = fmt.Sprintf("%d of %d pods updated", d.Status.UpdatedNumberScheduled, want)
		if d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
			ws.Message += " (" + onDeleteHint + ")"
		}
	case d.Status.NumberReady < want:
		ws.Message = fmt.Sprintf("%d of %d pods ready", d.Status.NumberReady, want)
	default:
		ws.Ready = true
	}
}

// NotReadySummary names the workloads that are not ready, for the Ready
// condition's message.
func NotReadySummary(components []v1alpha1.ComponentStatus) string {
	var parts []string
	for _, c := range components {
		for _, w := range c.Workloads {
			if !w.Ready {
				part := fmt.Sprintf("%s %s/%s: %s", c.Name, w.Kind, w.Name, w.Message)
				if len(w.Pods) > 0 {
					p := w.Pods[0]
					part += fmt.Sprintf(" (pod %s: %s", p.Name, p.Phase)
					if p.Reason != "" {
						part += " " + p.Reason
					}
					if p.Restarts > 0 {
						part += fmt.Sprintf(", %d restarts", p.Restarts)
					}
					part += ")"
				}
				parts = append(parts, part)
			}
		}
	}
	return strings.Join(parts, "; ")
}
