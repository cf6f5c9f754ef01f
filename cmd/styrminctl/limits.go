package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

// driverFlags are the flags that bound drivers: limits over styrmin.cue's
// and whether drivers are evaluated in a child process.
type driverFlags struct {
	limits    drivers.Limits
	inProcess bool
	// checks is the folder where the sandbox remembers the driver loads
	// its children checked (drivers.Sandbox.KeepChecks); "" for none.
	checks string
	// sandbox is set by prepare unless inProcess.
	sandbox *drivers.Sandbox
}

func (f *driverFlags) register(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.DurationVar(&f.limits.Timeout, "driver-timeout", 0, "time limit of one driver load or render (default: styrmin.cue's limits.timeout, else 30s)")
	fl.Int64Var(&f.limits.Memory, "driver-memory", 0, "memory limit of one driver evaluation in bytes (default: styrmin.cue's limits.memory, else 1 GiB)")
	fl.Int64Var(&f.limits.RenderedBytes, "driver-rendered-bytes", 0, "most bytes a chart may render to (default: styrmin.cue's limits.renderedBytes, else 64 MiB)")
	fl.Int64Var(&f.limits.ChartBytes, "driver-chart-bytes", 0, "most bytes subchart archives may unpack to (default: styrmin.cue's limits.chartBytes, else 64 MiB)")
	fl.BoolVar(&f.inProcess, "driver-in-process", false, "evaluate drivers in this process: no memory limit, and a driver over its time limit is abandoned, not stopped")
	fl.StringVar(&f.checks, "driver-checks", defaultDriverChecks(), `folder where the driver loads and deployment inputs checked in a child process are remembered, with the results of those inputs, so that the next command reading the repository loads an unchanged driver at once and reads back what an unchanged input evaluated to (drivers lint always checks in a child; "" for none; default: $`+driverChecksEnv+`, else styrmin/driver-checks in the user's cache folder)`)
}

// driverChecksEnv names the variable that replaces the default folder of
// the driver checks (empty: none).
const driverChecksEnv = "STYRMIN_DRIVER_CHECKS"

// defaultDriverChecks is $STYRMIN_DRIVER_CHECKS when set, else the user's
// cache folder's styrmin/driver-checks, or none when the user has no
// cache folder.
func defaultDriverChecks() string {
	if dir, set := os.LookupEnv(driverChecksEnv); set {
		return dir
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "styrmin", "driver-checks")
}

// prepare starts nothing: it finds this executable, which serves as the
// sandbox child (main calls drivers.ServeSandbox), and, for a command
// that reads the repository, opens the folder of the driver checks:
// one named by the flag (named) must work, a default one that cannot be
// used is noted on stderr. Other commands (drivers lint among them: a
// lint is the check) keep none.
func (f *driverFlags) prepare(stderr io.Writer, readsRepo, named bool) error {
	if f.inProcess {
		return nil
	}
	sb, err := drivers.SelfSandbox(runtime.GOMAXPROCS(0))
	if err != nil {
		return err
	}
	if f.checks != "" && readsRepo {
		// Without the checks every load is checked in a child, as it
		// would be anyway.
		dir, err := filepath.Abs(f.checks)
		if err == nil {
			err = sb.KeepChecks(dir)
		}
		if err != nil && named {
			return fmt.Errorf("--driver-checks: %w", err)
		}
		if err != nil && !errors.Is(err, errors.ErrUnsupported) {
			fmt.Fprintf(stderr, "note: every driver load is checked in a child process: %v\n", err)
		}
	}
	f.sandbox = sb
	return nil
}

// driverOptions are the limits the flags set (styrmin.cue's apply where
// they set none) and the sandbox.
func (g *globalOptions) driverOptions() (drivers.Limits, *drivers.Sandbox) {
	return g.drivers.limits, g.drivers.sandbox
}

// workspaceOptions are the options every command that resolves the
// repository loads it with; remoteURL is the desired-state repository's
// remote, the one host driver sources may get the credentials for.
func (g *globalOptions) workspaceOptions(ctx context.Context, remoteURL string) resolver.WorkspaceOptions {
	l, sb := g.driverOptions()
	o := resolver.WorkspaceOptions{FetchDriver: driverFetcher(ctx, remoteURL), DriverLimits: l, Sandbox: sb}
	if g.progress != nil {
		o.Progress = g.progress.resolved
	}
	return o
}

// driverLoadOptions are the options a driver folder of the repository at
// repo loads with: styrmin.cue's limits under the flags'.
func (g *globalOptions) driverLoadOptions(repo fs.FS) (drivers.LoadOptions, error) {
	s, err := resolver.NewLoader(0).LoadSettings(repo)
	if err != nil {
		return drivers.LoadOptions{}, err
	}
	l, err := s.DriverLimits()
	if err != nil {
		return drivers.LoadOptions{}, err
	}
	flags, sb := g.driverOptions()
	return drivers.LoadOptions{Limits: l.Merge(flags), Sandbox: sb}, nil
}
