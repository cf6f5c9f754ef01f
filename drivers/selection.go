package drivers

import (
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Selection is what the selection rule needs to know about a deployment.
type Selection struct {
	// AppVersion is the application version the deployment asks for.
	AppVersion string
	// Pinned is a driver version the deployment pins ("" when not pinned).
	Pinned string
	// Locked is the driver version of the deployment's current lock.
	Locked string
	// LockedAppVersion is the application version of the current lock.
	LockedAppVersion string
	// Upgrade asks for the newest matching driver version even when the
	// application version is unchanged: the resolver sets it for an
	// explicit upgrade request that the lock has not honoured yet.
	Upgrade bool
}

// Tried is one driver version the selection rule looked at.
type Tried struct {
	Version     string `json:"version"`
	AppVersions string `json:"appVersions"`
}

// NoMatchError is returned by Select when no driver version fits.
type NoMatchError struct {
	Driver     string
	AppVersion string
	Pinned     string
	Reason     string
	Tried      []Tried // ascending
}

func (e *NoMatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "driver %s: no version supports application version %s", e.Driver, e.AppVersion)
	if e.Reason != "" {
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	if len(e.Tried) == 0 {
		b.WriteString("; no versions loaded")
		return b.String()
	}
	b.WriteString("; tried:")
	for i, t := range e.Tried {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s (%s)", t.Version, t.AppVersions)
	}
	return b.String()
}

// LockedNotLoadedError is returned by Select when the driver version a
// deployment's lock runs is not loaded and nothing asks to leave it (no
// pin, the same application version, no upgrade request).
type LockedNotLoadedError struct {
	Driver     string
	Version    string
	AppVersion string
	Loaded     []string // ascending
}

func (e *LockedNotLoadedError) Error() string {
	return fmt.Sprintf("driver %s: version %s, which the deployment's lock runs, is not loaded (loaded: %s); "+
		"the deployment keeps its driver version until an upgrade is asked for: bring %s back, "+
		"pin a version (driver.version), or request an upgrade (styrminctl upgrade) to take the newest that supports %s",
		e.Driver, e.Version, strings.Join(e.Loaded, ", "), e.Version, e.AppVersion)
}

// Select applies the selection rule. See the package documentation.
func (c *Catalog) Select(name string, s Selection) (*Driver, error) {
	versions := c.byName[name]
	noMatch := func(reason string, tried []*Driver) *NoMatchError {
		e := &NoMatchError{Driver: name, AppVersion: s.AppVersion, Pinned: s.Pinned, Reason: reason}
		for _, d := range tried {
			e.Tried = append(e.Tried, Tried{Version: d.Version, AppVersions: d.AppVersions})
		}
		return e
	}
	if len(versions) == 0 {
		if err := c.BrokenAbove(name, ""); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("driver %s: %w", name, ErrUnknownDriver)
	}
	app, err := semver.StrictNewVersion(strings.TrimPrefix(s.AppVersion, "v"))
	if err != nil {
		return nil, fmt.Errorf("driver %s: application version %q is not a semantic version: %w", name, s.AppVersion, err)
	}
	if s.Pinned != "" {
		if err := c.BrokenVersion(name, s.Pinned); err != nil {
			return nil, err
		}
		d, ok := c.Get(name, s.Pinned)
		if !ok {
			return nil, noMatch(fmt.Sprintf("pinned version %s is not loaded", s.Pinned), versions)
		}
		if !d.supports(app) {
			return nil, noMatch(fmt.Sprintf("pinned version %s supports %s", s.Pinned, d.AppVersions), []*Driver{d})
		}
		return d, nil
	}
	if s.Locked != "" && !s.Upgrade && s.LockedAppVersion != "" && sameVersion(s.AppVersion, s.LockedAppVersion) {
		if d, ok := c.Get(name, s.Locked); ok {
			return d, nil
		}
		if err := c.BrokenVersion(name, s.Locked); err != nil {
			// Kept, were it loading: another version would change the
			// driver under an unchanged application.
			return nil, err
		}
		// Gone (its folder removed, its tag no longer listed): another
		// version would change the driver under an unchanged application,
		// run its upgrade hooks and maybe go back a version, with no
		// upgrade asked for.
		e := &LockedNotLoadedError{Driver: name, Version: s.Locked, AppVersion: s.AppVersion}
		for _, d := range versions {
			e.Loaded = append(e.Loaded, d.Version)
		}
		return nil, e
	}
	// A version that does not load may be the one the rule picks: above
	// the version picked, the choice is not known (the locked one kept
	// above needs none).
	for i := len(versions) - 1; i >= 0; i-- {
		if versions[i].supports(app) {
			if err := c.BrokenAbove(name, versions[i].Version); err != nil {
				return nil, err
			}
			return versions[i], nil
		}
	}
	if err := c.BrokenAbove(name, ""); err != nil {
		return nil, err
	}
	return nil, noMatch("", versions)
}

// sameVersion compares two application versions semantically when both
// parse, textually otherwise.
func sameVersion(a, b string) bool {
	va, errA := semver.NewVersion(a)
	vb, errB := semver.NewVersion(b)
	if errA == nil && errB == nil {
		return va.Equal(vb) && va.Metadata() == vb.Metadata()
	}
	return a == b
}

// supports reports whether the driver's application range contains app.
// Prerelease application versions follow Masterminds semver: they match
// only a range that itself names a prerelease (for example ">=2.0.0-0").
func (d *Driver) supports(app *semver.Version) bool {
	return d.compiled != nil && d.compiled.appRange != nil && d.compiled.appRange.Check(app)
}
