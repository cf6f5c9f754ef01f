package task

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/health"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/internal/eventnote"
	"github.com/styrmin/styrmin/operator/internal/outcome"
	"github.com/styrmin/styrmin/operator/release"
	"github.com/styrmin/styrmin/resolver"
)

// Defaults of Options.
const (
	// DefaultStepTimeout bounds a step whose driver declares no timeout.
	DefaultStepTimeout = 15 * time.Minute
	// DefaultTaskPollInterval is how often a waiting step looks again
	// (Jobs and StyrminDeployments also wake it through watches).
	DefaultTaskPollInterval = time.Second
	// DefaultTaskConcurrency is how many tasks (of different deployments)
	// run at once.
	DefaultTaskConcurrency = 8
	// DefaultKeepTasks is how many finished tasks of a deployment are
	// kept: every change leaves a task, and without a bound the cluster's
	// store and the agent's cache grow with the whole history.
	DefaultKeepTasks = 10
	// DefaultMaxStepResumes is how many times a step an agent restart
	// interrupted is resumed; the next interruption fails it. A rolling
	// update of the agent or a leader handover interrupts a step once; an
	// agent in a crash loop would restart the step, and its clock, for
	// ever.
	DefaultMaxStepResumes = 5
)

// Options configures the task controller.
type Options struct {
	// Client reads through the manager's cache and writes to the API.
	Client client.Client
	// APIReader reads a task straight from the API server when the cache
	// is behind the controller's own last write.
	APIReader client.Reader
	// Drivers gives the driver version an instance pins.
	Drivers driversource.Source
	// Renders renders instances, sharing the renders with the
	// StyrminDeployment controller (optional: nil renders each time).
	Renders *driversource.Renders
	// ActiveClaims is shared with the StyrminDeployment controller, which
	// records a change active with Ready when its task's last step writes
	// the instance: a task failing that step claims its failure there
	// first (nil: none, the task controller alone).
	ActiveClaims *instance.ActiveClaims
	// Locks gives the instance of a task that does not carry a copy
	// (optional: without it such a task fails).
	Locks instance.LockSource
	// Branch tells whether the branch the agent follows still holds a
	// task's lock commit: a change task whose commit it no longer holds
	// (a force push or a rewind took it away) is withdrawn before its
	// first step, on every replica alike, rather than run by one whose
	// clone still has the commit and failed by one whose clone has not
	// (optional: without it such a task runs when its lock can be read).
	Branch BranchHistory
	// Policies gives the policy the configuration declares for a task's
	// instance at its lock commit, which the instance's lockfile must
	// record (optional: without it the recorded policy is trusted).
	Policies instance.PolicySource
	// Source is the agent's StyrminSource, whose last synced commit tells
	// a task whether a peer it waits for that left nothing in the cluster
	// was deleted (optional: without it such a peer looks not created).
	Source types.NamespacedName
	// Recorder records events on tasks and StyrminDeployments (optional).
	Recorder events.EventRecorder
	// Exec runs exec steps; nil makes them fail with a clear message.
	Exec PodExecutor
	// Logs reads the logs of a runJob step's pods into its output
	// (optional).
	Logs PodLogs
	// Impersonate gives the clients of the service account an
	// environment's policy names, as which that environment's tasks act
	// (Exec and Logs above, Client's writes and APIReader's Secret reads
	// are the agent's own identity); nil makes such a task fail.
	Impersonate Impersonator
	// AgentNamespace is the agent's namespace, where the Secrets that
	// backups name live.
	AgentNamespace string
	// BackupSettings gives an environment's backup settings as git
	// declares them (the Secret of a clone's restore, of a backup before an
	// upgrade); nil: such jobs get no credentials.
	BackupSettings func(ctx context.Context, cluster, environment string) (resolver.EnvironmentBackups, error)
	// StepTimeout bounds steps without a declared timeout; 0 means
	// DefaultStepTimeout.
	StepTimeout time.Duration
	// PollInterval is how often a waiting step looks again; 0 means
	// DefaultTaskPollInterval.
	PollInterval time.Duration
	// KeepTasks is how many finished tasks of a deployment are kept (its
	// history in the cluster); older ones are deleted when a task
	// finishes. 0 means DefaultKeepTasks.
	KeepTasks int
	// Concurrency is how many tasks run at once; 0 means
	// DefaultTaskConcurrency. Tasks of one deployment always run one at a
	// time, in sequence order.
	Concurrency int
	// Registerer receives the task metrics; nil means controller-runtime's
	// registry (served on the manager's metrics endpoint).
	Registerer prometheus.Registerer
	// MaxStepResumes is how many times a step interrupted by an agent
	// restart is resumed before it fails (StepInterrupted); 0 means
	// DefaultMaxStepResumes.
	MaxStepResumes int
	// StepPause, for fault-injection tests only, pauses after a step is
	// written Running and again after its action is done, before the
	// result is written, widening the windows in which a test kills the
	// agent. Zero in production.
	StepPause time.Duration
}

// Reconciler runs StyrminTasks: the steps of a task's workflow, in
// order, one task of a deployment at a time in sequence order. Each step's
// state is written before and after it runs, so an agent killed at any
// point resumes the task at the step that was running (running it again:
// the primitives are idempotent).
type Reconciler struct {
	opts    Options
	metrics *taskMetrics
	// own is the agent's own identity, for environments that name no
	// service account.
	own Actor
	// scopes tells the policy check each rendered kind's scope, from the
	// client's RESTMapper.
	scopes *release.Scopes

	mu sync.Mutex
	// started records, per task, the step this process started; a step
	// found Running that this process did not start was interrupted by a
	// restart, and counts a new attempt.
	started map[types.UID]int32
	// tried records, per task, a start whose write failed (the step and
	// its attempt): the API server may have applied it all the same (a
	// timeout), and a step found Running at exactly that start was
	// started here, not interrupted by a restart.
	tried map[types.UID]triedStart
	// freshJobs records, per task, the runJob step's attempt this process
	// started afresh (not resumed after a restart), and the UID of the Job
	// it made for it until the record is written: a Job not found at
	// another attempt, with no UID recorded, may have been made, run and
	// deleted before the restart (see runJob).
	freshJobs map[types.UID]freshJob
	// fates is what the branch's head says of newer pending tasks'
	// changes, for supersedeOvertaken: kept for one head only.
	fates headFates
	// written is the resourceVersion of each task's last status write, to
	// notice a cache that has not caught up with it yet.
	written map[types.UID]string
	// instances holds the lockfile of each unfinished task as read, so a
	// task's reconciles read it from git once; by name, so a task
	// deleted before it finished is forgotten too. It is kept encoded,
	// a quarter of its decoded size, and decoded at each reconcile (tens
	// of microseconds): in a fan-out thousands of tasks wait for minutes.
	instances map[types.NamespacedName]lockedInstance
	// lastErr is the last transient error of each task's running step,
	// for the message of a step that times out.
	lastErr map[types.UID]string
	// lastWait is what each task's running step waited for at its last
	// call (a Job's pod that cannot start), unless an error came after:
	// the call that finds the step past its deadline is cut short by it,
	// and cannot say.
	lastWait map[types.UID]string
	// finished is the resourceVersion of each task's terminal write until
	// the cache shows it: an event before then (its StyrminDeployment's
	// status changing) must not run its last step again from a stale copy.
	finished map[types.UID]string
	// scaled is, per task, the generation each workload a startComponents
	// step scaled was answered with ("step Kind/name"): the step ends once
	// the cache shows it (see startComponents).
	scaled map[types.UID]map[string]int64
	// uids is the UID of each task seen, to forget a task that is gone.
	uids map[types.NamespacedName]types.UID
	// runs is, per deployment, the task of it whose steps this process
	// runs. awaitTurn orders tasks from the cache, which can miss a task
	// created a moment earlier (an operation task ordered before a change
	// task that has just started): the tasks of a deployment are
	// reconciled by this process, so it can keep two from running at once
	// whatever its cache shows.
	runs map[resolver.ID]types.UID
	// waiting maps each deployment to the tasks waiting for it (the
	// instances they run after): its StyrminDeployment's changes wake
	// them, instead of each polling it.
	waiting map[resolver.ID]map[types.NamespacedName]bool
	// waitsFor is waiting the other way round: what each waiting task
	// waits for, and how far through its list it got.
	waitsFor map[types.NamespacedName]orderWait
	// execs is the exec command each task runs in the background (see
	// execInComponent).
	execs map[types.UID]*execRun
}

// lockedInstance is a task's lockfile as read from its lock, checked
// against the task.
type lockedInstance struct {
	uid  types.UID
	lock v1alpha1.LockRef
	data []byte
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// NewReconciler checks opts and returns the task controller.
func NewReconciler(opts Options) (*Reconciler, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("task reconciler: Client is required")
	case opts.Drivers == nil:
		return nil, errors.New("task reconciler: Drivers is required")
	}
	if opts.APIReader == nil {
		opts.APIReader = opts.Client
	}
	if opts.StepTimeout <= 0 {
		opts.StepTimeout = DefaultStepTimeout
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultTaskPollInterval
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultTaskConcurrency
	}
	if opts.KeepTasks <= 0 {
		opts.KeepTasks = DefaultKeepTasks
	}
	if opts.MaxStepResumes <= 0 {
		opts.MaxStepResumes = DefaultMaxStepResumes
	}
	if opts.Registerer == nil {
		opts.Registerer = crmetrics.Registry
	}
	m, err := newTaskMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	own := Actor{Writer: opts.Client, Reader: opts.APIReader, Exec: opts.Exec, Logs: opts.Logs}
	return &Reconciler{opts: opts, metrics: m, own: own, scopes: release.NewScopes(opts.Client.RESTMapper()), started: map[types.UID]int32{}, tried: map[types.UID]triedStart{}, freshJobs: map[types.UID]freshJob{}, written: map[types.UID]string{}, instances: map[types.NamespacedName]lockedInstance{}, lastErr: map[types.UID]string{}, lastWait: map[types.UID]string{}, finished: map[types.UID]string{}, scaled: map[types.UID]map[string]int64{}, uids: map[types.NamespacedName]types.UID{}, runs: map[resolver.ID]types.UID{}, waiting: map[resolver.ID]map[types.NamespacedName]bool{}, waitsFor: map[types.NamespacedName]orderWait{}}, nil
}

// ControllerName is the task controller's name, in its metrics and logs.
const ControllerName = "styrmintask"

// SetupWithManager registers the controller: it watches StyrminTasks
// (a task's change wakes the other tasks of its deployment, which may be
// waiting for it) and StyrminDeployments (to wake the step waiting for
// one). Jobs and pods are read straight from the API server while a step
// waits for them (the cache holds the Jobs of steps for the drift check's
// hold only, and a step needs what the API server holds now).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		// The task's own status writes change no generation: they do not
		// wake it again (the step loop requeues as it needs).
		For(&v1alpha1.StyrminTask{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.StyrminTask{}, handler.EnqueueRequestsFromMapFunc(r.siblingsOfTask)).
		Watches(&v1alpha1.StyrminDeployment{}, handler.EnqueueRequestsFromMapFunc(r.tasksOfDeployment)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.opts.Concurrency,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](
				100*time.Millisecond, 30*time.Second),
		}).
		Complete(r)
}

// siblingsOfTask maps a task to the unfinished other tasks of its
// deployment: they wait for it to end, or are overtaken by it.
func (r *Reconciler) siblingsOfTask(ctx context.Context, o client.Object) []reconcile.Request {
	t, ok := o.(*v1alpha1.StyrminTask)
	if !ok {
		return nil
	}
	tasks, err := r.tasksOf(ctx, t.Namespace, t.Spec.Deployment)
	if err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, s := range tasks {
		if s.UID != t.UID && !s.Status.Phase.Terminal() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
		}
	}
	return out
}

// tasksOfDeployment maps a StyrminDeployment to the running tasks of its
// deployment: a step waiting for what the StyrminDeployment reports is
// woken by its change, not by polling (watchedPollInterval).
func (r *Reconciler) tasksOfDeployment(ctx context.Context, o client.Object) []reconcile.Request {
	sd, ok := o.(*v1alpha1.StyrminDeployment)
	if !ok {
		return nil
	}
	tasks, err := r.tasksOf(ctx, sd.Namespace, sd.Spec.Deployment)
	if err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, t := range tasks {
		if t.Status.Phase == v1alpha1.TaskRunning {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
		}
	}
	return append(out, r.waitersOf(sd)...)
}

// tasksOf lists the tasks of a deployment, in sequence order. A
// deployment's tasks live in its namespace: the cache's namespace index
// finds them without looking at every task of the cluster. The tasks are
// the cache's own (not copied: every task event lists its siblings): read
// them, never change them.
func (r *Reconciler) tasksOf(ctx context.Context, namespace string, id v1alpha1.DeploymentID) ([]v1alpha1.StyrminTask, error) {
	var list v1alpha1.StyrminTaskList
	if err := r.opts.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels(id.Labels()), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the tasks of %s: %w", id, err)
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.StyrminTask) int {
		return int(a.Spec.ToSequence - b.Spec.ToSequence)
	})
	return list.Items, nil
}

// pruneTasks deletes the finished tasks of the deployment of run's task,
// which has just finished, beyond the KeepTasks newest, and the ended Jobs
// of tasks no longer there (pruneJobs). Tasks that have not finished are
// never deleted. Failing changes nothing but the history's length: it is
// logged only.
func (r *Reconciler) pruneTasks(ctx context.Context, run *taskRun) {
	t := run.task
	tasks, err := r.tasksOf(ctx, t.Namespace, t.Spec.Deployment)
	if err != nil {
		run.log.Error(err, "pruning the deployment's finished tasks")
		return
	}
	// A failed task that holds components stopped is kept: deleted, its
	// hold would go with it, and the next drift check start the old
	// workers on the data it left halfway.
	holders := map[types.UID]bool{}
	for _, h := range instance.LeftStopped(tasks) {
		holders[h.Task.UID] = true
	}
	// Newest first; the cache may not show t finished yet.
	kept := 0
	left := map[string]bool{}
	for i := len(tasks) - 1; i >= 0; i-- {
		old := &tasks[i]
		left[old.Name] = true
		if (old.UID != t.UID && !old.Status.Phase.Terminal()) || IsOperation(old) || holders[old.UID] {
			// Operations' tasks go with their StyrminBackup or
			// StyrminRestore (a failed restore's holds its deployment).
			continue
		}
		if kept++; kept <= r.opts.KeepTasks {
			continue
		}
		uid := old.UID
		err := r.opts.Client.Delete(ctx, old, client.Preconditions{UID: &uid})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			delete(left, old.Name)
		case apierrors.IsConflict(err):
			// Another task of that name was made since the cache's copy:
			// its Jobs are its own, and stay.
		default:
			run.log.Error(err, "deleting a finished task beyond the kept history", "task", old.Name)
		}
	}
	r.pruneJobs(ctx, run, tasks, left)
}

// pruneJobs deletes the ended Jobs steps made in the deployment's
// namespace whose task is gone (jobPruner.pruned), their pods with them. Nothing
// deleted them: each change with a migration left a Job and its pod in
// the namespace for ever, and every runJob step and drift hold read them
// all. What a Job logged is in its step's output; a Job still running is
// left to end (it holds the drift check, and the next runJob step waits
// for it).
func (r *Reconciler) pruneJobs(ctx context.Context, run *taskRun, tasks []v1alpha1.StyrminTask, left map[string]bool) {
	t := run.task
	var jobs batchv1.JobList
	if err := r.opts.Client.List(ctx, &jobs, client.InNamespace(t.Spec.Namespace), client.HasLabels{LabelTask}); err != nil {
		run.log.Error(err, "listing the namespace's step jobs to prune")
		return
	}
	p, err := r.jobPruner(ctx, run, tasks, left)
	if err != nil {
		run.log.Error(err, "pruning the step jobs of pruned tasks")
		return
	}
	var a *Actor
	background := metav1.DeletePropagationBackground
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if !j.DeletionTimestamp.IsZero() || !health.JobEnded(j) || !p.pruned(j) {
			continue
		}
		if a == nil {
			actor, err := r.actor(ctx, run)
			if err != nil {
				run.log.Error(err, "pruning the step jobs of pruned tasks")
				return
			}
			a = &actor
		}
		uid := j.UID
		err := a.Writer.Delete(ctx, j, client.Preconditions{UID: &uid}, client.PropagationPolicy(background))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			run.log.Error(err, "deleting the ended job of a task no longer kept", "job", j.Name, "task", j.Labels[LabelTask])
		}
	}
}

// jobPruner decides which ended step Jobs of a namespace go.
type jobPruner struct {
	// own is the identity of the deployment whose task prunes.
	own v1alpha1.DeploymentID
	// left holds the names of own's tasks still there.
	left map[string]bool
	// reached is the last sequence own is known to have passed.
	reached int64
	// others holds, for each task of another deployment still in the
	// namespace, its deployment and name.
	others map[otherTask]bool
}

// otherTask is a task of another deployment than the pruning one's.
type otherTask struct {
	id   v1alpha1.DeploymentID
	name string
}

// jobPruner reads what pruned needs: the sequence the deployment reached
// (its StyrminDeployment's, or its last succeeded task's), and the tasks
// of any other deployment in the namespace.
func (r *Reconciler) jobPruner(ctx context.Context, run *taskRun, tasks []v1alpha1.StyrminTask, left map[string]bool) (jobPruner, error) {
	t := run.task
	p := jobPruner{own: t.Spec.Deployment, left: left, others: map[otherTask]bool{}}
	sd, err := r.deployment(ctx, run)
	if err != nil {
		return p, err
	}
	if sd != nil && sd.Spec.Deployment == t.Spec.Deployment {
		p.reached = sd.Spec.Sequence
	}
	succeeded := func(o *v1alpha1.StyrminTask) {
		if o.Status.Phase == v1alpha1.TaskSucceeded && !IsOperation(o) {
			p.reached = max(p.reached, o.Spec.ToSequence)
		}
	}
	succeeded(t)
	for i := range tasks {
		succeeded(&tasks[i])
	}
	var all v1alpha1.StyrminTaskList
	if err := r.opts.Client.List(ctx, &all, client.InNamespace(t.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return p, fmt.Errorf("listing the tasks of %s: %w", t.Namespace, err)
	}
	for i := range all.Items {
		if o := &all.Items[i]; o.Spec.Deployment != t.Spec.Deployment {
			p.others[otherTask{o.Spec.Deployment, o.Name}] = true
		}
	}
	return p, nil
}

// pruned reports whether j, a step's Job that ended, goes: its task is
// gone (pruned, deleted by hand, or an operation's gone with its
// StyrminBackup). One of a change the deployment has not reached stays,
// though: it is the only record that the change's step ran, and the
// syncer makes a task deleted by hand again (its lock met again) until the
// deployment reaches its sequence; with the Job gone, the task made again
// ran its migration a second time. One of another deployment (deleted from
// the namespace before: an environment renamed, its namespacePrefix kept)
// goes once that deployment's task is gone: nothing else deleted it. One
// lacking an identity label stays: the agent labels every Job it makes
// with all of them, so it is no Job of a deployment (a step Job's YAML
// copied to run by hand, labels trimmed), and an id with an empty part
// never matches a task.
func (p jobPruner) pruned(j *batchv1.Job) bool {
	id, whole := jobDeployment(j)
	if !whole {
		return false
	}
	if id != p.own {
		return !p.others[otherTask{id, j.Labels[LabelTask]}]
	}
	if p.left[j.Labels[LabelTask]] {
		return false
	}
	if j.Labels[v1alpha1.LabelOperation] != "" {
		return true
	}
	seq, err := strconv.ParseInt(j.Labels[v1alpha1.LabelSequence], 10, 64)
	return err != nil || seq <= p.reached
}

// jobDeployment is the deployment a step Job's labels name, and whether
// they name each part of it.
func jobDeployment(j *batchv1.Job) (v1alpha1.DeploymentID, bool) {
	id := v1alpha1.DeploymentID{Cluster: j.Labels[v1alpha1.LabelCluster], Environment: j.Labels[v1alpha1.LabelEnvironment], Name: j.Labels[v1alpha1.LabelDeployment]}
	return id, id.Cluster != "" && id.Environment != "" && id.Name != ""
}

// taskRun is what one reconcile of a task knows.
type taskRun struct {
	task     *v1alpha1.StyrminTask
	log      logr.Logger
	instance *resolver.Instance
	driver   *drivers.Driver
	// manifests is the target instance rendered (lazily).
	manifests *drivers.Manifests
	// backupFrom and backupDriver are the instance the deployment runs
	// and its driver, whose backup hook an upgrade runs first (read
	// lazily, see backupSource).
	backupFrom   *resolver.Instance
	backupDriver *drivers.Driver
	// sd is the deployment's StyrminDeployment (nil: none), read lazily.
	sd     *v1alpha1.StyrminDeployment
	sdRead bool
	// actor is the identity the run's actions act as (see actor).
	actor *Actor
	// waiting says what a step is waiting for, for the timeout message.
	waiting string
	// sensitive masks what steps report (read lazily, see redact).
	sensitive     resolver.Sensitive
	sensitiveRead bool
	// credentials masks the backup credentials its jobs were given
	// (read lazily, see redact).
	credentials     resolver.Sensitive
	credentialsRead bool
	// planUnwritten is set when prepare planned the steps but did not
	// write them: the next status write (the first step's start, or the
	// end) carries them, which saves a request per task. A task that has
	// to wait for its turn writes them before it waits.
	planUnwritten bool
	// failReason is the reason constant of a failure (failTask), for the
	// task's Stalled condition, or of an end before it ran (Withdrawn).
	failReason string
}

// phaseResult ends a reconcile early (stop) and asks to look again after a
// delay.
type phaseResult struct {
	stop  bool
	after time.Duration
}

// taskPhase is one link of the reconcile chain.
type taskPhase func(ctx context.Context, run *taskRun) (phaseResult, error)

// Reconcile runs the chain prepare → supersede → await turn → start
// workflow → run steps
// and maps its outcome to a result in one place (taskResult).
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	task, err := r.load(ctx, req.NamespacedName)
	if errors.Is(err, errEndNotCached) {
		// Its end's own event reconciles it again.
		return reconcile.Result{}, nil
	}
	if err != nil {
		return r.taskResult(log, phaseResult{}, err)
	}
	if task == nil {
		r.metrics.forget(req.NamespacedName)
		r.forgetKey(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	r.metrics.setPhase(req.NamespacedName, task.Status.Phase)
	if task.Status.Phase.Terminal() {
		r.forget(task)
		// The agent may have stopped between the task's end and the
		// deletion of its copies of backup credentials (or an older
		// agent kept them with the task).
		if err := r.dropCredentials(ctx, &taskRun{task: task, log: log}); err != nil {
			if apierrors.IsForbidden(err) {
				// Retrying would not grant it: the copies go with the
				// task, as before.
				log.Error(err, "deleting an ended task's copies of backup credentials")
				return reconcile.Result{}, nil
			}
			return r.taskResult(log, phaseResult{}, err)
		}
		return reconcile.Result{}, nil
	}
	run := &taskRun{task: task, log: log}
	for _, phase := range []taskPhase{r.prepare, r.supersedeOvertaken, r.awaitTurn, r.awaitOrder, r.startWorkflow, r.runSteps} {
		res, err := phase(ctx, run)
		if err != nil || res.stop {
			r.metrics.setPhase(req.NamespacedName, task.Status.Phase)
			return r.taskResult(log, res, err)
		}
	}
	r.metrics.setPhase(req.NamespacedName, task.Status.Phase)
	return reconcile.Result{}, nil
}

// taskResult maps a phase's outcome to the controller's result through
// outcome.Map: stalled errors were turned into a failed task by the phase
// that met them and end here without retry; conflicts (a write on a stale
// copy) retry at once; any other error retries with backoff, or after
// the delay it asks for.
func (r *Reconciler) taskResult(log logr.Logger, res phaseResult, err error) (reconcile.Result, error) {
	o := outcome.Map(err, "")
	switch o.Kind {
	case outcome.None:
		return reconcile.Result{RequeueAfter: res.after}, nil
	case outcome.Stall:
		return reconcile.Result{}, reconcile.TerminalError(err)
	case outcome.Conflict:
		log.V(1).Info("conflict; retrying", "error", err.Error())
		return reconcile.Result{RequeueAfter: o.After}, nil
	}
	if o.After > 0 {
		log.Info("retrying", "after", o.After, "error", err.Error())
		return reconcile.Result{RequeueAfter: o.After}, nil
	}
	return reconcile.Result{}, err
}

// load reads a task through the cache, or straight from the API server
// when the cache has not caught up with this controller's last write, or
// that write's outcome is not known (a stale copy would run a finished
// step again, or a finished task on).
func (r *Reconciler) load(ctx context.Context, key types.NamespacedName) (*v1alpha1.StyrminTask, error) {
	var t v1alpha1.StyrminTask
	if err := r.opts.Client.Get(ctx, key, &t); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading task %s: %w", key, err)
	}
	r.mu.Lock()
	if old, seen := r.uids[key]; seen && old != t.UID {
		// Deleted and made again under its name before this process saw
		// it go: what it kept of the old one (its hold on the deployment
		// first) goes now.
		r.forgetLocked(key, old)
	}
	r.uids[key] = t.UID
	last, ok := r.written[t.UID]
	end, ended := r.finished[t.UID]
	r.mu.Unlock()
	if ended && end != t.ResourceVersion {
		return nil, errEndNotCached
	}
	if !ok || last == t.ResourceVersion {
		return &t, nil
	}
	var fresh v1alpha1.StyrminTask
	if err := r.opts.APIReader.Get(ctx, key, &fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading task %s: %w", key, err)
	}
	r.mu.Lock()
	r.written[fresh.UID] = fresh.ResourceVersion
	r.mu.Unlock()
	return &fresh, nil
}

// unknownWrite stands for a task's last status write whose outcome is
// not known: no resourceVersion is equal to it, so load reads the task
// from the API server.
const unknownWrite = ""

// errEndNotCached: the cache does not show a task's terminal write yet.
var errEndNotCached = errors.New("the task's end is not in the cache yet")

// forget drops what the controller keeps of a task.
func (r *Reconciler) forget(t *v1alpha1.StyrminTask) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(client.ObjectKeyFromObject(t), t.UID)
}

// ended drops what the controller keeps of a task that has just written
// its end, but that end (finished) until the cache shows it: with the
// task's key, so that forgetKey finds it when the task is deleted first
// (a finished task is rarely reconciled again until it is pruned).
func (r *Reconciler) ended(t *v1alpha1.StyrminTask) {
	key := client.ObjectKeyFromObject(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(key, t.UID)
	r.finished[t.UID] = t.ResourceVersion
	r.uids[key] = t.UID
}

// forgetKey drops what the controller keeps of a task that is gone (it
// may have been deleted while it ran).
func (r *Reconciler) forgetKey(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(key, r.uids[key])
}

func (r *Reconciler) forgetLocked(key types.NamespacedName, uid types.UID) {
	delete(r.finished, uid)
	delete(r.started, uid)
	delete(r.tried, uid)
	delete(r.freshJobs, uid)
	delete(r.written, uid)
	delete(r.lastErr, uid)
	delete(r.lastWait, uid)
	delete(r.scaled, uid)
	if e := r.execs[uid]; e != nil {
		// The task ended or is gone: nothing will take its result.
		e.cancel()
		delete(r.execs, uid)
	}
	for id, holder := range r.runs {
		if holder == uid {
			delete(r.runs, id)
		}
	}
	delete(r.instances, key)
	delete(r.uids, key)
	r.dropWaitLocked(key)
}

// claimRun makes task uid the one whose steps run for deployment id,
// unless another task of it runs: it returns the task that runs.
func (r *Reconciler) claimRun(id resolver.ID, uid types.UID) types.UID {
	r.mu.Lock()
	defer r.mu.Unlock()
	if holder, ok := r.runs[id]; ok {
		return holder
	}
	r.runs[id] = uid
	return uid
}

// hasStarted reports whether this process wrote the start of a step of
// task uid.
func (r *Reconciler) hasStarted(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.started[uid]
	return ok
}

// releaseRun lets deployment id's tasks run, if task uid held it.
func (r *Reconciler) releaseRun(id resolver.ID, uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[id] == uid {
		delete(r.runs, id)
	}
}

// nameOf is the name of a task this process has seen ("" if none).
func (r *Reconciler) nameOf(uid types.UID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, u := range r.uids {
		if u == uid {
			return key.Name
		}
	}
	return ""
}

// lastError is the last transient error of a task's running step.
func (r *Reconciler) lastError(uid types.UID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr[uid]
}

// lastWaited is what a task's running step waited for at its last call
// that did not fail ("" when none said, or an error came after).
func (r *Reconciler) lastWaited(uid types.UID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastWait[uid]
}

// writeStatus persists the task's status. After a write that failed,
// the next load reads the task from the API server: a write whose answer
// was lost (a timeout, a reset connection) may have been made, and the
// cache's copy from before it would run the task on as if it had not (a
// Failed end made and then succeeded over, recording its instance
// active).
func (r *Reconciler) writeStatus(ctx context.Context, run *taskRun) error {
	t := run.task
	t.Status.ObservedGeneration = t.Generation
	if err := r.opts.Client.Status().Update(ctx, t); err != nil {
		r.mu.Lock()
		r.written[t.UID] = unknownWrite
		r.mu.Unlock()
		return fmt.Errorf("writing the status of task %s/%s: %w", t.Namespace, t.Name, err)
	}
	run.planUnwritten = false
	r.mu.Lock()
	r.written[t.UID] = t.ResourceVersion
	r.mu.Unlock()
	return nil
}

// prepare decodes the task's instance and, for a new task, plans its steps
// against the active instance (plan). A task whose instance or driver
// cannot be had ends Failed: that needs a change in git (a running task
// whose lock is gone: resumeWithoutLock).
func (r *Reconciler) prepare(ctx context.Context, run *taskRun) (phaseResult, error) {
	t := run.task
	if IsOperation(t) {
		return r.prepareOperation(ctx, run)
	}
	in, field, err := r.instance(ctx, t)
	if err != nil {
		var mm *lockMismatch
		if errors.As(err, &mm) {
			return r.failTask(ctx, run, v1alpha1.ReasonLockMismatch, field+": "+err.Error())
		}
		var nf *instance.LockNotFoundError
		if errors.As(err, &nf) && t.Status.Phase == v1alpha1.TaskRunning {
			return r.resumeWithoutLock(ctx, run, field+": "+err.Error())
		}
		if errors.As(err, &nf) {
			// Kept by a rewrite: read at the head; gone with the
			// branch's history: withdrawn, as on a replica whose
			// clone still has the commit.
			moved, merr := r.followRewrite(ctx, run)
			if merr != nil {
				return phaseResult{}, merr
			}
			if moved {
				return r.prepare(ctx, run)
			}
			if res, err := r.withdrawn(ctx, run); err != nil || res.stop {
				return res, err
			}
		}
		if errors.As(err, &nf) || field == "spec.instance" {
			return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, field+": "+err.Error())
		}
		return phaseResult{}, err
	}
	if in.Sequence != t.Spec.ToSequence {
		return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, fmt.Sprintf("%s: the instance's sequence is %d but spec.toSequence is %d", field, in.Sequence, t.Spec.ToSequence))
	}
	run.instance = in
	if t.Status.Phase != "" {
		return phaseResult{}, nil
	}
	if res, err := r.plan(ctx, run); err != nil || res.stop {
		return res, err
	}
	t.Status.Phase = v1alpha1.TaskPending
	setTaskConditions(t, v1alpha1.ReasonTaskPending, "waiting to run")
	// Not written yet: a restart before the next write plans again, to
	// the same steps.
	run.planUnwritten = true
	return phaseResult{}, nil
}

// resumeWithoutLock carries on a running task whose lock cannot be read
// (why): after a restart the agent's copy is gone, and a force push may
// have taken the lock commit from the clone. Its steps ran against that
// lock, so the task ends as they left it: when its core step wrote the
// instance (the StyrminDeployment holds the task's sequence and digest),
// the task goes on with it, and its post steps run (workers started
// again, maintenance off); otherwise the step that was running fails,
// saying why. Failing the task skipped every step left, the one
// interrupted too: no step said what failed, and the post steps of an
// instance already written never ran.
func (r *Reconciler) resumeWithoutLock(ctx context.Context, run *taskRun, why string) (phaseResult, error) {
	t := run.task
	sd, err := r.deployment(ctx, run)
	if err != nil {
		return phaseResult{}, err
	}
	if target := instance.TaskTarget(t); sd != nil && target != nil && sd.Spec.Sequence == t.Spec.ToSequence && sd.Spec.Digest == target.Digest {
		in, err := instance.InstanceFromSpec(&sd.Spec)
		if err == nil {
			err = matchLock(t, in, nil)
		}
		if err == nil {
			run.log.Info("the task's lock cannot be read; it goes on with the instance its StyrminDeployment holds", "task", t.Name, "why", why)
			run.instance = in
			return phaseResult{}, nil
		}
		why += "; the instance StyrminDeployment " + instance.Key(t.Spec.Namespace).String() + " holds: " + err.Error()
	}
	i := int(t.Status.CurrentStep)
	for i < len(t.Status.Steps) && t.Status.Steps[i].State.Terminal() {
		i++
	}
	if i == len(t.Status.Steps) {
		return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, why)
	}
	t.Status.CurrentStep = int32(i)
	run.failReason = v1alpha1.ReasonInvalidTask
	return r.failStep(ctx, run, v1alpha1.ReasonInvalidTask, "the task's lock could not be read, nor its instance taken from its StyrminDeployment: "+why, "")
}

// deletedAfter reports whether the active instance is a deletion that
// came after change t: a change task made late (a second writer, or a
// walk from the root after its task was pruned) of a deployment deleted
// since.
func deletedAfter(active *v1alpha1.ActiveInstance, t *v1alpha1.StyrminTask) bool {
	return active != nil && active.Kind == v1alpha1.KindTombstone && active.Sequence > t.Spec.ToSequence && !IsOperation(t)
}

// afterFailedDeletion is the active instance a change that adds the
// deployment (back) starts from when its deletion's task failed: that
// task is no active instance, so the one before it was, and the re-add
// ran as an update (no setup hook: a database's init) on what the
// uninstall, which goes on after the task failed, had deleted or was
// deleting. While the StyrminDeployment still holds the deletion (its
// uninstall not ended) the change waits (wait); once it is gone the
// deletion is the active instance, and the change a create.
func afterFailedDeletion(sd *v1alpha1.StyrminDeployment, tasks []v1alpha1.StyrminTask, active *v1alpha1.ActiveInstance, t *v1alpha1.StyrminTask) (*v1alpha1.ActiveInstance, bool) {
	if sd != nil {
		held := sd.Spec.Tombstone() && sd.Spec.Sequence < t.Spec.ToSequence && (active == nil || active.Sequence < sd.Spec.Sequence)
		return active, held
	}
	var deletion *v1alpha1.ActiveInstance
	for i := range tasks {
		d := &tasks[i]
		if d.Status.Phase != v1alpha1.TaskFailed || d.Spec.Operation != nil || d.Spec.ToSequence >= t.Spec.ToSequence ||
			(active != nil && d.Spec.ToSequence <= active.Sequence) {
			continue
		}
		if a := instance.TaskTarget(d); a != nil && a.Kind == v1alpha1.KindTombstone && (deletion == nil || a.Sequence > deletion.Sequence) {
			deletion = a
		}
	}
	if deletion != nil && active != nil && active.Kind != v1alpha1.KindTombstone {
		// No StyrminDeployment: its uninstall ended (it goes only then).
		return deletion, false
	}
	return active, false
}

// waitForDeletion keeps a change that adds the deployment back pending
// while the uninstall of its failed deletion goes on, saying so (once
// per message) with the StyrminDeployment's reason.
func (r *Reconciler) waitForDeletion(ctx context.Context, run *taskRun, sd *v1alpha1.StyrminDeployment) (phaseResult, error) {
	msg := fmt.Sprintf("waiting for the deletion at sequence %d to end (the uninstall of the release) before the deployment is installed anew", sd.Spec.Sequence)
	if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Message != "" {
		msg += fmt.Sprintf("; it says %s: %s", c.Reason, c.Message)
		if c.Reason == v1alpha1.ReasonUninstallFailed {
			msg += " (fix what refuses it: the uninstall is tried again until it ends)"
		}
	}
	msg = eventnote.Cut(msg, 1024)
	if run.task.Status.Phase == "" {
		// Pending, not planned: startWorkflow plans it when it may start.
		run.task.Status.Phase = v1alpha1.TaskPending
	}
	return r.waitSaying(ctx, run, v1alpha1.ReasonDeletionInProgress, msg, orderPollInterval)
}

// plan chooses the task's workflow against the deployment's active
// instance (instance.SelectWorkflow) and plans its steps from the
// instance's driver, recording the choice and the sequence it starts
// from. Not written here: the next status write carries them.
func (r *Reconciler) plan(ctx context.Context, run *taskRun) (phaseResult, error) {
	t := run.task
	sd, err := r.deployment(ctx, run)
	if err != nil {
		return phaseResult{}, err
	}
	tasks, err := r.tasksOf(ctx, t.Namespace, t.Spec.Deployment)
	if err != nil {
		return phaseResult{}, err
	}
	active := instance.Active(sd, tasks)
	if run.instance != nil && !run.instance.Tombstone() && !IsOperation(t) {
		var wait bool
		if active, wait = afterFailedDeletion(sd, tasks, active, t); wait {
			return r.waitForDeletion(ctx, run, sd)
		}
	}
	if deletedAfter(active, t) {
		// The deployment was deleted by a later change: running this
		// one would install it again (the guard keeps only a newer
		// StyrminDeployment, and there is none).
		t.Status.SupersededBy = active.Sequence
		run.failReason = v1alpha1.ReasonSupersededByDeletion
		return r.finish(ctx, run, v1alpha1.TaskSuperseded,
			fmt.Sprintf("superseded by sequence %d, which deleted the deployment: an earlier change does not install it again", active.Sequence))
	}
	wf := instance.SelectWorkflow(active, run.instance)
	if held := heldAfterActive(sd, active, t); wf == v1alpha1.WorkflowUpdate && held != nil &&
		instance.SelectWorkflow(held, run.instance) == v1alpha1.WorkflowUpgrade {
		// The StyrminDeployment holds a newer instance than the active
		// one: a change that failed after it was written (an upgrade
		// whose rollout or verification failed). The cluster runs that
		// driver and application version, so going back from it is an
		// upgrade too, with its hooks: a revert after a failed upgrade
		// must not change the version without its migration.
		wf = v1alpha1.WorkflowUpgrade
	}
	if active != nil && active.Sequence > t.Spec.ToSequence {
		// An earlier change than what is active (a task made late, by a
		// second writer): it runs its own workflow, from the lock before
		// it, and the guard keeps the newer instance.
		wf, active = t.Spec.Workflow, &v1alpha1.ActiveInstance{Sequence: t.Spec.FromSequence}
	}
	var d *drivers.Driver
	if wf != v1alpha1.WorkflowDelete {
		if d, err = r.driver(ctx, run); err != nil {
			if outcome.IsStalled(err) {
				return r.failTask(ctx, run, v1alpha1.ReasonTaskFailed, err.Error())
			}
			return phaseResult{}, err
		}
	}
	if d != nil {
		if res, err := r.checkPolicy(ctx, run); err != nil || res.stop {
			return res, err
		}
	}
	if wf == v1alpha1.WorkflowCreate && d != nil && d.CanBackup() {
		if why, err := r.cloneRestoreRefusal(ctx, run.instance, d); err != nil || why != "" {
			if err != nil {
				return phaseResult{}, err
			}
			return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, why)
		}
	}
	var running *drivers.Driver
	if wf == v1alpha1.WorkflowUpgrade && run.instance.BackupFirst {
		if _, running, _, err = r.backupSource(ctx, run); err != nil {
			return phaseResult{}, err
		}
	}
	steps, err := StepsForInstance(wf, d, running, run.instance)
	if err != nil {
		return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, err.Error())
	}
	var from int64
	if active != nil {
		from = active.Sequence
	}
	t.Status.Workflow, t.Status.FromSequence = wf, from
	t.Status.Steps = steps
	t.Status.CurrentStep = 0
	// A restart before the next write plans again, against what is
	// active then.
	run.planUnwritten = true
	return phaseResult{}, nil
}

// checkPolicy fails a task whose rendered objects leave its environment's
// policy before any step runs: the lock checked it too, but the agent
// enforces what it applies, whatever wrote the lock, at the scope the
// cluster serves each kind with (the lock could only go by kind names).
func (r *Reconciler) checkPolicy(ctx context.Context, run *taskRun) (phaseResult, error) {
	if run.instance.Context == nil {
		return phaseResult{}, nil
	}
	if res, err := r.checkDeclaredPolicy(ctx, run); err != nil || res.stop {
		return res, err
	}
	if res, err := r.checkDeclaredInternal(ctx, run); err != nil || res.stop {
		return res, err
	}
	m, err := r.rendered(ctx, run)
	if err != nil {
		if outcome.IsStalled(err) {
			return r.failTask(ctx, run, v1alpha1.ReasonTaskFailed, err.Error())
		}
		return phaseResult{}, err
	}
	if err := drivers.CheckPolicyWith(*run.instance.Context, m, run.instance.ID.String(), r.scopes.ClusterScoped); err != nil {
		if _, ok := errors.AsType[*drivers.PolicyError](err); ok {
			return r.failTask(ctx, run, v1alpha1.ReasonPolicyViolation, err.Error())
		}
		return phaseResult{}, err // the cluster could not be asked: retried
	}
	return phaseResult{}, nil
}

// checkDeclaredPolicy fails a task whose lockfile records another policy
// than the configuration at its lock commit declares for it. The agent
// enforces the recorded policy (and impersonates the service account it
// names), so a lockfile edited by hand with a valid checksum could
// otherwise loosen it, past whoever reviews the environment's files. A
// lock made by styrminctl or the agent's lock mode always records what
// the configuration it locked declares.
func (r *Reconciler) checkDeclaredPolicy(ctx context.Context, run *taskRun) (phaseResult, error) {
	ref := run.task.Spec.Lock
	if r.opts.Policies == nil || ref.Commit == "" {
		return phaseResult{}, nil // a task carrying its instance: made by the agent itself
	}
	declared, err := r.opts.Policies.DeclaredPolicy(ctx, ref, run.instance)
	recorded := run.instance.Context.Environment.Policy
	if err != nil {
		if _, ok := errors.AsType[*instance.PolicyUnknownError](err); ok {
			return r.failTask(ctx, run, v1alpha1.ReasonPolicyViolation, fmt.Sprintf("the policy of %s cannot be checked: %v", run.instance.ID, err))
		}
		if _, ok := errors.AsType[*instance.UndeclaredError](err); ok {
			return r.failTask(ctx, run, v1alpha1.ReasonPolicyViolation, err.Error()+"; lock it again")
		}
		return phaseResult{}, err
	}
	if !declared.Equal(recorded) {
		commit := ref.Commit
		if h, err := gitsource.ParseHash(commit); err == nil {
			commit = h.Short()
		}
		return r.failTask(ctx, run, v1alpha1.ReasonPolicyViolation, fmt.Sprintf(
			"%s records the policy %s, but the cluster and environment files at lock commit %s declare %s: the lockfile was not written by a lock of that configuration; lock it again",
			ref.Path, policyText(recorded), commit, policyText(declared)))
	}
	return phaseResult{}, nil
}

// checkDeclaredInternal fails the task of an internal instance (an
// ingress controller) whose lockfile records other settings or values
// than the configuration at its lock commit gives it with its driver: it
// applies as the agent, with every namespaced kind.
func (r *Reconciler) checkDeclaredInternal(ctx context.Context, run *taskRun) (phaseResult, error) {
	ref := run.task.Spec.Lock
	if r.opts.Policies == nil || ref.Commit == "" || run.instance.Internal == "" || run.instance.Tombstone() {
		return phaseResult{}, nil
	}
	drv, err := r.driver(ctx, run)
	if err != nil {
		return phaseResult{}, nil // the render that follows reports it
	}
	err = r.opts.Policies.CheckInternal(ctx, ref, run.instance, drv)
	if _, ok := errors.AsType[*instance.UndeclaredError](err); ok {
		return r.failTask(ctx, run, v1alpha1.ReasonPolicyViolation, err.Error()+"; lock it again")
	}
	if _, ok := errors.AsType[*instance.PolicyUnknownError](err); ok {
		return r.failTask(ctx, run, v1alpha1.ReasonPolicyViolation, fmt.Sprintf("%s cannot be checked against its configuration: %v", run.instance.ID, err))
	}
	return phaseResult{}, err
}

// policyText shows a policy in a message.
func policyText(p *drivers.Policy) string {
	if p.IsZero() {
		return "{} (the default)"
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Sprintf("%+v", *p)
	}
	return string(b)
}

// startWorkflow chooses the workflow again when the task's turn comes and
// no step has started: an earlier task of the deployment may have
// succeeded or failed meanwhile, and the workflow is chosen against what
// is active when the task starts (a failed upgrade's hooks are never
// skipped by the change after it). Once a step has started the choice is
// kept, so a restarted agent resumes with the same steps.
func (r *Reconciler) startWorkflow(ctx context.Context, run *taskRun) (phaseResult, error) {
	t := run.task
	if t.Status.Phase != v1alpha1.TaskPending || t.Status.CurrentStep != 0 || stepStarted(t) {
		return phaseResult{}, nil
	}
	if res, err := r.withdrawn(ctx, run); err != nil || res.stop {
		return res, err
	}
	wf, from := t.Status.Workflow, t.Status.FromSequence
	replan := r.plan
	if IsOperation(t) {
		replan = r.planOperation
	}
	if res, err := replan(ctx, run); err != nil || res.stop {
		return res, err
	}
	if t.Status.Workflow != wf || t.Status.FromSequence != from {
		run.log.Info("workflow chosen again at start", "was", wf, "from", from, "now", t.Status.Workflow, "fromSequence", t.Status.FromSequence)
	}
	return phaseResult{}, nil
}

// BranchHistory tells whether the branch the agent follows, as last
// fetched, holds a commit, and where its head is.
type BranchHistory interface {
	Head() (gitsource.Hash, error)
	Holds(commit gitsource.Hash) (bool, error)
}

var _ BranchHistory = (*gitsource.Repo)(nil)

// withdrawn ends a change task no step of which has started when its
// change is no longer in git (lockFate), Superseded with reason
// Withdrawn: nothing of it is applied; the deployment's next lock is
// chosen against what it runs. An error asking is transient.
func (r *Reconciler) withdrawn(ctx context.Context, run *taskRun) (phaseResult, error) {
	t := run.task
	f, err := r.lockFate(ctx, t)
	if err != nil || !f.gone() {
		return phaseResult{}, err
	}
	for i := range t.Status.Steps {
		t.Status.Steps[i].State = v1alpha1.StepSkipped
		t.Status.Steps[i].Message = "withdrawn before it ran"
	}
	run.failReason = v1alpha1.ReasonTaskWithdrawn
	return r.finish(ctx, run, v1alpha1.TaskSuperseded, fmt.Sprintf("withdrawn before it ran: the branch no longer holds lock commit %s "+
		"(a force push or a rewind took it away, or it was never on the branch) and %s; nothing of it was applied", f.commit.Short(), f.why(t)))
}

// followRewrite points a task whose lock cannot be read at the branch
// head when the head locks its change at its lockfile (a rewrite that
// kept it, lockFate): its lock, policy and peers are then read where the
// branch has them. It reports whether it did; the task's spec is then the
// new one.
func (r *Reconciler) followRewrite(ctx context.Context, run *taskRun) (bool, error) {
	t := run.task
	f, err := r.lockFate(ctx, t)
	if err != nil || f.held || !f.at.kept {
		return false, err
	}
	base := t.DeepCopy()
	t.Spec.Lock.Commit = f.at.head.String()
	if err := r.opts.Client.Patch(ctx, t, client.MergeFrom(base)); err != nil {
		return false, fmt.Errorf("task %s/%s: pointing it at lock commit %s, where the rewritten branch locks its change: %w", t.Namespace, t.Name, f.at.head.Short(), err)
	}
	run.log.Info("the task's lock commit is gone and the rewritten branch locks the same change: the task reads it at the head",
		"task", t.Name, "from", f.commit.Short(), "commit", f.at.head.Short())
	return true, nil
}

// lockFate is what the followed branch says of a task's lock commit.
type lockFate struct {
	commit gitsource.Hash
	// held: the branch holds the commit, or the question does not apply
	// (no branch, an operation, a task that started, not a commit, a
	// branch not found: nothing is told of the commit).
	held bool
	// at is the head's lockfile at the task's path, read when not held.
	at headLock
}

// gone reports that the task's change is no longer in git: its commit
// is not held and the head does not lock the same instance (a rewrite
// that kept the lockfile, a filter-repo or commits signed again, keeps
// the change: its task runs, at the head when the old commit is gone).
func (f lockFate) gone() bool { return !f.held && !f.at.kept }

// why says what the head locks at the task's lockfile.
func (f lockFate) why(t *v1alpha1.StyrminTask) string {
	switch {
	case f.at.in == nil:
		return "its head holds no " + t.Spec.Lock.Path
	case f.at.in.Sequence > t.Spec.ToSequence:
		return fmt.Sprintf("its head locks sequence %d, which follows", f.at.in.Sequence)
	}
	return fmt.Sprintf("its head locks another instance at sequence %d", f.at.in.Sequence)
}

// lockFate asks the branch about t's lock commit, for a change task no
// step of which has started (one that started runs to its end: its steps
// ran against that lock, resumeWithoutLock).
func (r *Reconciler) lockFate(ctx context.Context, t *v1alpha1.StyrminTask) (lockFate, error) {
	f := lockFate{held: true}
	if r.opts.Branch == nil || r.opts.Locks == nil || IsOperation(t) || t.Status.Phase.Terminal() || t.Status.Phase == v1alpha1.TaskRunning || stepStarted(t) {
		return f, nil
	}
	var err error
	if f.commit, err = gitsource.ParseHash(t.Spec.Lock.Commit); err != nil {
		return f, nil // not a commit: the lock's read says so
	}
	f.held, err = r.opts.Branch.Holds(f.commit)
	switch {
	case errors.Is(err, gitsource.ErrBranchNotFound):
		return lockFate{held: true}, nil
	case err != nil:
		return f, fmt.Errorf("task %s/%s: does the branch hold lock commit %s: %w", t.Namespace, t.Name, f.commit.Short(), err)
	case f.held:
		return f, nil
	}
	f.at, err = r.lockAtHead(ctx, t)
	return f, err
}

// headLock is what the branch head locks at a task's lockfile.
type headLock struct {
	head gitsource.Hash
	in   *resolver.Instance // nil: no such lockfile
	// kept: the same sequence and the instance the task's target names.
	kept bool
}

// lockAtHead reads the branch head's lockfile at t's path.
func (r *Reconciler) lockAtHead(ctx context.Context, t *v1alpha1.StyrminTask) (headLock, error) {
	head, err := r.opts.Branch.Head()
	if err != nil {
		return headLock{}, fmt.Errorf("task %s/%s: the branch head: %w", t.Namespace, t.Name, err)
	}
	in, err := instance.ReadLock(ctx, r.opts.Locks, v1alpha1.LockRef{Commit: head.String(), Path: t.Spec.Lock.Path})
	var nf *instance.LockNotFoundError
	if errors.As(err, &nf) {
		return headLock{head: head}, nil
	}
	if err != nil {
		return headLock{}, err
	}
	// A task made by hand names no target: nothing to compare it with.
	kept := t.Spec.Target != nil && in.Sequence == t.Spec.ToSequence && matchLock(t, in, nil) == nil
	return headLock{head: head, in: in, kept: kept}, nil
}

// stepStarted reports whether a step of t has started. Not the first
// step's state: a step can be planned Skipped (a create's restoreBackup
// when the deployment is no clone), and a task starting with one is
// still to be planned again when its turn comes.
func stepStarted(t *v1alpha1.StyrminTask) bool {
	return slices.ContainsFunc(t.Status.Steps, func(st v1alpha1.TaskStep) bool {
		return st.StartedAt != nil || st.Attempts > 0
	})
}

// workflow is the workflow the task runs: chosen when it started, or the
// one its spec suggests for a task planned by an earlier agent.
func workflow(t *v1alpha1.StyrminTask) v1alpha1.Workflow {
	if t.Status.Workflow != "" {
		return t.Status.Workflow
	}
	return t.Spec.Workflow
}

// instance returns the task's instance and the field it comes from: the
// instance its lock records in git (read once per task). A task carrying a
// copy (spec.instance) runs it only when it is the locked one: a task is a
// change git asked for, so one whose namespace, deployment or instance
// differ from its lock is a lockMismatch, whoever made it. An agent
// without a repository (tests of the controller alone) runs the copy.
func (r *Reconciler) instance(ctx context.Context, t *v1alpha1.StyrminTask) (*resolver.Instance, string, error) {
	var carried *resolver.Instance
	if t.Spec.Instance != nil {
		in, err := instance.InstanceFromSpec(t.Spec.Instance)
		if err != nil || r.opts.Locks == nil {
			return in, "spec.instance", err
		}
		carried = in
	}
	const field = "spec.lock"
	key := client.ObjectKeyFromObject(t)
	r.mu.Lock()
	cached, ok := r.instances[key]
	r.mu.Unlock()
	if ok && cached.uid == t.UID && cached.lock == t.Spec.Lock {
		in, err := instance.DecodeLockFile(t.Spec.Lock, cached.data)
		if err == nil {
			// Checked again: a task's spec can be edited between reads.
			err = matchLock(t, in, carried)
		}
		return in, field, err
	}
	if r.opts.Locks == nil {
		return nil, field, &instance.LockNotFoundError{Ref: t.Spec.Lock, Err: errors.New("the task carries no instance and the agent has no repository to read its lock from")}
	}
	data, err := r.opts.Locks.LockFile(ctx, t.Spec.Lock)
	if err != nil {
		return nil, field, err
	}
	in, err := instance.DecodeLockFile(t.Spec.Lock, data)
	if err != nil {
		return nil, field, err
	}
	if err := matchLock(t, in, carried); err != nil {
		return nil, field, err
	}
	r.mu.Lock()
	r.instances[key] = lockedInstance{uid: t.UID, lock: t.Spec.Lock, data: data}
	r.mu.Unlock()
	return in, field, nil
}

// lockMismatch is a task that is not the change its lock records.
type lockMismatch struct {
	ref v1alpha1.LockRef
	msg string
}

func (e *lockMismatch) Error() string {
	return fmt.Sprintf("%s; the lock %s at commit %s says otherwise: a task runs only the change git locked", e.msg, e.ref.Path, e.ref.Commit)
}

// matchLock checks a task against the instance its lock records: the
// deployment, the namespace (where the task lives and the one it names),
// the summary of spec.target (what the deployment's active instance is
// taken from once the task succeeds, so what the next change's workflow
// is chosen against) and, when the task carries one, the instance itself.
func matchLock(t *v1alpha1.StyrminTask, locked, carried *resolver.Instance) error {
	mismatch := func(format string, args ...any) error {
		return &lockMismatch{ref: t.Spec.Lock, msg: fmt.Sprintf(format, args...)}
	}
	if d := t.Spec.Deployment; locked.ID.Cluster != d.Cluster || locked.ID.Environment != d.Environment || locked.ID.Name != d.Name {
		return mismatch("the lock is of deployment %s, the task's is %s/%s/%s", locked.ID, d.Cluster, d.Environment, d.Name)
	}
	if t.Namespace != t.Spec.Namespace {
		return mismatch("the task is in namespace %q but spec.namespace is %q", t.Namespace, t.Spec.Namespace)
	}
	if locked.Context != nil && locked.Context.Deployment.Namespace != t.Spec.Namespace {
		return mismatch("spec.namespace is %q but the deployment's namespace is %q", t.Spec.Namespace, locked.Context.Deployment.Namespace)
	}
	if tg := t.Spec.Target; tg != nil && (tg.Kind != locked.Kind || tg.Digest != locked.Digest || tg.AppVersion != locked.AppVersion ||
		tg.SourceCommit != locked.SourceCommit || tg.Driver.Name != locked.Driver.Name ||
		tg.Driver.Version != locked.Driver.Version || tg.Driver.Digest != locked.Driver.Digest) {
		return mismatch("spec.target (digest %s, driver %s %s, application %s) is not the locked instance (digest %s, driver %s %s, application %s)",
			tg.Digest, tg.Driver.Name, tg.Driver.Version, tg.AppVersion, locked.Digest, locked.Driver.Name, locked.Driver.Version, locked.AppVersion)
	}
	if carried != nil && (carried.ID != locked.ID || carried.Sequence != locked.Sequence || carried.Digest != locked.Digest || carried.Kind != locked.Kind) {
		return mismatch("spec.instance (sequence %d, digest %s) is not the locked instance (sequence %d, digest %s)", carried.Sequence, carried.Digest, locked.Sequence, locked.Digest)
	}
	return nil
}

// supersedeOvertaken ends a pending configuration-only task that a newer
// task of its deployment (not failed) has overtaken: the newer one writes
// the whole configuration anyway. A pending create ends so only before a
// newer deletion of its deployment (it may wait for ever for the order of
// its lock, a peer that failed, and the deletion behind it would wait
// too); otherwise creates, upgrades (migrations) and deletes always run.
// A newer task whose change the branch withdrew (a force push back to
// this one's commit) writes nothing either: superseded by it, neither
// change was applied, and the deployment stayed behind the change git's
// head locks for good.
func (r *Reconciler) supersedeOvertaken(ctx context.Context, run *taskRun) (phaseResult, error) {
	t := run.task
	wf := workflow(t)
	if t.Status.Phase != v1alpha1.TaskPending || (wf != v1alpha1.WorkflowUpdate && wf != v1alpha1.WorkflowCreate) || IsOperation(t) {
		return phaseResult{}, nil
	}
	tasks, err := r.tasksOf(ctx, t.Namespace, t.Spec.Deployment)
	if err != nil {
		return phaseResult{}, err
	}
	newest, err := r.overtakenBy(ctx, t, tasks)
	if err != nil || newest == 0 {
		return phaseResult{}, err
	}
	why := fmt.Sprintf("superseded by sequence %d before it ran: the newer task writes the whole configuration", newest)
	if wf == v1alpha1.WorkflowCreate {
		why = fmt.Sprintf("superseded by sequence %d before it ran: that change deletes the deployment, which is not created first", newest)
	}
	for i := range t.Status.Steps {
		t.Status.Steps[i].State = v1alpha1.StepSkipped
		t.Status.Steps[i].Message = "superseded before it ran"
	}
	t.Status.SupersededBy = newest
	if wf == v1alpha1.WorkflowCreate {
		// Said by the reason, not the words: the page of the task says
		// nothing of it was applied.
		run.failReason = v1alpha1.ReasonSupersededByDeletion
	}
	return r.finish(ctx, run, v1alpha1.TaskSuperseded, why)
}

// overtakenBy is the sequence of the newest of tasks, t's deployment's,
// that supersedes pending t (0: none). A newer task that failed writes
// nothing more (one that failed in its checks wrote nothing at all):
// t still brings the deployment closer to git, and the guard keeps an
// instance the failed one wrote; nor does one withdrawn, or pending and
// whose lock commit the branch no longer holds (withdrawnAtHead), or
// superseded before it ran (by one newer still, itself judged here: a
// force push may have withdrawn that one since). A newer
// create or update of a deployment not created yet plans against nothing
// and would skip the order a create waits for: only a deletion
// supersedes a create.
func (r *Reconciler) overtakenBy(ctx context.Context, t *v1alpha1.StyrminTask, tasks []v1alpha1.StyrminTask) (int64, error) {
	newer := make([]*v1alpha1.StyrminTask, 0, len(tasks))
	for i := range tasks {
		s := &tasks[i]
		if s.Spec.ToSequence <= t.Spec.ToSequence || IsOperation(s) || s.Status.Phase == v1alpha1.TaskFailed || supersededUnrun(s) {
			continue
		}
		if workflow(t) == v1alpha1.WorkflowCreate && s.Spec.Workflow != v1alpha1.WorkflowDelete {
			continue
		}
		newer = append(newer, s)
	}
	// The newest first: the branch is asked of the fewest.
	slices.SortFunc(newer, func(a, b *v1alpha1.StyrminTask) int { return cmp.Compare(b.Spec.ToSequence, a.Spec.ToSequence) })
	for _, s := range newer {
		gone, err := r.withdrawnAtHead(ctx, s)
		if err != nil {
			return 0, err
		}
		if !gone {
			return s.Spec.ToSequence, nil
		}
	}
	return 0, nil
}

// supersededUnrun reports whether s ended Superseded before a step of it
// started (withdrawn, or overtaken): it wrote nothing.
func supersededUnrun(s *v1alpha1.StyrminTask) bool {
	return s.Status.Phase == v1alpha1.TaskSuperseded && !stepStarted(s)
}

// withdrawnAtHead reports whether the branch withdrew s's change
// (lockFate: a change task that has not started, whose lock commit the
// branch no longer holds nor its head locks again), before s's own turn
// says so (withdrawn). The answer is kept for the branch's head, as every
// pending task of the deployment asks it at each reconcile; git only,
// no request to the API server.
func (r *Reconciler) withdrawnAtHead(ctx context.Context, s *v1alpha1.StyrminTask) (bool, error) {
	if r.opts.Branch == nil || r.opts.Locks == nil || s.Status.Phase.Terminal() || s.Status.Phase == v1alpha1.TaskRunning || stepStarted(s) {
		return false, nil
	}
	head, err := r.opts.Branch.Head()
	if errors.Is(err, gitsource.ErrBranchNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("task %s/%s: the branch head: %w", s.Namespace, s.Name, err)
	}
	key := fateKey{uid: s.UID, commit: s.Spec.Lock.Commit}
	r.mu.Lock()
	if r.fates.head != head {
		r.fates = headFates{head: head, gone: map[fateKey]bool{}}
	}
	gone, ok := r.fates.gone[key]
	r.mu.Unlock()
	if ok {
		return gone, nil
	}
	f, err := r.lockFate(ctx, s)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	if r.fates.head == head {
		r.fates.gone[key] = f.gone()
	}
	r.mu.Unlock()
	return f.gone(), nil
}

// headFates is what the branch at head says of pending tasks' changes
// (withdrawnAtHead): gone, per task and lock commit.
type headFates struct {
	head gitsource.Hash
	gone map[fateKey]bool
}

// fateKey is a task and its lock commit (one a rewrite pointed it at
// since is asked again).
type fateKey struct {
	uid    types.UID
	commit string
}

// heldAfterActive is the instance the StyrminDeployment holds when it is
// newer than the active one and not task t's own (nil otherwise): what a
// change that failed after writing it left in the cluster.
func heldAfterActive(sd *v1alpha1.StyrminDeployment, active *v1alpha1.ActiveInstance, t *v1alpha1.StyrminTask) *v1alpha1.ActiveInstance {
	if sd == nil || active == nil || sd.Spec.Kind == resolver.KindTombstone ||
		sd.Spec.Sequence <= active.Sequence || sd.Spec.Sequence >= t.Spec.ToSequence {
		return nil
	}
	return &v1alpha1.ActiveInstance{Sequence: sd.Spec.Sequence, Kind: sd.Spec.Kind, Digest: sd.Spec.Digest,
		Driver: sd.Spec.Driver, AppVersion: sd.Spec.AppVersion}
}

// awaitTurn keeps a pending task waiting while a task before it of its
// deployment is not finished (that task's end wakes it): a lower
// sequence, or an operation ordered before it (runsBefore). A change or
// a backup also waits while a restore before it failed (restoreHold); a
// restore does not wait for a backup held so (heldByRestore), nor a
// backup's deletion for a change or backup held so (heldForRestores).
func (r *Reconciler) awaitTurn(ctx context.Context, run *taskRun) (phaseResult, error) {
	t := run.task
	if t.Status.Phase != v1alpha1.TaskPending {
		return phaseResult{}, nil
	}
	tasks, err := r.tasksOf(ctx, t.Namespace, t.Spec.Deployment)
	if err != nil {
		return phaseResult{}, err
	}
	restore := IsOperation(t) && t.Spec.Operation.Kind == v1alpha1.OperationRestore
	deletion := IsOperation(t) && t.Spec.Operation.Kind == v1alpha1.OperationDeleteBackup
	for _, s := range tasks {
		if waitsFor(t, &s) && !(restore && heldByRestore(&s, tasks)) && !(deletion && heldForRestores(&s, tasks)) {
			run.log.V(1).Info("waiting for an earlier task", "task", s.Name)
			return r.waitSaying(ctx, run, v1alpha1.ReasonTaskPending, turnMessage(&s), 30*time.Second)
		}
	}
	if holdsForRestores(t) {
		if why := restoreHold(t, tasks); why != "" {
			return r.waitWith(ctx, run, v1alpha1.ReasonRestoreInProgress, why, 30*time.Second)
		}
	}
	return phaseResult{}, nil
}

// turnMessage says which task of its deployment a pending task waits for,
// and what that one does: it said only "waiting to run", so a change
// behind one held for days (by a failed wave before it, a step waiting
// for a person) did not say why it did not start. The other's state is
// what its condition says, cut (its conditions name it whole).
func turnMessage(s *v1alpha1.StyrminTask) string {
	what := fmt.Sprintf("task %s (sequence %d)", s.Name, s.Spec.ToSequence)
	if op := s.Spec.Operation; op != nil {
		what = fmt.Sprintf("task %s (%s %s)", s.Name, strings.ToLower(string(op.Kind)), op.Name)
	}
	msg := "waiting for " + what + " of the deployment to end"
	if c := apimeta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Message != "" {
		msg += fmt.Sprintf("; it is %s: %s", orPendingPhase(s.Status.Phase), eventnote.Cut(firstLine(c.Message), maxTurnCause))
	}
	return msg
}

// maxTurnCause bounds what turnMessage keeps of the other task's message.
const maxTurnCause = 1024

// orPendingPhase is phase, Pending when none is written yet.
func orPendingPhase(p v1alpha1.TaskPhase) string {
	if p == "" {
		return string(v1alpha1.TaskPending)
	}
	return string(p)
}

// waitsFor reports whether pending task t waits for task s of its
// deployment: s is ordered before it and has not ended, or s runs. A task
// ordered after t may have started from a cache that did not show t yet
// (then held back only by this agent's memory of it, which a restart
// loses); it finishes first.
func waitsFor(t, s *v1alpha1.StyrminTask) bool {
	return s.UID != t.UID && ((runsBefore(s, t) && !s.Status.Phase.Terminal()) || s.Status.Phase == v1alpha1.TaskRunning)
}

// waitWith records why the task waits (once per change of reason) and
// looks again after the interval.
func (r *Reconciler) waitWith(ctx context.Context, run *taskRun, reason, msg string, after time.Duration) (phaseResult, error) {
	t := run.task
	// Bounded as the condition holds it (as waitSaying's): a message over
	// the bound (a failed restore's first line is up to it) differed from
	// the cut one every look, and was written again every 30 s.
	msg = boundMessage(msg)
	if c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Message != msg || c.Reason != reason || run.planUnwritten {
		setTaskConditions(t, reason, msg)
		if err := r.writeStatus(ctx, run); err != nil {
			return phaseResult{}, err
		}
	}
	return phaseResult{stop: true, after: after}, nil
}

// runSteps runs the steps from the current one on. Each step is marked
// Running (and the task Running) in a status write before its action
// runs, and its result is written before the next one starts (together
// with the next one's Running mark).
func (r *Reconciler) runSteps(ctx context.Context, run *taskRun) (phaseResult, error) {
	t := run.task
	id := instance.ResolverID(t.Spec.Deployment)
	if holder := r.claimRun(id, t.UID); holder != t.UID {
		run.log.Info("waiting for another task of the deployment, which runs", "task", r.nameOf(holder))
		if run.planUnwritten {
			if err := r.writeStatus(ctx, run); err != nil {
				return phaseResult{}, err
			}
		}
		return phaseResult{stop: true, after: r.opts.PollInterval}, nil
	}
	wasPending := t.Status.Phase == v1alpha1.TaskPending
	defer func() {
		// A task whose first step's start was not written (the write
		// failed) has not started: it may wait for another task next
		// time, and must not hold the deployment meanwhile.
		if wasPending && !r.hasStarted(t.UID) {
			r.releaseRun(id, t.UID)
		}
	}()
	for int(t.Status.CurrentStep) < len(t.Status.Steps) {
		i := t.Status.CurrentStep
		// A status write decodes the server's answer into t, replacing
		// the Steps slice: take the step afresh after every write.
		st := &t.Status.Steps[i]
		if st.State.Terminal() {
			// Written as finished but the index not moved: move on.
			t.Status.CurrentStep++
			continue
		}
		if st.State == v1alpha1.StepPending && st.Attempts > 0 && st.FinishedAt != nil {
			// A failed run of a step its driver retries: not before its
			// back-off, whatever woke the task.
			if wait := time.Until(st.FinishedAt.Add(retryPolicy(st).Delay(runs(st)))); wait > 0 {
				// No copy of backup credentials waits with it (one
				// left by a restart after the failed run's end).
				return phaseResult{stop: true, after: wait}, r.dropCredentials(ctx, run)
			}
			// The failed run's Job goes now that the next run starts, not
			// when the run failed: until the step is written Pending a
			// reload sees it Running, and would take the Job's absence
			// for a run to start at once, uncounted and without back-off.
			if err := r.clearFailedRun(ctx, run, st, "before running it again"); err != nil {
				return phaseResult{}, err
			}
			// The next run makes a Job of its own: the failed one's gone
			// is no Job deleted under it (written with its start).
			delete(st.Recorded, recordJob)
		}
		if res, err := r.startStep(ctx, run, i); err != nil || res.stop {
			return res, err
		}
		st = &t.Status.Steps[i]
		out, err := r.runStepAction(ctx, run, st)
		if err == nil && (out.done || out.newer > 0) {
			run.log.Info("step action done", "task", t.Name, "step", st.Name, "index", i, "attempt", st.Attempts)
			r.pause(ctx)
		}
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			// The step's deadline cut this call short: the error worth
			// reporting is the one that kept it from finishing before.
			if last := r.lastError(t.UID); last != "" {
				err = fmt.Errorf("%w; the error before: %s", err, last)
			}
			if run.waiting == "" {
				// What the step waited for until then: what its timeout
				// says (decideOnce), rather than the deadline's own cut.
				run.waiting = r.lastWaited(t.UID)
			}
		}
		d := decide(stepCall{step: st, out: out, err: err, now: time.Now(),
			defaultTimeout: r.opts.StepTimeout, poll: r.opts.PollInterval, waiting: run.waiting})
		switch d.next {
		case stepFail:
			msg := d.message
			if d.reason == v1alpha1.ReasonStepTimedOut {
				// Nothing runs after the task says it failed. A Job that
				// cannot be deleted (the account may not, the API server
				// fails) does not hold the task's end: its deadline, the
				// step's timeout, stops it anyway; the message says so.
				if err := r.clearFailedRun(ctx, run, st, "of a step that timed out"); err != nil {
					run.log.Error(err, "deleting a timed-out step's job", "step", st.Name)
					msg += fmt.Sprintf("; its job could not be deleted (its deadline stops it): %v", err)
				}
			}
			return r.failStep(ctx, run, d.reason, msg, d.output)
		case stepRetry:
			r.mu.Lock()
			r.lastErr[t.UID] = d.err.Error()
			delete(r.lastWait, t.UID)
			r.mu.Unlock()
			return phaseResult{}, d.err
		case stepAgain:
			// Pending again: the next start counts a new attempt and
			// starts the step's clock anew. The failed run's Job is
			// deleted when that start comes, after this is written (a
			// timed-out run's is stopped by its deadline meanwhile).
			now := metav1.Now()
			st.State, st.Message, st.FinishedAt = v1alpha1.StepPending, boundMessage(r.redact(ctx, run, d.message)), &now
			st.Output = boundOutput(r.redact(ctx, run, d.output), maxActionOutput)
			run.log.Info("step failed; running it again", "step", st.Name, "attempt", st.Attempts, "after", d.after.String())
			if err := r.writeStatus(ctx, run); err != nil {
				return phaseResult{}, err
			}
			// The failed run's end and output are written: its copy of
			// backup credentials goes; the next run copies them again.
			if err := r.dropCredentials(ctx, run); err != nil {
				return phaseResult{}, err
			}
			return phaseResult{stop: true, after: d.after}, nil
		case stepRecord:
			if st.Recorded == nil {
				st.Recorded = map[string]string{}
			}
			maps.Copy(st.Recorded, d.record)
			if err := r.writeStatus(ctx, run); err != nil {
				return phaseResult{}, err
			}
			continue // run the action again (st is taken afresh), now with its record
		case stepSuperseded:
			// A newer instance holds the StyrminDeployment: this change's
			// remaining actions (its post steps) still run, as the
			// earlier ones did, and the task ends Superseded.
			r.endStep(ctx, run, st, v1alpha1.StepSucceeded, d.output, "")
			t.Status.SupersededBy = d.newer
			t.Status.CurrentStep++
			if err := r.writeStatus(ctx, run); err != nil {
				return phaseResult{}, err
			}
		case stepWait:
			if run.waiting != "" {
				r.mu.Lock()
				r.lastWait[t.UID] = run.waiting
				r.mu.Unlock()
			}
			if d.message != "" {
				// Blocked until a person acts: say why, and start the
				// step's clock again, so its timeout counts from when
				// it can make progress (a rare state: one write a poll).
				now := metav1.Now()
				st.Message, st.StartedAt = boundMessage(r.redact(ctx, run, d.message)), &now
				setTaskConditions(t, d.reason, st.Message)
				if err := r.writeStatus(ctx, run); err != nil {
					return phaseResult{}, err
				}
			}
			return phaseResult{stop: true, after: d.after}, nil
		case stepDone:
			// A backup taken inside a change (before an upgrade) is
			// recorded as a StyrminBackup once its last step is done,
			// before that step's end is written: a restart records it
			// again, which finds it made.
			if err := r.recordInlineBackup(ctx, run, i); err != nil {
				if outcome.IsStalled(err) {
					return r.failStep(ctx, run, v1alpha1.ReasonStepFailed, err.Error(), d.output)
				}
				return phaseResult{}, err
			}
			r.endStep(ctx, run, st, v1alpha1.StepSucceeded, d.output, "")
			t.Status.CurrentStep++
		}
	}
	if t.Status.SupersededBy > 0 {
		return r.finish(ctx, run, v1alpha1.TaskSuperseded,
			fmt.Sprintf("the StyrminDeployment holds sequence %d, newer than %d: this change's actions ran, its instance was not written", t.Status.SupersededBy, t.Spec.ToSequence))
	}
	return r.finish(ctx, run, v1alpha1.TaskSucceeded, "")
}

// runStepAction runs the step's action bounded by the step's deadline, so
// a call that hangs (an exec whose node does not answer) ends in time.
func (r *Reconciler) runStepAction(ctx context.Context, run *taskRun, st *v1alpha1.TaskStep) (actionOutcome, error) {
	if st.StartedAt != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, st.StartedAt.Add(stepTimeout(st, r.opts.StepTimeout)))
		defer cancel()
	}
	return r.runAction(ctx, run, st)
}

// startStep marks step i Running and writes it, when it is pending or was
// interrupted by a restart (Running but not started by this process).
func (r *Reconciler) startStep(ctx context.Context, run *taskRun, i int32) (phaseResult, error) {
	t := run.task
	st := &t.Status.Steps[i]
	r.mu.Lock()
	here, ok := r.started[t.UID]
	tried, wasTried := r.tried[t.UID]
	delete(r.tried, t.UID)
	if st.State == v1alpha1.StepRunning && !(ok && here == i) && wasTried && tried == (triedStart{i, st.Attempts}) {
		// This process's start, whose write it took for failed.
		r.started[t.UID], here, ok = i, i, true
	}
	r.mu.Unlock()
	if st.State == v1alpha1.StepRunning && ok && here == i {
		return phaseResult{}, nil
	}
	now := metav1.Now()
	resumed := st.State == v1alpha1.StepRunning
	if resumed {
		// Interrupted by a restart: resumed a bounded number of times, as
		// each resume starts the step's clock again; but for a runJob
		// step's Job, which its own deadline bounds (jobRunsOn).
		takeUp := false
		if int(st.Resumes) >= r.opts.MaxStepResumes {
			var err error
			if takeUp, err = r.jobRunsOn(ctx, run, st); err != nil {
				return phaseResult{}, err
			}
		}
		if int(st.Resumes) >= r.opts.MaxStepResumes && !takeUp {
			msg := fmt.Sprintf("the agent restarted while this step ran %d times, more than it resumes a step (%d): it is not run again; see why the agent restarts (its pod's last state and log), then run the change again (styrminctl retry)",
				st.Resumes+1, r.opts.MaxStepResumes)
			if left := r.interruptedJob(ctx, run, st); left != "" {
				msg += "; " + left
			}
			return r.failStep(ctx, run, v1alpha1.ReasonStepInterrupted, msg, st.Output)
		}
		st.Resumes++
		run.log.Info("resuming a step interrupted by a restart", "step", st.Name, "attempt", st.Attempts+1, "resume", st.Resumes, "pastBound", takeUp)
	}
	st.State = v1alpha1.StepRunning
	st.Attempts++
	st.StartedAt = &now
	st.FinishedAt = nil
	if !resumed {
		markJobSince(st, now.Time)
	}
	if t.Status.Phase != v1alpha1.TaskRunning {
		t.Status.Phase = v1alpha1.TaskRunning
		if t.Status.StartedAt == nil {
			t.Status.StartedAt = &now
		}
	}
	setTaskConditions(t, v1alpha1.ReasonTaskRunning, "running step "+st.Name)
	if err := r.writeStatus(ctx, run); err != nil {
		r.mu.Lock()
		r.tried[t.UID] = triedStart{i, st.Attempts}
		r.mu.Unlock()
		return phaseResult{}, err
	}
	r.mu.Lock()
	r.started[t.UID] = i
	delete(r.freshJobs, t.UID)
	if !resumed && st.Action == string(drivers.ActionRunJob) {
		r.freshJobs[t.UID] = freshJob{attempt: triedStart{i, st.Attempts}}
	}
	delete(r.lastErr, t.UID)
	delete(r.lastWait, t.UID)
	r.mu.Unlock()
	// The step before's end is written: the copies of backup credentials
	// its Job had go, unless this step's Job, running on after a restart,
	// needs them. A step that starts anew copies them again.
	if !(resumed && stepUsesCredentials(t, st)) {
		if err := r.dropCredentials(ctx, run); err != nil {
			return phaseResult{}, err
		}
	}
	run.log.Info("step started", "task", t.Name, "step", st.Name, "index", i, "attempt", st.Attempts)
	r.pause(ctx)
	return phaseResult{}, nil
}

// recordEndedJob is the key under which a resume past MaxStepResumes
// records the UID of the step's Job it took up once the Job had ended
// (jobRunsOn).
const recordEndedJob = "endedJob"

// jobRunsOn reports whether st is a runJob step whose Job is still there
// and not being deleted (the one it recorded; with none recorded, one of
// its task's, made by its deployment's step: an agent stopped between the
// Job's creation and its record, as runJob takes up): a resume past
// MaxStepResumes takes it up rather than fail the step and delete it. The
// Job runs in the cluster whatever the agent does, and a resume of the step
// runs nothing again; deleting it killed a migration midway because the
// agent crash-looped, leaving the database half migrated. The wait stays
// bounded: the Job's deadline (activeDeadlineSeconds, the step's timeout,
// counted from the Job's start whatever the agent does) ends it, and a
// resume then reads its end. A Job that ended is taken up once only
// (recorded in st): an agent that dies while it reads the end (its logs,
// its pods) took it up at every restart, crash-looping for ever. Another
// deployment's Job at the name (one deleted from the namespace before, its
// task of the same name) is not the step's run: taking it up made the
// step wait for it, then run its own Job, past the bound.
func (r *Reconciler) jobRunsOn(ctx context.Context, run *taskRun, st *v1alpha1.TaskStep) (bool, error) {
	if st.Action != string(drivers.ActionRunJob) {
		return false, nil
	}
	t := run.task
	var job batchv1.Job
	key := client.ObjectKey{Namespace: t.Spec.Namespace, Name: retriedJobName(t, st)}
	if err := r.opts.APIReader.Get(ctx, key, &job); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading job %s of a step interrupted by restarts: %w", key, err)
	}
	uid := st.Recorded[recordJob]
	switch {
	case !job.DeletionTimestamp.IsZero(), !ownJob(t, &job):
		return false, nil
	case uid != "" && string(job.UID) != uid, uid == "" && job.Labels[LabelTask] != t.Name:
		return false, nil
	}
	if health.JobEnded(&job) {
		if st.Recorded[recordEndedJob] == string(job.UID) {
			return false, nil
		}
		if st.Recorded == nil {
			st.Recorded = map[string]string{}
		}
		// Written with the resume (startStep).
		st.Recorded[recordEndedJob] = string(job.UID)
	}
	return true, nil
}

// interruptedJob says what the Job of st, a runJob step failed as
// interrupted past MaxStepResumes, did: the Job is left as it is, never
// deleted with the step's failure. One that ended (its end taken up once,
// the agent dying again while it read it) is the only record of what its
// migration did, kept with its pods and logs as long as its task; deleted,
// a migration that completed read as a step interrupted and not run. One
// that runs (not the step's to take up: another run of the deployment at
// its name) is not stopped midway; its deadline ends it. "" when the step
// has no Job of its deployment there, or it cannot be read.
func (r *Reconciler) interruptedJob(ctx context.Context, run *taskRun, st *v1alpha1.TaskStep) string {
	if st.Action != string(drivers.ActionRunJob) {
		return ""
	}
	t := run.task
	var job batchv1.Job
	key := client.ObjectKey{Namespace: t.Spec.Namespace, Name: retriedJobName(t, st)}
	if err := r.opts.APIReader.Get(ctx, key, &job); err != nil {
		if !apierrors.IsNotFound(err) {
			run.log.Error(err, "reading the job of a step interrupted too often", "job", key.String())
		}
		return ""
	}
	if !ownJob(t, &job) || !job.DeletionTimestamp.IsZero() {
		return ""
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return fmt.Sprintf("its job %s completed (%d pod(s) succeeded) and is kept with its pods and logs: its work ran, its end was not recorded", key, job.Status.Succeeded)
		case batchv1.JobFailed:
			return fmt.Sprintf("its job %s failed (%s: %s) and is kept with its pods and logs", key, c.Reason, c.Message)
		}
	}
	return fmt.Sprintf("its job %s runs on, not stopped midway: its deadline ends it", key)
}

// triedStart is a step's start whose write failed: its index and attempt.
type triedStart struct {
	step, attempts int32
}

// pause waits StepPause (fault-injection tests only).
func (r *Reconciler) pause(ctx context.Context) {
	if r.opts.StepPause <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(r.opts.StepPause):
	}
}

// endStep ends a step with what it did and why: both bounded and masked
// (redact), as the status is read by more people than the secrets.
func (r *Reconciler) endStep(ctx context.Context, run *taskRun, st *v1alpha1.TaskStep, state v1alpha1.StepState, output, message string) {
	now := metav1.Now()
	st.State = state
	st.Output = boundOutput(r.redact(ctx, run, output), maxActionOutput)
	st.Message = boundMessage(r.redact(ctx, run, message))
	st.FinishedAt = &now
	if st.StartedAt != nil {
		r.metrics.stepDuration.WithLabelValues(st.Action, string(state)).Observe(now.Sub(st.StartedAt.Time).Seconds())
	}
}

// redact masks the deployment's sensitive values in text a step reports
// (a command's output, a Job's logs, an error): the engine renders only
// placeholders, but a program that was given a value may print it. The
// values come from the Secret the release wrote (read once per run,
// without the cache: the agent does not watch Secrets); without one there
// is nothing to mask. So do the values of the backup credentials a
// backup's or restore's jobs were given (credentialValues), and those of
// the Secrets the deployment's secret parameters name (secretRefValues):
// a job's pod takes them from the component's template.
func (r *Reconciler) redact(ctx context.Context, run *taskRun, text string) string {
	if text == "" {
		return text
	}
	if !run.credentialsRead {
		creds, err := r.credentialValues(ctx, run)
		if err != nil {
			return fmt.Sprintf("[%d bytes of output withheld: the backup credentials its jobs were given could not be read to mask it: %v]", len(text), err)
		}
		refs, err := r.secretRefValues(ctx, run)
		if err != nil {
			return fmt.Sprintf("[%d bytes of output withheld: the Secrets the deployment's secret parameters name could not be read to mask it: %v]", len(text), err)
		}
		if creds == nil {
			creds = resolver.Sensitive{}
		}
		maps.Copy(creds, refs)
		run.credentials, run.credentialsRead = creds, true
	}
	text = run.credentials.Mask(text)
	if run.instance == nil || !resolver.HasPlaceholders(run.instance) {
		return text
	}
	if !run.sensitiveRead {
		a, err := r.actor(ctx, run)
		if err == nil {
			var sec corev1.Secret
			key := client.ObjectKey{Namespace: run.task.Spec.Namespace, Name: v1alpha1.SensitiveSecretName}
			if err = a.Reader.Get(ctx, key, &sec); err == nil {
				run.sensitive, run.sensitiveRead = resolver.SensitiveByDigest(sec.Data), true
			} else if apierrors.IsNotFound(err) {
				run.sensitiveRead, err = true, nil
			}
		}
		if err != nil {
			// Without the values nothing can be masked: say so, and keep
			// nothing of what may hold one.
			return fmt.Sprintf("[%d bytes of output withheld: the deployment's sensitive values could not be read to mask it: %v]", len(text), err)
		}
	}
	return run.sensitive.Mask(text)
}

// boundOutput keeps the last max bytes of s, saying how much was cut.
func boundOutput(s string, max int) string {
	if len(s) <= max {
		return s
	}
	marker := fmt.Sprintf("[truncated: the last %d of %d bytes]\n", max, len(s))
	return marker + tailString(s, max-len(marker))
}

// failStep fails the current step and the task; the later steps are
// skipped. What ran before stays as it is: a step that failed before the
// instance was written leaves the active instance unchanged. The step's
// output (a failed command's) goes to its status only; the task's Warning
// event names the step and why, never what a command printed.
func (r *Reconciler) failStep(ctx context.Context, run *taskRun, reason, msg, output string) (phaseResult, error) {
	if recorded, err := r.recordedFirst(ctx, run); err != nil || recorded {
		return r.endRecorded(ctx, run, recorded, err, reason+": "+msg)
	}
	t := run.task
	i := int(t.Status.CurrentStep)
	st := &t.Status.Steps[i]
	r.endStep(ctx, run, st, v1alpha1.StepFailed, output, msg)
	for j := i + 1; j < len(t.Status.Steps); j++ {
		t.Status.Steps[j].State = v1alpha1.StepSkipped
		t.Status.Steps[j].Message = "skipped: step " + st.Name + " failed"
	}
	return r.finishWith(ctx, run, v1alpha1.TaskFailed, fmt.Sprintf("step %s (%s) failed: %s", st.Name, reason, st.Message),
		fmt.Sprintf("step %s failed (%s); its message and output are in the task's status", st.Name, reason))
}

// failTask ends a task that cannot run at all.
func (r *Reconciler) failTask(ctx context.Context, run *taskRun, reason, msg string) (phaseResult, error) {
	if recorded, err := r.recordedFirst(ctx, run); err != nil || recorded {
		return r.endRecorded(ctx, run, recorded, err, reason+": "+msg)
	}
	for i := range run.task.Status.Steps {
		if !run.task.Status.Steps[i].State.Terminal() {
			run.task.Status.Steps[i].State = v1alpha1.StepSkipped
		}
	}
	run.failReason = reason
	return r.finish(ctx, run, v1alpha1.TaskFailed, reason+": "+r.redact(ctx, run, msg))
}

// recordedFirst tells a task about to fail whether its change was
// recorded active first. Only a task running its last step can be. When
// that step writes the instance, the StyrminDeployment controller records
// the change with the Ready the step waits for: the task claims its
// failure (instance.ActiveClaims), which waits for a record under way and
// keeps the controller from making one after. Any other last step: the
// task itself records its change before it writes its end (finishWith),
// and a reload after that write was refused or lost, or the agent killed,
// runs the step again. Either way, a record made before (by this agent
// before a restart, or a write whose answer was lost) is read from the API
// server, which a cache may not show yet.
func (r *Reconciler) recordedFirst(ctx context.Context, run *taskRun) (bool, error) {
	t := run.task
	target := instance.TaskTarget(t)
	steps := t.Status.Steps
	if target == nil || IsOperation(t) || t.Status.Phase != v1alpha1.TaskRunning || int(t.Status.CurrentStep) != len(steps)-1 {
		return false, nil
	}
	if instance.LastStepWritesInstance(t, t.Spec.Deployment, t.Spec.ToSequence, target.Digest) {
		recorded, err := r.opts.ActiveClaims.Fail(ctx, t.UID)
		if err != nil || recorded {
			return recorded, err
		}
	}
	var sd v1alpha1.StyrminDeployment
	key := instance.Key(t.Spec.Namespace)
	if err := r.opts.APIReader.Get(ctx, key, &sd); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading StyrminDeployment %s before ending the task Failed: %w", key, err)
	}
	return recordedBy(&sd, t.Spec.ToSequence, t.Name), nil
}

// recordDoubtPoll is how often a task whose change's record is in doubt
// (instance.ErrRecordInDoubt) asks again whether it may fail.
const recordDoubtPoll = 10 * time.Second

// endRecorded ends a task whose change was recorded active before its
// last step could fail (recordedFirst): that step waited for its
// deployment to be Ready at its sequence, which it was, so the step and
// the task succeed, saying what would have failed them. err is
// recordedFirst's (the task is then left as it is, to be tried again; a
// record in doubt after recordDoubtPoll).
func (r *Reconciler) endRecorded(ctx context.Context, run *taskRun, recorded bool, err error, why string) (phaseResult, error) {
	if errors.Is(err, instance.ErrRecordInDoubt) {
		run.log.Info("not failing the task yet", "task", run.task.Name, "why", err.Error())
		return phaseResult{stop: true, after: recordDoubtPoll}, nil
	}
	if err != nil || !recorded {
		return phaseResult{}, err
	}
	why = r.redact(ctx, run, why)
	t := run.task
	st := &t.Status.Steps[t.Status.CurrentStep]
	out := fmt.Sprintf("StyrminDeployment %s was Ready at sequence %d and records it active, before the step could end (%s)",
		instance.Key(t.Spec.Namespace), t.Spec.ToSequence, why)
	run.log.Info("the change was recorded active before its last step failed; the task succeeds", "task", t.Name, "step", st.Name, "why", why)
	r.endStep(ctx, run, st, v1alpha1.StepSucceeded, out, "")
	t.Status.CurrentStep++
	return r.finish(ctx, run, v1alpha1.TaskSucceeded, "")
}

// finish writes a terminal phase, with msg as its message and event.
func (r *Reconciler) finish(ctx context.Context, run *taskRun, phase v1alpha1.TaskPhase, msg string) (phaseResult, error) {
	return r.finishWith(ctx, run, phase, msg, msg)
}

// finishWith writes a terminal phase with msg as its message; a Failed or
// Superseded task's event says event.
func (r *Reconciler) finishWith(ctx context.Context, run *taskRun, phase v1alpha1.TaskPhase, msg, event string) (phaseResult, error) {
	t := run.task
	if phase == v1alpha1.TaskSucceeded {
		// Before the task's own end is written: whoever sees the task
		// Succeeded sees its instance active.
		if err := r.recordActive(ctx, run); err != nil {
			// Persist that every step ended first: a retry then only
			// finishes, and runs no step again.
			if werr := r.writeStatus(ctx, run); werr != nil {
				return phaseResult{}, errors.Join(err, werr)
			}
			return phaseResult{}, err
		}
	}
	now := metav1.Now()
	msg = boundMessage(msg)
	t.Status.Phase = phase
	t.Status.FinishedAt = &now
	t.Status.Message = msg
	// A task that ends before its first step (superseded, withdrawn,
	// failed in its checks) gets no start time: startedAt is when its
	// first step started, and one here would read as a task that ran
	// (once, as one that ended a hold on stopped components).
	reason := string(phase)
	if phase != v1alpha1.TaskSucceeded && run.failReason != "" {
		// The conditions name why: InvalidTask, LockMismatch, StepFailed,
		// Withdrawn…
		reason = run.failReason
	}
	setTaskConditions(t, reason, msg)
	if err := r.writeStatus(ctx, run); err != nil {
		return phaseResult{}, err
	}
	r.metrics.finished.WithLabelValues(string(workflow(t)), string(phase)).Inc()
	// A task records an event only when it ends other than as planned:
	// its start and success are in its status, and the change a
	// successful task makes is the StyrminDeployment's Installed or
	// Upgraded event. At hundreds of tasks a commit, two more events each
	// were a seventh of the agent's requests.
	switch phase {
	case v1alpha1.TaskFailed:
		r.event(t, nil, corev1.EventTypeWarning, v1alpha1.ReasonTaskFailed, "%s", event)
	case v1alpha1.TaskSuperseded:
		r.event(t, nil, corev1.EventTypeNormal, reason, "%s", event)
	}
	run.log.Info("task finished", "phase", phase, "message", msg)
	r.ended(t)
	r.opts.ActiveClaims.Forget(t.UID)
	r.pruneTasks(ctx, run)
	// Its end written, no Job of the task needs its copies of backup
	// credentials; failing, the task is reconciled again to delete them.
	if err := r.dropCredentials(ctx, run); err != nil {
		return phaseResult{}, err
	}
	return phaseResult{stop: true}, nil
}

// recordActive records the task's instance as the deployment's active
// one on its StyrminDeployment (status.active and activeSequence): the
// task succeeded, post steps included. A StyrminDeployment gone (a
// tombstone uninstalled) or already recording it or a newer one is left
// alone: when the core step is the task's last, the StyrminDeployment
// controller records it with the Ready the step waited for.
func (r *Reconciler) recordActive(ctx context.Context, run *taskRun) error {
	if run.instance == nil || run.instance.Tombstone() || IsOperation(run.task) {
		// An operation changes no instance.
		return nil
	}
	sd, err := r.deployment(ctx, run)
	if err != nil || sd == nil {
		return err
	}
	seq := run.task.Spec.ToSequence
	for attempt := 1; ; attempt++ {
		if a := sd.Status.Active; a != nil && a.Sequence >= seq {
			return nil
		}
		base := sd.DeepCopy()
		// The whole summary in the patch: a merge patch from a cached copy
		// would leave out the fields it happens to share with it.
		base.Status.Active = nil
		sd.Status.Active = instance.Summary(run.instance, run.task.Name)
		sd.Status.ActiveSequence = seq
		// Only over the copy the check above read: a replica that lost
		// its lease while it finished this task (the next leader ran it
		// and a newer change since) would otherwise record an older
		// instance active over a newer one, and the next change's
		// workflow would be chosen against it.
		err := r.opts.Client.Status().Patch(ctx, sd, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err) || attempt == recordActiveAttempts:
			return fmt.Errorf("recording sequence %d as the active instance of StyrminDeployment %s/%s: %w", seq, sd.Namespace, sd.Name, err)
		}
		if sd, err = r.freshDeployment(ctx, run); err != nil || sd == nil {
			return err
		}
	}
}

// recordActiveAttempts bounds recordActive's reads again after a
// conflict; one left over is an error, and the task is reconciled again.
const recordActiveAttempts = 3

// freshDeployment reads the task's StyrminDeployment from the API server
// (nil when it is gone), for run's later reads too: the cache may hold
// the copy a write just conflicted with.
func (r *Reconciler) freshDeployment(ctx context.Context, run *taskRun) (*v1alpha1.StyrminDeployment, error) {
	var sd v1alpha1.StyrminDeployment
	key := instance.Key(run.task.Spec.Namespace)
	switch err := r.opts.APIReader.Get(ctx, key, &sd); {
	case apierrors.IsNotFound(err):
		run.sd, run.sdRead = nil, true
	case err != nil:
		return nil, fmt.Errorf("reading StyrminDeployment %s: %w", key, err)
	default:
		run.sd, run.sdRead = &sd, true
	}
	return run.sd, nil
}

func (r *Reconciler) event(regarding, related client.Object, evType, reason, format string, args ...any) {
	if r.opts.Recorder == nil {
		return
	}
	if related == nil {
		r.opts.Recorder.Eventf(regarding, nil, evType, reason, "Run", format, args...)
		return
	}
	r.opts.Recorder.Eventf(regarding, related, evType, reason, "Run", format, args...)
}

// setTaskConditions sets the kstatus-style conditions of a task from its
// phase: Reconciling while it is pending or running, Ready when it
// succeeded (or was superseded: nothing is left to do), Stalled when it
// failed.
func setTaskConditions(t *v1alpha1.StyrminTask, reason, msg string) {
	gen := t.Generation
	msg = boundMessage(msg)
	set := func(typ string, status metav1.ConditionStatus) {
		apimeta.SetStatusCondition(&t.Status.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen,
		})
	}
	switch t.Status.Phase {
	case v1alpha1.TaskPending, v1alpha1.TaskRunning:
		set(v1alpha1.ConditionReconciling, metav1.ConditionTrue)
		set(v1alpha1.ConditionReady, metav1.ConditionFalse)
		apimeta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionStalled)
	case v1alpha1.TaskSucceeded, v1alpha1.TaskSuperseded:
		set(v1alpha1.ConditionReady, metav1.ConditionTrue)
		apimeta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionReconciling)
		apimeta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionStalled)
	case v1alpha1.TaskFailed:
		set(v1alpha1.ConditionReady, metav1.ConditionFalse)
		set(v1alpha1.ConditionStalled, metav1.ConditionTrue)
		apimeta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionReconciling)
	}
}

// maxMessage bounds a step's and a task's message and its conditions'.
// The API server refuses a condition's message past 32 KiB: a longer one
// (a waitReady that timed out naming hundreds of workloads) kept the task
// from writing its end, Running for ever, and every later change of its
// deployment waited behind it. What is cut is marked.
const maxMessage = 8 << 10

// boundMessage cuts s to maxMessage bytes, on a character boundary.
func boundMessage(s string) string { return eventnote.Cut(s, maxMessage) }

// driver returns the instance's driver version.
func (r *Reconciler) driver(ctx context.Context, run *taskRun) (*drivers.Driver, error) {
	if run.driver != nil {
		return run.driver, nil
	}
	// Classified by the source: missing or not loading is stalled (the
	// task fails), anything else is retried. An in-repository driver is
	// read at the task's lock commit: the head may have dropped it since.
	commit := run.task.Spec.Lock.Commit
	if commit == "" || IsOperation(run.task) {
		commit = run.instance.SourceCommit
	}
	d, err := driversource.Get(ctx, r.opts.Drivers, driversource.Request{Ref: run.instance.Driver, Commit: commit})
	if err != nil {
		return nil, err
	}
	run.driver = d
	return d, nil
}

// rendered returns the target instance's objects.
func (r *Reconciler) rendered(ctx context.Context, run *taskRun) (*drivers.Manifests, error) {
	if run.manifests != nil {
		return run.manifests, nil
	}
	if run.instance.Tombstone() || run.instance.Context == nil {
		return &drivers.Manifests{}, nil
	}
	d, err := r.driver(ctx, run)
	if err != nil {
		return nil, err
	}
	m, err := r.opts.Renders.Render(ctx, d, *run.instance.Context, run.instance.Values)
	if err != nil {
		what := fmt.Sprintf("rendering %s with %s@%s", run.instance.ID, d.Name, d.Version)
		if cutShort(ctx, err) {
			// Not the driver's fault: left as the context's error, a
			// step's deadline ends the step TimedOut (decide).
			return nil, fmt.Errorf("%s: %w", what, ctx.Err())
		}
		return nil, driversource.ClassifyRender(fmt.Errorf("%s: %w", what, err))
	}
	run.manifests = m
	return m, nil
}

// cutShort reports whether a render failed because ctx ended (a step's
// deadline passed, say while the agent was away, or the agent stops): a
// driver reports its caller's deadline as its own time limit, whose
// message asks for a smaller driver, and that failed the step at once.
func cutShort(ctx context.Context, err error) bool {
	if ctx.Err() == nil {
		return false
	}
	le, ok := errors.AsType[*drivers.LimitError](err)
	return errors.Is(err, ctx.Err()) || ok && le.Limit == drivers.LimitTime
}

// deployment returns the deployment's StyrminDeployment (nil when there is
// none), read once per reconcile through the cache.
func (r *Reconciler) deployment(ctx context.Context, run *taskRun) (*v1alpha1.StyrminDeployment, error) {
	if run.sdRead {
		return run.sd, nil
	}
	var sd v1alpha1.StyrminDeployment
	key := instance.Key(run.task.Spec.Namespace)
	err := r.opts.Client.Get(ctx, key, &sd)
	switch {
	case apierrors.IsNotFound(err):
		run.sd = nil
	case err != nil:
		return nil, fmt.Errorf("reading StyrminDeployment %s: %w", key, err)
	default:
		run.sd = &sd
	}
	run.sdRead = true
	return run.sd, nil
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	// Do not start in the middle of a UTF-8 sequence: drop the leading
	// continuation bytes only. The text is masked already, so nothing
	// inside it may be removed: dropping invalid bytes between two pieces
	// of a value would join them into the value again.
	i := 0
	for i < len(s) && s[i]&0xC0 == 0x80 {
		i++
	}
	return s[i:]
}
