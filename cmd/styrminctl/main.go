// Command styrminctl is the command-line interface of Styrmin: drivers, plans,
// diffs, locks and the state of deployments in a cluster. It only parses
// flags, wires the library packages and prints.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/drivers"
)

func main() {
	// Started as a driver sandbox (drivers.Sandbox): evaluate one driver
	// and exit.
	if drivers.IsSandboxChild() {
		os.Exit(drivers.ServeSandbox(os.Stdin, os.Stdout, os.Stderr))
	}
	// Rendering a plan allocates about 1 MB per deployment while little
	// stays live (20 MB for 1,000 deployments): collecting less often
	// saves a fifth of the CPU time of a large plan, and costs the other
	// short-lived commands nothing that matters. GOGC still wins when set.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	root := newRootCmd(os.Stdout, os.Stderr)
	if err := root.Execute(); err != nil {
		code := 1
		var ec exitCoder
		if asExitCoder(err, &ec) {
			code = ec.ExitCode()
		} else {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		os.Exit(code)
	}
}

// globalOptions are the flags every subcommand shares.
type globalOptions struct {
	// Repo is the root of the desired-state repository (a working tree).
	Repo string
	// drivers bound driver loads and renders.
	drivers driverFlags
}

// newRootCmd builds the command tree. Subcommands are constructed with the
// writers they print to, so tests run them in-process.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:           "styrminctl",
		Short:         "Plan, lock and inspect Styrmin deployments",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.Repo, "repo", ".", "root of the desired-state repository")
	g.drivers.register(root)
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return g.drivers.prepare() }
	root.AddCommand(
		newDriversCmd(g, stdout),
		newLockCmd(g, kubeClient, stdout),
		newRetryCmd(g, stdout),
		newUpgradeCmd(g, time.Now, stdout),
		newExplainCmd(g, stdout),
		newPlanCmd(g, stdout),
		newDiffCmd(g, stdout),
		newStatusCmd(kubeClient, stdout),
		newTasksCmd(kubeClient, stdout),
		newHistoryCmd(kubeClient, stdout),
		newInstallCmd(kubeRESTConfig, stdout),
		newCheckCmd(kubeRESTConfig, os.Getenv, stdout),
		newVersionCmd(kubeRESTConfig, stdout),
	)
	return root
}
