package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/internal/eventnote"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// Finalizer keeps a StyrminBackup or StyrminRestore until its tasks are
// deleted: they live in the deployments' namespaces, where no owner
// reference from the agent's namespace reaches.
const Finalizer = v1alpha1.Group + "/operation-tasks"

// driverRetry is how often a backup's deletion that waits for a driver
// that cannot be loaded looks again.
const driverRetry = 30 * time.Second

// Options configures the operation controllers.
type Options struct {
	// Client reads through the manager's cache and writes to the API.
	Client client.Client
	// APIReader reads straight from the API server: Secrets, and the
	// tasks a new operation task is ordered after.
	APIReader client.Reader
	// Drivers gives the driver of a running instance.
	Drivers driversource.Source
	// Settings gives the environments' backup settings from git.
	Settings Settings
	// Namespace is the agent's namespace, where StyrminBackups,
	// StyrminRestores and the backup credentials Secrets live.
	Namespace string
	// Cluster is the agent's cluster.
	Cluster string
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Source is the agent's StyrminSource, where the scheduler records
	// the newest time each schedule made, for the agent that runs next
	// (empty: kept in memory only).
	Source types.NamespacedName
	// Recorder records events (nil: SetupWithManager takes the
	// manager's, as the agent's; none without a manager).
	Recorder events.EventRecorder
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// BackupReconciler runs StyrminBackups: it checks the backup can be
// taken, makes one backup task per deployment and records each one's
// result.
type BackupReconciler struct{ opts Options }

var _ reconcile.Reconciler = (*BackupReconciler)(nil)

// NewBackupReconciler checks opts and returns the StyrminBackup
// controller.
func NewBackupReconciler(opts Options) (*BackupReconciler, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	return &BackupReconciler{opts: opts}, nil
}

func (o *Options) check() error {
	switch {
	case o.Client == nil:
		return errors.New("operation: Client is required")
	case o.APIReader == nil:
		return errors.New("operation: APIReader is required")
	case o.Drivers == nil:
		return errors.New("operation: Drivers is required")
	case o.Settings == nil:
		return errors.New("operation: Settings is required")
	case o.Namespace == "" || o.Cluster == "":
		return errors.New("operation: Namespace and Cluster are required")
	}
	return nil
}

// SetupWithManager registers the controller: StyrminBackups, and the
// operation tasks that belong to them.
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.opts.Recorder == nil {
		r.opts.Recorder = eventnote.Wrap(mgr.GetEventRecorder(eventSource))
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("styrminbackup").
		For(&v1alpha1.StyrminBackup{}).
		Watches(&v1alpha1.StyrminTask{}, handler.EnqueueRequestsFromMapFunc(ownerOf(v1alpha1.OperationBackup, r.opts.Namespace))).
		Complete(r)
}

// ownerOf maps an operation task to its StyrminBackup or StyrminRestore.
func ownerOf(kind v1alpha1.OperationKind, namespace string) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		t, ok := o.(*v1alpha1.StyrminTask)
		if !ok || t.Spec.Operation == nil {
			return nil
		}
		if k := t.Spec.Operation.Kind; k != kind && (kind != v1alpha1.OperationBackup || k != v1alpha1.OperationDeleteBackup) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: namespace, Name: t.Spec.Operation.Name}}}
	}
}

// Reconcile runs the chain refuseForeign → finalize → start → record;
// a status write another writer's overtook is decided again
// (againOnConflict).
func (r *BackupReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return againOnConflict(r.reconcile(ctx, req))
}

func (r *BackupReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var b v1alpha1.StyrminBackup
	if err := r.opts.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if b.Namespace != r.opts.Namespace {
		return reconcile.Result{}, r.refuseForeign(ctx, &b)
	}
	if !b.DeletionTimestamp.IsZero() {
		// Read afresh: a cached copy of a backup already gone would make
		// its artefacts' delete tasks again.
		if err := r.opts.APIReader.Get(ctx, req.NamespacedName, &b); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if controllerutil.ContainsFinalizer(&b, Finalizer) {
			// Deleting the CRD deletes every StyrminBackup: deleting their
			// artefacts would make removing Styrmin delete the backups'
			// data. It is kept where it is, and the backup goes.
			removed, err := instance.CRDRemoved(ctx, r.opts.APIReader, BackupCRD)
			if err != nil {
				return reconcile.Result{RequeueAfter: 5 * time.Second}, err
			}
			if removed {
				r.sayBackupKept(ctx, &b)
				return reconcile.Result{}, finalize(ctx, r.opts.Client, r.opts.APIReader, r.opts.Namespace, &b, v1alpha1.OperationBackup, v1alpha1.OperationDeleteBackup)
			}
		}
		wait, kept, err := r.deleteArtifacts(ctx, &b)
		if err != nil {
			return reconcile.Result{RequeueAfter: 5 * time.Second}, err
		}
		if wait.reason != "" {
			every := 5 * time.Second
			if wait.reason == v1alpha1.ReasonDeletionWaitsForDriver {
				every = driverRetry // each look may fetch the driver's remote
			}
			return reconcile.Result{RequeueAfter: every}, sayDeletionWaits(ctx, r.opts.Client, "StyrminBackup", &b, &b.Status.Conditions, wait)
		}
		left, err := r.artifactsLeft(ctx, &b)
		if err != nil {
			return reconcile.Result{RequeueAfter: 5 * time.Second}, err
		}
		if err := finalize(ctx, r.opts.Client, r.opts.APIReader, r.opts.Namespace, &b, v1alpha1.OperationBackup, v1alpha1.OperationDeleteBackup); err != nil {
			return reconcile.Result{}, err
		}
		r.sayArtifactsLeft(ctx, &b, left)
		r.sayArtifactsKept(ctx, &b, kept)
		return reconcile.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(&b, Finalizer) {
		base := b.DeepCopy()
		controllerutil.AddFinalizer(&b, Finalizer)
		if err := patchFinalizers(ctx, r.opts.Client, &b, base); err != nil {
			return reconcile.Result{}, err
		}
	}
	var missing []int
	switch {
	case b.Status.Phase == "":
		// About to start: read afresh. The finalizer's patch queues the
		// backup again at once, and a cache that has not seen the start's
		// status write would start it again, or refuse it (settings
		// changed meanwhile) while its tasks run.
		if err := r.opts.APIReader.Get(ctx, req.NamespacedName, &b); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	case !b.Status.Phase.Terminal() && b.Labels[task.LabelTask] == "" && b.Annotations[AnnotationSupersededBy] == "":
		var err error
		if missing, err = unmadeFresh(ctx, r.opts.Client, r.opts.APIReader, &b, func() []v1alpha1.OperationDeployment { return b.Status.Deployments }); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	if b.Status.Phase.Terminal() {
		return reconcile.Result{}, nil
	}
	if b.Labels[task.LabelTask] != "" {
		// Taken inside a change's task (a backup before an upgrade), which
		// records its result itself.
		return reconcile.Result{}, nil
	}
	if b.Status.Phase == "" {
		if by := b.Annotations[AnnotationSupersededBy]; by != "" {
			return reconcile.Result{}, r.fail(ctx, &b, fmt.Sprintf("superseded by the schedule's next backup %s before it started", by))
		}
		return r.start(ctx, &b)
	}
	return r.record(ctx, &b, missing)
}

// refuseForeign refuses a backup made outside the agent's namespace
// before it gets a finalizer (check says why), and drops one an older
// agent added: none of the tasks labelled with its name is its own, and
// its deletion must neither wait for nor delete the tasks, or artefacts,
// of the backup of that name in the agent's namespace.
func (r *BackupReconciler) refuseForeign(ctx context.Context, b *v1alpha1.StyrminBackup) error {
	if err := releaseForeign(ctx, r.opts.Client, b); err != nil {
		return err
	}
	if !b.DeletionTimestamp.IsZero() || b.Status.Phase != "" {
		return nil
	}
	_, err := r.start(ctx, b)
	return err
}

// start checks the backup can be taken and makes its tasks; a refusal
// ends it Failed with nothing else changed.
func (r *BackupReconciler) start(ctx context.Context, b *v1alpha1.StyrminBackup) (reconcile.Result, error) {
	plan, err := r.check(ctx, b)
	var refused *RefusedError
	if errors.As(err, &refused) {
		return reconcile.Result{}, r.refuse(ctx, b, refused)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	now := metav1.NewTime(r.opts.now())
	base := b.DeepCopy()
	b.Status.Phase = v1alpha1.OperationRunning
	b.Status.Location = plan.settings.Location
	b.Status.StartedAt = &now
	b.Status.Deployments, b.Status.Skipped = nil, plan.skipped
	for _, tg := range plan.targets {
		name := task.OperationTaskName(tg.sd.Spec.Deployment.Name, v1alpha1.OperationBackup, b.Name, 1)
		b.Status.Deployments = append(b.Status.Deployments, v1alpha1.OperationDeployment{
			Name: tg.sd.Spec.Deployment.Name, Namespace: tg.sd.Namespace, Task: name, Phase: v1alpha1.OperationPending,
			Artifact: resolver.ArtifactURL(plan.settings.Location, b.Name, tg.sd.Spec.Deployment.Name),
			Sequence: tg.sd.Spec.Sequence,
			Driver:   v1alpha1.DriverRef{Name: tg.driver.Name, Version: tg.driver.Version, Digest: tg.instance.Driver.Digest},
		})
	}
	setConditions(&b.Status.Conditions, b.Generation, v1alpha1.OperationRunning, "creating the backup's tasks")
	// The plan first: a restart after it, or a task that could not be
	// made, makes the same tasks (record, remakeTasks).
	if err := patchStatus(ctx, r.opts.Client, b, base); err != nil {
		return reconcile.Result{}, err
	}
	for i, tg := range plan.targets {
		d := b.Status.Deployments[i]
		op := v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: b.Name, BackupID: b.Name, Artifact: d.Artifact, Secret: plan.settings.Secret, Attempt: 1, Created: created(b)}
		if err := makeTask(ctx, r.opts.Client, r.opts.APIReader, tg, d.Task, op); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// backupPlan is what a backup acts on once checked.
type backupPlan struct {
	settings resolver.EnvironmentBackups
	targets  []target
	// skipped: the deployments being deleted, whose drivers cannot be
	// backed up or whose jobs could not mount the location's claim, each
	// with why.
	skipped []string
}

// check refuses a backup that cannot be taken: an environment of another
// cluster, or one git does not declare or without a location; a location
// its Secret cannot reach; a deployment that does not run here, whose
// driver has no backup hook, or whose namespace lacks a pvc:// location's
// claim (skipUnclaimed). A backup of the whole environment skips those
// last two, as it does a deployment being deleted, while one is left.
func (r *BackupReconciler) check(ctx context.Context, b *v1alpha1.StyrminBackup) (*backupPlan, error) {
	cluster := b.Spec.Cluster
	if cluster == "" {
		cluster = r.opts.Cluster
	}
	envName := cluster + "/" + b.Spec.Environment
	if err := inAgentNamespace(b.Namespace, r.opts.Namespace, "StyrminBackup"); err != nil {
		return nil, err
	}
	if cluster != r.opts.Cluster {
		return nil, &RefusedError{Environment: envName, Msg: fmt.Sprintf("this agent serves cluster %s: a backup of another cluster's environment belongs to that cluster's agent", r.opts.Cluster)}
	}
	if err := validName(b.Name); err != nil {
		return nil, &RefusedError{Environment: envName, Msg: "metadata.name: " + err.Error()}
	}
	settings, err := environment(ctx, r.opts.Settings, cluster, b.Spec.Environment)
	if err != nil {
		return nil, err
	}
	if err := checkCredentials(ctx, r.opts.APIReader, r.opts.Namespace, settings); err != nil {
		return nil, err
	}
	tgs, deleting, err := targets(ctx, r.opts.Client, r.opts.Drivers, cluster, b.Spec.Environment, b.Spec.Deployments)
	if err != nil {
		return nil, err
	}
	// A whole environment's backup takes what can be backed up and says
	// what it skipped (a stateless web server has nothing to keep, a
	// deployment being deleted nothing running); a deployment named that
	// cannot be backed up is refused.
	plan := &backupPlan{settings: settings, skipped: deleting}
	var cannot []string
	for _, tg := range tgs {
		if tg.driver.CanBackup() {
			plan.targets = append(plan.targets, tg)
			continue
		}
		why := fmt.Sprintf("%s: driver %s@%s declares no backup hook", tg.sd.Spec.Deployment.Name, tg.driver.Name, tg.driver.Version)
		plan.skipped = append(plan.skipped, why)
		cannot = append(cannot, fmt.Sprintf("%s (driver %s@%s)", tg.sd.Spec.Deployment.Name, tg.driver.Name, tg.driver.Version))
	}
	slices.Sort(plan.skipped)
	if len(cannot) > 0 && (len(b.Spec.Deployments) > 0 || len(plan.targets) == 0) {
		return nil, &RefusedError{Environment: envName, Deployment: strings.Join(cannot, ", "),
			Msg: "its driver declares no backup and restore hooks, so it cannot be backed up (expected actions: backup: … and restore: … in the driver)"}
	}
	if err := skipUnclaimed(ctx, r.opts.APIReader, envName, len(b.Spec.Deployments) > 0, plan); err != nil {
		return nil, err
	}
	return plan, nil
}

// skipUnclaimed leaves out of plan the deployments whose jobs could not
// mount the claim of a pvc:// location (claimFaults) and says them in
// plan.skipped, as a driver without a backup hook is: one deployment
// added without the claim in its namespace would otherwise refuse every
// nightly backup of its environment. A backup that named its deployments
// (named), or that has none left, is refused instead.
func skipUnclaimed(ctx context.Context, api client.Reader, env string, named bool, plan *backupPlan) error {
	uses := make([]claimUse, 0, len(plan.targets))
	for _, tg := range plan.targets {
		uses = append(uses, claimUse{tg.sd.Spec.Deployment.Name, tg.sd.Namespace, plan.settings.Location})
	}
	faults, err := claimFaults(ctx, api, env, uses)
	if err != nil || len(faults) == 0 {
		return err
	}
	if named || len(faults) == len(plan.targets) {
		return claimRefusal(env, faults)
	}
	for _, f := range faults {
		plan.skipped = append(plan.skipped, f.deployment+": "+f.why+": "+claimNeeded)
		plan.targets = slices.DeleteFunc(plan.targets, func(tg target) bool { return tg.sd.Spec.Deployment.Name == f.deployment })
	}
	slices.Sort(plan.skipped)
	return nil
}

// inAgentNamespace refuses an operation made outside the agent's
// namespace: people make them there (styrminctl, RBAC on that namespace),
// and one made in a deployment's namespace (by whoever may write there, a
// chart the agent applies) could otherwise restore or back up any
// environment of the cluster.
func inAgentNamespace(namespace, agent, kind string) error {
	if namespace == agent {
		return nil
	}
	return &RefusedError{Msg: fmt.Sprintf("metadata.namespace: a %s is acted on only in the agent's namespace %s, not %s", kind, agent, namespace)}
}

// validName refuses a backup ID that cannot be part of an artefact's
// path and of its tasks' names.
func validName(n string) error { return checkName(n, "backup ID") }

// validRestoreName refuses a restore name that cannot label its tasks
// (styrmin.io/operation, a label value: at most 63 characters).
func validRestoreName(n string) error { return checkName(n, "StyrminRestore name") }

func checkName(n, what string) error {
	const want = "lowercase letters, digits and '-', at most 63 characters"
	if len(n) > 63 {
		return fmt.Errorf("the name %q is not a valid %s: it has %d characters (expected %s)", n, what, len(n), want)
	}
	if n == "" || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || strings.HasPrefix(n, "-") || strings.HasSuffix(n, "-") {
		return fmt.Errorf("the name %q is not a valid %s (expected %s)", n, what, want)
	}
	return nil
}

// refuse ends an operation Failed before anything ran.
func (r *BackupReconciler) refuse(ctx context.Context, b *v1alpha1.StyrminBackup, e *RefusedError) error {
	return r.fail(ctx, b, "refused: "+e.Error())
}

// fail ends a backup that has not started Failed, saying msg.
func (r *BackupReconciler) fail(ctx context.Context, b *v1alpha1.StyrminBackup, msg string) error {
	base := b.DeepCopy()
	now := metav1.NewTime(r.opts.now())
	b.Status.Phase, b.Status.Message, b.Status.FinishedAt = v1alpha1.OperationFailed, boundMessage(msg), &now
	setConditions(&b.Status.Conditions, b.Generation, v1alpha1.OperationFailed, b.Status.Message)
	return patchStatus(ctx, r.opts.Client, b, base)
}

// record copies the tasks' progress into the backup's status and ends
// it when every task has ended, after making again the tasks of missing
// (unmadeFresh). A scheduled backup its schedule's next one superseded
// ends its parts that have not started (supersedeParts) and makes no task
// again.
func (r *BackupReconciler) record(ctx context.Context, b *v1alpha1.StyrminBackup, missing []int) (reconcile.Result, error) {
	base := b.DeepCopy()
	by := b.Annotations[AnnotationSupersededBy]
	if by == "" {
		if err := r.remakeTasks(ctx, b, missing); err != nil {
			return reconcile.Result{}, err
		}
	}
	done, err := recordTasks(ctx, r.opts.Client, v1alpha1.OperationBackup, b.Name, b.Status.Deployments)
	if err != nil {
		return reconcile.Result{}, err
	}
	if by != "" && !done {
		if done, err = r.supersedeParts(ctx, b, by); err != nil {
			return reconcile.Result{}, err
		}
	}
	phase, msg := overall(b.Status.Deployments, done)
	if phase.Terminal() {
		now := metav1.NewTime(r.opts.now())
		b.Status.Phase, b.Status.Message, b.Status.FinishedAt = phase, msg, &now
		setConditions(&b.Status.Conditions, b.Generation, phase, msg)
	}
	if equalStatus(base.Status.Deployments, b.Status.Deployments) && base.Status.Phase == b.Status.Phase {
		return reconcile.Result{RequeueAfter: time.Minute}, nil
	}
	return reconcile.Result{}, patchStatus(ctx, r.opts.Client, b, base)
}

// remakeTasks makes again the tasks of b's deployments missing (indexes
// unmadeFresh found on the copy b is): they have not started and are not
// there, as the start planned them, then failed to make them (or the
// agent stopped in between). A deployment that no longer runs, or whose
// driver can no longer back up, ends Failed.
func (r *BackupReconciler) remakeTasks(ctx context.Context, b *v1alpha1.StyrminBackup, missing []int) error {
	if len(missing) == 0 {
		return nil
	}
	cluster := b.Spec.Cluster
	if cluster == "" {
		cluster = r.opts.Cluster
	}
	for _, i := range missing {
		d := &b.Status.Deployments[i]
		tgs, _, err := targets(ctx, r.opts.Client, r.opts.Drivers, cluster, b.Spec.Environment, []string{d.Name})
		var refused *RefusedError
		if errors.As(err, &refused) {
			d.Phase, d.Message = v1alpha1.OperationFailed, partMessage(refused.Error())
			continue
		}
		if err != nil {
			return err
		}
		secret, err := r.secretOf(ctx, cluster, b.Spec.Environment)
		if errors.As(err, &refused) {
			d.Phase, d.Message = v1alpha1.OperationFailed, partMessage(refused.Error())
			continue
		}
		if err != nil {
			return err
		}
		op := v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: b.Name, BackupID: b.Name, Artifact: d.Artifact, Secret: secret, Attempt: 1, Created: created(b)}
		if err := makeTask(ctx, r.opts.Client, r.opts.APIReader, tgs[0], d.Task, op); err != nil {
			return err
		}
	}
	return nil
}

// supersedeParts ends Failed the parts of b, superseded by the schedule's
// backup by, whose tasks have not started: each such task is read from
// the API server and deleted on that read (deleteUnstarted), so one that
// has started is left to finish and recorded as any other, and one that
// waits (its deployment held by a failed restore or a failed wave) waits
// no longer. It reports whether every part has ended.
func (r *BackupReconciler) supersedeParts(ctx context.Context, b *v1alpha1.StyrminBackup, by string) (bool, error) {
	done := true
	for i := range b.Status.Deployments {
		d := &b.Status.Deployments[i]
		if d.Phase.Terminal() {
			continue
		}
		started := d.StartedAt != nil
		if !started && d.Task != "" {
			var t v1alpha1.StyrminTask
			err := r.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: d.Task}, &t)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return false, fmt.Errorf("reading task %s/%s: %w", d.Namespace, d.Task, err)
			case !ownTask(&t, v1alpha1.OperationBackup, b.Name, d.Attempt) || t.Status.Phase.Terminal():
				// Another's (recordTasks ends the part), or ended and
				// recorded at the next pass.
				started = true
			default:
				if started, err = deleteUnstarted(ctx, r.opts.Client, &t); err != nil {
					return false, err
				}
			}
		}
		if started {
			done = false
			continue
		}
		why := fmt.Sprintf("superseded by the schedule's next backup %s: its task had not started", by)
		if d.Message != "" {
			why += " (it waited: " + firstLine(d.Message) + ")"
		}
		d.Phase, d.Message = v1alpha1.OperationFailed, partMessage(why)
	}
	return done, nil
}

// unmadeTasks are the indexes of the deployments of an operation whose
// task has not started and does not exist. The cache is asked first; a
// task it does not show is looked for on the API server, since right
// after the start made it the cache usually does not show it yet.
func unmadeTasks(ctx context.Context, cache, api client.Reader, ds []v1alpha1.OperationDeployment) ([]int, error) {
	var out []int
	for i, d := range ds {
		if d.Phase.Terminal() || d.StartedAt != nil || d.Task == "" {
			continue
		}
		key := client.ObjectKey{Namespace: d.Namespace, Name: d.Task}
		var t v1alpha1.StyrminTask
		err := cache.Get(ctx, key, &t)
		if apierrors.IsNotFound(err) {
			err = api.Get(ctx, key, &t)
		}
		if apierrors.IsNotFound(err) {
			out = append(out, i)
		} else if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// unmadeFresh is unmadeTasks of the deployments ds gives of operation o,
// found again on a copy of o read from the API server when any is
// missing: o may be the cache's copy from before the reconciler's own
// last status write, which recorded a part ended (or retried) whose task
// was deleted since, and a task made again from that copy ran again (a
// restore's hooks over the data written since). Only a missing task costs
// the read.
func unmadeFresh(ctx context.Context, cache, api client.Reader, o client.Object, ds func() []v1alpha1.OperationDeployment) ([]int, error) {
	missing, err := unmadeTasks(ctx, cache, api, ds())
	if err != nil || len(missing) == 0 {
		return missing, err
	}
	seen := o.GetResourceVersion()
	if err := api.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
		return nil, err
	}
	if o.GetResourceVersion() == seen {
		return missing, nil
	}
	return unmadeTasks(ctx, cache, api, ds())
}

// makeTask creates an operation task for target tg, ordered after the
// newest change the agent made a task for, as the API server lists them
// (api): a change task the cache does not show yet would be ordered after
// the operation, and both could run at once.
func makeTask(ctx context.Context, c client.Client, api client.Reader, tg target, name string, op v1alpha1.TaskOperation) error {
	return makeTaskAt(ctx, c, api, tg, name, op, nil)
}

// makeTaskAt is makeTask in the place of task at (when not nil): a
// retry's.
func makeTaskAt(ctx context.Context, c client.Client, api client.Reader, tg target, name string, op v1alpha1.TaskOperation, at *v1alpha1.StyrminTask) error {
	var seq int64
	var lock v1alpha1.LockRef
	if at != nil {
		seq, lock = at.Spec.ToSequence, at.Spec.Lock
	} else {
		var err error
		if seq, lock, err = orderAfter(ctx, api, tg.sd); err != nil {
			return err
		}
	}
	id := tg.sd.Spec.Deployment
	labels := id.Labels()
	labels[v1alpha1.LabelOperation] = op.Name
	labels[v1alpha1.LabelOperationKind] = strings.ToLower(string(op.Kind))
	labels[v1alpha1.LabelSequence] = strconv.FormatInt(seq, 10)
	t := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tg.sd.Namespace, Labels: labels},
		Spec: v1alpha1.StyrminTaskSpec{
			Deployment: id, Namespace: tg.sd.Namespace,
			Workflow:     task.OperationWorkflow(op.Kind),
			FromSequence: tg.sd.Spec.Sequence, ToSequence: seq, Lock: lock,
			Operation: &op,
		},
	}
	err := c.Create(ctx, t)
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier pass (the agent stopped, or the cache did not
		// show it), or another's at this name: only the former is ours.
		var have v1alpha1.StyrminTask
		if err := api.Get(ctx, client.ObjectKeyFromObject(t), &have); err != nil {
			return fmt.Errorf("reading the %s task %s/%s: %w", strings.ToLower(string(op.Kind)), t.Namespace, t.Name, err)
		}
		if !ownTask(&have, op.Kind, op.Name, op.Attempt) {
			return foreignTask(&have, op.Kind, op.Name, op.Attempt)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating the %s task %s/%s: %w", strings.ToLower(string(op.Kind)), t.Namespace, t.Name, err)
	}
	return nil
}

// created is when operation obj (a StyrminBackup or StyrminRestore) was
// made, copied into each of its tasks: every deployment the operation
// names orders it among its other operations by it (not by when its task
// was made, which a refused create can put late on one deployment).
func created(obj client.Object) *metav1.Time {
	t := obj.GetCreationTimestamp()
	return &t
}

// deletionAsked is when a backup's deletion was asked for, which orders
// its deleteBackup tasks among the deployments' other operations.
func deletionAsked(b *v1alpha1.StyrminBackup) *metav1.Time {
	if b.DeletionTimestamp != nil {
		t := *b.DeletionTimestamp
		return &t
	}
	return created(b)
}

// ownTask reports whether task t is the task of attempt of operation
// (kind, name); attempt 0 is the first, as a backup records it.
func ownTask(t *v1alpha1.StyrminTask, kind v1alpha1.OperationKind, name string, attempt int32) bool {
	op := t.Spec.Operation
	return op != nil && op.Kind == kind && op.Name == name && max(op.Attempt, 1) == max(attempt, 1)
}

// foreignTask is the error of a task found at the name of an operation's
// task that is not that operation's: its result is another's.
func foreignTask(t *v1alpha1.StyrminTask, kind v1alpha1.OperationKind, name string, attempt int32) error {
	whose := "a change's (it has no spec.operation)"
	if op := t.Spec.Operation; op != nil {
		whose = describeOperation(op.Kind, op.Name, op.Attempt) + "'s"
	}
	return fmt.Errorf("task %s/%s has the name of %s's task, but its spec.operation makes it %s: it is left as it is, and not taken as this one's", t.Namespace, t.Name, describeOperation(kind, name, attempt), whose)
}

func describeOperation(kind v1alpha1.OperationKind, name string, attempt int32) string {
	switch kind {
	case v1alpha1.OperationRestore:
		return fmt.Sprintf("StyrminRestore %s (attempt %d)", name, max(attempt, 1))
	case v1alpha1.OperationDeleteBackup:
		return "the deletion of StyrminBackup " + name
	}
	return "StyrminBackup " + name
}

// operationTask is the task of attempt of operation (kind, name) in
// namespace (nil when none), found by its spec.operation: a task an older
// agent made has a name of another form.
func operationTask(ctx context.Context, c client.Reader, namespace string, kind v1alpha1.OperationKind, name string, attempt int32) (*v1alpha1.StyrminTask, error) {
	var list v1alpha1.StyrminTaskList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.LabelOperation: name}); err != nil {
		return nil, fmt.Errorf("listing the tasks of %s in %s: %w", describeOperation(kind, name, attempt), namespace, err)
	}
	for i := range list.Items {
		if ownTask(&list.Items[i], kind, name, attempt) {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// recordTasks copies each deployment's task's progress into ds and
// reports whether every one ended. A task at a deployment's task name
// that is not operation (kind, name)'s ends that deployment Failed,
// naming it.
func recordTasks(ctx context.Context, c client.Reader, kind v1alpha1.OperationKind, name string, ds []v1alpha1.OperationDeployment) (bool, error) {
	done := true
	for i := range ds {
		d := &ds[i]
		var t v1alpha1.StyrminTask
		err := c.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: d.Task}, &t)
		if apierrors.IsNotFound(err) {
			if !d.Phase.Terminal() {
				// Not in the cache yet, or deleted by hand: the latter
				// is an end.
				if d.StartedAt != nil {
					d.Phase, d.Message = v1alpha1.OperationFailed, "its task "+d.Namespace+"/"+d.Task+" was deleted before it ended"
				} else {
					done = false
				}
			}
			continue
		}
		if err != nil {
			return false, err
		}
		if !ownTask(&t, kind, name, d.Attempt) {
			if !d.Phase.Terminal() {
				d.Phase, d.Message = v1alpha1.OperationFailed, partMessage(foreignTask(&t, kind, name, d.Attempt).Error())
			}
			continue
		}
		d.StartedAt, d.FinishedAt = t.Status.StartedAt, t.Status.FinishedAt
		if from := t.Status.FromSequence; from > 0 && from != d.Sequence {
			// The task ran after a change that was pending when the
			// operation started: its data is that instance's, and so is
			// the driver a restore of it must be compatible with.
			// Both or neither: a sequence recorded without its driver
			// would not be looked up again.
			if drv, ok := driverAt(ctx, c, d.Namespace, d.Name, from); ok {
				d.Driver, d.Sequence = drv, from
			}
		}
		switch t.Status.Phase {
		case v1alpha1.TaskSucceeded:
			d.Phase, d.Message = v1alpha1.OperationSucceeded, ""
			d.Size = reportedSize(&t)
		case v1alpha1.TaskFailed, v1alpha1.TaskSuperseded:
			d.Phase, d.Message = v1alpha1.OperationFailed, partMessage(t.Status.Message)
		case v1alpha1.TaskRunning:
			d.Phase = v1alpha1.OperationRunning
			done = false
		default:
			d.Phase = v1alpha1.OperationPending
			if c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady); c != nil {
				d.Message = partMessage(c.Message)
			}
			done = false
		}
	}
	return done, nil
}

// SizeMarker starts the line of a backup job's output that reports the
// artefact's size in bytes ("styrmin-backup-size=1234").
const SizeMarker = "styrmin-backup-size="

// reportedSize is the size the task's jobs reported (0: none).
func reportedSize(t *v1alpha1.StyrminTask) int64 {
	var size int64
	for _, st := range t.Status.Steps {
		for _, line := range strings.Split(st.Output, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), SizeMarker); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
					size = n
				}
			}
		}
	}
	return size
}

// overall is an operation's phase from its deployments': Failed when one
// failed (its message names each), Succeeded when all did.
func overall(ds []v1alpha1.OperationDeployment, done bool) (v1alpha1.OperationPhase, string) {
	if !done {
		return v1alpha1.OperationRunning, ""
	}
	var failed []string
	for _, d := range ds {
		if d.Phase != v1alpha1.OperationSucceeded {
			failed = append(failed, fmt.Sprintf("%s: %s", d.Name, firstLine(d.Message)))
		}
	}
	if len(failed) > 0 {
		return v1alpha1.OperationFailed, failedFor(failed)
	}
	return v1alpha1.OperationSucceeded, ""
}

// failedFor names the failed parts, as many as fit in maxMessage with
// room left for what a restore adds; the others are counted
// (status.deployments holds each).
func failedFor(failed []string) string {
	var b strings.Builder
	b.WriteString("failed for ")
	for i, f := range failed {
		if i > 0 && b.Len()+len(f) > maxMessage/2 {
			fmt.Fprintf(&b, "; and %d more (status.deployments names each)", len(failed)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f)
	}
	return b.String()
}

// maxMessage bounds an operation's message and its conditions'. The API
// server refuses a condition's message past 32 KiB: a backup of a whole
// environment whose parts failed alike (a location that refuses every
// deployment's job) named each in one, could not write its end, and stayed
// Running for ever.
const maxMessage = 8 << 10

// maxPartMessage bounds what a deployment's part says (its task holds the
// whole message): a whole environment's parts are one object, which etcd
// bounds at about 1.5 MiB.
const maxPartMessage = 1 << 10

// boundMessage cuts s to maxMessage bytes, marking the cut.
func boundMessage(s string) string { return eventnote.Cut(s, maxMessage) }

// partMessage cuts s to maxPartMessage bytes, marking the cut.
func partMessage(s string) string { return eventnote.Cut(s, maxPartMessage) }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func equalStatus(a, b []v1alpha1.OperationDeployment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Phase != y.Phase || x.Message != y.Message || x.Size != y.Size || x.Sequence != y.Sequence ||
			!x.StartedAt.Equal(y.StartedAt) || !x.FinishedAt.Equal(y.FinishedAt) {
			return false
		}
	}
	return true
}

// setConditions sets Ready, Reconciling and Stalled from the phase.
func setConditions(conds *[]metav1.Condition, gen int64, phase v1alpha1.OperationPhase, msg string) {
	set := func(t string, s metav1.ConditionStatus, reason string) {
		apimeta.SetStatusCondition(conds, metav1.Condition{Type: t, Status: s, Reason: reason, Message: boundMessage(msg), ObservedGeneration: gen})
	}
	switch phase {
	case v1alpha1.OperationSucceeded:
		set(v1alpha1.ConditionReady, metav1.ConditionTrue, string(phase))
		apimeta.RemoveStatusCondition(conds, v1alpha1.ConditionReconciling)
		apimeta.RemoveStatusCondition(conds, v1alpha1.ConditionStalled)
	case v1alpha1.OperationFailed:
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, string(phase))
		set(v1alpha1.ConditionStalled, metav1.ConditionTrue, string(phase))
		apimeta.RemoveStatusCondition(conds, v1alpha1.ConditionReconciling)
	default:
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, string(phase))
		set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, string(phase))
		apimeta.RemoveStatusCondition(conds, v1alpha1.ConditionStalled)
	}
}

// deletionWait is what the deletion of a backup waits for: a reason of
// its Reconciling condition and a message naming what (zero when
// nothing).
type deletionWait struct{ reason, msg string }

// sayDeletionWaits writes why the deletion of o (a StyrminBackup or
// StyrminRestore, kind, whose conditions are conds) waits, when that
// changed, so one that does not go says why rather than only keeping its
// finalizer.
func sayDeletionWaits(ctx context.Context, c client.Client, kind string, o client.Object, conds *[]metav1.Condition, w deletionWait) error {
	base := o.DeepCopyObject().(client.Object)
	if !apimeta.SetStatusCondition(conds, metav1.Condition{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionTrue,
		Reason: w.reason, Message: boundMessage(w.msg), ObservedGeneration: o.GetGeneration()}) {
		return nil
	}
	log.FromContext(ctx).Info("the deletion waits", "kind", kind, "name", o.GetName(), "reason", w.reason, "why", w.msg)
	return client.IgnoreNotFound(patchStatus(ctx, c, o, base))
}

// conflictRetry is how soon an operation whose status write conflicted
// is read and decided again.
const conflictRetry = time.Second

// patchStatus writes o's status as changed from base, on base's
// resourceVersion. A merge patch replaces a list whole (the deployments,
// the conditions): without the version, a writer that decided on an older
// copy (a leader paused past its lease, a cache behind) put back what it
// read over what the next writer recorded since, a backup recorded
// Succeeded back to Running with every deployment Pending, and its
// location and artefacts the paused leader's. With it, the write conflicts
// and the operation is read and decided again (againOnConflict).
func patchStatus(ctx context.Context, c client.Client, o, base client.Object) error {
	return c.Status().Patch(ctx, o, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// againOnConflict turns a reconcile that ended on a conflict (a write on
// a copy another writer changed since) into one queued again soon without
// an error: it is read afresh then, and decided on what it holds now.
func againOnConflict(res reconcile.Result, err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

// deleteArtifacts runs, for a backup being deleted, the deleteBackup
// hook of each deployment whose artefact it may hold (holdsArtifact) and
// whose running driver declares one, as a task of that deployment; it
// reports what the deletion still waits for, nothing once every such task
// ended (a failed one leaves its artefact: sayArtifactsLeft names it
// before the task goes with the backup). A deployment that no longer
// runs, or whose driver has no such hook, keeps its artefact where it is:
// kept lists those, for sayArtifactsKept once the backup has gone.
// A backup an upgrade took first is deleted alike: its artefact is the
// deployment's as any other.
func (r *BackupReconciler) deleteArtifacts(ctx context.Context, b *v1alpha1.StyrminBackup) (deletionWait, []artifactKept, error) {
	if !controllerutil.ContainsFinalizer(b, Finalizer) {
		return deletionWait{}, nil, nil
	}
	return r.runDeleteHooks(ctx, b)
}

// runDeleteHooks is deleteArtifacts once the backup has its finalizer.
func (r *BackupReconciler) runDeleteHooks(ctx context.Context, b *v1alpha1.StyrminBackup) (deletionWait, []artifactKept, error) {
	// A restore that reads the backup keeps its artefacts: a new restore
	// refuses a backup being deleted, and one that started before the
	// deletion (or checked it a moment before) is waited for.
	inUse, err := restoring(ctx, r.opts.APIReader, r.opts.Namespace, false)
	if err != nil {
		return deletionWait{}, nil, err
	}
	if reader := inUse[b.Name]; reader != "" {
		return deletionWait{v1alpha1.ReasonDeletionWaitsForRestore,
			fmt.Sprintf("the deletion waits for StyrminRestore %s, which reads this backup; its artefacts stay until it ends (or is deleted)", reader)}, nil, nil
	}
	if w, err := r.cloneWait(ctx, b); err != nil || w.reason != "" {
		return w, nil, err
	}
	ds, backingUp, err := r.backupTasksEnded(ctx, b)
	if err != nil {
		return deletionWait{}, nil, err
	}
	var running, unloaded []string
	var kept []artifactKept
	for _, d := range ds {
		if !holdsArtifact(d) {
			continue
		}
		cluster := b.Spec.Cluster
		if cluster == "" {
			cluster = r.opts.Cluster
		}
		// Looked for in every namespace: the part's recorded one is where
		// the backup ran, which a deployment removed and added back under
		// another namespacePrefix has left, and the task is made where the
		// deployment is when it is made. Found by its spec: one an older
		// agent made has a name of another form, and its hook must not run
		// twice (nor be left running because the driver now has none).
		id := v1alpha1.DeploymentID{Cluster: cluster, Environment: b.Spec.Environment, Name: d.Name}
		t, err := deletionTask(ctx, r.opts.Client, id, b.Name)
		if err != nil {
			return deletionWait{}, nil, err
		}
		if t != nil {
			if !t.Status.Phase.Terminal() {
				running = append(running, d.Name)
			}
			continue
		}
		tgs, _, err := targets(ctx, r.opts.Client, r.opts.Drivers, cluster, b.Spec.Environment, []string{d.Name})
		var refused *RefusedError
		if errors.As(err, &refused) {
			// Cut before the list of the deployments that run.
			why, _, _ := strings.Cut(refused.Msg, " (expected one of")
			kept = append(kept, artifactKept{deployment: d.Name, artifact: d.Artifact, gone: true, why: why})
			continue
		}
		var unloadable *DriverError
		if errors.As(err, &unloadable) {
			// Its hook deletes the artefact once the driver loads again;
			// the others' go meanwhile, and the backup says what it
			// waits for rather than failing every few seconds unsaid.
			unloaded = append(unloaded, unloadable.Error())
			continue
		}
		if err == nil && !tgs[0].driver.CanDeleteBackups() {
			kept = append(kept, artifactKept{deployment: d.Name, artifact: d.Artifact,
				why: fmt.Sprintf("its driver %s@%s has no deleteBackup hook", tgs[0].driver.Name, tgs[0].driver.Version)})
			continue
		}
		if err != nil {
			return deletionWait{}, nil, err
		}
		name := task.OperationTaskName(d.Name, v1alpha1.OperationDeleteBackup, b.Name, 1)
		// Unreadable settings wait (cloneWait): a job without the
		// location's credentials would fail and leave the artefact.
		secret, err := r.secretOf(ctx, cluster, b.Spec.Environment)
		if err != nil {
			return deletionWait{}, nil, err
		}
		op := v1alpha1.TaskOperation{Kind: v1alpha1.OperationDeleteBackup, Name: b.Name, BackupID: b.Name, Artifact: d.Artifact, Secret: secret, Attempt: 1, Created: deletionAsked(b)}
		if err := makeTask(ctx, r.opts.Client, r.opts.APIReader, tgs[0], name, op); err != nil {
			return deletionWait{}, nil, err
		}
		running = append(running, d.Name)
	}
	if len(backingUp) > 0 {
		return deletionWait{v1alpha1.ReasonDeletionWaitsForBackupTasks,
			fmt.Sprintf("the deletion waits for the backup tasks of %s, which run: the artefacts they write are deleted once they end", strings.Join(backingUp, ", "))}, nil, nil
	}
	if len(running) > 0 {
		return deletionWait{v1alpha1.ReasonDeletingArtifacts,
			fmt.Sprintf("deleting the artefacts of %s: the deleteBackup task of each runs", strings.Join(running, ", "))}, nil, nil
	}
	if len(unloaded) > 0 {
		return deletionWait{v1alpha1.ReasonDeletionWaitsForDriver,
			fmt.Sprintf("the deletion waits for a driver whose deleteBackup hook deletes an artefact, which cannot be loaded: %s "+
				"(to let the backup go and leave the artefact, remove the finalizer %s)", strings.Join(unloaded, "; "), Finalizer)}, nil, nil
	}
	return deletionWait{}, kept, nil
}

// holdsArtifact reports whether part d of a backup may have written its
// artefact: it succeeded, or it failed after its task started. A job
// that failed half-way leaves a truncated file or the first objects of a
// dump, which nothing else deletes once retention lets the failed backup
// go. A part that failed before its task started (refused, superseded,
// its task failed in its checks) wrote nothing.
func holdsArtifact(d v1alpha1.OperationDeployment) bool {
	if d.Artifact == "" {
		return false
	}
	return d.Phase == v1alpha1.OperationSucceeded || (d.Phase == v1alpha1.OperationFailed && d.StartedAt != nil)
}

// deletionTask is the deleteBackup task of backup for deployment id, in
// whatever namespace (nil when none): only a task whose spec names that
// deployment and that deletion is taken as it.
func deletionTask(ctx context.Context, c client.Reader, id v1alpha1.DeploymentID, backup string) (*v1alpha1.StyrminTask, error) {
	var list v1alpha1.StyrminTaskList
	if err := c.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelOperation: backup}); err != nil {
		return nil, fmt.Errorf("listing the tasks of %s: %w", describeOperation(v1alpha1.OperationDeleteBackup, backup, 1), err)
	}
	for i := range list.Items {
		t := &list.Items[i]
		if t.Spec.Deployment == id && ownTask(t, v1alpha1.OperationDeleteBackup, backup, 1) {
			return t, nil
		}
	}
	return nil, nil
}

// backupTasksEnded returns b's deployments with their tasks' phases, read
// from the API server as record reads them: the status may be behind the
// tasks (the agent stopped before it recorded one's end), and an
// artefact whose task succeeded unrecorded was left behind. A task that
// has not started is deleted now, so that it never writes an artefact no
// one deletes (on its resourceVersion: one that has just started is
// waited for instead); the deployments whose tasks run are named.
func (r *BackupReconciler) backupTasksEnded(ctx context.Context, b *v1alpha1.StyrminBackup) ([]v1alpha1.OperationDeployment, []string, error) {
	ds := slices.Clone(b.Status.Deployments)
	if b.Status.Phase.Terminal() {
		return ds, nil, nil
	}
	if _, err := recordTasks(ctx, r.opts.APIReader, v1alpha1.OperationBackup, b.Name, ds); err != nil {
		return nil, nil, err
	}
	var running []string
	for _, d := range ds {
		if d.Phase == v1alpha1.OperationPending {
			started, err := dropUnstarted(ctx, r.opts.Client, r.opts.APIReader, d.Namespace, d.Task, b.Name)
			if err != nil {
				return nil, nil, err
			}
			if !started {
				continue
			}
		} else if d.Phase != v1alpha1.OperationRunning {
			continue
		}
		running = append(running, d.Name)
	}
	return ds, running, nil
}

// dropUnstarted deletes backup backup's task namespace/name unless it has
// started (true then), read from the API server (deleteUnstarted).
func dropUnstarted(ctx context.Context, c client.Client, api client.Reader, namespace, name, backup string) (bool, error) {
	if name == "" {
		return false, nil
	}
	var t v1alpha1.StyrminTask
	err := api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &t)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading task %s/%s: %w", namespace, name, err)
	}
	if !ownTask(&t, v1alpha1.OperationBackup, backup, 1) || t.Status.Phase.Terminal() {
		return false, nil
	}
	return deleteUnstarted(ctx, c, &t)
}

// deleteUnstarted deletes task t, read from the API server, unless it has
// started (true then), on that read's resourceVersion: a task marks its
// first step Running before the step acts, so a task deleted so never
// acted.
func deleteUnstarted(ctx context.Context, c client.Client, t *v1alpha1.StyrminTask) (bool, error) {
	if t.Status.Phase == v1alpha1.TaskRunning {
		return true, nil
	}
	err := c.Delete(ctx, t, client.Preconditions{UID: &t.UID, ResourceVersion: &t.ResourceVersion})
	switch {
	case apierrors.IsConflict(err):
		// Written since: it may have started; looked at again next pass.
		return true, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("deleting task %s/%s, which has not started: %w", t.Namespace, t.Name, err)
	}
	return false, nil
}

// cloneWait is what the deletion of b waits for in the environments git
// declares cloned from it (in this cluster, whose tasks this agent sees):
// their deployments restore b as they are created, in their create's
// setup hook. Retention keeps such a backup; a deletion by hand waits
// while one of those creates has not ended, or while the clone has not
// reached the cluster yet (no task or StyrminDeployment of the
// deployments that restore it): the restore would find no artefact and
// the clone would start empty.
func (r *BackupReconciler) cloneWait(ctx context.Context, b *v1alpha1.StyrminBackup) (deletionWait, error) {
	all, err := readSettings(ctx, r.opts.Settings)
	if err != nil {
		// Said on the backup, not only logged: it stays until git reads.
		return deletionWait{v1alpha1.ReasonDeletionWaitsForClone,
			fmt.Sprintf("the deletion waits: git's environments cannot be read to tell whether one is cloned from this backup: %v", err)}, nil
	}
	// An environment of this cluster whose settings cannot be read may be
	// a clone of this backup; the others' are read all the same.
	var unknown []string
	for _, e := range all {
		// One broken cluster file is each of its environments' error.
		if e.Cluster == r.opts.Cluster && e.Err != nil && !slices.Contains(unknown, e.Err.Error()) {
			unknown = append(unknown, e.Err.Error())
		}
	}
	if len(unknown) > 0 {
		return deletionWait{v1alpha1.ReasonDeletionWaitsForClone,
			fmt.Sprintf("the deletion waits: git's settings of environments of cluster %s cannot be read to tell whether one is cloned from this backup: %s", r.opts.Cluster, strings.Join(unknown, "; "))}, nil
	}
	cluster := b.Spec.Cluster
	if cluster == "" {
		cluster = r.opts.Cluster
	}
	var waits []string
	for _, e := range all {
		cf := e.ClonedFrom
		if e.Cluster != r.opts.Cluster || cf == nil || cf.Backup != b.Name || cf.Cluster != cluster || cf.Environment != b.Spec.Environment {
			continue
		}
		names, made, err := r.restoringCreates(ctx, e.Environment, cf.Deployments, b.Name)
		if err != nil {
			return deletionWait{}, err
		}
		switch {
		case !made:
			waits = append(waits, fmt.Sprintf("environment %s/%s (not created yet)", e.Cluster, e.Environment))
		case len(names) > 0:
			waits = append(waits, fmt.Sprintf("environment %s/%s (deployments %s)", e.Cluster, e.Environment, strings.Join(names, ", ")))
		}
	}
	if len(waits) == 0 {
		return deletionWait{}, nil
	}
	return deletionWait{v1alpha1.ReasonDeletionWaitsForClone,
		fmt.Sprintf("the deletion waits for %s, cloned from this backup: the creates of its deployments restore it; its artefacts stay until they have ended (or git no longer declares the clone)", strings.Join(waits, "; "))}, nil
}

// restoringCreates names the deployments of environment env of this
// cluster (those of restore, the ones the clone copied; nil, a clone
// written before that list: all) with a change task that has not ended and
// restores backup, or may (not planned yet), as the API server lists them:
// one the sync made a moment ago may not be in the cache. made is false
// while none of those deployments has a task or a StyrminDeployment. An
// empty list restores none (resolver: each is created empty): nothing to
// wait for.
func (r *BackupReconciler) restoringCreates(ctx context.Context, env string, restore []string, backup string) (names []string, made bool, err error) {
	if restore != nil && len(restore) == 0 {
		return nil, true, nil
	}
	sel := client.MatchingLabels{v1alpha1.LabelCluster: r.opts.Cluster, v1alpha1.LabelEnvironment: env}
	var tasks v1alpha1.StyrminTaskList
	if err := r.opts.APIReader.List(ctx, &tasks, sel); err != nil {
		return nil, false, fmt.Errorf("listing the tasks of %s/%s: %w", r.opts.Cluster, env, err)
	}
	var sds v1alpha1.StyrminDeploymentList
	if err := r.opts.APIReader.List(ctx, &sds, sel); err != nil {
		return nil, false, fmt.Errorf("listing the StyrminDeployments of %s/%s: %w", r.opts.Cluster, env, err)
	}
	restores := func(name string) bool { return restore == nil || slices.Contains(restore, name) }
	for _, sd := range sds.Items {
		made = made || restores(sd.Spec.Deployment.Name)
	}
	for i := range tasks.Items {
		t := &tasks.Items[i]
		name := t.Spec.Deployment.Name
		if !restores(name) || t.Spec.Operation != nil {
			continue
		}
		made = true
		if t.Status.Phase.Terminal() || slices.Contains(names, name) {
			continue
		}
		if len(t.Status.Steps) == 0 || task.RestoresBackup(t, backup) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, made, nil
}

// secretOf is the credentials Secret git names for an environment now
// ("" when none, or when git no longer declares the environment: the job
// then runs without). Settings that cannot be read are an error
// (settingsOf): a job made without the Secret they name would fail.
func (r *BackupReconciler) secretOf(ctx context.Context, cluster, env string) (string, error) {
	e, _, err := settingsOf(ctx, r.opts.Settings, cluster, env)
	return e.Secret, err
}

// finalize deletes an operation's tasks (tasksOf: none when o is outside
// the agent's namespace agent), then lets the object go.
func finalize(ctx context.Context, c client.Client, api client.Reader, agent string, o client.Object, kinds ...v1alpha1.OperationKind) error {
	if !controllerutil.ContainsFinalizer(o, Finalizer) {
		return nil
	}
	// Listed from the API server: a task made a moment before the
	// deletion (a start or a retry) may not be in the cache, and left
	// behind it would run without its operation, or hold its deployment.
	tasks, err := tasksOf(ctx, api, agent, o)
	if err != nil {
		return err
	}
	for i := range tasks {
		if op := tasks[i].Spec.Operation; op == nil || !slices.Contains(kinds, op.Kind) || op.Name != o.GetName() {
			continue
		}
		if err := c.Delete(ctx, &tasks[i]); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting task %s/%s: %w", tasks[i].Namespace, tasks[i].Name, err)
		}
	}
	base := o.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(o, Finalizer)
	return patchFinalizers(ctx, c, o, base)
}

// patchFinalizers writes o's finalizers as changed from base, on base's
// resourceVersion. A merge patch replaces the list whole: from a copy read
// before another controller added its own finalizer (a cache behind), the
// write dropped that finalizer, and the object could go before that
// controller's clean-up ran. A conflict reads the operation again
// (againOnConflict).
func patchFinalizers(ctx context.Context, c client.Client, o, base client.Object) error {
	return c.Patch(ctx, o, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}
