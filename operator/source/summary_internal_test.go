package source

import (
	"os"
	"testing"
	"unsafe"

	"github.com/styrmin/styrmin/resolver"
)

// TestAWalkSummaryKeepsNoneOfItsLockfilesText pins that what a walk keeps
// of each deployment's instance holds none of the decoded lockfile's
// strings, each of which would keep the whole document alive while the
// walk lasts (a fan-out of 2,000 deployments: 2,000 lockfiles).
func TestAWalkSummaryKeepsNoneOfItsLockfilesText(t *testing.T) {
	data, err := os.ReadFile("../../resolver/testdata/golden/locks/local/dev/web.lock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in, err := resolver.DecodeLock("locks/local/dev/web.lock.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	s := summary(in)
	for name, pair := range map[string][2]string{
		"apiVersion":                   {in.APIVersion, s.APIVersion},
		"deployment.name":              {in.ID.Name, s.ID.Name},
		"digest":                       {in.Digest, s.Digest},
		"driver.digest":                {in.Driver.Digest, s.Driver.Digest},
		"appVersion":                   {in.AppVersion, s.AppVersion},
		"context.deployment.namespace": {in.Context.Deployment.Namespace, s.Context.Deployment.Namespace},
	} {
		if pair[0] == "" || pair[0] != pair[1] {
			t.Errorf("%s: %q kept as %q", name, pair[0], pair[1])
		}
		if unsafe.StringData(pair[0]) == unsafe.StringData(pair[1]) {
			t.Errorf("%s: the summary shares the decoded lockfile's bytes", name)
		}
	}
}
