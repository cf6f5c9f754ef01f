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

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/internal/outcome"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
)

// Environment variables an operation's jobs receive (besides the
// location's credentials, from the copied Secret).
const (
	EnvBackupID       = "STYRMIN_BACKUP_ID"
	EnvBackupLocation = "STYRMIN_BACKUP_LOCATION"
	EnvRestoreFrom    = "STYRMIN_RESTORE_FROM"
	// EnvBackupPath is, for a pvc:// location, the artefact's folder in
	// the claim as mounted in the job (BackupMountPath/…).
	EnvBackupPath = "STYRMIN_BACKUP_PATH"
)

// BackupMountPath is where a job of an operation on a pvc:// location
// mounts the claim.
const BackupMountPath = "/styrmin-backup"

// LabelBackupCredentials marks a Secret of the agent's namespace that an
// environment's backups may use: the agent hands a Secret to a driver's
// job only when the platform team marked it so, whatever a repository
// names in backups.secret.
const LabelBackupCredentials = v1alpha1.Group + "/backup-credentials"

// AnnotationBackupEnvironments on a backup credentials Secret lists the
// environments whose backups may use it, comma-separated, each CLUSTER/ENV,
// CLUSTER/* or * (without the annotation: any; with one that lists no
// environment: refused). Under strict tenancy, the team owning one
// environment's files must not get another's credentials (dev's
// environment.cue naming prod's bucket keys) by naming its Secret. A
// clone's restore reads its source's data: the list must hold both.
const AnnotationBackupEnvironments = v1alpha1.Group + "/backup-environments"

// CredentialsRefusal says why Secret s may not be handed to the jobs of
// environment cluster/env ("": it may): it is not marked for backups, or
// its AnnotationBackupEnvironments does not list the environment.
func CredentialsRefusal(s *corev1.Secret, cluster, env string) string {
	key := s.Namespace + "/" + s.Name
	if s.Labels[LabelBackupCredentials] != "true" {
		return fmt.Sprintf("the Secret %s is not labelled %s=true: the agent hands a Secret to a driver's job only when it is marked for backups", key, LabelBackupCredentials)
	}
	list, ok := s.Annotations[AnnotationBackupEnvironments]
	if !ok {
		return ""
	}
	listed := false
	for _, e := range strings.Split(list, ",") {
		switch e = strings.TrimSpace(e); e {
		case "":
			continue
		case "*", cluster + "/*", cluster + "/" + env:
			return ""
		}
		listed = true
	}
	if !listed {
		return fmt.Sprintf("the Secret %s lists no environment in its annotation %s: list there the environments whose backups may use it (CLUSTER/ENV, CLUSTER/* or *), %s/%s among them, or name another Secret in the environment's backups.secret",
			key, AnnotationBackupEnvironments, cluster, env)
	}
	return fmt.Sprintf("the Secret %s is for environments %q (annotation %s), not %s/%s: add it there, or name another Secret in the environment's backups.secret",
		key, list, AnnotationBackupEnvironments, cluster, env)
}

// IsOperation reports whether t runs an operation (a backup or a
// restore) rather than a change locked in git.
func IsOperation(t *v1alpha1.StyrminTask) bool { return t.Spec.Operation != nil }

// OperationWorkflow is the workflow of an operation kind.
func OperationWorkflow(k v1alpha1.OperationKind) v1alpha1.Workflow {
	switch k {
	case v1alpha1.OperationRestore:
		return v1alpha1.WorkflowRestore
	case v1alpha1.OperationDeleteBackup:
		return v1alpha1.WorkflowDeleteBackup
	}
	return v1alpha1.WorkflowBackup
}

// runsBefore reports whether task s comes before task t of the same
// deployment: by sequence; at one sequence the change before the
// operations ordered after it; operations among themselves in the order
// the operations (not their tasks) were made, then by kind, name and
// attempt: one order for every deployment an operation names.
func runsBefore(s, t *v1alpha1.StyrminTask) bool {
	if s.Spec.ToSequence != t.Spec.ToSequence {
		return s.Spec.ToSequence < t.Spec.ToSequence
	}
	so, to := IsOperation(s), IsOperation(t)
	if so != to {
		return !so
	}
	if !so {
		return false
	}
	if c := operationCreated(s).Compare(operationCreated(t)); c != 0 {
		return c < 0
	}
	sop, top := s.Spec.Operation, t.Spec.Operation
	if c := cmp.Compare(sop.Kind, top.Kind); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(sop.Name, top.Name); c != 0 {
		return c < 0
	}
	if sop.Attempt != top.Attempt {
		return sop.Attempt < top.Attempt
	}
	return s.Name < t.Name
}

// operationCreated is when operation task t's operation was made; for a
// task made before its operation recorded it, when the task was.
func operationCreated(t *v1alpha1.StyrminTask) time.Time {
	if c := t.Spec.Operation.Created; c != nil {
		return c.Time
	}
	return t.CreationTimestamp.Time
}

// restoreHold returns why task t of the deployment (a change, or a
// backup) waits for a restore ("" when none holds it): a restore with an
// attempt ordered before t whose newest attempt failed holds the
// deployment until it is retried or its StyrminRestore is deleted (which
// deletes its tasks): the deployment's data is half restored. Unfinished
// attempts ordered before t are awaited by awaitTurn like any earlier
// task; a retry, though, takes its failed attempt's place by sequence
// only, and a backup made between the two is ordered before it: for that
// backup an unfinished newest attempt holds too, or it would record the
// half-restored data first.
func restoreHold(t *v1alpha1.StyrminTask, tasks []v1alpha1.StyrminTask) string {
	failed, retried, newest := restoresHolding(t, tasks)
	what := "this change"
	if IsOperation(t) {
		what = "this backup"
	}
	switch {
	case len(failed) > 0:
		return fmt.Sprintf("restore in progress: StyrminRestore %s failed (%s); %s waits until it is retried (styrminctl restore retry %s) or deleted",
			strings.Join(failed, ", "), firstLine(newest[failed[0]].Status.Message), what, failed[0])
	case len(retried) > 0:
		return fmt.Sprintf("restore in progress: StyrminRestore %s is being retried; %s waits until it has ended",
			strings.Join(retried, ", "), what)
	}
	return ""
}

// restoresHolding names, in name order, the restores that hold task t
// (see restoreHold): those whose newest attempt failed, and those whose
// newest attempt has not ended and is ordered after t; with each
// restore's newest attempt.
func restoresHolding(t *v1alpha1.StyrminTask, tasks []v1alpha1.StyrminTask) (failed, retried []string, newest map[string]*v1alpha1.StyrminTask) {
	newest = map[string]*v1alpha1.StyrminTask{}
	before := map[string]bool{}
	// touched are the restores an attempt of which ran a step: their data
	// may be half restored, whatever a later attempt did before failing.
	touched := map[string]bool{}
	for i := range tasks {
		s := &tasks[i]
		op := s.Spec.Operation
		if op == nil || op.Kind != v1alpha1.OperationRestore {
			continue
		}
		if runsBefore(s, t) {
			before[op.Name] = true
		}
		touched[op.Name] = touched[op.Name] || stepStarted(s)
		if n := newest[op.Name]; n == nil || n.Spec.Operation.Attempt < op.Attempt {
			newest[op.Name] = s
		}
	}
	for name := range before {
		switch s := newest[name]; {
		case s.Status.Phase == v1alpha1.TaskFailed && touched[name]:
			// One none of whose attempts ran a step (its backup taken by a
			// newer driver version, say) touched no data: the upgrade that
			// makes it fit must not wait for it.
			failed = append(failed, name)
		case !s.Status.Phase.Terminal() && !runsBefore(s, t):
			retried = append(retried, name)
		}
	}
	// One message whatever the map's order: it is written only when it
	// changes.
	slices.Sort(failed)
	slices.Sort(retried)
	return failed, retried, newest
}

// heldByRestore reports whether backup task s is held by a restore (see
// restoreHold) and has not started: a restore does not wait for it,
// though ordered before it. The backup waits for the deployment's data
// to be whole again, which the restore is to make; waiting for each other
// they would both wait for ever.
func heldByRestore(s *v1alpha1.StyrminTask, tasks []v1alpha1.StyrminTask) bool {
	if op := s.Spec.Operation; op == nil || op.Kind != v1alpha1.OperationBackup || s.Status.Phase == v1alpha1.TaskRunning {
		return false
	}
	failed, retried, _ := restoresHolding(s, tasks)
	return len(failed)+len(retried) > 0
}

// holdsForRestores reports whether task t waits while a restore of its
// deployment failed (restoreHold): a change, which would redeploy the
// deployment half restored, and a backup, which would record its data
// half restored (and a later clone or restore would use it). A restore
// is not held (it is what mends the data), nor a backup's deletion (it
// reads nothing of the deployment's data), which does not wait for the
// tasks held either (heldForRestores).
func holdsForRestores(t *v1alpha1.StyrminTask) bool {
	return !IsOperation(t) || t.Spec.Operation.Kind == v1alpha1.OperationBackup
}

// heldForRestores reports whether task s (a change or a backup) has not
// started and waits for a restore of its deployment (restoreHold): a
// backup's deletion, ordered after the deployment's newest change when it
// was made, does not wait for it. Held until someone retries or deletes
// the restore, it would hold the deletion (and the backup's finalizer)
// as long; and it cannot start while the deletion runs (waitsFor).
func heldForRestores(s *v1alpha1.StyrminTask, tasks []v1alpha1.StyrminTask) bool {
	return holdsForRestores(s) && s.Status.Phase != v1alpha1.TaskRunning && restoreHold(s, tasks) != ""
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// prepareOperation is prepare for an operation task: its instance is the
// deployment's running one (what its StyrminDeployment holds), and its
// steps are the driver's backup or restore hook.
func (r *Reconciler) prepareOperation(ctx context.Context, run *taskRun) (phaseResult, error) {
	t := run.task
	sd, err := r.deployment(ctx, run)
	if err != nil {
		return phaseResult{}, err
	}
	kind := strings.ToLower(string(t.Spec.Operation.Kind))
	if sd == nil || sd.Spec.Tombstone() {
		return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, fmt.Sprintf("deployment %s has no running instance to %s", instanceID(t.Spec.Deployment), kind))
	}
	in, err := instance.InstanceFromSpec(&sd.Spec)
	if err != nil {
		return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, fmt.Sprintf("StyrminDeployment %s/%s: %v", sd.Namespace, sd.Name, err))
	}
	if run.instance == nil || run.instance.Sequence != in.Sequence || run.instance.Digest != in.Digest {
		run.instance, run.driver, run.manifests = in, nil, nil
	}
	if t.Status.Phase != "" {
		return phaseResult{}, nil
	}
	if res, err := r.planOperation(ctx, run); err != nil || res.stop {
		return res, err
	}
	t.Status.Phase = v1alpha1.TaskPending
	setTaskConditions(t, v1alpha1.ReasonTaskPending, "waiting to run")
	run.planUnwritten = true
	return phaseResult{}, nil
}

// planOperation plans an operation task's steps from the running
// instance's driver: its backup or restore hook, which a driver declares
// both or neither of.
func (r *Reconciler) planOperation(ctx context.Context, run *taskRun) (phaseResult, error) {
	t := run.task
	d, err := r.driver(ctx, run)
	if err != nil {
		if outcome.IsStalled(err) {
			return r.failTask(ctx, run, v1alpha1.ReasonTaskFailed, err.Error())
		}
		return phaseResult{}, err
	}
	if !d.CanBackup() {
		return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, fmt.Sprintf("deployment %s runs driver %s@%s, which declares no backup and restore hooks: it cannot be backed up or restored", run.instance.ID, d.Name, d.Version))
	}
	if t.Spec.Operation.Kind == v1alpha1.OperationDeleteBackup && !d.CanDeleteBackups() {
		return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, fmt.Sprintf("deployment %s runs driver %s@%s, which declares no deleteBackup hook: the artefact %s is left where it is", run.instance.ID, d.Name, d.Version, t.Spec.Operation.Artifact))
	}
	if t.Spec.Operation.Kind == v1alpha1.OperationRestore {
		var b v1alpha1.StyrminBackup
		err := r.opts.Client.Get(ctx, client.ObjectKey{Namespace: r.opts.AgentNamespace, Name: t.Spec.Operation.BackupID}, &b)
		if err != nil && !apierrors.IsNotFound(err) {
			return phaseResult{}, fmt.Errorf("reading backup %s: %w", t.Spec.Operation.BackupID, err)
		}
		if why := restoreRefusal(&b, t.Spec.Deployment.Name, d); why != "" {
			return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, why)
		}
	}
	wf := OperationWorkflow(t.Spec.Operation.Kind)
	steps, err := Steps(wf, d)
	if err != nil {
		return r.failTask(ctx, run, v1alpha1.ReasonInvalidTask, err.Error())
	}
	t.Status.Workflow, t.Status.FromSequence = wf, run.instance.Sequence
	t.Status.Steps, t.Status.CurrentStep = steps, 0
	run.planUnwritten = true
	return phaseResult{}, nil
}

// restoreRefusal says why a restore task may not restore backup b's data
// of a deployment into driver d ("" when it may, or when b records no
// such data: a backup deleted meanwhile leaves the restore's job to find
// the artefact gone). The restore checked this when it started, against
// the driver running then; its task runs after the changes made before
// it, and one of them may have moved the deployment to a driver that
// cannot read the backup (a new major version).
func restoreRefusal(b *v1alpha1.StyrminBackup, deployment string, d *drivers.Driver) string {
	if err := incompatibleBackup(b, deployment, d); err != nil {
		return fmt.Sprintf("backup %s cannot be restored into deployment %s as it runs now (a change ran before the restore): %v", b.Name, deployment, err)
	}
	return ""
}

// incompatibleBackup says why backup b's data of deployment cannot be
// restored into driver d (drivers.RestoreCompatible); nil when it can, or
// when b records no such data.
func incompatibleBackup(b *v1alpha1.StyrminBackup, deployment string, d *drivers.Driver) error {
	for _, bd := range b.Status.Deployments {
		if bd.Name != deployment || bd.Driver.Name == "" {
			continue
		}
		if err := drivers.RestoreCompatible(bd.Driver.Name, bd.Driver.Version, d.Name, d.Version); err != nil {
			return err
		}
	}
	return nil
}

// cloneRestoreRefusal says why the create of a deployment cloned from a
// backup may not restore it into driver d: the backup, when this cluster
// holds its record, has no part of the deployment, one that did not
// succeed (a backup of some deployments only, one that failed for this
// one, one taken before the deployment was added), or one from a driver
// d cannot restore (a newer major version, or an older version than the
// backup's). A StyrminRestore checks the same when it starts; a clone's
// restore is a step of the create, so it is checked as the create is
// planned, before anything runs. The create then fails rather than come
// up empty: the clone was asked for the deployment's data, and a
// deployment set up without it looks like one that has it. Starting
// empty is a choice made in git (the name taken out of
// clonedFrom.deployments, or a list without it added to a clone written
// before the list), as the message says. "" when it may, or when
// the record is elsewhere (a clone into another cluster) and the restore
// job is left to read it.
func (r *Reconciler) cloneRestoreRefusal(ctx context.Context, in *resolver.Instance, d *drivers.Driver) (string, error) {
	if in.Context == nil || in.Context.Environment.ClonedFrom == nil || in.Context.Environment.ClonedFrom.Backup == "" {
		return "", nil
	}
	cf := in.Context.Environment.ClonedFrom
	clone := fmt.Sprintf("the environment is a clone of %s/%s from backup %s", cf.Cluster, cf.Environment, cf.Backup)
	// The restore runs only at the setup hook's restoreBackup step: a
	// driver without one would set the deployment up empty and Ready,
	// whichever cluster holds the record.
	if planner.Restores(in) && !d.RestoresInSetup() {
		return fmt.Sprintf("%s, and driver %s@%s's setup hook has no restoreBackup step, so its create would set %s up empty, without the backup's data: add {action: \"restoreBackup\"} to actions.setup of the driver (where its data can be loaded), or take %s out of clonedFrom.deployments in the clone's environment file to create it empty",
			clone, d.Name, d.Version, in.ID.Name, in.ID.Name), nil
	}
	var b v1alpha1.StyrminBackup
	err := r.opts.Client.Get(ctx, client.ObjectKey{Namespace: r.opts.AgentNamespace, Name: cf.Backup}, &b)
	if apierrors.IsNotFound(err) {
		if cf.Cluster == in.ID.Cluster {
			// The source's backups are recorded where it runs, here: one
			// gone was deleted, and its artefacts with it (its
			// deleteBackup hook), so the restore would read nothing.
			return fmt.Sprintf("%s, of which this cluster has no record (deleted since the clone was made, or never taken): there is nothing to restore; clone from a backup it has (styrminctl backup list %s/%s), or take %s out of clonedFrom.deployments in the clone's environment file to create it empty",
				clone, cf.Cluster, cf.Environment, in.ID.Name), nil
		}
		return "", nil // recorded in the source's cluster
	}
	if err != nil {
		return "", fmt.Errorf("reading backup %s: %w", cf.Backup, err)
	}
	// A record of another environment, or (in a cluster the clone went
	// to) of this cluster's own environment of the source's name, is
	// another backup that shares the ID.
	if b.Spec.Environment != cf.Environment || cmp.Or(b.Spec.Cluster, in.ID.Cluster) != cf.Cluster {
		// Unless its artefact is the very one the restore reads: then
		// clonedFrom misnames whose data it is (dev's files calling
		// prod's backup dev's own would restore prod into dev).
		want := resolver.ArtifactURL(cf.Location, cf.Backup, in.ID.Name)
		if slices.ContainsFunc(b.Status.Deployments, func(p v1alpha1.OperationDeployment) bool { return p.Name == in.ID.Name && p.Artifact == want }) {
			return fmt.Sprintf("%s, whose artefact of %s (%s) the record of this cluster's backup %s says is of %s/%s, not of %s/%s: a clone restores only its source's backups; clone from %s/%s",
				clone, in.ID.Name, want, cf.Backup, cmp.Or(b.Spec.Cluster, in.ID.Cluster), b.Spec.Environment, cf.Cluster, cf.Environment, cmp.Or(b.Spec.Cluster, in.ID.Cluster), b.Spec.Environment), nil
		}
		return "", nil
	}
	startEmpty := fmt.Sprintf("clone from a backup that holds it (styrminctl backup list %s/%s), or take %s out of clonedFrom.deployments in the clone's environment file to create it empty", cf.Cluster, cf.Environment, in.ID.Name)
	// A clone written before that list has none (every deployment
	// restores): the list is to be added, not edited. The context never
	// carries it; git's settings of the environment do.
	if r.opts.BackupSettings != nil {
		if e, err := r.opts.BackupSettings(ctx, in.ID.Cluster, in.ID.Environment); err == nil && e.ClonedFrom != nil && e.ClonedFrom.Deployments == nil {
			startEmpty = fmt.Sprintf("clone from a backup that holds it (styrminctl backup list %s/%s), or add clonedFrom.deployments to the clone's environment file, listing the deployments to restore without %s, to create it empty", cf.Cluster, cf.Environment, in.ID.Name)
		}
	}
	i := slices.IndexFunc(b.Status.Deployments, func(p v1alpha1.OperationDeployment) bool { return p.Name == in.ID.Name })
	if i < 0 {
		var held []string
		for _, p := range b.Status.Deployments {
			held = append(held, p.Name)
		}
		return fmt.Sprintf("%s, which holds no backup of %s (it holds: %s): there is nothing to restore; %s",
			clone, in.ID.Name, cmp.Or(strings.Join(held, ", "), "none"), startEmpty), nil
	}
	if p := b.Status.Deployments[i]; p.Phase != v1alpha1.OperationSucceeded {
		return fmt.Sprintf("%s, whose backup of %s did not succeed (%s): there is nothing whole to restore; %s",
			clone, in.ID.Name, cmp.Or(string(p.Phase), "not started"), startEmpty), nil
	}
	if err := incompatibleBackup(&b, in.ID.Name, d); err != nil {
		return fmt.Sprintf("%s, which %s cannot restore: %v; clone from a backup this driver version reads, or lock %s with a driver version that reads it",
			clone, in.ID, err, in.ID), nil
	}
	// The restore reads the artefact at the clone's location (the
	// source's backupLocation when the clone was made); the record says
	// where the backup wrote it. A location changed between the two would
	// have the restore read nothing, failing with only the store's error.
	want := resolver.ArtifactURL(cf.Location, cf.Backup, in.ID.Name)
	if got := b.Status.Deployments[i].Artifact; got != "" && got != want {
		where := "the location the backup wrote to"
		if loc, ok := strings.CutSuffix(got, "/"+cf.Backup+"/"+in.ID.Name); ok {
			where = loc
		}
		return fmt.Sprintf("%s, whose record has the artefact of %s at %s, where the restore would read %s (clonedFrom.location, %s, is not where the backup was written): set clonedFrom.location in the clone's environment file to %s",
			clone, in.ID.Name, got, want, cf.Location, where), nil
	}
	return "", nil
}

// OperationTaskName is the name of an operation's task for a deployment:
// the deployment, the operation's kind and name and the attempt (after
// the first), cut to fit, then a hash of all four. The readable part
// alone is ambiguous (restore fix's second attempt and restore fix-2's
// first both read hub-restore-fix-2), and so were the names older agents
// gave; the hash keeps each operation's tasks its own. At most 63
// characters: the name labels the task's jobs and Secrets.
func OperationTaskName(deployment string, kind v1alpha1.OperationKind, name string, attempt int32) string {
	attempt = max(attempt, 1)
	k := strings.ToLower(string(kind))
	s := fmt.Sprintf("%s-%s-%s", deployment, k, name)
	if attempt > 1 {
		s = fmt.Sprintf("%s-%d", s, attempt)
	}
	return hashedName(s, deployment, k, name, strconv.Itoa(int(attempt)))
}

// hashedName is readable, cut to fit, then a hash of parts (what the
// name stands for, which readable may not tell apart): at most 63
// characters, a label value and a DNS label when readable is one.
func hashedName(readable string, parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	hash := hex.EncodeToString(sum[:])[:10]
	if room := 63 - len(hash) - 1; len(readable) > room {
		readable = strings.TrimRight(readable[:room], "-.")
	}
	return readable + "-" + hash
}

// operationJobName is the Job name of an operation task's runJob step:
// each operation (and attempt) runs its own Job.
func operationJobName(t *v1alpha1.StyrminTask, job string) string {
	sum := sha256.Sum256([]byte(t.Name))
	return JobName(t.Spec.Deployment.Name, job+"-"+hex.EncodeToString(sum[:])[:6], t.Spec.ToSequence)
}

// credentialsSecretName is the copy of an operation's credentials Secret
// in the deployment's namespace.
func credentialsSecretName(t *v1alpha1.StyrminTask, secret string) string {
	sum := sha256.Sum256([]byte(t.Name + "/" + secret))
	return credentialsCopyPrefix + hex.EncodeToString(sum[:])[:10]
}

// credentialsCopyPrefix starts the name of every copy of backup
// credentials (credentialsSecretName).
const credentialsCopyPrefix = "styrmin-backup-"

// withOperation gives an operation task's job what the driver's hook
// needs: the backup's ID and artefact URL as environment variables, the
// location's credentials from a copy of the Secret the environment names
// (made here, deleted once the Job ended: dropCredentials), and for a pvc:// location the claim
// mounted at BackupMountPath.
func (r *Reconciler) withOperation(ctx context.Context, run *taskRun, step drivers.Step, pod *corev1.PodSpec, c *corev1.Container) error {
	op, err := r.operationOf(ctx, run, step)
	if op == nil || err != nil {
		return err
	}
	env := []corev1.EnvVar{{Name: EnvBackupID, Value: op.BackupID}}
	if op.Kind == v1alpha1.OperationRestore {
		env = append(env, corev1.EnvVar{Name: EnvRestoreFrom, Value: op.Artifact})
	} else {
		env = append(env, corev1.EnvVar{Name: EnvBackupLocation, Value: op.Artifact})
	}
	loc, err := resolver.ParseBackupLocation(op.Artifact)
	if err != nil {
		return outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("spec.operation.artifact: %w", err))
	}
	if loc.Scheme == "pvc" {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "styrmin-backup", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: loc.Target}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "styrmin-backup", MountPath: BackupMountPath})
		env = append(env, corev1.EnvVar{Name: EnvBackupPath, Value: BackupMountPath + "/" + strings.TrimPrefix(loc.Path, "/")})
	}
	c.Env = append(c.Env, env...)
	if op.Secret == "" {
		return nil
	}
	name, err := r.copyCredentials(ctx, run, op)
	if err != nil {
		return err
	}
	c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}})
	return nil
}

// copyCredentials copies the operation's credentials Secret from the
// agent's namespace into the deployment's, owned by the task (so it goes
// with it at the latest; dropCredentials deletes it once its Job ended),
// and returns the copy's name. A Secret that is missing or not
// marked for backups fails the step: it needs a person.
func (r *Reconciler) copyCredentials(ctx context.Context, run *taskRun, op *v1alpha1.TaskOperation) (string, error) {
	t := run.task
	var src corev1.Secret
	key := client.ObjectKey{Namespace: r.opts.AgentNamespace, Name: op.Secret}
	if err := r.opts.APIReader.Get(ctx, key, &src); err != nil {
		if apierrors.IsNotFound(err) {
			return "", outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("the backup credentials Secret %s does not exist", key))
		}
		return "", fmt.Errorf("reading the backup credentials Secret %s: %w", key, err)
	}
	if why := CredentialsRefusal(&src, t.Spec.Deployment.Cluster, t.Spec.Deployment.Environment); why != "" {
		return "", outcome.Stalled(v1alpha1.ReasonStepFailed, errors.New(why))
	}
	if why := cloneSourceRefusal(&src, run, op); why != "" {
		return "", outcome.Stalled(v1alpha1.ReasonStepFailed, errors.New(why))
	}
	name := credentialsSecretName(t, op.Secret)
	cp := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: t.Spec.Namespace, Labels: t.Spec.Deployment.Labels(),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "StyrminTask", Name: t.Name, UID: t.UID}}},
		Type: src.Type,
		Data: src.Data,
	}
	cp.Labels[LabelTask] = t.Name
	a, err := r.actor(ctx, run)
	if err != nil {
		return "", err
	}
	if err := a.Writer.Create(ctx, cp); err != nil && !apierrors.IsAlreadyExists(err) {
		if apierrors.IsForbidden(err) {
			return "", forbidden(a, "creating secret "+cp.Namespace+"/"+cp.Name, err)
		}
		return "", fmt.Errorf("copying the backup credentials into %s: %w", t.Spec.Namespace, err)
	}
	return name, nil
}

// cloneSourceRefusal says why Secret s may not be handed to the restore
// job of a clone's create ("": it may): that job reads the source
// environment's backup, so the Secret must be for the source too. The
// clone's files name the source (clonedFrom), and under strict tenancy
// dev's files naming prod as theirs would otherwise restore prod's data
// into dev with dev's credentials. A source in another cluster needs the
// Secret annotated (listing it) even where an unannotated Secret would
// do for the environment's own backups.
func cloneSourceRefusal(s *corev1.Secret, run *taskRun, op *v1alpha1.TaskOperation) string {
	if run.task.Spec.Operation != nil || op.Kind != v1alpha1.OperationRestore || run.instance == nil || run.instance.Context == nil {
		return ""
	}
	cf := run.instance.Context.Environment.ClonedFrom
	if cf == nil {
		return ""
	}
	if why := CredentialsRefusal(s, cf.Cluster, cf.Environment); why != "" {
		return fmt.Sprintf("the restore of backup %s reads the data of %s/%s, the environment %s was cloned from, so its credentials must be for that environment too: %s",
			cf.Backup, cf.Cluster, cf.Environment, run.instance.ID, why)
	}
	// A source in this cluster has its backup's record checked before the
	// create runs (cloneRestoreRefusal: the record names that source and
	// the artefact read). One in another cluster has none here: the
	// clone's files alone say whose data the artefact is, so a Secret
	// without the annotation, open to any environment's own backups, is
	// no consent to read another cluster's, or this cluster's under
	// another cluster's name.
	if _, listed := s.Annotations[AnnotationBackupEnvironments]; !listed && cf.Cluster != run.instance.ID.Cluster {
		return fmt.Sprintf("the restore of backup %s reads the data of %s/%s, the environment %s was cloned from, in another cluster: this cluster holds no record of that backup to check whose data it is, and the Secret %s/%s has no annotation %s: annotate it %s=\"%s/%s, %s/%s\" (with its other environments) for the clone to read that backup with it",
			cf.Backup, cf.Cluster, cf.Environment, run.instance.ID, s.Namespace, s.Name, AnnotationBackupEnvironments, AnnotationBackupEnvironments,
			run.instance.ID.Cluster, run.instance.ID.Environment, cf.Cluster, cf.Environment)
	}
	return ""
}

// usesCredentials reports whether task t's jobs may be given copies of
// backup credentials: an operation's that names a Secret, or a change's
// backup or restore steps.
func usesCredentials(t *v1alpha1.StyrminTask) bool {
	if op := t.Spec.Operation; op != nil {
		return op.Secret != ""
	}
	return slices.ContainsFunc(t.Status.Steps, func(st v1alpha1.TaskStep) bool { return st.Args[argOperation] != "" })
}

// stepUsesCredentials reports whether step st of t runs a Job that may be
// given a copy of backup credentials.
func stepUsesCredentials(t *v1alpha1.StyrminTask, st *v1alpha1.TaskStep) bool {
	if st.Action != string(drivers.ActionRunJob) {
		return false
	}
	if op := t.Spec.Operation; op != nil {
		return op.Secret != ""
	}
	return st.Args[argOperation] != ""
}

// dropCredentials deletes the task's copies of backup credentials in the
// deployment's namespace. Called when no Job of the task runs that needs
// them: owned by the task, they lived as long as it did (an operation's
// as long as its StyrminBackup), outlived a rotation or a withdrawal of
// the Secret, and stayed readable to whoever reads the namespace's
// Secrets. A step that needs them again copies them afresh
// (withOperation). Idempotent: it runs again after a restart that came
// between a step's end and the deletion.
func (r *Reconciler) dropCredentials(ctx context.Context, run *taskRun) error {
	t := run.task
	if !usesCredentials(t) {
		return nil
	}
	a, err := r.actor(ctx, run)
	if err != nil {
		return err
	}
	var list corev1.SecretList
	if err := a.Reader.List(ctx, &list, client.InNamespace(t.Spec.Namespace), client.MatchingLabels{LabelTask: t.Name}); err != nil {
		return fmt.Errorf("listing the copies of backup credentials in %s: %w", t.Spec.Namespace, err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		if !strings.HasPrefix(s.Name, credentialsCopyPrefix) {
			continue
		}
		uid := s.UID
		if err := a.Writer.Delete(ctx, s, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting the copy %s/%s of backup credentials: %w", s.Namespace, s.Name, err)
		}
	}
	return nil
}

// minCredentialLength is the shortest credential value redact masks.
// Masking is by text, and a value of a few characters (an access key ID
// of "test", a region) is common text: masking it would garble output
// around every such word and hide nothing worth hiding.
const minCredentialLength = 6

// credentialValues are the values of the backup credentials the task's
// jobs were given, read from the copies they read (credentialsCopies).
// No copy, no job was given any: nothing to mask. A copy a job was given
// that cannot be read is an error, so that redact withholds the output
// rather than print it unmasked.
func (r *Reconciler) credentialValues(ctx context.Context, run *taskRun) (resolver.Sensitive, error) {
	copies, err := r.credentialsCopies(ctx, run)
	if len(copies) == 0 || err != nil {
		return nil, err
	}
	a, err := r.actor(ctx, run)
	if err != nil {
		return nil, err
	}
	out := resolver.Sensitive{}
	for _, cc := range copies {
		key := client.ObjectKey{Namespace: run.task.Spec.Namespace, Name: cc.name}
		var cp corev1.Secret
		if err := a.Reader.Get(ctx, key, &cp); apierrors.IsNotFound(err) {
			if cc.job == "" {
				continue
			}
			return nil, fmt.Errorf("the copy %s of the backup credentials job %s was given is gone", key, cc.job)
		} else if err != nil {
			return nil, fmt.Errorf("reading the Secret %s: %w", key, err)
		}
		for k, v := range cp.Data {
			value := string(v)
			trimmed := strings.TrimSpace(value)
			if len(trimmed) < minCredentialLength {
				continue
			}
			out[cc.name+"/"+k] = value
			// A value from a file ends in a newline a job's print may drop.
			out[cc.name+"/"+k+"/trimmed"] = trimmed
		}
	}
	return out, nil
}

// credentialsCopy is a copy of backup credentials a task's jobs may have
// been given: by job (named), or, when job is "", the copy of the
// operation's Secret or of a step that no longer runs, which is there only
// while a job needs it.
type credentialsCopy struct{ name, job string }

// credentialsCopies are the copies of backup credentials the task's jobs
// were given. An operation task's jobs get the copy of the Secret its
// spec names, which does not change. A change's backup or restore steps
// get the Secret the environment names when their job is built, which a
// later commit may change: theirs are read from their Jobs as built, not
// from git as it is now (a copy of another Secret's name would not be
// found, and the output would go unmasked). A step whose Job is not there
// was given nothing yet, or has had its output recorded. Nor is the copy
// of a step that no longer runs missed: it is deleted once the step's end
// is written (dropCredentials); only a running step's is needed.
func (r *Reconciler) credentialsCopies(ctx context.Context, run *taskRun) ([]credentialsCopy, error) {
	t := run.task
	if op := t.Spec.Operation; op != nil {
		if op.Secret == "" {
			return nil, nil
		}
		return []credentialsCopy{{name: credentialsSecretName(t, op.Secret)}}, nil
	}
	var out []credentialsCopy
	for i := range t.Status.Steps {
		st := &t.Status.Steps[i]
		if st.Args[argOperation] == "" || st.StartedAt == nil || st.Action != string(drivers.ActionRunJob) {
			continue
		}
		var job batchv1.Job
		key := client.ObjectKey{Namespace: t.Spec.Namespace, Name: retriedJobName(t, st)}
		if err := r.opts.APIReader.Get(ctx, key, &job); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("reading job %s to tell the backup credentials it was given: %w", key, err)
		}
		pod := job.Spec.Template.Spec
		for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
			for _, from := range c.EnvFrom {
				if ref := from.SecretRef; ref != nil && strings.HasPrefix(ref.Name, credentialsCopyPrefix) {
					cc := credentialsCopy{name: ref.Name}
					if st.State == v1alpha1.StepRunning {
						cc.job = key.String()
					}
					out = append(out, cc)
				}
			}
		}
	}
	return out, nil
}

// Step arguments of an operation's steps inside a change's task (a
// clone's restore in its setup hook, a backup before an upgrade).
const (
	argOperation = "operation" // backup or restore
	argBackupID  = "backupID"
	argArtifact  = "artifact"
)

// operationOf is the operation a job step runs for: the task's own, or
// the one its step carries (a restoreBackup or backup step of a change),
// whose credentials are the environment's as git declares them now.
func (r *Reconciler) operationOf(ctx context.Context, run *taskRun, step drivers.Step) (*v1alpha1.TaskOperation, error) {
	if op := run.task.Spec.Operation; op != nil {
		return op, nil
	}
	kind := step.Args[argOperation]
	if kind == "" {
		return nil, nil
	}
	op := &v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, BackupID: step.Args[argBackupID], Artifact: step.Args[argArtifact]}
	if kind == "restore" {
		op.Kind = v1alpha1.OperationRestore
	}
	if op.Artifact == "" {
		return nil, outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf("the environment of %s has no backupLocation: expected backupLocation in its environment.cue", run.instance.ID))
	}
	if r.opts.BackupSettings != nil {
		id := run.task.Spec.Deployment
		e, err := r.opts.BackupSettings(ctx, id.Cluster, id.Environment)
		if err != nil {
			return nil, err
		}
		op.Secret = e.Secret
	}
	return op, nil
}

// RestoresBackup reports whether change task t has a step yet to end
// that restores backup backupID (a clone's restoreBackup, in its create's
// setup hook): the backup's artefacts must stay until it has.
func RestoresBackup(t *v1alpha1.StyrminTask, backupID string) bool {
	if IsOperation(t) || t.Status.Phase.Terminal() {
		return false
	}
	for _, st := range t.Status.Steps {
		if st.Args[argOperation] == "restore" && st.Args[argBackupID] == backupID && !st.State.Terminal() {
			return true
		}
	}
	return false
}

// StepsForInstance are the steps a change's task runs to instance in with
// driver d: StepsFor with the instance's BackupFirst, the backup and
// restore hooks put in place (expandSteps; running is the driver the
// deployment runs, nil when none). The plan shows the same
// (planner.ActionsForInstance).
func StepsForInstance(wf v1alpha1.Workflow, d, running *drivers.Driver, in *resolver.Instance) ([]v1alpha1.TaskStep, error) {
	steps, err := StepsFor(wf, d, in.BackupFirst)
	if err != nil {
		return nil, err
	}
	return expandSteps(wf, d, running, in, steps)
}

// expandSteps puts the driver's backup and restore hooks where a change's
// steps ask for them: a create of a deployment whose environment is a
// clone from a backup restores it at the setup hook's restoreBackup step
// (any other create skips that step); an upgrade takes a backup at its
// backup step, with the backup hook of the driver the deployment runs
// (planner.BackupHookDriver).
func expandSteps(wf v1alpha1.Workflow, d, running *drivers.Driver, in *resolver.Instance, steps []v1alpha1.TaskStep) ([]v1alpha1.TaskStep, error) {
	if wf != v1alpha1.WorkflowCreate && wf != v1alpha1.WorkflowUpgrade {
		return steps, nil
	}
	var env drivers.EnvironmentContext
	if in.Context != nil {
		env = in.Context.Environment
	}
	hookSteps := func(at string, hook v1alpha1.Workflow, d *drivers.Driver, args map[string]string) ([]v1alpha1.TaskStep, error) {
		hs, err := Steps(hook, d)
		if err != nil {
			return nil, err
		}
		for i := range hs {
			hs[i].Name = at + "/" + hs[i].Name
			if hs[i].Args == nil {
				hs[i].Args = map[string]string{}
			}
			for k, v := range args {
				hs[i].Args[k] = v
			}
		}
		return hs, nil
	}
	backupArgs := func() map[string]string {
		id := InlineBackupID(in.ID, in.Sequence)
		art := ""
		if env.BackupLocation != "" {
			art = resolver.ArtifactURL(env.BackupLocation, id, in.ID.Name)
		}
		return map[string]string{argOperation: "backup", argBackupID: id, argArtifact: art}
	}
	var out []v1alpha1.TaskStep
	for _, st := range steps {
		switch drivers.ActionKind(st.Action) {
		case drivers.ActionRestoreBackup:
			if d == nil || !d.CanBackup() {
				out = append(out, st)
				continue
			}
			cf := env.ClonedFrom
			if !planner.Restores(in) {
				st.State, st.Message = v1alpha1.StepSkipped, "nothing to restore: the environment is not a clone from a backup, or the deployment was added to it after the clone"
				out = append(out, st)
				continue
			}
			hs, err := hookSteps(st.Name, v1alpha1.WorkflowRestore, d, map[string]string{argOperation: "restore", argBackupID: cf.Backup,
				argArtifact: resolver.ArtifactURL(cf.Location, cf.Backup, in.ID.Name)})
			if err != nil {
				return nil, err
			}
			out = append(out, hs...)
		case drivers.ActionBackup:
			hd := planner.BackupHookDriver(d, running)
			if hd == nil || !hd.CanBackup() {
				out = append(out, st)
				continue
			}
			hs, err := hookSteps(st.Name, v1alpha1.WorkflowBackup, hd, backupArgs())
			if err != nil {
				return nil, err
			}
			out = append(out, hs...)
		default:
			out = append(out, st)
		}
	}
	return out, nil
}

// backedUp is the driver and sequence of the data an upgrade's backup
// took: the active instance's, the one the upgrade starts from (the
// upgrade's own when none is known). Read as the workflow was chosen, from
// the StyrminDeployment and the deployment's tasks both: the task before
// this one records itself active on the StyrminDeployment just before its
// end, and the cache may show its end before that record.
func backedUp(sd *v1alpha1.StyrminDeployment, tasks []v1alpha1.StyrminTask, in *resolver.Instance) (v1alpha1.DriverRef, int64) {
	if a := instance.Active(sd, tasks); a != nil && a.Sequence < in.Sequence {
		return a.Driver, a.Sequence
	}
	return v1alpha1.DriverRef{Name: in.Driver.Name, Version: in.Driver.Version}, in.Sequence
}

// backupSource is the instance and driver the backup an upgrade takes
// first runs with (planner.BackupHookDriver): the instance the
// StyrminDeployment holds, older than the task's, which the cluster runs
// and whose data the backup is, when its driver has a backup hook; its
// job's pod is that instance's chart's (the new chart's may name objects
// only the upgrade makes, or another database). Otherwise (none older,
// or no backup hook) the task's own. ok is false then.
func (r *Reconciler) backupSource(ctx context.Context, run *taskRun) (in *resolver.Instance, d *drivers.Driver, ok bool, err error) {
	if run.backupFrom != nil {
		return run.backupFrom, run.backupDriver, true, nil
	}
	sd, err := r.deployment(ctx, run)
	if err != nil || sd == nil || sd.Spec.Sequence == 0 || sd.Spec.Sequence >= run.instance.Sequence {
		return nil, nil, false, err
	}
	in, err = instance.InstanceFromSpec(&sd.Spec)
	if err != nil || in.Tombstone() || in.Context == nil {
		// Nothing renderable runs: the upgrade's own hook, as before.
		return nil, nil, false, nil
	}
	d, err = driversource.Get(ctx, r.opts.Drivers, driversource.Request{Ref: in.Driver, Commit: in.SourceCommit})
	if outcome.IsStalled(err) {
		// The running version's driver is gone or no longer loads (an
		// upgrade is how one leaves a broken version): the new version's
		// hook is the backup to be had, as when the running one has none;
		// the plan, which cannot load it either, shows the same.
		run.log.Info("the driver the deployment runs cannot be loaded; the upgrade's backup runs the new version's hook", "driver", in.Driver.Name+"@"+in.Driver.Version, "why", err.Error())
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("the driver %s runs, %s@%s, whose backup hook the upgrade runs first: %w", in.ID, in.Driver.Name, in.Driver.Version, err)
	}
	if !d.CanBackup() {
		return nil, nil, false, nil
	}
	run.backupFrom, run.backupDriver = in, d
	return in, d, true, nil
}

// backupRendered is the running instance's objects, for the pod of a job
// of the backup an upgrade takes first (see backupSource).
func (r *Reconciler) backupRendered(ctx context.Context, run *taskRun) (*drivers.Manifests, bool, error) {
	in, d, ok, err := r.backupSource(ctx, run)
	if err != nil || !ok {
		return nil, false, err
	}
	m, err := r.opts.Renders.Render(ctx, d, *in.Context, in.Values)
	if err != nil {
		what := fmt.Sprintf("rendering %s at sequence %d with %s@%s, for its backup before the upgrade", in.ID, in.Sequence, d.Name, d.Version)
		if cutShort(ctx, err) {
			return nil, false, fmt.Errorf("%s: %w", what, ctx.Err())
		}
		return nil, false, driversource.ClassifyRender(fmt.Errorf("%s: %w", what, err))
	}
	return m, true, nil
}

// inlineBackup reports whether a step with args, of task t, is one of the
// backup an upgrade takes first.
func inlineBackup(t *v1alpha1.StyrminTask, args map[string]string) bool {
	return !IsOperation(t) && args[argOperation] == "backup"
}

// InlineBackupID is the ID of the backup an upgrade takes before its pre
// steps: the environment, the deployment and the sequence it upgrades to,
// then a hash of those and the cluster (hashedName). Read alone they are
// ambiguous: environment team-a's deployment web and environment team's
// deployment a-web would share their backups' name.
func InlineBackupID(id resolver.ID, seq int64) string {
	n := strconv.FormatInt(seq, 10)
	return hashedName(fmt.Sprintf("%s-%s-before-%s", id.Environment, id.Name, n), id.Cluster, id.Environment, id.Name, n)
}

// recordInlineBackup records the backup a change's steps took (an
// upgrade's backup first) as a StyrminBackup that succeeded, when step i
// is the last of that backup's steps: it can then be listed and restored
// like any other. The driver it records is the active one, whose data it
// is.
func (r *Reconciler) recordInlineBackup(ctx context.Context, run *taskRun, i int32) error {
	t := run.task
	steps := t.Status.Steps
	st := steps[i]
	if IsOperation(t) || st.Args[argOperation] != "backup" {
		return nil
	}
	if int(i)+1 < len(steps) && steps[i+1].Args[argBackupID] == st.Args[argBackupID] {
		return nil
	}
	id := st.Args[argBackupID]
	first := steps[i]
	for j := int(i); j >= 0 && steps[j].Args[argBackupID] == id; j-- {
		first = steps[j]
	}
	sd, err := r.deployment(ctx, run)
	if err != nil {
		return err
	}
	tasks, err := r.tasksOf(ctx, t.Namespace, t.Spec.Deployment)
	if err != nil {
		return err
	}
	driver, seq := backedUp(sd, tasks, run.instance)
	if in, d, ok, err := r.backupSource(ctx, run); err != nil {
		return err
	} else if ok {
		// The running instance's hook took it: its data, its format.
		driver, seq = v1alpha1.DriverRef{Name: d.Name, Version: d.Version}, in.Sequence
	}
	loc := run.instance.Context.Environment.BackupLocation
	now := metav1.Now()
	dep := t.Spec.Deployment
	b := &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: r.opts.AgentNamespace, Labels: map[string]string{
			v1alpha1.LabelCluster: dep.Cluster, v1alpha1.LabelEnvironment: dep.Environment, LabelTask: t.Name}},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: dep.Cluster, Environment: dep.Environment, Deployments: []string{dep.Name}},
	}
	if err := r.opts.Client.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("recording the backup %s taken before the upgrade: %w", id, err)
	} else if err != nil {
		want := b.Spec
		if err := r.opts.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if b.Labels[LabelTask] != t.Name || b.Spec.Cluster != want.Cluster || b.Spec.Environment != want.Environment || !slices.Equal(b.Spec.Deployments, want.Deployments) {
			// Its name is predictable: a StyrminBackup made beforehand
			// (by hand, for another environment) would be taken over,
			// its record holding this deployment's artefact, its
			// deletion running its own environment's hook on it; or,
			// finished, leave this backup unrecorded. The upgrade stops
			// before its changes, its data backed up where the step said.
			return outcome.Stalled(v1alpha1.ReasonStepFailed, fmt.Errorf(
				"the backup taken before the upgrade cannot be recorded: StyrminBackup %s/%s exists and is not this task's (made for environment %s/%s, deployments %v, by task %q), and is left as it is; retry the change (styrminctl retry: its backup has another name, of its own sequence)",
				b.Namespace, b.Name, b.Spec.Cluster, b.Spec.Environment, b.Spec.Deployments, b.Labels[LabelTask]))
		}
		if b.Status.Phase.Terminal() {
			return nil
		}
	}
	base := b.DeepCopy()
	b.Status = v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: loc, StartedAt: first.StartedAt, FinishedAt: &now,
		Message: "taken by task " + t.Namespace + "/" + t.Name + " before its upgrade",
		Deployments: []v1alpha1.OperationDeployment{{Name: dep.Name, Namespace: t.Spec.Namespace, Task: t.Name, Phase: v1alpha1.OperationSucceeded,
			Artifact: st.Args[argArtifact], Sequence: seq, Driver: driver, StartedAt: first.StartedAt, FinishedAt: &now}}}
	return r.opts.Client.Status().Patch(ctx, b, client.MergeFrom(base))
}
