package operation

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// Settings gives the backup settings of every environment as git declares
// them at the commit the agent synced.
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

// environment returns the settings of cluster/env, refusing an
// environment git does not declare or one without a backup location.
func environment(ctx context.Context, s Settings, cluster, env string) (resolver.EnvironmentBackups, error) {
	all, err := s.BackupSettings(ctx)
	if err != nil {
		return resolver.EnvironmentBackups{}, fmt.Errorf("reading the environments' backup settings: %w", err)
	}
	i := slices.IndexFunc(all, func(e resolver.EnvironmentBackups) bool { return e.Cluster == cluster && e.Environment == env })
	name := cluster + "/" + env
	if i < 0 {
		return resolver.EnvironmentBackups{}, &RefusedError{Environment: name, Msg: "git declares no such environment (clusters/" + cluster + "/environments/" + env + "/)"}
	}
	e := all[i]
	if e.Location == "" {
		return e, &RefusedError{Environment: name, Msg: "the environment has no backupLocation (expected backupLocation: \"s3://BUCKET/PREFIX\" or \"pvc://CLAIM/PATH\" in its environment.cue, or a default in cluster.cue)"}
	}
	return e, nil
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
	if s.Labels[task.LabelBackupCredentials] != "true" {
		return &RefusedError{Environment: name, Msg: fmt.Sprintf("backups.secret %s/%s is not labelled %s=true: the agent hands a Secret to drivers' jobs only when it is marked for backups", namespace, e.Secret, task.LabelBackupCredentials)}
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
