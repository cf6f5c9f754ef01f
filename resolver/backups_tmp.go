package resolver

import (
	"fmt"
	"io/fs"
	"strings"
)

// BackupLocation is a parsed backup location URL (temporary, replaced by the merge).
type BackupLocation struct{ Scheme, Target, Path string }

// ParseBackupLocation is temporary.
func ParseBackupLocation(s string) (BackupLocation, error) {
	for _, sc := range []string{"s3", "pvc"} {
		if rest, ok := strings.CutPrefix(s, sc+"://"); ok {
			t, p, _ := strings.Cut(rest, "/")
			return BackupLocation{sc, t, p}, nil
		}
	}
	return BackupLocation{}, fmt.Errorf("bad location %q", s)
}

// ArtifactURL is temporary.
func ArtifactURL(location, backupID, deployment string) string {
	return strings.TrimRight(location, "/") + "/" + backupID + "/" + deployment
}

// EnvironmentBackups is temporary.
type EnvironmentBackups struct {
	Cluster, Environment string
	Location             string
	Secret               string
	Schedule             string
	Keep                 int
}

// BackupSettings is temporary.
func BackupSettings(fsys fs.FS) ([]EnvironmentBackups, error) { return nil, nil }
