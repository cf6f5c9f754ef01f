package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/resolver"
)

type upgradeOptions struct {
	appVersion    string
	driverVersion string
	commit        bool
	backupFirst   bool
	ident         identityFlags
}

// upgradeAttempts bounds the compare-and-swap attempts of upgrade
// --commit (a local branch rarely moves under it).
const upgradeAttempts = 8

// newUpgradeCmd builds `styrminctl upgrade CLUSTER/ENV[/NAME]`: the upgrade
// operation, as an edit of the deployment files that the next lock turns
// into instances. now dates the upgrade request tokens it writes.
func newUpgradeCmd(g *globalOptions, now func() time.Time, stdout io.Writer) *cobra.Command {
	o := &upgradeOptions{}
	cmd := &cobra.Command{
		Use:         "upgrade CLUSTER/ENV[/NAME]",
		Annotations: map[string]string{readsRepo: "true", readsCommitWith: "commit"},
		Short:       "Upgrade a deployment, or every deployment of an environment, at the next lock",
		Example: `  styrminctl upgrade local/dev/hub --app-version 1.4.1
  styrminctl upgrade local/staging --commit
  styrminctl upgrade local/dev/web --driver-version 1.1.0
  styrminctl upgrade local/dev/hub --app-version 1.4.1 --backup-first`,
		Long: `upgrade edits deployment files in the working tree; the next lock turns the edit
into instances. With --app-version it sets the application version (the lock then
selects the newest driver version that supports it); with --driver-version it pins
the driver version; with neither it writes a new upgrade request token
(driver.upgrade), so the next lock takes the newest loaded driver build for the
current application version, once: later locks, fan-outs included, keep it.
Without NAME every deployment of the environment is edited (an upgrade request
skips the deployments that pin a version). Every edit is checked before anything
is written: bad input names the file and the field and changes nothing. With
--commit the edited files are committed in one commit on the current branch (built
on its committed head: a file to edit with uncommitted changes is refused). With
--backup-first each edited file also gets backupBeforeUpgrade: true: the upgrade
then runs the driver's backup hook before its pre steps (a driver without backup
and restore hooks, or an environment without backupLocation, is refused).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, err := resolver.ParseUpgradeTarget(args[0])
			if err != nil {
				return err
			}
			req := resolver.UpgradeRequest{Target: target, AppVersion: o.appVersion, DriverVersion: o.driverVersion, Now: now(), BackupFirst: o.backupFirst}
			if o.commit {
				return runUpgradeCommit(cmd.Context(), g, req, &o.ident, stdout)
			}
			return runUpgrade(cmd.Context(), g, req, stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.appVersion, "app-version", "", "set the application version")
	f.StringVar(&o.driverVersion, "driver-version", "", "pin the driver version (it must be loaded)")
	f.BoolVar(&o.commit, "commit", false, "commit the edited files in one commit")
	f.BoolVar(&o.backupFirst, "backup-first", false, "also set backupBeforeUpgrade: true in each edited file, so the upgrade backs the deployment up first (its driver must declare backup and restore hooks, and its environment have a backupLocation)")
	o.ident.register(cmd, os.Getenv)
	return cmd
}

// runUpgrade writes the upgrade's edits into the working tree.
func runUpgrade(ctx context.Context, g *globalOptions, req resolver.UpgradeRequest, stdout io.Writer) error {
	ws, _, err := headWorkspace(ctx, g)
	if err != nil {
		return err
	}
	plan, err := ws.PlanUpgrade(req)
	if err != nil {
		return err
	}
	// Every edit was checked before the first write.
	for _, e := range plan.Edits {
		if err := replaceFile(filepath.Join(g.Repo, filepath.FromSlash(e.File)), e.Data); err != nil {
			return fmt.Errorf("upgrade %s: %w", e.ID, err)
		}
	}
	printUpgrade(stdout, plan)
	if len(plan.Edits) > 0 {
		fmt.Fprintln(stdout, "run `styrminctl lock` to lock it (or commit the files and let CI lock them)")
	}
	return nil
}

// runUpgradeCommit commits the upgrade's edits on the current branch.
func runUpgradeCommit(ctx context.Context, g *globalOptions, req resolver.UpgradeRequest, ident *identityFlags, stdout io.Writer) error {
	c, err := newCommitter(ctx, g, ident, upgradeAttempts)
	if err != nil {
		return err
	}
	out, err := resolver.CommitUpgrade(ctx, c.repo, c.opts, req, c.co)
	if err != nil {
		return err
	}
	printUpgrade(stdout, out.Plan)
	if out.Committed {
		fmt.Fprintf(stdout, "committed %s on %s: %s\n", out.Commit, c.repo.Branch(), out.Plan.Subject())
	}
	return nil
}

// printUpgrade says what an upgrade edited and what the next lock does.
func printUpgrade(stdout io.Writer, plan *resolver.UpgradePlan) {
	for _, e := range plan.Edits {
		next := "the next lock selects " + e.To
		if e.From != "" && e.From != e.To {
			next = "the next lock moves " + e.From + " → " + e.To
		} else if e.From == e.To {
			next = "the next lock keeps " + e.To
		}
		fmt.Fprintf(stdout, "edited %s (%s): %s; %s\n", e.File, e.ID, strings.Join(e.Changes, ", "), next)
	}
	for _, s := range plan.Skipped {
		fmt.Fprintf(stdout, "skipped %s: %s\n", s.ID, s.Reason)
	}
	if len(plan.Edits) == 0 {
		fmt.Fprintf(stdout, "nothing to change: %s is already as asked\n", plan.Request.Target)
	}
}

// replaceFile replaces a user's file through a rename, so a crash never
// leaves it half-written, and keeps its permissions.
func replaceFile(path string, data []byte) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".upgrade-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
