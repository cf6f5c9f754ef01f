package operation

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/resolver"
)

// A task's steps read their own environment's backup settings: another
// environment's broken file (listed with its Err, the error joining it)
// does not hold them back, their own does, and an environment git does
// not declare has none.
func TestATasksBackupSettingsAreItsEnvironmentsAlone(t *testing.T) {
	t.Parallel()
	broken := &resolver.ConfigError{File: "clusters/local/environments/qa/environment.cue", Field: "backupLocation", Msg: "expected a string"}
	s := SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		return []resolver.EnvironmentBackups{
			{Cluster: "local", Environment: "dev", Location: "s3://backups/dev", Secret: "backup-credentials"},
			{Cluster: "local", Environment: "qa", Err: broken},
		}, errors.Join(broken)
	})
	ctx := context.Background()
	dev, err := EnvironmentSettings(ctx, s, "local", "dev")
	if err != nil || dev.Location != "s3://backups/dev" || dev.Secret != "backup-credentials" {
		t.Errorf("dev beside qa's broken file: %+v, %v; want dev's settings", dev, err)
	}
	if _, err := EnvironmentSettings(ctx, s, "local", "qa"); err == nil || !strings.Contains(err.Error(), "qa/environment.cue") {
		t.Errorf("qa, whose file is broken: %v, want its file named", err)
	}
	if gone, err := EnvironmentSettings(ctx, s, "local", "gone"); err != nil || gone.Location != "" || gone.Cluster != "local" || gone.Environment != "gone" {
		t.Errorf("an environment git does not declare: %+v, %v; want no settings", gone, err)
	}
}
