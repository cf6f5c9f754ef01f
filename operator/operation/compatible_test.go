package operation

import (
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

func TestABackupRestoresOnlyIntoItsDriverOfTheSameMajorVersionAndNoOlder(t *testing.T) {
	t.Parallel()
	from := v1alpha1.DriverRef{Name: "graphhub", Version: "1.2.0"}
	for _, tc := range []struct {
		name, driver, version, want string
	}{
		{"the same version", "graphhub", "1.2.0", ""},
		{"a newer minor", "graphhub", "1.3.1", ""},
		{"another driver", "webapp", "1.2.0", "a backup restores only into the driver that took it"},
		{"a new major", "graphhub", "2.0.0", "a new major version of a driver may not read its old backups (expected graphhub@1.x)"},
		{"an older version", "graphhub", "1.1.0", "newer than the running graphhub@1.1.0: upgrade the deployment first"},
		{"no semantic version", "graphhub", "latest", "expected semantic versions"},
	} {
		err := Compatible(from, tc.driver, tc.version)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestBackupIDsAreRefusedUnlessTheyCanNameAnArtefactAndATask(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"dev-20261201-0300", "before-migration", "a"} {
		if err := validName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Dev", "-a", "a-", "a/b", "a.b", strings.Repeat("a", 64)} {
		if err := validName(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

// TestEveryEnvironmentGetsAValidDefaultRestoreName pins the name a
// restore gets when none is given: <env>-restore-<time>, which for an
// environment of 40 characters (the longest a name may be) had 64 and
// was refused by the agent's own check.
func TestEveryEnvironmentGetsAValidDefaultRestoreName(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 10, 15, 0, 0, time.UTC)
	if got := defaultRestoreName("dev", at); got != "dev-restore-20261201-101500" {
		t.Errorf("the default name of a restore of dev: %s, want dev-restore-20261201-101500", got)
	}
	long := strings.Repeat("a", 38)
	names := map[string]bool{}
	for _, env := range []string{long + "-b", long + "-c", strings.Repeat("x", 40), strings.Repeat("ab-", 13) + "c"} {
		n := defaultRestoreName(env, at)
		if err := validRestoreName(n); err != nil {
			t.Errorf("environment %s (%d characters): %v", env, len(env), err)
		}
		if !strings.HasSuffix(n, "-restore-20261201-101500") || !strings.HasPrefix(n, env[:30]) {
			t.Errorf("environment %s: default name %s does not read as its restore of that time", env, n)
		}
		names[n] = true
	}
	if len(names) != 4 {
		t.Errorf("the default names of four environments' restores: %v, want four apart", names)
	}
}
