package task

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/health"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/internal/outcome"
)

// The action primitives. Each is called again and again until it reports
// done: it does the part of its work that is not done yet and says when to
// look again, so no reconcile blocks while pods start or a job runs. Each is
// idempotent, because a step found Running after an agent restart is run
// again from its start: stopComponents records the replicas before it
// scales (and keeps the first record), runJob names its Job after the task
// so a re-run finds it, upgradeDeploymentVersion does not write a
// StyrminDeployment that already holds its sequence.
//
// Errors follow the package's classification: stalled means the step
// failed (the task fails), anything else is retried until the step's
// timeout.

// actionFieldOwner is the field manager of the changes actions make to
// workloads (replicas), distinct from the release's own manager.
const actionFieldOwner = v1alpha1.ActionsFieldManager

// Labels the agent puts on the Jobs it runs.
const (
	// LabelTask names the StyrminTask a Job belongs to.
	LabelTask = v1alpha1.LabelTask
	// LabelComponent names the driver component a Job's pod template was
	// taken from.
	LabelComponent = v1alpha1.Group + "/component"
)

// heldPollInterval is how often a step blocked by a hand-set sequence
// annotation looks again; the StyrminDeployment's change (the annotation
// removed) wakes it sooner.
const heldPollInterval = 30 * time.Second

// watchedPollInterval is how often a step waiting for what its
// StyrminDeployment reports (its instance applied and Ready, its
// tombstone uninstalled) looks again. Every change of the
// StyrminDeployment wakes the deployment's running tasks
// (tasksOfDeployment), so this is a safety net, for a change that comes
// before the cache shows the task Running. At the step poll of one
// second, 2,000 deployments rolling out were 2,000 reconciles a second of
// tasks that could not progress, and the new tasks of a fan-out waited
// behind them in the queue.
const watchedPollInterval = 10 * time.Second

// actionOutcome is what one call of a primitive did.
type actionOutcome struct {
	// done: the step finished successfully.
	done bool
	// after: not done; look again after this delay.
	after time.Duration
	// output describes what the step did (kept in the step's status).
	output string
	// record holds entries to persist in the step's Recorded map before
	// the primitive is called again.
	record map[string]string
	// newer is the sequence of a newer instance the guard kept: the task
	// is superseded.
	newer int64
	// blocked: not done, and waiting for a person to act (output says
	// what to do); the step's timeout does not apply.
	blocked bool
}

// workloadRef is one workload of a component.
type workloadRef struct {
	Kind, Name string
}

func (w workloadRef) String() string { return w.Kind + "/" + w.Name }

func (r *Reconciler) runAction(ctx context.Context, run *taskRun, st *v1alpha1.TaskStep) (actionOutcome, error) {
	step, err := driverStep(st)
	if err != nil {
		return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, err)
	}
	switch step.Action {
	case drivers.ActionStopComponents:
		return r.stopComponents(ctx, run, st, step)
	case drivers.ActionStartComponents:
		return r.startComponents(ctx, run, st.Name, step)
	case drivers.ActionRunJob:
		return r.runJob(ctx, run, st, step)
	case drivers.ActionExec:
		return r.execInComponent(ctx, run, st, step)
	case drivers.ActionWaitReady:
		return r.waitReady(ctx, run, step)
	case drivers.ActionUpgradeDeploymentVersion:
		return r.upgradeDeploymentVersion(ctx, run)
	default:
		return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("unknown action %q", st.Action))
	}
}

// componentWorkloads lists the workloads of a component: those of the
// target instance's rendered chart, and those the StyrminDeployment last
// observed (the running instance's, which an upgrade may rename), sorted.
func (r *Reconciler) componentWorkloads(ctx context.Context, run *taskRun, component string) ([]workloadRef, error) {
	seen := map[workloadRef]bool{}
	m, err := r.rendered(ctx, run)
	if err != nil {
		return nil, err
	}
	for _, o := range m.Objects {
		if o.Component == component && drivers.IsWorkloadKind(o.APIVersion, o.Kind) {
			seen[workloadRef{o.Kind, o.Name}] = true
		}
	}
	sd, err := r.deployment(ctx, run)
	if err != nil {
		return nil, err
	}
	if sd != nil {
		for _, cs := range sd.Status.Components {
			if cs.Name != component {
				continue
			}
			for _, w := range cs.Workloads {
				seen[workloadRef{w.Kind, w.Name}] = true
			}
		}
	}
	out := make([]workloadRef, 0, len(seen))
	for w := range seen {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b workloadRef) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// scalable reads a Deployment's or StatefulSet's spec.replicas and status
// replicas; found is false when it does not exist.
func (r *Reconciler) scalable(ctx context.Context, ns string, w workloadRef) (obj client.Object, spec, current int32, found bool, err error) {
	key := client.ObjectKey{Namespace: ns, Name: w.Name}
	switch w.Kind {
	case "Deployment":
		var d appsv1.Deployment
		if err = r.opts.Client.Get(ctx, key, &d); err == nil {
			return &d, health.ReplicasOf(d.Spec.Replicas), d.Status.Replicas, true, nil
		}
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err = r.opts.Client.Get(ctx, key, &s); err == nil {
			return &s, health.ReplicasOf(s.Spec.Replicas), s.Status.Replicas, true, nil
		}
	default:
		return nil, 0, 0, false, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("%s cannot be stopped or started: only Deployments and StatefulSets scale", w))
	}
	if apierrors.IsNotFound(err) {
		return nil, 0, 0, false, nil
	}
	return nil, 0, 0, false, fmt.Errorf("reading %s: %w", w, err)
}

// scale sets a workload's replicas, as the run's identity.
func (r *Reconciler) scale(ctx context.Context, run *taskRun, obj client.Object, replicas int32) error {
	a, err := r.actor(ctx, run)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("scaling %s/%s to %d", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), replicas)
	patch := []byte(`{"spec":{"replicas":` + strconv.Itoa(int(replicas)) + `}}`)
	if err := a.Writer.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(actionFieldOwner)); err != nil {
		if apierrors.IsForbidden(err) {
			return forbidden(a, what, err)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// stopComponents scales the components' workloads to zero and waits until
// their pods have ended (podsLeft). Before scaling it records each workload's replicas
// in the step (persisted before the first scale), so startComponents, and
// a re-run after a restart, know what to go back to.
func (r *Reconciler) stopComponents(ctx context.Context, run *taskRun, st *v1alpha1.TaskStep, step drivers.Step) (actionOutcome, error) {
	ns := run.task.Spec.Namespace
	var targets []workloadRef
	for _, comp := range step.Components {
		ws, err := r.componentWorkloads(ctx, run, comp)
		if err != nil {
			return actionOutcome{}, err
		}
		targets = append(targets, ws...)
	}
	// First pass: record what is not recorded yet.
	record := map[string]string{}
	var absent []string
	for _, w := range targets {
		if !drivers.CanScale(w.Kind) {
			return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("%s cannot be stopped: only %s scale", w, strings.Join(drivers.ScalableKinds(), " and ")))
		}
		if _, ok := st.Recorded[w.String()]; ok {
			continue
		}
		_, spec, _, found, err := r.scalable(ctx, ns, w)
		if err != nil {
			return actionOutcome{}, err
		}
		if !found {
			absent = append(absent, w.String())
			continue
		}
		record[w.String()] = strconv.Itoa(int(spec))
	}
	if len(record) > 0 {
		return actionOutcome{record: record}, nil
	}
	// Second pass: scale to zero and wait for the pods to go.
	var lines, waiting []string
	for _, w := range targets {
		was, ok := st.Recorded[w.String()]
		if !ok {
			continue
		}
		obj, spec, current, found, err := r.scalable(ctx, ns, w)
		if err != nil {
			return actionOutcome{}, err
		}
		if !found {
			lines = append(lines, fmt.Sprintf("%s is gone", w))
			continue
		}
		if spec != 0 {
			if err := r.scale(ctx, run, obj, 0); err != nil {
				return actionOutcome{}, err
			}
			waiting = append(waiting, fmt.Sprintf("%s scaled to 0, %d replica(s) left", w, current))
			continue
		}
		if current != 0 {
			waiting = append(waiting, fmt.Sprintf("%s: %d replica(s) left", w, current))
			continue
		}
		left, err := r.podsLeft(ctx, ns, w, obj)
		if err != nil {
			return actionOutcome{}, err
		}
		if left != "" {
			waiting = append(waiting, fmt.Sprintf("%s: %s", w, left))
			continue
		}
		lines = append(lines, fmt.Sprintf("stopped %s (was %s replicas)", w, was))
	}
	if len(waiting) > 0 {
		// What the step's timeout names: a pod that never ends (its node
		// gone, a finalizer) is for a person to see to.
		run.waiting = "waiting for the pods to end: " + strings.Join(waiting, "; ")
		return actionOutcome{after: r.opts.PollInterval}, nil
	}
	for _, a := range absent {
		lines = append(lines, a+" does not exist yet: nothing to stop")
	}
	if len(lines) == 0 {
		lines = append(lines, "no workload to stop")
	}
	return actionOutcome{done: true, output: strings.Join(lines, "\n")}, nil
}

// maxPodsNamed is how many pods a wait for pods to end names; the others
// are counted.
const maxPodsNamed = 3

// podsLeft says which pods of workload obj (w) have not ended ("" when
// none): those it owns (ownsPods) among those its selector matches, read
// from the API server, whose phase is not Succeeded or Failed. A
// Deployment's replicas count no pod being deleted, so a Deployment scaled
// to zero reads 0 replicas while its pods still run their graceful
// shutdown (up to their terminationGracePeriodSeconds): the step went on,
// and the migration after it ran beside workers still writing. A pod past
// its grace period is waited for too (it may still run, on a node that
// does not answer); the message says what a person does about it.
func (r *Reconciler) podsLeft(ctx context.Context, ns string, w workloadRef, obj client.Object) (string, error) {
	var sel *metav1.LabelSelector
	switch o := obj.(type) {
	case *appsv1.Deployment:
		sel = o.Spec.Selector
	case *appsv1.StatefulSet:
		sel = o.Spec.Selector
	}
	if sel == nil {
		return "", nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return "", outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("%s: selector: %w", w, err))
	}
	var pods corev1.PodList
	if err := r.opts.APIReader.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: s}); err != nil {
		return "", fmt.Errorf("listing the pods of %s: %w", w, err)
	}
	owns, err := r.ownsPods(ctx, ns, w, obj, s)
	if err != nil {
		return "", err
	}
	var named []string
	n, stuck := 0, false
	now := time.Now()
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || !owns(p) {
			continue
		}
		if n++; n > maxPodsNamed {
			continue
		}
		line, past := podLeft(p, now)
		named = append(named, line)
		stuck = stuck || past && p.Spec.NodeName != ""
	}
	if n == 0 {
		return "", nil
	}
	if n > maxPodsNamed {
		named = append(named, fmt.Sprintf("%d more", n-maxPodsNamed))
	}
	left := fmt.Sprintf("%d pod(s) not ended: %s", n, strings.Join(named, ", "))
	if stuck {
		left += "; a pod past its grace period may be on a node that is down, its kubelet not answering: confirm the node is down, then kubectl delete pod --force --grace-period=0, or taint the node node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
	}
	return left, nil
}

// ownsPods tells the pods workload obj (w), of selector s, owns: a
// StatefulSet's are those it controls; a Deployment's those its
// ReplicaSets control, and those of a ReplicaSet no longer there (gone
// while its pods stop). A selector may match other workloads' pods: a
// chart's scaffold selector (name and instance) is often shared by a web
// and a worker Deployment whose pods add a component label, and a
// CronJob's pods may carry it too; stopping web waited for pods nothing
// stopped, and failed at its timeout, and at every retry.
func (r *Reconciler) ownsPods(ctx context.Context, ns string, w workloadRef, obj client.Object, s labels.Selector) (func(*corev1.Pod) bool, error) {
	controlled := func(o metav1.Object, uid types.UID) bool {
		ref := metav1.GetControllerOf(o)
		return ref != nil && ref.UID == uid
	}
	if _, ok := obj.(*appsv1.StatefulSet); ok {
		return func(p *corev1.Pod) bool { return controlled(p, obj.GetUID()) }, nil
	}
	// A ReplicaSet's labels are its pods' (with their template hash):
	// the selector lists those of every pod it matches.
	var sets appsv1.ReplicaSetList
	if err := r.opts.APIReader.List(ctx, &sets, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: s}); err != nil {
		return nil, fmt.Errorf("listing the replica sets of %s: %w", w, err)
	}
	ours := map[types.UID]bool{}
	for i := range sets.Items {
		ours[sets.Items[i].UID] = controlled(&sets.Items[i], obj.GetUID())
	}
	return func(p *corev1.Pod) bool {
		ref := metav1.GetControllerOf(p)
		if ref == nil || ref.Kind != "ReplicaSet" {
			return false
		}
		mine, there := ours[ref.UID]
		return mine || !there
	}, nil
}

// podLeft names a pod that has not ended, at now: terminating until when
// (its deletion timestamp: when its grace period ends), or past its grace
// period, then true; on which node.
func podLeft(p *corev1.Pod, now time.Time) (string, bool) {
	what := fmt.Sprintf("pod %s %s", p.Name, cmp.Or(string(p.Status.Phase), "Pending"))
	past := false
	if d := p.DeletionTimestamp; d != nil {
		at := d.UTC().Format(time.RFC3339)
		what = fmt.Sprintf("pod %s terminating, its grace period ending %s", p.Name, at)
		if past = now.After(d.Time); past {
			what = fmt.Sprintf("pod %s terminating, past its grace period since %s", p.Name, at)
		}
	}
	if p.Spec.NodeName != "" {
		what += " on node " + p.Spec.NodeName
	}
	return what, past
}

// startComponents scales the components' workloads back to the replicas
// the task's stopComponents step recorded; a workload with no record (or a
// record of zero) gets the replicas of the target instance's chart, and so
// does one a change starts whose chart sets them (no autoscaler of the
// chart scaling it): the change's apply kept it at zero. It is
// done once the cache shows every workload it scaled at the generation the
// scale was answered with: a waitReady after it reads the cache, and a
// copy from before the scale, at zero replicas and fully rolled out, would
// read as ready (0/0). The generation, not the replicas, because an
// autoscaler may change them at once. After a restart the cache is read
// afresh, and a workload at its replicas is done.
func (r *Reconciler) startComponents(ctx context.Context, run *taskRun, stepName string, step drivers.Step) (actionOutcome, error) {
	ns := run.task.Spec.Namespace
	recorded := map[string]string{}
	for _, s := range run.task.Status.Steps {
		for k, v := range s.Recorded {
			recorded[k] = v
		}
	}
	// A backup, or a backup's deletion, leaves the deployment as it found
	// it: a workload its stop found at zero (held stopped by a failed
	// upgrade or restore, on half-migrated data; or scaled down by hand)
	// stays at zero. A change takes zero as "the chart's replicas".
	asFound := instance.LeavesData(run.task)
	var lines []string
	scaling := false
	for _, comp := range step.Components {
		ws, err := r.componentWorkloads(ctx, run, comp)
		if err != nil {
			return actionOutcome{}, err
		}
		for _, w := range ws {
			if !drivers.CanScale(w.Kind) {
				continue
			}
			obj, spec, _, found, err := r.scalable(ctx, ns, w)
			if err != nil {
				return actionOutcome{}, err
			}
			if !found {
				lines = append(lines, fmt.Sprintf("%s does not exist: nothing to start", w))
				continue
			}
			scaledKey := stepName + " " + w.String()
			gen, scaled := r.scaledAt(run.task.UID, scaledKey)
			want, source := int32(0), "recorded"
			if !scaled || obj.GetGeneration() >= gen {
				// Only what the decision needs: a scale not yet seen
				// waits without rendering the chart.
				if v, ok := recorded[w.String()]; ok {
					n, _ := strconv.Atoi(v)
					want = int32(n)
				}
				chart, err := r.chartReplicas(ctx, run, w)
				if err != nil {
					return actionOutcome{}, err
				}
				switch {
				case want == 0 && asFound:
					source = "as the backup found it"
				case want == 0:
					want, source = chart.orOne(), "from the chart"
				case run.task.Spec.Operation == nil && chart.set && !chart.autoscaled:
					// A change's apply kept the stopped workers at zero
					// (release.Request.Stopped): they start at the new
					// chart's count, which the apply would have set.
					// The recorded one is the old chart's: scaled back
					// to it, the drift check put the new one back after
					// the task.
					want, source = chart.replicas, "from the chart"
				}
			}
			switch startNext(obj.GetGeneration(), gen, scaled, spec, want) {
			case startWait:
				scaling = true
			case startScale:
				if err := r.scale(ctx, run, obj, want); err != nil {
					return actionOutcome{}, err
				}
				// The patch's answer holds the new generation.
				r.noteScaled(run.task.UID, scaledKey, obj.GetGeneration())
				scaling = true
			case startDone:
				lines = append(lines, fmt.Sprintf("started %s at %d replicas (%s)", w, want, source))
			}
		}
	}
	if scaling {
		return actionOutcome{after: r.opts.PollInterval}, nil
	}
	if len(lines) == 0 {
		lines = append(lines, "no workload to start")
	}
	return actionOutcome{done: true, output: strings.Join(lines, "\n")}, nil
}

// startMove is what a startComponents step does next with one workload.
type startMove int

const (
	// startWait: the cache has not seen the step's scale yet.
	startWait startMove = iota
	// startScale: scale the workload to the replicas it goes back to.
	startScale
	// startDone: the workload is started.
	startDone
)

// startNext decides a startComponents step's next move with a workload the
// cache shows at generation cached with spec replicas; scaled tells
// whether the step scaled it, answered with generation scaledGen, and want
// is the replicas it goes back to. A copy older than the scale's answer,
// at zero replicas and fully rolled out, would read as ready: it is waited
// out, not taken as started. Once the scale is seen the workload is
// started, whatever its replicas are then (an autoscaler's change is not
// fought).
func startNext(cached, scaledGen int64, scaled bool, spec, want int32) startMove {
	switch {
	case scaled && cached < scaledGen:
		return startWait
	case !scaled && spec != want:
		return startScale
	default:
		return startDone
	}
}

// scaledAt is the generation a startComponents step's scale of a
// workload ("step Kind/name") in task uid was answered with, if it scaled
// it.
func (r *Reconciler) scaledAt(uid types.UID, key string) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gen, ok := r.scaled[uid][key]
	return gen, ok
}

// noteScaled records that a startComponents step scaled a workload ("step
// Kind/name") in task uid, answered with generation gen.
func (r *Reconciler) noteScaled(uid types.UID, key string, gen int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.scaled[uid] == nil {
		r.scaled[uid] = map[string]int64{}
	}
	r.scaled[uid][key] = gen
}

// chartScale is what the target instance's chart says of a workload's
// replicas.
type chartScale struct {
	// replicas is its spec.replicas, when set.
	replicas int32
	set      bool
	// autoscaled: a HorizontalPodAutoscaler of the chart scales it; its
	// live replicas are the autoscaler's.
	autoscaled bool
}

// orOne is the chart's replicas, or 1 when it sets none (or zero).
func (c chartScale) orOne() int32 {
	if c.set && c.replicas > 0 {
		return c.replicas
	}
	return 1
}

// chartReplicas reads a workload's replicas in the target instance's
// chart, and whether an autoscaler of the chart scales it.
func (r *Reconciler) chartReplicas(ctx context.Context, run *taskRun, w workloadRef) (chartScale, error) {
	m, err := r.rendered(ctx, run)
	if err != nil {
		return chartScale{}, err
	}
	var out chartScale
	for _, o := range m.Objects {
		var obj struct {
			Spec struct {
				Replicas       *int32 `json:"replicas"`
				ScaleTargetRef struct {
					Kind string `json:"kind"`
					Name string `json:"name"`
				} `json:"scaleTargetRef"`
			} `json:"spec"`
		}
		hpa := o.Kind == "HorizontalPodAutoscaler"
		if !hpa && (o.Kind != w.Kind || o.Name != w.Name) {
			continue
		}
		if err := yaml.Unmarshal(o.YAML, &obj); err != nil {
			return chartScale{}, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("rendered %s %s: %w", o.Kind, o.Name, err))
		}
		switch {
		case hpa:
			out.autoscaled = out.autoscaled || obj.Spec.ScaleTargetRef.Kind == w.Kind && obj.Spec.ScaleTargetRef.Name == w.Name
		case obj.Spec.Replicas != nil:
			out.replicas, out.set = *obj.Spec.Replicas, true
		}
	}
	return out, nil
}

// JobName is the name of the Job a runJob step creates: the deployment,
// the job's declared name and the sequence, so a re-run of the step after a
// restart finds the Job it created, and each sequence runs its own. Names
// longer than a label value allows are shortened with a hash.
func JobName(deployment, job string, sequence int64) string {
	name := fmt.Sprintf("%s-%s-%d", deployment, job, sequence)
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(name[:63-len(suffix)], "-") + suffix
}

// runJobName is the Job a runJob step of t makes: an operation's (a backup
// or restore task, or such a step inside a change) is named apart, so that
// it never meets a change's Job of the same sequence.
func runJobName(t *v1alpha1.StyrminTask, job string, args map[string]string) string {
	if IsOperation(t) || args[argOperation] != "" {
		return operationJobName(t, job)
	}
	return JobName(t.Spec.Deployment.Name, job, t.Spec.ToSequence)
}

// retriedJobName is the Job of a runJob step st of t that failed, deleted
// before the step runs again: the one runJob made.
func retriedJobName(t *v1alpha1.StyrminTask, st *v1alpha1.TaskStep) string {
	return runJobName(t, st.Args[argJob], st.Args)
}

// recordJob is the key under which a runJob step records the UID of the
// Job it made (st.Recorded), so that a Job gone before its end was seen is
// not taken for one to make.
const recordJob = "job"

// runJob runs a one-off Job from the pod template of a component's
// workload in the target instance's chart (so a migration runs the new
// version's image), with the step's command, and waits until it completes.
// A failed Job fails the step; it is never retried behind the user's back.
// Nor is one deleted before the step saw its end (by hand, or by a TTL a
// cluster policy sets while the agent restarted): its end is read from the
// Job controller's events, else the step fails saying so.
func (r *Reconciler) runJob(ctx context.Context, run *taskRun, st *v1alpha1.TaskStep, step drivers.Step) (actionOutcome, error) {
	t := run.task
	name := runJobName(t, step.Job, step.Args)
	var job batchv1.Job
	err := r.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: t.Spec.Namespace, Name: name}, &job)
	if apierrors.IsNotFound(err) {
		if uid := r.madeJob(run, st); uid != "" {
			return r.goneJob(ctx, t.Spec.Namespace, name, uid)
		}
		if !r.startedFresh(run, st) {
			// Resumed: the Job may have been made, run and deleted
			// before its UID was written (see unrecordedJob).
			if out, ended, uerr := r.unrecordedJob(ctx, t.Spec.Namespace, name, jobSince(st)); uerr != nil || ended {
				return out, uerr
			}
			// None was: from here this process knows the attempt's Jobs
			// as the one that started it does (no List at every poll).
			r.rememberJob(run, st, "")
		}
		if other, oerr := r.otherJobRuns(ctx, t, name); oerr != nil || other != "" {
			run.waiting = other
			if oerr == nil && time.Since(jobSince(st)) > jobSinceRenewed {
				// Waiting makes no Job: the attempt's Jobs can only be
				// made from now, so an agent resuming it after an hour
				// behind another Job does not take the events' absence
				// for a Job it cannot account for.
				return actionOutcome{record: map[string]string{recordJobSince: time.Now().UTC().Format(time.RFC3339)}}, nil
			}
			return actionOutcome{after: r.opts.PollInterval}, oerr
		}
		j, berr := r.buildJob(ctx, run, step, name, r.jobDeadline(st, step, time.Now()))
		if berr != nil {
			return actionOutcome{}, berr
		}
		a, aerr := r.actor(ctx, run)
		if aerr != nil {
			return actionOutcome{}, aerr
		}
		if cerr := a.Writer.Create(ctx, j); cerr != nil && !apierrors.IsAlreadyExists(cerr) {
			if apierrors.IsForbidden(cerr) {
				return actionOutcome{}, forbidden(a, "creating job "+j.Namespace+"/"+j.Name, cerr)
			}
			return actionOutcome{}, fmt.Errorf("creating job %s/%s: %w", j.Namespace, j.Name, cerr)
		} else if cerr == nil && j.UID != "" {
			// Recorded from the create's answer, written at once: the
			// Job may end and be deleted (a TTL) before the step looks
			// again, and an agent restarting meanwhile made it again.
			r.rememberJob(run, st, j.UID)
			return actionOutcome{record: map[string]string{recordJob: string(j.UID)}}, nil
		}
		return actionOutcome{after: r.opts.PollInterval}, nil
	}
	if err != nil {
		return actionOutcome{}, fmt.Errorf("reading job %s/%s: %w", t.Spec.Namespace, name, err)
	}
	if !ownJob(t, &job) {
		return r.clearOthersJob(ctx, run, &job)
	}
	if st.Recorded[recordJob] != string(job.UID) && job.DeletionTimestamp.IsZero() {
		// Recorded before it is waited for: the Job this attempt runs.
		return actionOutcome{record: map[string]string{recordJob: string(job.UID)}}, nil
	}
	if !job.DeletionTimestamp.IsZero() {
		// A failed run's Job being removed before the step runs again.
		run.waiting = fmt.Sprintf("job %s/%s of an earlier run is being deleted before the step runs again", job.Namespace, name)
		return actionOutcome{after: r.opts.PollInterval}, nil
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			out := fmt.Sprintf("job %s completed (%d pod(s) succeeded)", name, job.Status.Succeeded)
			if earlierTasksJob(t, &job) {
				out += fmt.Sprintf(", an earlier run's, made by a task %s deleted since: not run again", t.Name)
			}
			if logs := r.jobLogs(ctx, run, &job, step.Command, maxActionOutput-len(out)-1); logs != "" {
				out += "\n" + logs
			}
			return actionOutcome{done: true, output: out}, nil
		case batchv1.JobFailed:
			// The logs go to the step's output only: the error becomes
			// the task's message, and a message may reach an event.
			msg := fmt.Sprintf("job %s/%s failed: %s: %s", job.Namespace, name, c.Reason, c.Message)
			if why := r.jobFailure(ctx, &job, r.lastWaited(t.UID)); why != "" {
				msg += "; " + why
			}
			if earlierTasksJob(t, &job) {
				msg += fmt.Sprintf("; the job is an earlier run's, made by a task %s deleted since (this one was made again in its place): it is not run again behind your back; see what it did, then run the change again (styrminctl retry)", t.Name)
			}
			return actionOutcome{output: r.jobLogs(ctx, run, &job, step.Command, maxActionOutput)}, outcome.Stalled(v1alpha1.ReasonStepFailed, errors.New(msg))
		}
	}
	run.waiting = r.jobWaiting(ctx, &job)
	return actionOutcome{after: r.opts.PollInterval}, nil
}

// annotationTaskUID on a step's Job is the UID of the task that made it:
// its name is shared by a task made again in its place.
const annotationTaskUID = v1alpha1.Group + "/task-uid"

// earlierTasksJob reports whether job, a Job of t's deployment at t's
// step's name, was made by an earlier task of t's name, deleted since (by
// hand, or its lock withdrawn) and made again as t: its end is that run's,
// which the step takes up rather than run the migration twice. A Job
// made before the annotation was written is judged by its age.
func earlierTasksJob(t *v1alpha1.StyrminTask, job *batchv1.Job) bool {
	if uid := job.Annotations[annotationTaskUID]; uid != "" {
		return uid != string(t.UID)
	}
	return job.CreationTimestamp.Before(&t.CreationTimestamp)
}

// ownJob reports whether job, found at the name a runJob step of t gives
// its Job, was made by a step of t's deployment. A Job name holds the
// deployment's name, not its environment: a deployment deleted from the
// namespace before t's came (an environment renamed, its namespacePrefix
// kept) may have left one at that name, whose end says nothing of t's.
func ownJob(t *v1alpha1.StyrminTask, job *batchv1.Job) bool {
	for k, v := range t.Spec.Deployment.Labels() {
		if job.Labels[k] != v {
			return false
		}
	}
	return job.Labels[LabelTask] != ""
}

// clearOthersJob deals with job, at the name of a runJob step of run's
// task but not its deployment's (ownJob). It was taken as the step's own:
// the new deployment's migration was skipped as "completed", or failed
// with the old deployment's failure. A step's Job of the deployment that
// was there before is deleted once it ended, its pods with it, and the
// step makes its own after; one that runs is waited for, as any other
// Job of the namespace's migrations. The deletion is in the foreground:
// the Job stays, being deleted, until its pods are gone (an ended Job's
// pods may still run their shutdown: one stopped at its deadline), as
// they carry the other deployment's labels and the wait for the
// deployment's own pods (otherJobRuns) does not see them. A Job no step
// made (a chart's, a person's) is the user's: the step fails, naming it.
func (r *Reconciler) clearOthersJob(ctx context.Context, run *taskRun, job *batchv1.Job) (actionOutcome, error) {
	t := run.task
	if job.Labels[LabelTask] == "" {
		return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf(
			"job %s/%s, the name of this step's job, is not one a step of deployment %s made: rename or delete it, then run the change again (styrminctl retry)",
			job.Namespace, job.Name, t.Spec.Deployment))
	}
	was := fmt.Sprintf("job %s/%s of task %s of deployment %s/%s/%s, which was in the namespace before",
		job.Namespace, job.Name, job.Labels[LabelTask], job.Labels[v1alpha1.LabelCluster], job.Labels[v1alpha1.LabelEnvironment], job.Labels[v1alpha1.LabelDeployment])
	switch {
	case !job.DeletionTimestamp.IsZero():
		run.waiting = was + ", is being deleted before this step makes its own"
		return actionOutcome{after: r.opts.PollInterval}, nil
	case !health.JobEnded(job):
		run.waiting = was + ", has not ended: this step makes its own once it has, so that two jobs never run at once"
		return actionOutcome{after: r.opts.PollInterval}, nil
	}
	a, err := r.actor(ctx, run)
	if err != nil {
		return actionOutcome{}, err
	}
	uid := job.UID
	err = a.Writer.Delete(ctx, job, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationForeground))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		if apierrors.IsForbidden(err) {
			return actionOutcome{}, forbidden(a, "deleting "+was, err)
		}
		return actionOutcome{}, fmt.Errorf("deleting %s: %w", was, err)
	}
	run.log.Info("deleted the ended job a deployment that was in the namespace before left at this step's job name", "job", job.Name, "task", job.Labels[LabelTask])
	run.waiting = was + ", was deleted: this step makes its own"
	return actionOutcome{after: r.opts.PollInterval}, nil
}

// goneJob ends a runJob step whose Job (uid) is gone before the step saw
// it end: from the Job controller's events about it, its end (they are
// kept an hour); without one, the step fails: it may have done part of
// its work, or all of it, and running it again is for a person to decide.
func (r *Reconciler) goneJob(ctx context.Context, ns, name string, uid types.UID) (actionOutcome, error) {
	var events corev1.EventList
	if err := r.opts.APIReader.List(ctx, &events, client.InNamespace(ns), client.MatchingFields{"involvedObject.uid": string(uid)}); err != nil {
		return actionOutcome{}, fmt.Errorf("reading the events of job %s/%s, gone before its end was seen: %w", ns, name, err)
	}
	return goneJobEnd(ns, name, lastJobEnd(events.Items))
}

// lastJobEnd is the last of events that tells a Job's end (nil: none).
func lastJobEnd(events []corev1.Event) *corev1.Event {
	var last *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Reason != "Completed" && !health.JobFailedReason(e.Reason) {
			continue
		}
		if last == nil || warnedAt(e).After(warnedAt(last)) {
			last = e
		}
	}
	return last
}

// goneJobEnd ends the step whose Job ns/name was deleted before the step
// saw its end, with last, the Job controller's event of its end (nil:
// none).
func goneJobEnd(ns, name string, last *corev1.Event) (actionOutcome, error) {
	switch {
	case last == nil:
		return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf(
			"job %s/%s was deleted before the step saw it end (by hand, or by a TTL the cluster sets on Jobs), and no event of the Job controller tells its end: it is not run again behind your back; see what it did, then run the change again (styrminctl retry)", ns, name))
	case last.Reason == "Completed":
		return actionOutcome{done: true, output: fmt.Sprintf("job %s completed (read from its events: it was deleted since, with its pods and their logs)", name)}, nil
	}
	return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("job %s/%s failed: %s: %s (read from its events: it was deleted since, with its pods and their logs)", ns, name, last.Reason, last.Message))
}

// recordJobSince is the key under which a runJob step records when its
// attempt started (written with the start, not with a resume, whose
// start is the step's clock's): the Job controller's events of a Job of
// the step's name from after it are this attempt's Job's.
const recordJobSince = "jobSince"

// markJobSince records in st, a step starting afresh, when its
// attempt started, if it runs a Job (see unrecordedJob).
func markJobSince(st *v1alpha1.TaskStep, now time.Time) {
	if st.Action != string(drivers.ActionRunJob) {
		return
	}
	if st.Recorded == nil {
		st.Recorded = map[string]string{}
	}
	st.Recorded[recordJobSince] = now.UTC().Format(time.RFC3339)
}

// jobSince is when st's attempt started: recorded with its start, else
// (a step started by an agent before the record was) its last start.
func jobSince(st *v1alpha1.TaskStep) time.Time {
	if at, err := time.Parse(time.RFC3339, st.Recorded[recordJobSince]); err == nil {
		return at
	}
	if st.StartedAt != nil {
		return st.StartedAt.Time
	}
	return time.Time{}
}

// freshJob is a runJob step's attempt this process started afresh, and
// the UID of the Job it made for it ("" until made).
type freshJob struct {
	attempt triedStart
	uid     types.UID
}

// stepAttempt is st's attempt in run's task: its index and attempts.
func stepAttempt(run *taskRun, st *v1alpha1.TaskStep) triedStart {
	return triedStart{run.task.Status.CurrentStep, st.Attempts}
}

// startedFresh reports whether this process started st's attempt afresh
// (startStep): no Job of it was made before a restart.
func (r *Reconciler) startedFresh(run *taskRun, st *v1alpha1.TaskStep) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.freshJobs[run.task.UID]
	return ok && f.attempt == stepAttempt(run, st)
}

// madeJob is the UID of the Job this process made for st's attempt, its
// record's write not seen yet ("" when none): one not found is gone.
func (r *Reconciler) madeJob(run *taskRun, st *v1alpha1.TaskStep) types.UID {
	if uid := st.Recorded[recordJob]; uid != "" {
		return types.UID(uid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.freshJobs[run.task.UID]; ok && f.attempt == stepAttempt(run, st) {
		return f.uid
	}
	return ""
}

// rememberJob keeps uid as the Job made for st's attempt until its
// record is written (madeJob); "" says none was made before this process
// looked (startedFresh), as for an attempt it started.
func (r *Reconciler) rememberJob(run *taskRun, st *v1alpha1.TaskStep, uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.freshJobs[run.task.UID]; ok && f.attempt == stepAttempt(run, st) {
		f.uid = uid
		r.freshJobs[run.task.UID] = f
		return
	}
	r.freshJobs[run.task.UID] = freshJob{attempt: stepAttempt(run, st), uid: uid}
}

// eventTTL is how long the API server keeps events by default
// (--event-ttl): past it, their absence says nothing.
const eventTTL = time.Hour

// jobSinceRenewed is how old a runJob step's recorded attempt start may
// grow while the step waits behind another Job and makes none: well
// within eventTTL, at one status write each.
const jobSinceRenewed = 20 * time.Minute

// unrecordedJob decides, for a runJob step this process resumed whose Job
// ns/name is not found and whose UID was never recorded, whether a Job of
// the attempt (since it started) was made and deleted: the agent that
// made it died before the record was written (OOM-killed, its lease lost),
// the Job ran to its end, and a TTL a cluster policy sets on Jobs, or a
// person, deleted it; made again, the migration ran twice. The Job
// controller's events of a Job of that name from after the attempt
// started tell: its end ends the step as goneJob does (ended); an event
// but no end (made, deleted before it ended) fails the step; none, the
// Job was not made (or made and deleted before it had a pod: nothing ran)
// and the step makes it. Events live an hour by default: with none, an
// attempt older than that cannot tell, and fails rather than run twice.
// One List, on a resume only.
func (r *Reconciler) unrecordedJob(ctx context.Context, ns, name string, since time.Time) (actionOutcome, bool, error) {
	var events corev1.EventList
	if err := r.opts.APIReader.List(ctx, &events, client.InNamespace(ns),
		client.MatchingFields{"involvedObject.kind": "Job", "involvedObject.name": name}); err != nil {
		return actionOutcome{}, false, fmt.Errorf("reading the events of job %s/%s, not found on resuming its step: %w", ns, name, err)
	}
	// Seconds, as an event's time is written; one in the attempt's first
	// second is its Job's (its first pod made at once): an earlier
	// attempt's end that close is taken for this one's, which fails
	// the step rather than run it twice.
	since = since.Truncate(time.Second)
	ofAttempt := events.Items[:0]
	for _, e := range events.Items {
		if !warnedAt(&e).Before(since) {
			ofAttempt = append(ofAttempt, e)
		}
	}
	if len(ofAttempt) > 0 {
		out, err := goneJobEnd(ns, name, lastJobEnd(ofAttempt))
		return out, true, err
	}
	if !since.IsZero() && time.Since(since) > eventTTL {
		return actionOutcome{}, true, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf(
			"job %s/%s is not found on resuming this step, started %s ago, longer than the API server keeps the events that would tell whether the agent made it before it restarted and how it ended: it is not run again behind your back; see whether it ran, then run the change again (styrminctl retry)",
			ns, name, time.Since(since).Round(time.Minute)))
	}
	return actionOutcome{}, false, nil
}

// jobWaiting says what a Job that has not finished waits for, for the
// message of a step that times out: its pods that do not run, each with
// the reason Kubernetes gives (a container waiting: ImagePullBackOff,
// CreateContainerConfigError for a missing Secret or ConfigMap; the pod
// not scheduled: Unschedulable; else the pod's last warning, a volume that
// cannot be mounted), or, with no pod, the Job's last warning (a quota, an
// admission policy refusing its pods). A pod that cannot start never fails
// its Job, only the Job's deadline does: without this the step failed at
// its timeout saying only that it timed out, while the deployment looked
// fine. Best effort: what cannot be read is left out. A Job with a ready
// pod runs, and its pods are not read.
func (r *Reconciler) jobWaiting(ctx context.Context, job *batchv1.Job) string {
	what := fmt.Sprintf("job %s/%s", job.Namespace, job.Name)
	if job.Status.Ready != nil && *job.Status.Ready > 0 {
		return fmt.Sprintf("%s running (%d pod(s) ready)", what, *job.Status.Ready)
	}
	pods, err := r.jobPods(ctx, job)
	if err != nil {
		return what + " has no pod ready"
	}
	var lines []string
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || podReady(p) {
			continue
		}
		lines = append(lines, r.podLine(ctx, p))
	}
	if len(lines) > 0 {
		return what + " has no pod running: " + strings.Join(lines, "; ")
	}
	if wr, wm := r.lastWarning(ctx, job.Namespace, job.UID); wr != "" {
		return fmt.Sprintf("%s has no pod: %s: %s", what, wr, wm)
	}
	return what + " has no pod running yet"
}

// jobFailure says how a Job that failed ended, for the step's message:
// its last pod (how its containers ended: Error with the exit code,
// OOMKilled, DeadlineExceeded; or why it never ran), else, for a Job
// whose pods are gone (stopped at its deadline), what the step waited for
// when it last looked (waited). The Job's own condition says only that it
// reached its backoff limit or its deadline, and the logs, in the step's
// output, may say nothing of a container killed for its memory.
func (r *Reconciler) jobFailure(ctx context.Context, job *batchv1.Job, waited string) string {
	pods, err := r.jobPods(ctx, job)
	if err == nil && len(pods) > 0 {
		last := slices.MaxFunc(pods, func(a, b corev1.Pod) int {
			return cmp.Or(podEnd(&a).Compare(podEnd(&b)), strings.Compare(a.Name, b.Name))
		})
		return fmt.Sprintf("its last pod: %s (%d pod(s) failed)", r.podLine(ctx, &last), job.Status.Failed)
	}
	if waited != "" {
		return "before: " + waited
	}
	return ""
}

// jobPods lists the pods a Job controls (one of a Job of the same name
// deleted before is not its).
func (r *Reconciler) jobPods(ctx context.Context, job *batchv1.Job) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.opts.APIReader.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{"job-name": job.Name}); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !metav1.IsControlledBy(&p, job) }), nil
}

// podEnd is when a pod last changed as far as its status tells: its
// containers' last end, else its start, else its creation.
func podEnd(p *corev1.Pod) time.Time {
	var end time.Time
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(end) {
			end = t.FinishedAt.Time
		}
	}
	switch {
	case !end.IsZero():
		return end
	case p.Status.StartTime != nil:
		return p.Status.StartTime.Time
	}
	return p.CreationTimestamp.Time
}

// podLine describes a Job's pod: its phase and Kubernetes' reason (its
// first container not ready's waiting or terminated state; not scheduled:
// the PodScheduled condition; else its last warning, a volume that cannot
// be mounted).
func (r *Reconciler) podLine(ctx context.Context, p *corev1.Pod) string {
	// The termination message PodSummary may show is masked with the rest
	// of the step's message (redact), as it is written.
	ps := health.PodSummary(p, nil)
	reason, msg := ps.Reason, ps.Message
	if reason == "" || reason == "ContainerCreating" || reason == "PodInitializing" {
		if c := podCondition(p, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse {
			reason, msg = c.Reason, c.Message
		} else if wr, wm := r.lastWarning(ctx, p.Namespace, p.UID); wr != "" {
			reason, msg = wr, wm
		}
	}
	line := fmt.Sprintf("pod %s %s", p.Name, cmp.Or(ps.Phase, "Pending"))
	if reason != "" {
		line += ": " + reason
	}
	if msg != "" {
		line += ": " + msg
	}
	return line
}

// podCondition is p's condition of type typ, nil when it has none.
func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// lastWarning is the reason and message of the last Warning event about
// the object of uid in ns ("" when there is none or they cannot be read).
func (r *Reconciler) lastWarning(ctx context.Context, ns string, uid types.UID) (reason, msg string) {
	var events corev1.EventList
	if err := r.opts.APIReader.List(ctx, &events, client.InNamespace(ns),
		client.MatchingFields{"involvedObject.uid": string(uid), "type": corev1.EventTypeWarning}); err != nil {
		return "", ""
	}
	var last *corev1.Event
	for i := range events.Items {
		if e := &events.Items[i]; last == nil || warnedAt(e).After(warnedAt(last)) {
			last = e
		}
	}
	if last == nil {
		return "", ""
	}
	return last.Reason, last.Message
}

// warnedAt is when an event last happened.
func warnedAt(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// otherJobRuns says which Job the agent made for a step in t's namespace,
// other than the one named name, has not ended, or which pod of one still
// runs ("" when none): the step does not start its Job until then, so that
// two migrations never run at once against the namespace's data. Tasks of
// a deployment run one at a time, but a Job outlives its task's end: a
// task deleted by hand while its Job ran (the Job is not the task's), a
// step that timed out and whose Job could not be deleted (its deadline
// stops it), a deleted Job whose pods are still stopping. Every step Job
// of the namespace counts, not only the deployment's: two deployments
// never share a namespace, so another's is one deleted from it before (an
// environment renamed, its namespacePrefix kept) whose data this one
// takes over, and its migration under another job name or sequence ran
// beside this one's.
func (r *Reconciler) otherJobRuns(ctx context.Context, t *v1alpha1.StyrminTask, name string) (string, error) {
	steps := []client.ListOption{client.InNamespace(t.Spec.Namespace), client.HasLabels{LabelTask}}
	var jobs batchv1.JobList
	if err := r.opts.APIReader.List(ctx, &jobs, steps...); err != nil {
		return "", fmt.Errorf("listing the step jobs in %s: %w", t.Spec.Namespace, err)
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.Name == name || !j.DeletionTimestamp.IsZero() || health.JobEnded(j) {
			continue
		}
		return fmt.Sprintf("job %s/%s (task %s%s) has not ended: job %s starts after it, so that two of the namespace's jobs never run at once",
			j.Namespace, j.Name, j.Labels[LabelTask], otherDeployment(t, j.Labels), name), nil
	}
	var pods corev1.PodList
	if err := r.opts.APIReader.List(ctx, &pods, steps...); err != nil {
		return "", fmt.Errorf("listing the step jobs' pods in %s: %w", t.Spec.Namespace, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		return fmt.Sprintf("pod %s/%s of job %s (task %s%s) still runs: job %s starts after it, so that two of the namespace's jobs never run at once",
			p.Namespace, p.Name, p.Labels["job-name"], p.Labels[LabelTask], otherDeployment(t, p.Labels), name), nil
	}
	return "", nil
}

// otherDeployment names, for a message, the deployment whose identity
// labels are labels when it is not t's ("" when it is).
func otherDeployment(t *v1alpha1.StyrminTask, labels map[string]string) string {
	for k, v := range t.Spec.Deployment.Labels() {
		if labels[k] != v {
			return fmt.Sprintf(" of deployment %s/%s/%s, which was in the namespace before",
				labels[v1alpha1.LabelCluster], labels[v1alpha1.LabelEnvironment], labels[v1alpha1.LabelDeployment])
		}
	}
	return ""
}

// jobDeadline is the activeDeadlineSeconds of the Job a runJob step st
// makes at now: what is left of the step's timeout, so that the Job ends
// by the step's deadline whatever the agent does. The whole timeout, given
// to a Job made late in the step (after waiting for another Job of the
// namespace to end), let it run on past the step's end, if the agent was
// down or could not delete it then. At least a second: the Job's deadline
// must be positive, and the step's own timeout fails it meanwhile.
func (r *Reconciler) jobDeadline(st *v1alpha1.TaskStep, step drivers.Step, now time.Time) int64 {
	timeout := cmp.Or(step.Timeout, r.opts.StepTimeout, DefaultStepTimeout)
	left := timeout
	if st.StartedAt != nil {
		left = min(timeout, st.StartedAt.Add(stepTimeout(st, timeout)).Sub(now))
	}
	// Rounded up: a Job's deadline counts from its start, after the make.
	return max(int64((left+time.Second-1)/time.Second), 1)
}

// buildJob makes the Job of a runJob step, stopped by Kubernetes after
// deadline seconds (jobDeadline).
func (r *Reconciler) buildJob(ctx context.Context, run *taskRun, step drivers.Step, name string, deadline int64) (*batchv1.Job, error) {
	t := run.task
	tmpl, from, err := r.podTemplate(ctx, run, step)
	if err != nil {
		return nil, err
	}
	if len(tmpl.Spec.Containers) == 0 {
		return nil, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("component %s: %s has no container", step.Component, from))
	}
	ci := 0
	if want := step.Args["container"]; want != "" {
		ci = slices.IndexFunc(tmpl.Spec.Containers, func(c corev1.Container) bool { return c.Name == want })
		if ci < 0 {
			return nil, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("component %s: %s has no container %q", step.Component, from, want))
		}
	}
	// A one-off run serves no traffic and is no replica of the workload:
	// drop the probes and the workload's labels (which Services and the
	// workload's selector match).
	for i := range tmpl.Spec.Containers {
		tmpl.Spec.Containers[i].LivenessProbe = nil
		tmpl.Spec.Containers[i].ReadinessProbe = nil
		tmpl.Spec.Containers[i].StartupProbe = nil
	}
	jobSidecars(&tmpl.Spec, ci)
	c := &tmpl.Spec.Containers[0]
	c.Command = append([]string(nil), step.Command...)
	c.Args = nil
	if err := r.withOperation(ctx, run, step, &tmpl.Spec, c); err != nil {
		return nil, err
	}
	labels := t.Spec.Deployment.Labels()
	labels[LabelTask] = t.Name
	labels[LabelComponent] = step.Component
	labels[v1alpha1.LabelSequence] = strconv.FormatInt(t.Spec.ToSequence, 10)
	if IsOperation(t) {
		// An operation's Job goes with its task (pruneJobs), whatever
		// sequence it is ordered at.
		labels[v1alpha1.LabelOperation] = t.Spec.Operation.Name
	}
	tmpl.Labels = labels
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	backoff := int32(0)
	if v := step.Args["backoffLimit"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("args.backoffLimit: expected a non-negative integer, got %q", v))
		}
		backoff = int32(n)
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: t.Spec.Namespace,
			Labels:    labels,
			Annotations: map[string]string{
				v1alpha1.Group + "/template-from": from,
				annotationTaskUID:                 string(t.UID),
			},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: &backoff,
			Template:     *tmpl,
		},
	}
	// The step's timeout, declared or the controller's default, bounds the
	// Job too: a step that timed out leaves nothing running.
	job.Spec.ActiveDeadlineSeconds = &deadline
	return job, nil
}

// jobSidecars makes the container at index run the pod's only container
// and the workload's others its sidecars (init containers that restart
// always, after its own init containers): Kubernetes stops them once the
// command's container ended. As plain containers beside it, a sidecar
// that never exits (a database proxy, a log shipper) kept the Job from
// completing, and the step ran into its timeout however its command
// ended. The workload's own sidecars (native already) stay as they are.
func jobSidecars(spec *corev1.PodSpec, run int) {
	always := corev1.ContainerRestartPolicyAlways
	for i, c := range spec.Containers {
		if i == run {
			continue
		}
		c.RestartPolicy = &always
		spec.InitContainers = append(spec.InitContainers, c)
	}
	spec.Containers = []corev1.Container{spec.Containers[run]}
}

// podTemplate returns the pod template of the step's component's first
// workload in the target instance's chart (the running instance's for the
// backup an upgrade takes first: see backupSource), and which workload it
// came from.
func (r *Reconciler) podTemplate(ctx context.Context, run *taskRun, step drivers.Step) (*corev1.PodTemplateSpec, string, error) {
	component := step.Component
	var m *drivers.Manifests
	var err error
	ok := false
	chart := run.instance.Driver.Name + "@" + run.instance.Driver.Version
	if inlineBackup(run.task, step.Args) {
		if m, ok, err = r.backupRendered(ctx, run); err != nil {
			return nil, "", err
		}
		if ok {
			chart = run.backupDriver.Name + "@" + run.backupDriver.Version + " (the version the deployment runs)"
		}
	}
	if !ok {
		if m, err = r.rendered(ctx, run); err != nil {
			return nil, "", err
		}
	}
	for _, o := range m.Objects {
		if o.Component != component || !drivers.IsWorkloadKind(o.APIVersion, o.Kind) {
			continue
		}
		from := o.Kind + "/" + o.Name
		var tmpl corev1.PodTemplateSpec
		switch o.Kind {
		case "Deployment":
			var d appsv1.Deployment
			err = yaml.Unmarshal(o.YAML, &d)
			tmpl = d.Spec.Template
		case "StatefulSet":
			var s appsv1.StatefulSet
			err = yaml.Unmarshal(o.YAML, &s)
			tmpl = s.Spec.Template
		case "DaemonSet":
			var d appsv1.DaemonSet
			err = yaml.Unmarshal(o.YAML, &d)
			tmpl = d.Spec.Template
		}
		if err != nil {
			return nil, "", outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("rendered %s: %w", from, err))
		}
		return &tmpl, from, nil
	}
	return nil, "", outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("component %s has no Deployment, StatefulSet or DaemonSet in the chart of %s to take a pod template from", component, chart))
}

// jobLogs returns the logs of a Job's pods in at most max bytes, the last
// attempt's whole (boundJobLogs), best effort (pods without containers, as
// on fake nodes, have none). Each is masked before it is cut, as endStep
// masks before it bounds: a value cut in two at an edge is in no form a
// mask can find.
func (r *Reconciler) jobLogs(ctx context.Context, run *taskRun, job *batchv1.Job, command []string, max int) string {
	a, err := r.actor(ctx, run)
	if err != nil || a.Logs == nil {
		return ""
	}
	var pods corev1.PodList
	if err := r.opts.APIReader.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{"job-name": job.Name}); err != nil {
		return ""
	}
	// Oldest first: the last attempt's log, the one that says why the Job
	// ended, is the last one.
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	var logs []podLog
	for _, p := range pods.Items {
		if len(p.Spec.Containers) == 0 {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		// Named: a pod with sidecars has more than one container, and the
		// API server then refuses a request that names none.
		out, err := a.Logs.Logs(lctx, p.Namespace, p.Name, commandContainer(p.Spec.Containers, command))
		cancel()
		if err == nil && strings.TrimSpace(out) != "" {
			// The step's context: redact may read the values to mask.
			logs = append(logs, podLog{pod: p.Name, text: r.redact(ctx, run, out)})
		}
	}
	return boundJobLogs(logs, len(pods.Items) > 1, max)
}

// podLog is the log of one of a Job's pods.
type podLog struct {
	pod, text string
}

// boundJobLogs joins the logs of a Job's pods, oldest attempt first, each
// after a line naming its pod when headed, in at most max bytes. The last
// attempt's log says why the Job ended: it is kept whole, or its end when
// it alone is longer. Earlier attempts get the room left, the latest
// first: each whole, then the end of the one that does not fit, and a
// line says how many older ones were left out. A log cut says so in its
// first line. (The tail of them all, as boundOutput keeps it, began in the
// middle of an earlier attempt's log without its pod's name, and cut a
// completed Job's first line.)
//
// The logs must be masked already: a value cut in two here is in no form
// a mask can find.
func boundJobLogs(logs []podLog, headed bool, max int) string {
	if len(logs) == 0 {
		return ""
	}
	head := func(l podLog) string {
		if headed {
			return "pod " + l.pod + ":\n"
		}
		return ""
	}
	parts := make([]string, len(logs))
	for i, l := range logs {
		parts[i] = head(l) + l.text
	}
	if all := joinLines(parts); len(all) <= max {
		return all
	}
	earlier, last := logs[:len(logs)-1], logs[len(logs)-1]
	leftOut, leftOutPods := 0, len(earlier)
	for _, l := range earlier {
		leftOut += len(l.text)
	}
	// Room for the line on the earlier attempts left out, at its longest
	// (the numbers only shrink).
	room := max
	if len(earlier) > 0 {
		room -= len(leftOutLine(leftOut, leftOutPods)) + 1
	}
	var kept []string // newest first
	if n := len(parts[len(parts)-1]); n <= room {
		kept, room = append(kept, parts[len(parts)-1]), room-n
		for i := len(earlier) - 1; i >= 0; i-- {
			l := earlier[i]
			if n := len(parts[i]) + lineEnd(parts[i]); n <= room {
				kept, room = append(kept, parts[i]), room-n
				leftOut, leftOutPods = leftOut-len(l.text), leftOutPods-1
				continue
			}
			if end, ok := logEnd(l.text, room-1-len(head(l))); ok {
				kept = append(kept, head(l)+end)
				leftOut, leftOutPods = leftOut-len(l.text), leftOutPods-1
			}
			break
		}
	} else if end, ok := logEnd(last.text, room-len(head(last))); ok {
		kept = append(kept, head(last)+end)
	} else {
		// A bound too small for any note.
		return tailString(joinLines(parts), max)
	}
	slices.Reverse(kept)
	if leftOutPods > 0 {
		kept = slices.Insert(kept, 0, leftOutLine(leftOut, leftOutPods))
	}
	return joinLines(kept)
}

// joinLines joins texts each on lines of its own: a newline between two
// unless the first ends with one.
func joinLines(texts []string) string {
	var b strings.Builder
	for i, t := range texts {
		if i > 0 {
			b.WriteString(strings.Repeat("\n", lineEnd(texts[i-1])))
		}
		b.WriteString(t)
	}
	return b.String()
}

// lineEnd is the bytes joinLines adds after text: 1 unless it ends a line.
func lineEnd(text string) int {
	if strings.HasSuffix(text, "\n") {
		return 0
	}
	return 1
}

// leftOutLine says that the logs of the n oldest attempts, of size bytes,
// are not in a step's output.
func leftOutLine(size, n int) string {
	return fmt.Sprintf("… %d bytes of %d earlier attempt(s) left out", size, n)
}

// logEnd is the end of a log in at most max bytes, from a line's start
// when there is one, after a line saying how much was cut; false when max
// leaves no room for any of it.
func logEnd(text string, max int) (string, bool) {
	note := func(n int) string { return fmt.Sprintf("… the first %d bytes of this log left out\n", n) }
	room := max - len(note(len(text)))
	if room <= 0 {
		return "", false
	}
	end := tailString(text, room)
	if cut := len(text) - len(end); cut > 0 && text[cut-1] != '\n' {
		if i := strings.IndexByte(end, '\n'); i >= 0 && i+1 < len(end) {
			end = end[i+1:]
		}
	}
	if end == "" {
		return "", false
	}
	return note(len(text)-len(end)) + end, true
}

// commandContainer names the container of a Job's pod that runs the
// step's command: the first (jobSidecars makes it the only one), or, in a
// Job an older agent made with every container of the workload, the one
// whose command is the step's.
func commandContainer(cs []corev1.Container, command []string) string {
	if i := slices.IndexFunc(cs, func(c corev1.Container) bool { return slices.Equal(c.Command, command) }); i >= 0 {
		return cs[i].Name
	}
	return cs[0].Name
}

// waitReady waits until every workload of the components is ready (as
// `kubectl rollout status` tells it). A missing workload is not ready.
func (r *Reconciler) waitReady(ctx context.Context, run *taskRun, step drivers.Step) (actionOutcome, error) {
	var lines, waiting []string
	// A progress deadline exceeded before the running instance was
	// applied is a verdict on the instance before (see health.Workload),
	// as the StyrminDeployment's own health judges it: a pre step sees
	// the running instance failed even when it failed before this task
	// started. Without an applied release, from the task's start.
	since, err := r.appliedSince(ctx, run)
	if err != nil {
		return actionOutcome{}, err
	}
	for _, comp := range step.Components {
		ws, err := r.componentWorkloads(ctx, run, comp)
		if err != nil {
			return actionOutcome{}, err
		}
		for _, w := range ws {
			st, err := health.Workload(ctx, r.opts.Client, v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: w.Kind, Namespace: run.task.Spec.Namespace, Name: w.Name}, since)
			if err != nil {
				return actionOutcome{}, err
			}
			if st.Failed {
				// It cannot become ready without a change: fail now, not
				// at the step's timeout.
				return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("%s %s: %s", comp, w, st.Message))
			}
			if !st.Ready {
				waiting = append(waiting, fmt.Sprintf("%s %s: %s", comp, w, st.Message))
				continue
			}
			lines = append(lines, fmt.Sprintf("%s %s ready (%d/%d)", comp, w, st.ReadyReplicas, st.DesiredReplicas))
		}
	}
	if len(waiting) > 0 {
		run.waiting = strings.Join(waiting, "; ")
		return actionOutcome{after: r.opts.PollInterval}, nil
	}
	if len(lines) == 0 {
		lines = append(lines, "no workload to wait for")
	}
	return actionOutcome{done: true, output: strings.Join(lines, "\n")}, nil
}

// appliedSince is when the deployment's running release was last
// applied (its StyrminDeployment's status), else when the task started.
func (r *Reconciler) appliedSince(ctx context.Context, run *taskRun) (time.Time, error) {
	sd, err := r.deployment(ctx, run)
	if err != nil {
		return time.Time{}, err
	}
	if sd != nil && sd.Status.Release != nil && sd.Status.Release.LastAppliedTime != nil {
		return sd.Status.Release.LastAppliedTime.Time, nil
	}
	if run.task.Status.StartedAt != nil {
		return run.task.Status.StartedAt.Time, nil
	}
	return time.Time{}, nil
}

// execInComponent runs the step's command in a ready pod of the
// component's first workload. Commands must be idempotent: a step found
// running after an agent restart runs again.
//
// The command runs in the background (execRun): it may take as long as
// its step's timeout, which the driver sets, and a task worker held that
// long would leave every other deployment's task waiting once as many
// long commands run as there are workers. Each reconcile of the task
// until it ends only looks whether it has.
func (r *Reconciler) execInComponent(ctx context.Context, run *taskRun, st *v1alpha1.TaskStep, step drivers.Step) (actionOutcome, error) {
	a, err := r.actor(ctx, run)
	if err != nil {
		return actionOutcome{}, err
	}
	if a.Exec == nil {
		return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, errors.New("exec: the agent has no pod executor configured"))
	}
	if e := r.execOf(run.task.UID, st); e != nil {
		select {
		case <-e.done:
			r.dropExec(run.task.UID, e)
			return e.outcome(step, a)
		default:
			run.waiting = fmt.Sprintf("exec %q running in pod %s/%s (container %s)", strings.Join(step.Command, " "), e.namespace, e.pod, e.container)
			return actionOutcome{after: r.opts.PollInterval}, nil
		}
	}
	ws, err := r.componentWorkloads(ctx, run, step.Component)
	if err != nil {
		return actionOutcome{}, err
	}
	pod, err := r.readyPod(ctx, run.task.Spec.Namespace, ws)
	if err != nil {
		return actionOutcome{}, err
	}
	if pod == nil {
		run.waiting = fmt.Sprintf("no ready pod of component %s to exec in", step.Component)
		return actionOutcome{after: r.opts.PollInterval}, nil
	}
	container := step.Args["container"]
	if container == "" && len(pod.Spec.Containers) > 0 {
		container = pod.Spec.Containers[0].Name
	}
	// Bounded by the step's deadline (runStepAction's), not by this
	// reconcile, which ends at once.
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(stepTimeout(st, r.opts.StepTimeout))
	}
	ectx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	e := &execRun{step: st.Name, attempt: st.Attempts, namespace: pod.Namespace, pod: pod.Name, container: container, cancel: cancel, done: make(chan struct{})}
	r.startExec(run.task.UID, e)
	go func() {
		defer cancel()
		e.stdout, e.stderr, e.err = a.Exec.Exec(ectx, pod.Namespace, pod.Name, container, step.Command)
		close(e.done)
	}()
	run.waiting = fmt.Sprintf("exec %q running in pod %s/%s (container %s)", strings.Join(step.Command, " "), pod.Namespace, pod.Name, container)
	return actionOutcome{after: r.opts.PollInterval}, nil
}

// execRun is an exec step's command running in the background (see
// execInComponent), for one attempt of one step of a task.
type execRun struct {
	step                      string
	attempt                   int32
	namespace, pod, container string
	cancel                    context.CancelFunc
	// done is closed when the command has ended; stdout, stderr and err
	// are its result, read only after.
	done           chan struct{}
	stdout, stderr string
	err            error
}

// outcome is the step's outcome from the command's result.
func (e *execRun) outcome(step drivers.Step, a Actor) (actionOutcome, error) {
	out := strings.TrimRight(e.stdout+e.stderr, "\n")
	if e.err != nil {
		// The output goes to the step's output only (see runJob).
		msg := fmt.Sprintf("exec %q in pod %s/%s (container %s) as %s: %v", strings.Join(step.Command, " "), e.namespace, e.pod, e.container, a.describe(), e.err)
		if errors.Is(e.err, context.DeadlineExceeded) {
			// The step's deadline: its timeout, decided as for any step.
			return actionOutcome{output: out}, fmt.Errorf("%s: %w", msg, e.err)
		}
		return actionOutcome{output: out}, outcome.Stalled(v1alpha1.ReasonStepFailed, errors.New(msg))
	}
	return actionOutcome{done: true, output: fmt.Sprintf("exec in pod %s (container %s)\n%s", e.pod, e.container, out)}, nil
}

// execOf is the command task uid runs for step st's attempt; nil when
// none. One left from another step or attempt (the task moved on without
// it: failed at its timeout, run again) is stopped and dropped.
func (r *Reconciler) execOf(uid types.UID, st *v1alpha1.TaskStep) *execRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.execs[uid]
	if e != nil && (e.step != st.Name || e.attempt != st.Attempts) {
		e.cancel()
		delete(r.execs, uid)
		return nil
	}
	return e
}

// startExec records e as the command task uid runs.
func (r *Reconciler) startExec(uid types.UID, e *execRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.execs == nil {
		r.execs = map[types.UID]*execRun{}
	}
	r.execs[uid] = e
}

// dropExec forgets e, whose result has been taken.
func (r *Reconciler) dropExec(uid types.UID, e *execRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.execs[uid] == e {
		delete(r.execs, uid)
	}
}

// readyPod returns a running, ready pod of the workloads (the first by
// name), nil when there is none yet.
func (r *Reconciler) readyPod(ctx context.Context, ns string, ws []workloadRef) (*corev1.Pod, error) {
	for _, w := range ws {
		var sel *metav1.LabelSelector
		key := client.ObjectKey{Namespace: ns, Name: w.Name}
		var err error
		switch w.Kind {
		case "Deployment":
			var d appsv1.Deployment
			err = r.opts.Client.Get(ctx, key, &d)
			sel = d.Spec.Selector
		case "StatefulSet":
			var s appsv1.StatefulSet
			err = r.opts.Client.Get(ctx, key, &s)
			sel = s.Spec.Selector
		case "DaemonSet":
			var d appsv1.DaemonSet
			err = r.opts.Client.Get(ctx, key, &d)
			sel = d.Spec.Selector
		}
		if apierrors.IsNotFound(err) || sel == nil {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", w, err)
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return nil, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("%s: selector: %w", w, err))
		}
		var pods corev1.PodList
		if err := r.opts.APIReader.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: s}); err != nil {
			return nil, fmt.Errorf("listing pods of %s: %w", w, err)
		}
		slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) {
				return p, nil
			}
		}
	}
	return nil, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// upgradeDeploymentVersion writes the task's instance into the
// deployment's StyrminDeployment (WriteInstance) and waits until the
// StyrminDeployment controller reports it Ready at that sequence (for a
// tombstone: until it uninstalled the release and removed the
// StyrminDeployment).
//
// The guard: a StyrminDeployment whose styrmin.io/instance-sequence
// annotation holds a higher number than the task's is left unchanged, the
// step says so, a NewerInstanceKept event is recorded and the task ends
// Superseded. The whole spec is written, so removing a hand-set annotation
// and making a change recovers the deployment's full configuration. A
// re-run after a restart finds the StyrminDeployment holding its sequence
// and only waits.
func (r *Reconciler) upgradeDeploymentVersion(ctx context.Context, run *taskRun) (actionOutcome, error) {
	t := run.task
	seq := t.Spec.ToSequence
	key := instance.Key(t.Spec.Namespace)
	// An annotation that is no number needs a person: fail at once
	// rather than retrying until the timeout.
	if sd, err := r.deployment(ctx, run); err != nil {
		return actionOutcome{}, err
	} else if sd != nil {
		if _, _, err := instance.HeldSequence(sd); err != nil {
			return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, err)
		}
	}
	res, err := instance.WriteInstance(ctx, r.opts.Client, t.Spec.Namespace, run.instance)
	if errors.Is(err, instance.ErrOtherDeployment) {
		return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, err)
	}
	if err != nil {
		return actionOutcome{}, outcome.Retryable("WriteFailed", err)
	}
	if res.Kept > 0 && res.Deployment != nil && res.Kept > res.Deployment.Spec.Sequence {
		// No task wrote that number (a task writes the spec and the
		// annotation together): a hand edit, no instance of this
		// deployment. Wait for the annotation to go, then write the
		// whole configuration.
		sd := res.Deployment
		msg := fmt.Sprintf("StyrminDeployment %s: annotation %s is %d, above the instance it holds (sequence %d) and no instance of this deployment; waiting: remove it (kubectl annotate styrmindeployment -n %s %s %s-) to let sequence %d write the whole configuration",
			key, v1alpha1.AnnotationInstanceSequence, res.Kept, sd.Spec.Sequence, sd.Namespace, sd.Name, v1alpha1.AnnotationInstanceSequence, seq)
		run.waiting = msg
		return actionOutcome{blocked: true, after: heldPollInterval, output: msg}, nil
	}
	if res.Kept > 0 {
		msg := fmt.Sprintf("StyrminDeployment %s holds sequence %d (annotation %s), newer than this task's %d: left unchanged",
			key, res.Kept, v1alpha1.AnnotationInstanceSequence, seq)
		if r.opts.Recorder != nil && res.Deployment != nil {
			r.opts.Recorder.Eventf(res.Deployment, t, corev1.EventTypeNormal, v1alpha1.EventNewerInstanceKept, "KeepNewer",
				"kept sequence %d; task %s for sequence %d is superseded", res.Kept, t.Name, seq)
		}
		return actionOutcome{newer: res.Kept, output: msg}, nil
	}
	sd := res.Deployment
	if run.instance.Tombstone() {
		if sd == nil {
			return actionOutcome{done: true, output: fmt.Sprintf("StyrminDeployment %s is gone: the release is uninstalled", key)}, nil
		}
		run.waiting = "waiting for the release to be uninstalled and the StyrminDeployment removed"
		return actionOutcome{after: watchedPollInterval}, nil
	}
	ready, recorded, err := coreStepDone(sd, seq, t.Name)
	if err != nil {
		return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, err)
	}
	if !ready && !recorded {
		if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady); c != nil {
			run.waiting = fmt.Sprintf("StyrminDeployment %s: %s: %s", key, c.Reason, c.Message)
		}
		return actionOutcome{after: watchedPollInterval}, nil
	}
	out := fmt.Sprintf("StyrminDeployment %s is Ready at sequence %d", key, seq)
	if !ready {
		out = fmt.Sprintf("StyrminDeployment %s was Ready at sequence %d and records it active", key, seq)
	}
	if rel := sd.Status.Release; rel != nil {
		out += fmt.Sprintf(" (release %s revision %d, chart %s)", rel.Name, rel.Revision, rel.Chart)
	}
	return actionOutcome{done: true, output: out}, nil
}

// coreStepDone tells where the core step of task at seq stands on sd:
// ready when sd runs seq and is Ready; recorded when sd records seq active
// by that task, which the StyrminDeployment controller does with the Ready
// the step waits for when it is the task's last. Recorded is done too,
// whatever the workloads did since, so that a task never fails a change
// its deployment records as active; err (a stalled deployment, a failed
// workload) only when it is not.
func coreStepDone(sd *v1alpha1.StyrminDeployment, seq int64, task string) (ready, recorded bool, err error) {
	recorded = recordedBy(sd, seq, task)
	ready, err = instance.Applied(sd, seq)
	if recorded {
		err = nil
	}
	return ready, recorded, err
}

// recordedBy reports whether sd records sequence seq active by task.
func recordedBy(sd *v1alpha1.StyrminDeployment, seq int64, task string) bool {
	a := sd.Status.Active
	return a != nil && a.Sequence == seq && a.Task == task
}

// clearFailedRun removes the Job a runJob step's failed run leaves: one
// that failed would fail the next run at once (it is named after the
// sequence, so the next run would find it), and one whose step timed out
// would go on running behind the task's back. Its pods go with it; what
// they logged is in the step's message. why says when, for the error.
func (r *Reconciler) clearFailedRun(ctx context.Context, run *taskRun, st *v1alpha1.TaskStep, why string) error {
	if st.Action != string(drivers.ActionRunJob) {
		return nil
	}
	t := run.task
	name := retriedJobName(t, st)
	var job batchv1.Job
	err := r.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: t.Spec.Namespace, Name: name}, &job)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the job %s/%s %s: %w", t.Spec.Namespace, name, why, err)
	}
	if !ownJob(t, &job) {
		// Not the step's run (clearOthersJob): a person's, or another
		// deployment's migration, is not for this step to stop.
		return nil
	}
	policy := metav1.DeletePropagationBackground
	uid := job.UID
	a, err := r.actor(ctx, run)
	if err != nil {
		return err
	}
	if err := a.Writer.Delete(ctx, &job, client.Preconditions{UID: &uid}, client.PropagationPolicy(policy)); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting the job %s/%s %s: %w", t.Spec.Namespace, name, why, err)
	}
	return nil
}
