// Command styrminctl is the command-line interface of Styrmin: drivers, plans,
// diffs, locks and the state of deployments in a cluster. It only parses
// flags, wires the library packages and prints.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/keypath"
	"github.com/styrmin/styrmin/resolver"
)

func main() {
	// Started as a driver sandbox (drivers.Sandbox): evaluate one driver
	// and exit.
	if drivers.IsSandboxChild() {
		os.Exit(drivers.ServeSandbox(os.Stdin, os.Stdout, os.Stderr, resolver.SandboxFuncs()))
	}
	// Rendering a plan allocates about 1 MB per deployment while little
	// stays live (20 MB for 1,000 deployments): collecting less often
	// saves a fifth of the CPU time of a large plan, and costs the other
	// short-lived commands nothing that matters. GOGC still wins when set.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	ctx, stop := interruptible()
	code := execute(ctx, newRootCmd(os.Stdout, os.Stderr), os.Stderr)
	stop()
	os.Exit(code)
}

// interruptible is the context commands run in: SIGINT (Ctrl-C) or
// SIGTERM cancels it, so a watch or the UI ends as asked (exit 0) and a
// command stops where it checks the context rather than anywhere. A lock
// commit does not check it between moving the branch and updating the
// checked-out lockfiles (gitsource's CommitLocks), so that step finishes.
// The first signal restores the default action: a second one kills the
// process, for a command that does not stop.
func interruptible() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, stop
}

// execute runs the command tree and returns the exit code. An error is
// printed on stderr, a usage mistake (an unknown flag or command, a wrong
// number of arguments) with a hint naming the command's --help; both exit
// 1, never 2, which plan --detailed-exitcode and lock --check use for
// "changes"; an error after ctx was interrupted exits 130.
func execute(ctx context.Context, root *cobra.Command, stderr io.Writer) int {
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var ec exitCoder
	if asExitCoder(err, &ec) {
		return ec.ExitCode()
	}
	// An error's text is not all ours (git's, CUE's, a path): its control
	// characters are escaped, its lines kept (keypath.Controls).
	fmt.Fprintln(stderr, "error:", keypath.Controls(err.Error()))
	if ctx.Err() != nil {
		// Stopped by a signal before it finished: 130, as a shell reports
		// a command Ctrl-C ended.
		fmt.Fprintf(stderr, "interrupted (%v)\n", context.Cause(ctx))
		return 130
	}
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return 1
}

// closeAfterRun makes c and its subcommands call done when their run
// returns, with an error or not.
func closeAfterRun(c *cobra.Command, done func()) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			defer done()
			return run(cmd, args)
		}
	}
	if run := c.Run; run != nil {
		c.Run = func(cmd *cobra.Command, args []string) {
			defer done()
			run(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		closeAfterRun(sub, done)
	}
}

// usageError is a mistake in how a command was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// asUsage makes the argument checks of c and its subcommands return
// usageErrors, and gives a command that only groups others (drivers,
// tasks) a check too: an unknown subcommand is a mistake, not a request
// for help.
func asUsage(c *cobra.Command) {
	if !c.Runnable() && c.HasSubCommands() && c.HasParent() {
		c.Args = cobra.NoArgs
		c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	if check := c.Args; check != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		asUsage(sub)
	}
}

// addCompletion adds cobra's `completion bash|zsh|fish|powershell`
// (shown in the help, with examples).
func addCompletion(root *cobra.Command) {
	root.CompletionOptions.HiddenDefaultCmd = false
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = `  styrminctl completion bash > /etc/bash_completion.d/styrminctl
  source <(styrminctl completion bash)
  styrminctl completion zsh > "${fpath[1]}/_styrminctl"
  styrminctl completion fish > ~/.config/fish/completions/styrminctl.fish`
		for _, sh := range c.Commands() {
			sh.Example = "  styrminctl completion " + sh.Name() + " --help"
		}
	}
}

// readsRepo marks a command that reads the --repo repository: it is
// checked to be one before the command runs.
const readsRepo = "styrmin.io/reads-repo"

// readsCommitWith lists (comma-separated) the flags with which a readsRepo
// command reads a commit rather than the working tree: lock --commit
// builds on the branch's head, plan --head on the revision.
const readsCommitWith = "styrmin.io/reads-commit-with"

// readsCommitsOnly as readsCommitWith marks a command that reads commits
// only, whatever its flags (ui: the timeline, plans between commits).
const readsCommitsOnly = "*"

// checkRepo says what is wrong with --repo for cmd: missing, not a
// folder, or not a desired-state repository.
func (g *globalOptions) checkRepo(cmd *cobra.Command) error {
	st, err := os.Stat(g.Repo)
	if err != nil {
		return fmt.Errorf("--repo %s: %w", g.Repo, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("--repo %s: not a folder", g.Repo)
	}
	err = resolver.CheckRepository(os.DirFS(g.Repo))
	if err == nil {
		return nil
	}
	if !headIsRepository(g.Repo) {
		return fmt.Errorf("--repo %s: %w", g.Repo, err)
	}
	// A clone without a working tree (git clone --no-checkout, a CI
	// cache). A command that reads a commit works there; one that reads
	// the working tree would find an empty repository in it: lock --check
	// would pass and plan would delete everything.
	if cmd.Annotations[readsCommitWith] == readsCommitsOnly {
		return nil
	}
	flags := strings.Split(cmd.Annotations[readsCommitWith], ",")
	for _, name := range flags {
		if fl := cmd.Flags().Lookup(name); fl != nil && fl.Changed && fl.Value.String() != "false" && fl.Value.String() != "" {
			return nil
		}
	}
	msg := fmt.Sprintf("--repo %s: the working tree holds no desired-state repository, though HEAD does (a clone without a checkout?): check it out (git checkout)", g.Repo)
	var uses []string
	for _, name := range flags {
		if fl := cmd.Flags().Lookup(name); fl != nil {
			use := cmd.CommandPath() + " --" + name
			if fl.Value.Type() == "string" {
				use += " HEAD"
			}
			uses = append(uses, "`"+use+"`")
		}
	}
	if len(uses) > 0 {
		msg += ", or read HEAD instead: " + strings.Join(uses, " or ")
	}
	return errors.New(msg)
}

// headIsRepository tells whether dir is (a folder of) a git repository
// whose HEAD commit holds a desired-state repository there.
func headIsRepository(dir string) bool {
	repo := openRepo(dir)
	if repo == nil {
		return false
	}
	sub, err := repo.Subdir(dir)
	if err != nil {
		return false
	}
	c, err := repo.Resolve("HEAD")
	if err != nil || c.IsZero() {
		return false
	}
	fsys, err := repo.TreeAt(c, sub)
	return err == nil && resolver.CheckRepository(fsys) == nil
}

// globalOptions are the flags every subcommand shares.
type globalOptions struct {
	// Repo is the root of the desired-state repository (a working tree).
	Repo string
	// drivers bound driver loads and renders.
	drivers driverFlags
	// stderr is where progress goes, when terminal says it is a
	// terminal; progress is the report of the running command (nil: none).
	stderr   io.Writer
	terminal bool
	progress *progress
}

// newProgress starts the progress report of a long command on stderr
// (quiet unless stderr is a terminal) and makes the workspaces it loads
// report to it.
func (g *globalOptions) newProgress() *progress {
	g.progress = newProgress(g.stderr, g.terminal)
	return g.progress
}

// newRootCmd builds the command tree. Subcommands are constructed with the
// writers they print to, so tests run them in-process.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	return newRootCmdWith(stdout, stderr, isTerminal(stderr))
}

// newRootCmdWith is newRootCmd with the answer to "is stderr a
// terminal?" (progress is shown only there), so tests can fake one.
func newRootCmdWith(stdout, stderr io.Writer, terminal bool) *cobra.Command {
	g := &globalOptions{stderr: stderr, terminal: terminal}
	root := &cobra.Command{
		Use:   "styrminctl",
		Short: "Plan, lock and inspect Styrmin deployments",
		Example: `  styrminctl plan --repo ./desired-state
  styrminctl lock --commit
  styrminctl status --context prod`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.Repo, "repo", ".", "root of the desired-state repository")
	g.drivers.register(root)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if cmd.Annotations[readsRepo] != "" {
			if err := g.checkRepo(cmd); err != nil {
				return err
			}
		}
		fl := cmd.Flag("driver-checks")
		return g.drivers.prepare(stderr, cmd.Annotations[readsRepo] != "", fl != nil && fl.Changed)
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newDriversCmd(g, stdout),
		newLockCmd(g, kubeRESTConfig, stdout),
		newRetryCmd(g, stdout),
		newUpgradeCmd(g, time.Now, stdout),
		newEnvCmd(g, kubeRESTConfig, stdout),
		newExplainCmd(g, stdout),
		newPlanCmd(g, stdout),
		newDiffCmd(g, stdout),
		newStatusCmd(kubeRESTConfig, stdout),
		newBackupCmd(kubeRESTConfig, time.Now, stdout),
		newRestoreCmd(kubeRESTConfig, time.Now, stdout),
		newTasksCmd(kubeRESTConfig, stdout),
		newHistoryCmd(g, kubeRESTConfig, stdout),
		newUICmd(g, kubeContextConfig, stdout),
		newInstallCmd(kubeRESTConfig, stdout),
		newUninstallCmd(kubeRESTConfig, stdout),
		newCheckCmd(kubeRESTConfig, os.Getenv, stdout),
		newVersionCmd(kubeRESTConfig, stdout),
	)
	addCompletion(root)
	g.registerCompletions(root)
	asUsage(root)
	// The sandbox's idle children would end when this process does; a
	// test runs many commands in one process. After every command, failed
	// ones too (cobra runs no post-run hook after an error).
	closeAfterRun(root, func() {
		if g.drivers.sandbox != nil {
			g.drivers.sandbox.Close()
		}
	})
	return root
}
