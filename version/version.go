package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// stamped is set at link time: -ldflags "-X github.com/styrmin/styrmin/version.stamped=v1.2.3".
// stampedCommit and stampedDate (the commit and its time, RFC 3339) are
// stamped the same way by make build and make image, which turn the
// toolchain's VCS record off: Go does not find the repository from a git
// worktree (golang/go#58218; nested in a clone it records the clone's
// commit), so the record would depend on how the source was checked out
// and an image's digest with it. Read-only at run time.
var stamped, stampedCommit, stampedDate string

// Info describes a build.
type Info struct {
	// Version is the release version ("v0.3.0"), or the module's version
	// when none was stamped ("(devel)" for a build of a work tree).
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from ("" unknown).
	Commit string `json:"commit,omitempty"`
	// Date is the commit's time, RFC 3339 ("" unknown).
	Date string `json:"date,omitempty"`
	// Modified is true when the work tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the running binary's build information.
func Get() Info {
	return withStampedCommit(fromBuild(stamped, readBuildInfo()), stampedCommit, stampedDate)
}

func readBuildInfo() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

// fromBuild combines a stamped version with the toolchain's record.
func fromBuild(stamp string, bi *debug.BuildInfo) Info {
	in := Info{Version: stamp, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		if in.Version == "" {
			in.Version = "(unknown)"
		}
		return in
	}
	if in.Version == "" {
		in.Version = bi.Main.Version
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.time":
			in.Date = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// withStampedCommit puts a stamped commit and date in place of the
// toolchain's record, when stamped. Modified stays the record's: a
// stamped build's version says "-dirty" itself (git describe --dirty).
func withStampedCommit(in Info, commit, date string) Info {
	if commit != "" {
		in.Commit, in.Date = commit, date
	}
	return in
}

// Short is the version alone, with "-dirty" for a modified tree's build
// that was not stamped (the tool version a plan records).
func (i Info) Short() string {
	if i.Modified && i.Version == "(devel)" {
		return i.Version + "-dirty"
	}
	return i.Version
}

// String is one line for --version: version, commit, date, toolchain
// and platform.
func (i Info) String() string {
	commit := i.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit == "" {
		commit = "unknown"
	}
	if i.Modified {
		commit += "-dirty"
	}
	date := i.Date
	if date == "" {
		date = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, %s, %s, %s)", i.Version, commit, date, i.GoVersion, i.Platform)
}
