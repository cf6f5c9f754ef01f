package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionPrefersTheStampOverTheToolchainsRecord(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	for _, c := range []struct {
		name, stamp, version, short string
		bi                          *debug.BuildInfo
	}{
		{"stamped", "v0.4.0", "v0.4.0", "v0.4.0", bi},
		{"work tree", "", "(devel)", "(devel)-dirty", bi},
		{"module version", "", "v0.3.1", "v0.3.1", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}},
		{"no build info", "", "(unknown)", "(unknown)", nil},
	} {
		got := fromBuild(c.stamp, c.bi)
		if got.Version != c.version || got.Short() != c.short {
			t.Errorf("%s: version %q short %q, want %q and %q", c.name, got.Version, got.Short(), c.version, c.short)
		}
	}
	line := fromBuild("v0.4.0", bi).String()
	for _, want := range []string{"v0.4.0", "commit 0123456789ab-dirty", "2026-12-01T10:00:00Z", "go1.", "/"} {
		if !strings.Contains(line, want) {
			t.Errorf("String() %q does not say %q", line, want)
		}
	}
}

func TestStampedCommitAndDateWinOverTheToolchainsRecord(t *testing.T) {
	bi := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
	}}
	got := withStampedCommit(fromBuild("v0.4.0", bi), "fedcba9876543210fedcba9876543210fedcba98", "2026-12-02T11:00:00Z")
	if got.Commit != "fedcba9876543210fedcba9876543210fedcba98" || got.Date != "2026-12-02T11:00:00Z" {
		t.Errorf("stamped commit and date: %+v", got)
	}
	if kept := withStampedCommit(fromBuild("", bi), "", ""); kept.Commit != "0123456789abcdef0123456789abcdef01234567" || kept.Date != "2026-12-01T10:00:00Z" {
		t.Errorf("without stamps the record is kept: %+v", kept)
	}
}
