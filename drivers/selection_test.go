package drivers

import (
	"errors"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
)

// fakeDriver is a catalog entry for selection tests: only name, version,
// range and digest matter to the rule.
func fakeDriver(t *testing.T, name, version, appRange string) *Driver {
	t.Helper()
	c, err := semver.NewConstraint(appRange)
	if err != nil {
		t.Fatal(err)
	}
	return &Driver{Name: name, Version: version, AppVersions: appRange, Digest: "sha256:" + version,
		Source: "drivers/" + name + "/" + version, compiled: &compiled{appRange: c}}
}

func selectionCatalog(t *testing.T) *Catalog {
	cat := NewCatalog()
	for _, d := range []*Driver{
		fakeDriver(t, "hub", "2.0.0", ">=1.5.0 <2.0.0"),
		fakeDriver(t, "hub", "1.0.0", ">=1.0.0 <1.5.0"),
		fakeDriver(t, "hub", "1.1.0", ">=1.0.0 <1.6.0"),
		fakeDriver(t, "hub", "3.0.0-beta.1", ">=2.0.0-0 <3.0.0"),
		fakeDriver(t, "hub", "2.1.0", ">=1.5.0 <2.0.0"),
	} {
		if err := cat.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	return cat
}

func TestCatalogVersionsAscendingSemver(t *testing.T) {
	cat := selectionCatalog(t)
	var got []string
	for _, d := range cat.Versions("hub") {
		got = append(got, d.Version)
	}
	want := "1.0.0 1.1.0 2.0.0 2.1.0 3.0.0-beta.1"
	if strings.Join(got, " ") != want {
		t.Fatalf("versions = %v, want %s", got, want)
	}
}

func TestSelect(t *testing.T) {
	cat := selectionCatalog(t)
	tests := []struct {
		name    string
		sel     Selection
		want    string
		wantErr string // substring of a *NoMatchError or *LockedNotLoadedError message
	}{
		{name: "newest version whose range contains the app version", sel: Selection{AppVersion: "1.2.0"}, want: "1.1.0"},
		{name: "newest match skips newer versions with other ranges", sel: Selection{AppVersion: "1.5.3"}, want: "2.1.0"},
		{name: "pinned version wins over a newer match", sel: Selection{AppVersion: "1.2.0", Pinned: "1.0.0"}, want: "1.0.0"},
		{name: "pinned version wins over the lock", sel: Selection{AppVersion: "1.2.0", Pinned: "1.0.0", Locked: "1.1.0", LockedAppVersion: "1.2.0"}, want: "1.0.0"},
		{name: "pinned version must support the app version", sel: Selection{AppVersion: "1.7.0", Pinned: "1.0.0"},
			wantErr: "(pinned version 1.0.0 supports >=1.0.0 <1.5.0); tried: 1.0.0 (>=1.0.0 <1.5.0)"},
		{name: "pinned version must be loaded", sel: Selection{AppVersion: "1.2.0", Pinned: "9.9.9"}, wantErr: "pinned version 9.9.9 is not loaded"},
		{name: "locked version kept while the app version is unchanged", sel: Selection{AppVersion: "1.2.0", Locked: "1.0.0", LockedAppVersion: "1.2.0"}, want: "1.0.0"},
		{name: "locked version kept even when its range no longer matters", sel: Selection{AppVersion: "1.5.1", Locked: "1.1.0", LockedAppVersion: "1.5.1"}, want: "1.1.0"},
		{name: "app version change selects the newest match", sel: Selection{AppVersion: "1.3.0", Locked: "1.0.0", LockedAppVersion: "1.2.0"}, want: "1.1.0"},
		{name: "explicit upgrade leaves the lock", sel: Selection{AppVersion: "1.2.0", Locked: "1.0.0", LockedAppVersion: "1.2.0", Upgrade: true}, want: "1.1.0"},
		{name: "lock of a version no longer loaded is an error, not another version", sel: Selection{AppVersion: "1.2.0", Locked: "0.9.0", LockedAppVersion: "1.2.0"},
			wantErr: "version 0.9.0, which the deployment's lock runs, is not loaded (loaded: 1.0.0, 1.1.0, 2.0.0, 2.1.0, 3.0.0-beta.1)"},
		{name: "lock of a version no longer loaded is left on an upgrade request", sel: Selection{AppVersion: "1.2.0", Locked: "0.9.0", LockedAppVersion: "1.2.0", Upgrade: true}, want: "1.1.0"},
		{name: "lock of a version no longer loaded is left for a new application version", sel: Selection{AppVersion: "1.3.0", Locked: "0.9.0", LockedAppVersion: "1.2.0"}, want: "1.1.0"},
		{name: "same app version written with a v prefix keeps the lock", sel: Selection{AppVersion: "v1.2.0", Locked: "1.0.0", LockedAppVersion: "1.2.0"}, want: "1.0.0"},
		{name: "prerelease app version does not match a range without prereleases",
			sel: Selection{AppVersion: "1.5.0-rc.1"}, wantErr: "no version supports application version 1.5.0-rc.1"},
		{name: "prerelease app version matches a range that names a prerelease", sel: Selection{AppVersion: "2.0.0-rc.1"}, want: "3.0.0-beta.1"},
		{name: "release app version matches a prerelease driver's range", sel: Selection{AppVersion: "2.3.0"}, want: "3.0.0-beta.1"},
		{name: "no match lists every version tried with its range", sel: Selection{AppVersion: "0.9.0"},
			wantErr: "tried: 1.0.0 (>=1.0.0 <1.5.0), 1.1.0 (>=1.0.0 <1.6.0), 2.0.0 (>=1.5.0 <2.0.0), 2.1.0 (>=1.5.0 <2.0.0), 3.0.0-beta.1 (>=2.0.0-0 <3.0.0)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := cat.Select("hub", tc.sel)
			if tc.wantErr != "" {
				var nm *NoMatchError
				var gone *LockedNotLoadedError
				if !errors.As(err, &nm) && !errors.As(err, &gone) {
					t.Fatalf("err = %v, want a *NoMatchError or *LockedNotLoadedError", err)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %q, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Version != tc.want {
				t.Fatalf("selected %s, want %s", d.Version, tc.want)
			}
		})
	}
}

func TestSelectUnknownDriver(t *testing.T) {
	_, err := selectionCatalog(t).Select("nope", Selection{AppVersion: "1.0.0"})
	if !errors.Is(err, ErrUnknownDriver) {
		t.Fatalf("err = %v, want ErrUnknownDriver", err)
	}
}

func TestSelectRejectsNonSemverAppVersion(t *testing.T) {
	_, err := selectionCatalog(t).Select("hub", Selection{AppVersion: "latest"})
	if err == nil || !strings.Contains(err.Error(), `application version "latest" is not a semantic version`) {
		t.Fatalf("err = %v", err)
	}
}

func TestCatalogAddSameDigestIsNoop(t *testing.T) {
	cat := NewCatalog()
	d := fakeDriver(t, "hub", "1.0.0", ">=1.0.0")
	if err := cat.Add(d); err != nil {
		t.Fatal(err)
	}
	if err := cat.Add(fakeDriver(t, "hub", "1.0.0", ">=1.0.0")); err != nil {
		t.Fatalf("re-adding identical content: %v", err)
	}
	if n := len(cat.Versions("hub")); n != 1 {
		t.Fatalf("%d versions, want 1", n)
	}
}

// A keep-going catalog holds the versions that load and records the
// others; a selection fails, naming a broken version, only when that
// version could have been its choice: pinned, or above the version the
// rule picks (it may fit the application version too), or when none
// that loads fits. A locked version kept for an unchanged application
// version, and every selection of another driver, are not affected.
func TestASelectionFailsOnlyWhenABrokenVersionCouldHaveBeenItsChoice(t *testing.T) {
	cat := selectionCatalog(t)
	why := errors.New("driver.cue: expected '}'")
	cat.broken = map[string]map[string]error{"hub": {"1.2.0": why, "2.0.5": why}, "other": {"1.0.0": why}}
	tests := []struct {
		name    string
		sel     Selection
		want    string
		wantErr string // the broken version named
	}{
		{name: "a broken version below the one picked changes nothing", sel: Selection{AppVersion: "1.5.3"}, want: "2.1.0"},
		{name: "a broken version above the one picked might have been picked", sel: Selection{AppVersion: "1.2.0"}, wantErr: "hub@2.0.5"},
		{name: "pinned to a broken version", sel: Selection{AppVersion: "1.2.0", Pinned: "1.2.0"}, wantErr: "hub@1.2.0"},
		{name: "pinned to one that loads", sel: Selection{AppVersion: "1.2.0", Pinned: "1.1.0"}, want: "1.1.0"},
		{name: "the locked version kept for an unchanged application version", sel: Selection{AppVersion: "1.2.0", Locked: "1.0.0", LockedAppVersion: "1.2.0"}, want: "1.0.0"},
		{name: "the locked version, kept for an unchanged application version, is broken", sel: Selection{AppVersion: "1.2.0", Locked: "1.2.0", LockedAppVersion: "1.2.0"}, wantErr: "hub@1.2.0"},
		{name: "no version that loads fits", sel: Selection{AppVersion: "9.0.0"}, wantErr: "hub@2.0.5"},
		{name: "a driver whose only version is broken", sel: Selection{AppVersion: "1.0.0"}, wantErr: "other@1.0.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := "hub"
			if strings.Contains(tc.wantErr, "other@") {
				name = "other"
			}
			d, err := cat.Select(name, tc.sel)
			if tc.wantErr != "" {
				var be *BrokenDriverError
				if !errors.As(err, &be) || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, why) {
					t.Fatalf("Select = %v, %v; want a BrokenDriverError naming %s and why", d, err, tc.wantErr)
				}
				return
			}
			if err != nil || d.Version != tc.want {
				t.Fatalf("Select = %v, %v; want %s", d, err, tc.want)
			}
		})
	}
}
