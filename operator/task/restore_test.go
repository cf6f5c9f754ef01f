package task

import (
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestARestoreTaskRefusesADriverAChangeBeforeItMovedTo pins the check a
// restore's task makes when it plans: the restore checked the backup
// against the driver running when it started, but its task runs after the
// changes made before it, and an upgrade among them may have moved the
// deployment to a driver that cannot read the backup.
func TestARestoreTaskRefusesADriverAChangeBeforeItMovedTo(t *testing.T) {
	t.Parallel()
	b := &v1alpha1.StyrminBackup{}
	b.Name = "monday"
	b.Status.Deployments = []v1alpha1.OperationDeployment{
		{Name: "hub", Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}},
		{Name: "web", Driver: v1alpha1.DriverRef{Name: "webapp", Version: "1.1.0"}},
	}
	for _, tc := range []struct {
		name, deployment, driver, version, want string
	}{
		{"the driver the backup was taken with", "hub", "graphhub", "1.4.0", ""},
		{"a newer minor version, after an upgrade", "hub", "graphhub", "1.5.0", ""},
		{"a new major version, after an upgrade", "hub", "graphhub", "2.0.0", "backup monday cannot be restored into deployment hub as it runs now (a change ran before the restore): the backup was taken with graphhub@1.4.0, the deployment runs graphhub@2.0.0"},
		{"another deployment's entry is not this one's", "web", "webapp", "1.1.0", ""},
		{"the backup records no such deployment (deleted meanwhile)", "db", "postgres", "9.0.0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := restoreRefusal(b, tc.deployment, &drivers.Driver{Name: tc.driver, Version: tc.version})
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("restoreRefusal = %q, want %q", got, tc.want)
			}
		})
	}
}
