package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// ReasonDeletionWaitsForRestoreTasks is the reason of the Reconciling
// condition of a StyrminRestore being deleted while its tasks run: it
// goes, and releases its deployments' hold, once they have ended.
const ReasonDeletionWaitsForRestoreTasks = "DeletionWaitsForRestoreTasks"

// RestoreReconciler runs StyrminRestores: it checks the backup fits what
// runs, makes one restore task per deployment (which holds the
// deployment's other changes back until it succeeds), records the
// results and runs the failed ones again when asked (spec.retry).
type RestoreReconciler struct{ opts Options }

var _ reconcile.Reconciler = (*RestoreReconciler)(nil)

// NewRestoreReconciler checks opts and returns the StyrminRestore
// controller.
func NewRestoreReconciler(opts Options) (*RestoreReconciler, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	return &RestoreReconciler{opts: opts}, nil
}

// SetupWithManager registers the controller.
func (r *RestoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("styrminrestore").
		For(&v1alpha1.StyrminRestore{}).
		Watches(&v1alpha1.StyrminTask{}, handler.EnqueueRequestsFromMapFunc(ownerOf(v1alpha1.OperationRestore, r.opts.Namespace))).
		Complete(r)
}

// Reconcile runs the chain refuseForeign → finalize → start → retry →
// record; a status write another writer's overtook is decided again
// (againOnConflict).
func (r *RestoreReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return againOnConflict(r.reconcile(ctx, req))
}

func (r *RestoreReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var rs v1alpha1.StyrminRestore
	if err := r.opts.Client.Get(ctx, req.NamespacedName, &rs); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if rs.Namespace != r.opts.Namespace {
		return reconcile.Result{}, r.refuseForeign(ctx, &rs)
	}
	if !rs.DeletionTimestamp.IsZero() {
		return r.delete(ctx, &rs)
	}
	if !controllerutil.ContainsFinalizer(&rs, Finalizer) {
		base := rs.DeepCopy()
		controllerutil.AddFinalizer(&rs, Finalizer)
		if err := patchFinalizers(ctx, r.opts.Client, &rs, base); err != nil {
			return reconcile.Result{}, err
		}
	}
	var missing []int
	switch {
	case rs.Status.Phase == "" || retryDue(&rs):
		// About to start or retry: read afresh, as a backup does before it
		// starts; a copy from before the last start or retry would make
		// its tasks again, or refuse what runs.
		if err := r.opts.APIReader.Get(ctx, req.NamespacedName, &rs); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	case !rs.Status.Phase.Terminal():
		var err error
		if missing, err = unmadeFresh(ctx, r.opts.Client, r.opts.APIReader, &rs, func() []v1alpha1.OperationDeployment { return rs.Status.Deployments }); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	switch {
	case rs.Status.Phase == "":
		return reconcile.Result{}, r.start(ctx, &rs)
	case retryDue(&rs):
		return reconcile.Result{}, r.retry(ctx, &rs)
	case rs.Status.Phase.Terminal():
		return reconcile.Result{}, nil
	}
	base := rs.DeepCopy()
	if err := r.remakeTasks(ctx, &rs, missing); err != nil {
		return reconcile.Result{}, err
	}
	done, err := recordTasks(ctx, r.opts.Client, v1alpha1.OperationRestore, rs.Name, rs.Status.Deployments)
	if err != nil {
		return reconcile.Result{}, err
	}
	if phase, msg := overall(rs.Status.Deployments, done); phase.Terminal() {
		now := metav1.NewTime(r.opts.now())
		rs.Status.Phase, rs.Status.Message, rs.Status.FinishedAt = phase, msg, &now
		if phase == v1alpha1.OperationFailed {
			msg += "; the deployments' changes wait until it is retried (styrminctl restore retry " + rs.Name + ") or deleted"
			rs.Status.Message = msg
		}
		setConditions(&rs.Status.Conditions, rs.Generation, phase, msg)
	}
	if equalStatus(base.Status.Deployments, rs.Status.Deployments) && base.Status.Phase == rs.Status.Phase {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, patchStatus(ctx, r.opts.Client, &rs, base)
}

// refuseForeign refuses a restore made outside the agent's namespace
// before it gets a finalizer (check says why), and drops one an older
// agent added: none of the tasks labelled with its name is its own.
func (r *RestoreReconciler) refuseForeign(ctx context.Context, rs *v1alpha1.StyrminRestore) error {
	if err := releaseForeign(ctx, r.opts.Client, rs); err != nil {
		return err
	}
	if !rs.DeletionTimestamp.IsZero() || rs.Status.Phase != "" {
		return nil
	}
	return r.start(ctx, rs)
}

// delete lets a deleted restore go once none of its tasks runs. A
// restore task's job is no object of the task's: deleting the task while
// it runs would release the deployment's hold with the restore (a
// `pg_restore --clean`) still running, start the waiting changes beside
// it, and leave the components its hook stopped stopped. Its tasks that
// have not started are deleted at once, so that none starts now.
func (r *RestoreReconciler) delete(ctx context.Context, rs *v1alpha1.StyrminRestore) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(rs, Finalizer) {
		return reconcile.Result{}, nil
	}
	running, err := r.runningTasks(ctx, rs)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(running) > 0 {
		w := deletionWait{ReasonDeletionWaitsForRestoreTasks,
			fmt.Sprintf("the deletion waits for the restore tasks of %s, which run: the restore goes, and their deployments' changes start, once they have ended", strings.Join(running, ", "))}
		return reconcile.Result{RequeueAfter: 5 * time.Second}, sayDeletionWaits(ctx, r.opts.Client, "StyrminRestore", rs, &rs.Status.Conditions, w)
	}
	return reconcile.Result{}, finalize(ctx, r.opts.Client, r.opts.APIReader, r.opts.Namespace, rs, v1alpha1.OperationRestore)
}

// runningTasks names the deployments whose tasks of restore rs run, as
// the API server lists them (as finalize does: a task made a moment ago
// may not be in the cache). A task that has not started is deleted
// (deleteUnstarted).
func (r *RestoreReconciler) runningTasks(ctx context.Context, rs *v1alpha1.StyrminRestore) ([]string, error) {
	tasks, err := tasksOf(ctx, r.opts.APIReader, r.opts.Namespace, rs)
	if err != nil {
		return nil, fmt.Errorf("StyrminRestore %s: %w", rs.Name, err)
	}
	var running []string
	for i := range tasks {
		t := &tasks[i]
		if op := t.Spec.Operation; op == nil || op.Kind != v1alpha1.OperationRestore || op.Name != rs.Name || t.Status.Phase.Terminal() {
			continue
		}
		started, err := deleteUnstarted(ctx, r.opts.Client, t)
		if err != nil {
			return nil, err
		}
		if started && !slices.Contains(running, t.Spec.Deployment.Name) {
			running = append(running, t.Spec.Deployment.Name)
		}
	}
	slices.Sort(running)
	return running, nil
}

// retryDue reports whether a failed restore was asked to run again
// (spec.retry moved) and has not yet.
func retryDue(rs *v1alpha1.StyrminRestore) bool {
	return rs.Spec.Retry != rs.Status.ObservedRetry && rs.Status.Phase == v1alpha1.OperationFailed && len(rs.Status.Deployments) > 0
}

// start checks the restore and makes its tasks; a refusal ends it Failed
// with nothing else changed (and holds nothing).
func (r *RestoreReconciler) start(ctx context.Context, rs *v1alpha1.StyrminRestore) error {
	ds, env, err := r.check(ctx, rs)
	base := rs.DeepCopy()
	now := metav1.NewTime(r.opts.now())
	var refused *RefusedError
	if errors.As(err, &refused) {
		rs.Status.Phase, rs.Status.Message, rs.Status.FinishedAt = v1alpha1.OperationFailed, boundMessage("refused: "+refused.Error()), &now
		rs.Status.Environment, rs.Status.ObservedRetry = env, rs.Spec.Retry
		setConditions(&rs.Status.Conditions, rs.Generation, v1alpha1.OperationFailed, rs.Status.Message)
		return patchStatus(ctx, r.opts.Client, rs, base)
	}
	if err != nil {
		return err
	}
	rs.Status.Phase, rs.Status.Environment, rs.Status.StartedAt = v1alpha1.OperationRunning, env, &now
	rs.Status.ObservedRetry, rs.Status.Deployments = rs.Spec.Retry, ds
	setConditions(&rs.Status.Conditions, rs.Generation, v1alpha1.OperationRunning, "restoring")
	if err := patchStatus(ctx, r.opts.Client, rs, base); err != nil {
		return err
	}
	return r.makeTasks(ctx, rs, nil)
}

// backupOf reads the backup a started restore reads, from the API
// server; one gone or being deleted (its deletion began after the restore
// started) is refused: its artefacts are going.
func (r *RestoreReconciler) backupOf(ctx context.Context, rs *v1alpha1.StyrminRestore) (*v1alpha1.StyrminBackup, error) {
	var b v1alpha1.StyrminBackup
	err := r.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: r.opts.Namespace, Name: rs.Spec.Backup}, &b)
	env := r.opts.Cluster + "/" + rs.Status.Environment
	switch {
	case apierrors.IsNotFound(err):
		return nil, &RefusedError{Environment: env, Msg: fmt.Sprintf("spec.backup: StyrminBackup %s is gone, with its artefacts", rs.Spec.Backup)}
	case err != nil:
		return nil, err
	case !b.DeletionTimestamp.IsZero():
		return nil, &RefusedError{Environment: env, Msg: fmt.Sprintf("spec.backup: StyrminBackup %s is being deleted, with its artefacts", b.Name)}
	}
	return &b, nil
}

// remakeTasks makes again the tasks of rs's deployments missing (indexes
// unmadeFresh found on the copy rs is): they have not started and are not
// there, as the start or a retry planned them, then failed to make them
// (or the agent stopped in between). A retry's task goes in its failed
// attempt's place. When a deployment no longer runs or cannot read the
// backup, those deployments end Failed.
func (r *RestoreReconciler) remakeTasks(ctx context.Context, rs *v1alpha1.StyrminRestore, missing []int) error {
	if len(missing) == 0 {
		return nil
	}
	var only []string
	for _, i := range missing {
		only = append(only, rs.Status.Deployments[i].Name)
	}
	err := r.makeTasks(ctx, rs, only)
	var refused *RefusedError
	if errors.As(err, &refused) {
		// The deployment the refusal names, or all of them (the backup
		// is going).
		for _, i := range missing {
			if d := &rs.Status.Deployments[i]; refused.Deployment == "" || refused.Deployment == d.Name {
				d.Phase, d.Message = v1alpha1.OperationFailed, partMessage(refused.Error())
			}
		}
		return nil
	}
	return err
}

// retry runs the failed deployments' restores again, each as a new
// attempt (a new task; the failed one stays as history), in the namespace
// its deployment runs in now (recordNamespaces).
func (r *RestoreReconciler) retry(ctx context.Context, rs *v1alpha1.StyrminRestore) error {
	base := rs.DeepCopy()
	tgs, err := r.retryCheck(ctx, rs)
	if err != nil {
		var refused *RefusedError
		if !errors.As(err, &refused) {
			return err
		}
		// Refused: it stays Failed, the retry observed.
		rs.Status.ObservedRetry = rs.Spec.Retry
		rs.Status.Message = boundMessage("retry refused: " + refused.Error() + "; the deployments' changes wait until StyrminRestore " + rs.Name + " is deleted")
		setConditions(&rs.Status.Conditions, rs.Generation, v1alpha1.OperationFailed, rs.Status.Message)
		return patchStatus(ctx, r.opts.Client, rs, base)
	}
	recordNamespaces(rs.Status.Deployments, tgs)
	var again []string
	for i := range rs.Status.Deployments {
		d := &rs.Status.Deployments[i]
		if d.Phase == v1alpha1.OperationSucceeded {
			continue
		}
		d.Attempt++
		d.Task = task.OperationTaskName(d.Name, v1alpha1.OperationRestore, rs.Name, d.Attempt)
		d.Phase, d.Message, d.StartedAt, d.FinishedAt = v1alpha1.OperationPending, "", nil, nil
		again = append(again, d.Name)
	}
	rs.Status.Phase, rs.Status.Message, rs.Status.FinishedAt = v1alpha1.OperationRunning, "", nil
	rs.Status.ObservedRetry = rs.Spec.Retry
	setConditions(&rs.Status.Conditions, rs.Generation, v1alpha1.OperationRunning, "retrying "+strings.Join(again, ", "))
	if err := patchStatus(ctx, r.opts.Client, rs, base); err != nil {
		return err
	}
	return r.makeTasks(ctx, rs, again)
}

// recordNamespaces records in ds each target's namespace now, before the
// retry's tasks are made there: recordTasks, unmadeTasks and a retry
// resumed after the agent stopped look for a task in its deployment's
// recorded namespace, which a deployment removed and added back under
// another namespacePrefix has left.
func recordNamespaces(ds []v1alpha1.OperationDeployment, tgs []target) {
	for _, tg := range tgs {
		i := slices.IndexFunc(ds, func(d v1alpha1.OperationDeployment) bool { return d.Name == tg.sd.Spec.Deployment.Name })
		if i >= 0 {
			ds[i].Namespace = tg.sd.Namespace
		}
	}
}

// retryCheck refuses the retry of rs when its backup is going
// (backupOf), its environment's location is another cluster's too
// (sharedLocation), a deployment it runs again no longer runs (targets), or its
// jobs could not be given their credentials (checkRestoreCredentials) or
// mount a pvc:// artefact's claim where their tasks will be made
// (checkClaims), before a new attempt stops anything. It returns the
// targets of the deployments it runs again.
func (r *RestoreReconciler) retryCheck(ctx context.Context, rs *v1alpha1.StyrminRestore) ([]target, error) {
	if _, err := r.backupOf(ctx, rs); err != nil {
		return nil, err
	}
	settings, _, err := settingsOf(ctx, r.opts.Settings, r.opts.Cluster, rs.Status.Environment)
	if err != nil {
		return nil, err
	}
	if err := sharedLocation(settings); err != nil {
		return nil, err
	}
	var again []v1alpha1.OperationDeployment
	var artifacts []string
	for _, d := range rs.Status.Deployments {
		if d.Phase != v1alpha1.OperationSucceeded {
			again = append(again, d)
			artifacts = append(artifacts, d.Artifact)
		}
	}
	if err := r.restoredNow(ctx, rs, rs.Status.Environment, names(again, nil)); err != nil {
		return nil, err
	}
	if err := checkRestoreCredentials(ctx, r.opts.APIReader, r.opts.Namespace, r.opts.Cluster, rs.Status.Environment, settings.Secret, artifacts); err != nil {
		return nil, err
	}
	// Where makeTasks makes the tasks: each deployment's namespace now,
	// not the one the restore recorded (a deployment removed and added
	// back under another namespacePrefix has left it).
	tgs, _, err := targets(ctx, r.opts.Client, r.opts.Drivers, r.opts.Cluster, rs.Status.Environment, names(again, nil))
	if err != nil {
		return nil, err
	}
	if err := checkClaims(ctx, r.opts.APIReader, r.opts.Cluster+"/"+rs.Status.Environment, claimUses(tgs, again)); err != nil {
		return nil, err
	}
	return tgs, nil
}

// checkRestoreCredentials refuses a restore whose jobs could not be given
// the credentials to read artifacts: Secret secret, which git names for
// cluster/env now and makeTasks hands the jobs, checked against each
// artefact's location as a backup's start checks its own
// (checkCredentials). A restore's pre step stops the deployment's
// components: a job refused its credentials only after that left them
// stopped, and the deployment's changes held.
func checkRestoreCredentials(ctx context.Context, api client.Reader, namespace, cluster, env, secret string, artifacts []string) error {
	seen := map[string]bool{}
	for _, a := range artifacts {
		// checkCredentials reads the location's scheme alone: one check
		// per scheme.
		scheme := a
		if loc, err := resolver.ParseBackupLocation(a); err == nil {
			scheme = loc.Scheme
		}
		if seen[scheme] {
			continue
		}
		seen[scheme] = true
		e := resolver.EnvironmentBackups{Cluster: cluster, Environment: env, Location: a, Secret: secret}
		if err := checkCredentials(ctx, api, namespace, e); err != nil {
			return err
		}
	}
	return nil
}

// makeTasks creates the restore tasks of rs's deployments (only: all
// when nil) that are not done. A retry's task takes its failed attempt's
// place among the deployment's changes: the changes that wait for the
// restore stay after it.
func (r *RestoreReconciler) makeTasks(ctx context.Context, rs *v1alpha1.StyrminRestore, only []string) error {
	// Checked again here, not only at the start: a restore an older agent
	// started under such a name could never make its task.
	if err := validRestoreName(rs.Name); err != nil {
		return &RefusedError{Environment: r.opts.Cluster + "/" + rs.Status.Environment, Msg: "metadata.name: " + err.Error()}
	}
	// So is where it was made: a retry of one started elsewhere by an
	// older agent would restore from there.
	if err := inAgentNamespace(rs.Namespace, r.opts.Namespace, "StyrminRestore"); err != nil {
		return err
	}
	b, err := r.backupOf(ctx, rs)
	if err != nil {
		return err
	}
	tgs, _, err := targets(ctx, r.opts.Client, r.opts.Drivers, r.opts.Cluster, rs.Status.Environment, names(rs.Status.Deployments, only))
	if err != nil {
		return err
	}
	// An environment git no longer declares, or without a location, has
	// no Secret to give the job; one whose settings cannot be read is
	// refused (a job without the Secret they name would fail).
	settings, _, err := settingsOf(ctx, r.opts.Settings, r.opts.Cluster, rs.Status.Environment)
	if err != nil {
		return err
	}
	for _, tg := range tgs {
		i := slices.IndexFunc(rs.Status.Deployments, func(d v1alpha1.OperationDeployment) bool { return d.Name == tg.sd.Spec.Deployment.Name })
		d := rs.Status.Deployments[i]
		if err := r.movedSince(rs, d, tg); err != nil {
			return err
		}
		op := v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: rs.Name, BackupID: b.Name, Artifact: d.Artifact, Secret: settings.Secret, Attempt: d.Attempt, Created: created(rs)}
		at, err := r.earlierAttempt(ctx, rs, d)
		if err != nil {
			return err
		}
		if err := makeTaskAt(ctx, r.opts.Client, r.opts.APIReader, tg, d.Task, op, at); err != nil {
			return err
		}
	}
	return nil
}

// movedSince refuses making deployment d's task in target tg's namespace
// when the restore recorded another: the deployment moved (removed and
// added back under another namespacePrefix) since its attempt was
// planned, and the agent stopped before making its task. Made there, the
// task would never be recorded (recordTasks looks in the recorded
// namespace), nor its pvc:// claim checked; the attempt ends Failed, and
// a retry runs it where the deployment is now.
func (r *RestoreReconciler) movedSince(rs *v1alpha1.StyrminRestore, d v1alpha1.OperationDeployment, tg target) error {
	if d.Namespace == tg.sd.Namespace {
		return nil
	}
	return &RefusedError{Environment: r.opts.Cluster + "/" + rs.Status.Environment, Deployment: d.Name,
		Msg: fmt.Sprintf("its task %s was planned in namespace %s, and the deployment runs in %s now: it is not made; retry the restore (styrminctl restore retry %s) to run it there",
			d.Task, d.Namespace, tg.sd.Namespace, rs.Name)}
}

// earlierAttempt is the task of deployment d's newest earlier attempt
// that still exists (nil: none), whose place among d's changes a retry
// takes: one deleted by hand would put the retry after the changes its
// failure holds, each then waiting for the other. It is found by its
// spec, not its name (an older agent named it otherwise), in d's
// recorded namespace, where its task is made: an attempt left in a
// namespace the deployment has left holds none of its changes in this
// one.
func (r *RestoreReconciler) earlierAttempt(ctx context.Context, rs *v1alpha1.StyrminRestore, d v1alpha1.OperationDeployment) (*v1alpha1.StyrminTask, error) {
	for a := d.Attempt - 1; a >= 1; a-- {
		at, err := operationTask(ctx, r.opts.Client, d.Namespace, v1alpha1.OperationRestore, rs.Name, a)
		if err != nil || at != nil {
			return at, err
		}
	}
	return nil, nil
}

func names(ds []v1alpha1.OperationDeployment, only []string) []string {
	var out []string
	for _, d := range ds {
		if only == nil || slices.Contains(only, d.Name) {
			out = append(out, d.Name)
		}
	}
	return out
}

// check refuses a restore that cannot run: a backup that does not exist
// or did not succeed for a deployment asked for (restoredParts), a
// deployment the backup does not hold or that does not run here,
// credentials its jobs could not be given (checkRestoreCredentials), a
// pvc:// artefact whose claim is not in its deployment's namespace
// (checkClaims), or a deployment whose running driver cannot read the
// backup (another driver, another major version, or an older version
// than the one that took it). It returns the deployments' plan and the
// environment.
func (r *RestoreReconciler) check(ctx context.Context, rs *v1alpha1.StyrminRestore) ([]v1alpha1.OperationDeployment, string, error) {
	if err := inAgentNamespace(rs.Namespace, r.opts.Namespace, "StyrminRestore"); err != nil {
		return nil, "", err
	}
	// The name labels the restore's tasks: one the API server refuses
	// there would leave the restore running for ever, and its backup
	// undeletable.
	if err := validRestoreName(rs.Name); err != nil {
		return nil, "", &RefusedError{Msg: "metadata.name: " + err.Error()}
	}
	// From the API server: a backup whose deletion began a moment ago
	// loses its artefacts unless a restore reading it is seen first.
	var b v1alpha1.StyrminBackup
	err := r.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: r.opts.Namespace, Name: rs.Spec.Backup}, &b)
	if apierrors.IsNotFound(err) {
		return nil, "", &RefusedError{Msg: fmt.Sprintf("spec.backup: no StyrminBackup %s in %s", rs.Spec.Backup, r.opts.Namespace)}
	}
	if err != nil {
		return nil, "", err
	}
	cluster := b.Spec.Cluster
	if cluster == "" {
		cluster = r.opts.Cluster
	}
	env := b.Spec.Environment
	envName := cluster + "/" + env
	if cluster != r.opts.Cluster {
		return nil, env, &RefusedError{Environment: envName, Msg: fmt.Sprintf("backup %s is of cluster %s; this agent serves %s", b.Name, cluster, r.opts.Cluster)}
	}
	if !b.DeletionTimestamp.IsZero() {
		return nil, env, &RefusedError{Environment: envName, Msg: fmt.Sprintf("spec.backup: StyrminBackup %s is being deleted, with its artefacts", b.Name)}
	}
	// Read before the start, not only as the tasks are made: settings git
	// cannot give would leave the restore Running with no task, and its
	// backup undeletable.
	settings, _, err := settingsOf(ctx, r.opts.Settings, cluster, env)
	if err != nil {
		return nil, env, err
	}
	if err := sharedLocation(settings); err != nil {
		return nil, env, err
	}
	want, byName, err := restoredParts(&b, envName, rs.Spec.Deployments)
	if err != nil {
		return nil, env, err
	}
	if err := r.restoredNow(ctx, rs, env, want); err != nil {
		return nil, env, err
	}
	artifacts := make([]string, 0, len(want))
	for _, n := range want {
		artifacts = append(artifacts, byName[n].Artifact)
	}
	if err := checkRestoreCredentials(ctx, r.opts.APIReader, r.opts.Namespace, cluster, env, settings.Secret, artifacts); err != nil {
		return nil, env, err
	}
	tgs, _, err := targets(ctx, r.opts.Client, r.opts.Drivers, cluster, env, want)
	if err != nil {
		return nil, env, err
	}
	out := make([]v1alpha1.OperationDeployment, 0, len(tgs))
	for _, tg := range tgs {
		n := tg.sd.Spec.Deployment.Name
		bd := byName[n]
		if err := Compatible(bd.Driver, tg.driver.Name, tg.driver.Version); err != nil {
			return nil, env, &RefusedError{Environment: envName, Deployment: n, Msg: err.Error()}
		}
		if !tg.driver.CanBackup() {
			return nil, env, &RefusedError{Environment: envName, Deployment: n, Msg: fmt.Sprintf("driver %s@%s declares no restore hook", tg.driver.Name, tg.driver.Version)}
		}
		out = append(out, v1alpha1.OperationDeployment{
			Name: n, Namespace: tg.sd.Namespace, Attempt: 1, Phase: v1alpha1.OperationPending,
			Task:     task.OperationTaskName(n, v1alpha1.OperationRestore, rs.Name, 1),
			Artifact: bd.Artifact, Sequence: tg.sd.Spec.Sequence,
			Driver: v1alpha1.DriverRef{Name: tg.driver.Name, Version: tg.driver.Version, Digest: tg.instance.Driver.Digest},
		})
	}
	if err := checkClaims(ctx, r.opts.APIReader, envName, claimUses(tgs, out)); err != nil {
		return nil, env, err
	}
	return out, env, nil
}

// restoredNow refuses restore rs of deployments want of env while
// another restore runs on one of them (its part there has not ended), as
// the API server lists the restores. Two restores run one after the
// other on each deployment, in the order their tasks are placed: a task
// one of them made late (its start retried, a create refused) went after
// a change locked meanwhile, and so after the other restore on that
// deployment only, leaving the environment's deployments holding
// different backups' data, both restores Succeeded. Whichever starts
// first runs; the other is refused, naming it.
func (r *RestoreReconciler) restoredNow(ctx context.Context, rs *v1alpha1.StyrminRestore, env string, want []string) error {
	var list v1alpha1.StyrminRestoreList
	if err := r.opts.APIReader.List(ctx, &list, client.InNamespace(r.opts.Namespace)); err != nil {
		return fmt.Errorf("listing the StyrminRestores in %s: %w", r.opts.Namespace, err)
	}
	for _, o := range list.Items {
		if o.Name == rs.Name || o.Status.Phase != v1alpha1.OperationRunning || o.Status.Environment != env || !o.DeletionTimestamp.IsZero() {
			continue
		}
		var both []string
		for _, d := range o.Status.Deployments {
			if !d.Phase.Terminal() && slices.Contains(want, d.Name) {
				both = append(both, d.Name)
			}
		}
		if len(both) > 0 {
			return &RefusedError{Environment: r.opts.Cluster + "/" + env, Deployment: strings.Join(both, ", "),
				Msg: fmt.Sprintf("StyrminRestore %s restores it and has not ended (two restores at once could leave the deployments holding different backups' data): make this restore again once it has ended, or delete it first", o.Name)}
		}
	}
	return nil
}

// claimUses are the restore jobs of targets tgs, each reading its
// deployment's artefact in ds, in its target's namespace: where
// makeTasks makes its task, whatever namespace ds recorded.
func claimUses(tgs []target, ds []v1alpha1.OperationDeployment) []claimUse {
	uses := make([]claimUse, 0, len(tgs))
	for _, tg := range tgs {
		n := tg.sd.Spec.Deployment.Name
		i := slices.IndexFunc(ds, func(d v1alpha1.OperationDeployment) bool { return d.Name == n })
		uses = append(uses, claimUse{n, tg.sd.Namespace, ds[i].Artifact})
	}
	return uses
}

// restoredParts is what a restore of the deployments want (none: every
// one backup b holds a part of) reads of b: the deployments, and b's
// parts by deployment. A deployment b holds no part of, or whose part
// did not succeed, is refused, naming it; b's own phase is not: a backup
// that failed for one deployment restores the parts that succeeded.
// NewRestore checks a request so too, as the agent will.
func restoredParts(b *v1alpha1.StyrminBackup, env string, want []string) ([]string, map[string]v1alpha1.OperationDeployment, error) {
	byName := map[string]v1alpha1.OperationDeployment{}
	var succeeded []string
	for _, d := range b.Status.Deployments {
		byName[d.Name] = d
		if d.Phase == v1alpha1.OperationSucceeded {
			succeeded = append(succeeded, d.Name)
		}
	}
	named := len(want) > 0
	if !named {
		want = sortedKeys(byName)
	}
	if len(want) == 0 {
		return nil, nil, &RefusedError{Environment: env, Msg: fmt.Sprintf("backup %s holds no deployment (phase %s)", b.Name, orNone(string(b.Status.Phase)))}
	}
	for _, n := range want {
		d, ok := byName[n]
		switch {
		case !ok:
			return nil, nil, &RefusedError{Environment: env, Deployment: n, Msg: fmt.Sprintf("backup %s holds no backup of it (it holds: %s)", b.Name, strings.Join(sortedKeys(byName), ", "))}
		case d.Phase != v1alpha1.OperationSucceeded:
			msg := fmt.Sprintf("its backup in %s did not succeed (%s): there is nothing to restore", b.Name, orNone(string(d.Phase)))
			if !named && len(succeeded) > 0 {
				slices.Sort(succeeded)
				msg += fmt.Sprintf(" (name the deployments whose parts succeeded to restore those: %s)", strings.Join(succeeded, ", "))
			}
			return nil, nil, &RefusedError{Environment: env, Deployment: n, Msg: msg}
		}
	}
	return want, byName, nil
}

func orNone(s string) string {
	if s == "" {
		return "not started"
	}
	return s
}

// Compatible refuses restoring a backup taken with driver from into a
// deployment running driver name@version (drivers.RestoreCompatible).
func Compatible(from v1alpha1.DriverRef, name, version string) error {
	return drivers.RestoreCompatible(from.Name, from.Version, name, version)
}
