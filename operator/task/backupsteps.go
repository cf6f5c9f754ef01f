package task

import (
	"errors"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/outcome"
)

// backupStepBridge runs the backup and restoreBackup steps until the
// agent's backup and restore support (issue 16, agent side) replaces it:
// restoreBackup outside a clone from a backup is skipped, as the step's
// contract says, so drivers that declare it (examples/drivers/graphhub)
// set up as before; anything that would need a backup or a restore stops
// the task with a message saying so, rather than passing silently.
func backupStepBridge(run *taskRun, step drivers.Step) (actionOutcome, error) {
	if step.Action == drivers.ActionRestoreBackup {
		var cf *drivers.CloneSource
		if c := run.instance.Context; c != nil {
			cf = c.Environment.ClonedFrom
		}
		if cf == nil || cf.Backup == "" {
			return actionOutcome{done: true, output: "skipped: the environment is no clone from a backup"}, nil
		}
	}
	return actionOutcome{}, outcome.Stalled(v1alpha1.ReasonStepFailed, errors.New(string(step.Action)+": this agent cannot run backups or restores yet"))
}
