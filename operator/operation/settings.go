package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// Settings gives the backup settings of every environment as git declares
// them at the commit the agent synced, as resolver.BackupSettings reads
// them: an environment whose files cannot be read is listed with its Err
// (and the error joins those); with no list, none could be read.
type Settings interface {
	BackupSettings(ctx context.Context) ([]resolver.EnvironmentBackups, error)
}

// SettingsFunc adapts a function to Settings.
type SettingsFunc func(ctx context.Context) ([]resolver.EnvironmentBackups, error)

// BackupSettings calls f.
func (f SettingsFunc) BackupSettings(ctx context.Context) ([]resolver.EnvironmentBackups, error) {
	return f(ctx)
}

var _ Settings = SettingsFunc(nil)

// readSettings is every environment's settings, those that cannot be read
// with their Err; an error only when the settings as a whole could not be
// read (one no environment carries). One broken file then stops only the
// environments it layers.
func readSettings(ctx context.Context, s Settings) ([]resolver.EnvironmentBackups, error) {
	all, err := s.BackupSettings(ctx)
	if err != nil && !slices.ContainsFunc(all, func(e resolver.EnvironmentBackups) bool { return e.Err != nil }) {
		return nil, fmt.Errorf("reading the environments' backup settings: %w", err)
	}
	return all, nil
}

// settingsOf returns the settings of cluster/env and whether git declares
// the environment. Settings git cannot give because a file is invalid
// are a refusal naming the file and the field (it needs a change in
// git); others (the repository not read yet, a sandbox that did not
// start) are returned to be retried.
func settingsOf(ctx context.Context, s Settings, cluster, env string) (resolver.EnvironmentBackups, bool, error) {
	name := cluster + "/" + env
	all, err := readSettings(ctx, s)
	if err != nil {
		return resolver.EnvironmentBackups{}, false, unreadable(name, err)
	}
	for _, e := range all {
		switch {
		case e.Cluster != cluster:
			continue
		case e.Environment == env:
		case e.Environment == "" && e.Err != nil:
			// The cluster's error, which named no environment: each one's.
		default:
			continue
		}
		if e.Err != nil {
			return resolver.EnvironmentBackups{}, false, unreadable(name, e.Err)
		}
		return e, true, nil
	}
	return resolver.EnvironmentBackups{}, false, nil
}

// EnvironmentSettings is the backup settings of cluster/env alone, for a
// task's steps (a backup before an upgrade, a clone's restore): an
// environment git does not declare has none (no location, no Secret), and
// only a file that layers it (its cluster's or its own) is its error, so
// one environment's broken file does not hold back another's tasks. A
// location shared with another cluster (LocationErr) is none: a backup
// before an upgrade is named after its cluster.
func EnvironmentSettings(ctx context.Context, s Settings, cluster, env string) (resolver.EnvironmentBackups, error) {
	e, declared, err := settingsOf(ctx, s, cluster, env)
	if err != nil {
		return resolver.EnvironmentBackups{}, err
	}
	if !declared {
		return resolver.EnvironmentBackups{Cluster: cluster, Environment: env}, nil
	}
	return e, nil
}

// unreadable classifies why the settings of environment name cannot be
// read: a file git holds is invalid (refused: Stalled, naming it), or
// anything else (retried).
func unreadable(name string, err error) error {
	var ce *resolver.ConfigError
	if errors.As(err, &ce) {
		return &RefusedError{Environment: name, Msg: fmt.Sprintf("git's backup settings of the environment cannot be read: %v: fix that file", err)}
	}
	return fmt.Errorf("environment %s: reading its backup settings: %w", name, err)
}

// environment returns the settings of cluster/env, refusing an
// environment git does not declare, one whose settings cannot be read,
// or one without a backup location.
func environment(ctx context.Context, s Settings, cluster, env string) (resolver.EnvironmentBackups, error) {
	e, declared, err := settingsOf(ctx, s, cluster, env)
	if err != nil {
		return e, err
	}
	name := cluster + "/" + env
	if !declared {
		return resolver.EnvironmentBackups{}, &RefusedError{Environment: name, Msg: "git declares no such environment (clusters/" + cluster + "/environments/" + env + "/)"}
	}
	if e.Location == "" {
		return e, &RefusedError{Environment: name, Msg: "the environment has no backupLocation (expected backupLocation: \"s3://BUCKET/PREFIX\" or \"pvc://CLAIM/PATH\" in its environment.cue, or a default in cluster.cue)"}
	}
	return e, sharedLocation(e)
}

// sharedLocation refuses a new backup or restore of environment e when an
// environment of its name in another cluster backs up to its location
// (LocationErr): both agents give the same backup IDs, so a backup would
// overwrite the other's artefacts and a restore could read them. Only
// these are refused; deletions and retention go on.
func sharedLocation(e resolver.EnvironmentBackups) error {
	if e.LocationErr == nil {
		return nil
	}
	return &RefusedError{Environment: e.Cluster + "/" + e.Environment, Msg: fmt.Sprintf("git's backupLocation of the environment is shared: %v: give it a location of its own (a restore reads the artefacts where its backup wrote them, so the backups taken before stay restorable)", e.LocationErr)}
}

// s3Keys are the keys a Secret for an s3:// location must hold.
var s3Keys = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}

// checkCredentials refuses a location its Secret cannot reach: an s3://
// location without a Secret, a Secret that is missing, not marked for
// backups, or lacks the keys the scheme needs. Only key names are read
// into messages, never values.
func checkCredentials(ctx context.Context, c client.Reader, namespace string, e resolver.EnvironmentBackups) error {
	name := e.Cluster + "/" + e.Environment
	loc, err := resolver.ParseBackupLocation(e.Location)
	if err != nil {
		return &RefusedError{Environment: name, Msg: fmt.Sprintf("backupLocation: %v", err)}
	}
	if e.Secret == "" {
		if loc.Scheme == "s3" {
			return &RefusedError{Environment: name, Msg: fmt.Sprintf("backupLocation %s needs credentials: expected backups: secret: NAME, a Secret in %s holding %v", e.Location, namespace, s3Keys)}
		}
		return nil
	}
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: e.Secret}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return &RefusedError{Environment: name, Msg: fmt.Sprintf("backups.secret %q: no such Secret in %s (expected one holding the credentials of %s)", e.Secret, namespace, e.Location)}
		}
		return fmt.Errorf("environment %s: reading backups.secret %s/%s: %w", name, namespace, e.Secret, err)
	}
	if why := task.CredentialsRefusal(&s, e.Cluster, e.Environment); why != "" {
		return &RefusedError{Environment: name, Msg: "backups.secret: " + why}
	}
	if loc.Scheme == "s3" {
		for _, k := range s3Keys {
			if len(s.Data[k]) == 0 {
				return &RefusedError{Environment: name, Msg: fmt.Sprintf("backups.secret %s/%s has no key %s: an s3:// location needs %v", namespace, e.Secret, k, s3Keys)}
			}
		}
	}
	return nil
}

// claimUse is a deployment whose jobs would read or write location, in
// the deployment's namespace.
type claimUse struct {
	deployment, namespace, location string
}

// claimFault is a deployment whose jobs could not mount the claim of its
// pvc:// location, with why.
type claimFault struct {
	deployment, why string
}

// claimNeeded says why a claim is expected in each deployment's
// namespace.
const claimNeeded = "the jobs of a pvc:// backup location mount its claim from their deployment's namespace (expected the claim in each deployment's namespace)"

// claimFaults are the deployments of uses whose jobs could not mount the
// claim of a pvc:// location: a job mounts it from its deployment's
// namespace (task.withOperation), and one without it there waits Pending
// until its step times out (a restore's pre step has stopped the
// deployment's components by then, and its changes stay held). Other
// schemes need no claim; a location that does not parse is
// checkCredentials' refusal.
func claimFaults(ctx context.Context, api client.Reader, env string, uses []claimUse) ([]claimFault, error) {
	var faults []claimFault
	for _, u := range uses {
		why, err := claimMissing(ctx, api, env, u)
		if err != nil {
			return nil, err
		}
		if why != "" {
			faults = append(faults, claimFault{u.deployment, why})
		}
	}
	return faults, nil
}

// claimMissing says why u's jobs could not mount its location's claim,
// "" when they can or need none.
func claimMissing(ctx context.Context, api client.Reader, env string, u claimUse) (string, error) {
	loc, err := resolver.ParseBackupLocation(u.location)
	if err != nil || loc.Scheme != resolver.SchemePVC {
		return "", nil
	}
	var pvc corev1.PersistentVolumeClaim
	err = api.Get(ctx, client.ObjectKey{Namespace: u.namespace, Name: loc.Target}, &pvc)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("no PersistentVolumeClaim %s in %s", loc.Target, u.namespace), nil
	case err != nil:
		return "", fmt.Errorf("environment %s, deployment %s: reading PersistentVolumeClaim %s/%s of %s: %w", env, u.deployment, u.namespace, loc.Target, u.location, err)
	case !pvc.DeletionTimestamp.IsZero():
		return fmt.Sprintf("PersistentVolumeClaim %s/%s is being deleted", u.namespace, loc.Target), nil
	}
	return "", nil
}

// checkClaims refuses an operation any of whose deployments' jobs could
// not mount their location's claim (claimFaults).
func checkClaims(ctx context.Context, api client.Reader, env string, uses []claimUse) error {
	faults, err := claimFaults(ctx, api, env, uses)
	if err != nil {
		return err
	}
	return claimRefusal(env, faults)
}

// claimRefusal refuses for faults, naming every deployment at fault (nil
// when none is).
func claimRefusal(env string, faults []claimFault) error {
	if len(faults) == 0 {
		return nil
	}
	names := make([]string, 0, len(faults))
	why := make([]string, 0, len(faults))
	for _, f := range faults {
		names = append(names, f.deployment)
		why = append(why, f.why)
	}
	return &RefusedError{Environment: env, Deployment: strings.Join(names, ", "), Msg: strings.Join(why, "; ") + ": " + claimNeeded}
}
