package operation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// BackupRequest asks for a backup of an environment.
type BackupRequest struct {
	// Namespace is the agent's namespace.
	Namespace            string
	Cluster, Environment string
	// Deployments to back up (none: all of the environment's).
	Deployments []string
	// Name is the backup's ID ("": <env>-<time>).
	Name string
	Now  time.Time
}

// NewBackup is the StyrminBackup a request asks for; its name is
// checked as the agent checks it, and one of a scheduled backup's form
// (<env>-YYYYMMDD-HHMM) is refused: the schedule would find its time's
// name taken.
func NewBackup(r BackupRequest) (*v1alpha1.StyrminBackup, error) {
	name := r.Name
	if name == "" {
		name = r.Environment + "-" + r.Now.UTC().Format("20060102-150405")
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	// A name of a scheduled backup's form is the schedule's: a backup
	// under it would take that time's scheduled backup's place.
	if env, slot, ok := scheduledNameOf(name); ok {
		return nil, fmt.Errorf("the name %q has the form of a scheduled backup's (<env>-YYYYMMDD-HHMM): it is the name a schedule of an environment %s would give its backup for %s, whether or not one has a schedule now (expected a name of another form, such as the default <env>-YYYYMMDD-HHMMSS)",
			name, env, slot.Format(time.RFC3339))
	}
	return &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace,
			Labels: map[string]string{v1alpha1.LabelCluster: r.Cluster, v1alpha1.LabelEnvironment: r.Environment}},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: r.Cluster, Environment: r.Environment, Deployments: r.Deployments},
	}, nil
}

// RestoreRequest asks for a restore of a backup.
type RestoreRequest struct {
	Namespace string
	// Cluster and Environment the backup must be of.
	Cluster, Environment string
	Backup               string
	Deployments          []string
	Name                 string
	Now                  time.Time
}

// NewRestore checks that the backup is of the environment named and holds
// a part that succeeded of each deployment asked for (restoredParts), and
// returns the StyrminRestore the request asks for.
func NewRestore(ctx context.Context, c client.Reader, r RestoreRequest) (*v1alpha1.StyrminRestore, error) {
	var b v1alpha1.StyrminBackup
	if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Backup}, &b); err != nil {
		return nil, fmt.Errorf("--from %s: %w", r.Backup, err)
	}
	if b.Spec.Environment != r.Environment || (b.Spec.Cluster != "" && b.Spec.Cluster != r.Cluster) {
		return nil, fmt.Errorf("--from %s: the backup is of %s/%s, not %s/%s", r.Backup, orNone(b.Spec.Cluster), b.Spec.Environment, r.Cluster, r.Environment)
	}
	// Each part asked for is judged, as the agent judges it: a backup that
	// failed for another deployment restores the parts that succeeded.
	if _, _, err := restoredParts(&b, r.Cluster+"/"+r.Environment, r.Deployments); err != nil {
		return nil, fmt.Errorf("--from %s: %w", r.Backup, err)
	}
	name := r.Name
	if name == "" {
		name = defaultRestoreName(r.Environment, r.Now)
	}
	if err := validRestoreName(name); err != nil {
		return nil, err
	}
	return &v1alpha1.StyrminRestore{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace,
			Labels: map[string]string{v1alpha1.LabelCluster: r.Cluster, v1alpha1.LabelEnvironment: r.Environment}},
		Spec: v1alpha1.StyrminRestoreSpec{Backup: r.Backup, Deployments: r.Deployments},
	}, nil
}

// defaultRestoreName is <env>-restore-<YYYYMMDD-HHMMSS>, within the 63
// characters of a restore's name: the environment's name (up to 40) is
// cut, and a hash of it added, when it would not fit, so that two long
// names alike in their start still name their restores apart.
func defaultRestoreName(env string, now time.Time) string {
	suffix := "-restore-" + now.UTC().Format("20060102-150405")
	if room := 63 - len(suffix); len(env) > room {
		sum := sha256.Sum256([]byte(env))
		hash := hex.EncodeToString(sum[:])[:6]
		env = strings.TrimRight(env[:room-len(hash)-1], "-") + "-" + hash
	}
	return env + suffix
}

// RetryRestore asks the agent to run a failed restore's failed
// deployments again. The ask is written on the copy read failed (its
// resourceVersion): one read before another's retry started, written
// after, asked for a retry of that one, which ran at once when it failed
// too, a destructive restore run again with no one having seen why. On a
// conflict the restore is read again and decided again.
func RetryRestore(ctx context.Context, c client.Client, key client.ObjectKey, now time.Time) error {
	const attempts = 3
	for attempt := 1; ; attempt++ {
		err := retryRestoreOnce(ctx, c, key, now)
		if !apierrors.IsConflict(err) || attempt == attempts {
			return err
		}
	}
}

func retryRestoreOnce(ctx context.Context, c client.Client, key client.ObjectKey, now time.Time) error {
	var r v1alpha1.StyrminRestore
	if err := c.Get(ctx, key, &r); err != nil {
		return err
	}
	switch {
	case r.Status.Phase != v1alpha1.OperationFailed:
		return fmt.Errorf("restore %s is %s: only a failed restore is retried", key.Name, orNone(string(r.Status.Phase)))
	case strings.HasPrefix(r.Status.Message, "refused:"):
		return fmt.Errorf("restore %s was refused (%s): fix that and make a new restore", key.Name, r.Status.Message)
	}
	base := r.DeepCopy()
	r.Spec.Retry = strconv.FormatInt(now.UnixNano(), 36)
	return c.Patch(ctx, &r, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// Wait polls obj (a StyrminBackup or StyrminRestore) until done says it
// ended, or ctx ends.
func Wait(ctx context.Context, c client.Reader, obj client.Object, poll time.Duration, done func() bool) error {
	key := client.ObjectKeyFromObject(obj)
	return wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, obj); err != nil {
			return false, err
		}
		return done(), nil
	})
}

// LatestBackup is the newest backup of the whole of cluster/env that
// succeeded (by when it finished): the one `env clone --from-backup
// latest` restores. A backup of some deployments only (an upgrade's
// backup first, `backup create --deployment`) is not one: the clone's
// other deployments would restore artefacts it does not hold.
func LatestBackup(ctx context.Context, c client.Reader, namespace, cluster, env string) (*v1alpha1.StyrminBackup, error) {
	var list v1alpha1.StyrminBackupList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing StyrminBackups in %s: %w", namespace, err)
	}
	var latest *v1alpha1.StyrminBackup
	for i := range list.Items {
		b := &list.Items[i]
		if b.Spec.Environment != env || (b.Spec.Cluster != "" && b.Spec.Cluster != cluster) || len(b.Spec.Deployments) > 0 ||
			b.Status.Phase != v1alpha1.OperationSucceeded || b.Status.FinishedAt == nil {
			continue
		}
		if latest == nil || b.Status.FinishedAt.After(latest.Status.FinishedAt.Time) {
			latest = b
		}
	}
	if latest == nil {
		return nil, fmt.Errorf("environment %s/%s has no backup of all its deployments that succeeded in %s (styrminctl backup create %s/%s --wait makes one)", cluster, env, namespace, cluster, env)
	}
	return latest, nil
}

// RestoresInProgress names, per deployment, the restore its changes wait
// for: one whose newest attempt runs or waits, or failed (until it is
// retried or deleted). `styrminctl plan --restores` shows it.
func RestoresInProgress(ctx context.Context, c client.Reader) (map[resolver.ID]string, error) {
	var tasks v1alpha1.StyrminTaskList
	if err := c.List(ctx, &tasks, client.MatchingLabels{v1alpha1.LabelOperationKind: "restore"}); err != nil {
		return nil, fmt.Errorf("listing restore tasks: %w", err)
	}
	type key struct {
		id   resolver.ID
		name string
	}
	newest := map[key]*v1alpha1.StyrminTask{}
	for i := range tasks.Items {
		t := &tasks.Items[i]
		if t.Spec.Operation == nil {
			continue
		}
		d := t.Spec.Deployment
		k := key{resolver.ID{Cluster: d.Cluster, Environment: d.Environment, Name: d.Name}, t.Spec.Operation.Name}
		if n := newest[k]; n == nil || n.Spec.Operation.Attempt < t.Spec.Operation.Attempt {
			newest[k] = t
		}
	}
	keys := make([]key, 0, len(newest))
	for k := range newest {
		keys = append(keys, k)
	}
	// Several restores of one deployment are named in name order.
	slices.SortFunc(keys, func(a, b key) int { return strings.Compare(a.name, b.name) })
	out := map[resolver.ID]string{}
	for _, k := range keys {
		t := newest[k]
		var s string
		switch {
		case !t.Status.Phase.Terminal():
			s = "StyrminRestore " + k.name + " runs"
		case t.Status.Phase == v1alpha1.TaskFailed:
			s = "StyrminRestore " + k.name + " failed; it waits to be retried or deleted"
		default:
			continue
		}
		if prev := out[k.id]; prev != "" {
			s = prev + "; " + s
		}
		out[k.id] = s
	}
	return out, nil
}
